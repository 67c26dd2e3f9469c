"""The ASGI middleware in front of the rerank app: request body limit and per-route request metrics."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from jingpai.reranker.service.errors import PayloadTooLargeError
from jingpai.reranker.service.http_errors import dialect_of, error_response
from jingpai.reranker.service.metrics import ServiceMetrics
from jingpai.reranker.service.settings import LIMIT_SOURCE


class BodyLimitAndMetrics:
    """Pure ASGI middleware: refuses bodies over ``max_body_bytes`` (413) and counts requests by status.

    The body is read here (at most ``limit`` bytes buffered), so chunked uploads without a
    ``Content-Length`` are bounded too, and replayed to the app unchanged. (Starlette's own body limit
    answers a bare "Content Too Large" that cannot name the limit.)
    """

    def __init__(self, app: Callable[..., Awaitable[None]], *, limit: int, metrics: ServiceMetrics, routes: set[str]) -> None:
        self.app = app
        self.limit = limit
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Awaitable[dict]], send: Callable[..., Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self.routes else "other"
        status = {"code": 500}
        t0 = time.perf_counter()

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if scope["method"] not in ("POST", "PUT", "PATCH"):
                await self.app(scope, receive, send_wrapper)
                return
            try:
                body = await self._read_body(scope, receive)
            except PayloadTooLargeError as exc:
                await error_response(exc, dialect=dialect_of(scope["path"]))(scope, receive, send_wrapper)
                return
            replayed = False

            async def replay() -> dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send_wrapper)
        finally:
            self.metrics.requests.labels(route, str(status["code"])).inc()
            self.metrics.request_seconds.labels(route).observe(time.perf_counter() - t0)

    def _too_large(self, what: str) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"request body is {what}; the limit is max_body_bytes={self.limit} ({LIMIT_SOURCE['max_body_bytes']})"
        )

    async def _read_body(self, scope: dict[str, Any], receive: Callable[..., Awaitable[dict]]) -> bytes:
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            raise self._too_large(f"{int(declared)} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise self._too_large(f"more than {self.limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)



__all__ = ["BodyLimitAndMetrics"]
