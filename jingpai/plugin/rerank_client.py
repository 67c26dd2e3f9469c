"""Async client of ``jingpai serve`` (TEI ``POST /rerank``) with a timeout and a circuit breaker.

Every failure becomes :class:`RerankUnavailable` with a short machine-readable ``reason``
(``reranker_timeout``, ``reranker_unreachable``, ``reranker_error``, ``reranker_bad_response``,
``circuit_open``), which the gateway reports in its ``jingpai.reason`` while returning the engine's
order (fail-open).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from jingpai.errors import UnavailableError

logger = logging.getLogger(__name__)

BreakerState = Literal["closed", "open", "half_open"]


class RerankUnavailable(UnavailableError, RuntimeError):
    """The reranker could not score this request; ``reason`` says why (the gateway fails open)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class RerankItem(BaseModel):
    """One entry of the TEI ``/rerank`` response."""

    index: int
    score: float


_RESPONSE = TypeAdapter(list[RerankItem])


class CircuitBreaker:
    """Closed → open after ``failure_threshold`` consecutive failures; after ``reset_timeout_s`` one probe
    request is let through (half-open): success closes the breaker, failure opens it again.

    Written here rather than taken from a library because the maintained breaker packages are either
    sync-only or tied to another event loop (pybreaker's async support needs tornado); this one is a
    lock and three fields.

    Args:
        failure_threshold: consecutive failures that open the breaker.
        reset_timeout_s: how long the breaker stays open before a probe.
        clock: monotonic time source.
    """

    def __init__(self, *, failure_threshold: int = 3, reset_timeout_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.failure_threshold = failure_threshold
        self.reset_timeout_s = reset_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state()

    def _state(self) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.reset_timeout_s:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """Whether a request may go to the reranker now (in half-open state: only one probe at a time)."""
        with self._lock:
            state = self._state()
            if state == "closed":
                return True
            if state == "half_open" and not self._probing:
                self._probing = True
                logger.info("reranker circuit breaker half-open: sending a probe request")
                return True
            return False

    def record_success(self) -> None:
        with self._lock:
            if self._opened_at is not None:
                logger.warning("reranker recovered: circuit breaker closed")
            self._failures = 0
            self._opened_at = None
            self._probing = False

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            was_probe = self._probing
            self._probing = False
            if was_probe or (self._opened_at is None and self._failures >= self.failure_threshold):
                self._opened_at = self._clock()
                logger.warning(
                    "reranker circuit breaker opened after %d consecutive failure(s); retrying in %.1f s",
                    self._failures,
                    self.reset_timeout_s,
                )


class RerankClient:
    """Calls ``POST {url}/rerank`` of ``jingpai serve`` (or any TEI-compatible reranker).

    Args:
        url: base URL of the service.
        timeout_ms: per-request timeout (connect + read); the gateway's ``timeout_ms`` setting.
        breaker: circuit breaker shared by all requests of this client.

    Example:
        >>> client = RerankClient("http://127.0.0.1:8081", timeout_ms=3000)       # doctest: +SKIP
        >>> await client.rerank("中国GDP", ["中国GDP增长", "天气"])                  # doctest: +SKIP
        [0.91, 0.02]
    """

    def __init__(self, url: str, *, timeout_ms: int, breaker: CircuitBreaker | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_ms / 1000.0
        self.breaker = breaker or CircuitBreaker()
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s), trust_env=False)
        self._model_name: str | None = None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def model_name(self) -> str | None:
        """The served model's name from ``GET /info`` (cached after the first answer; ``None`` if unknown)."""
        if self._model_name is None:
            try:
                resp = await self._client.get(f"{self.url}/info")
                info = resp.json() if resp.status_code == 200 else {}
            except (httpx.HTTPError, ValueError) as exc:
                logger.info("reranker at %s did not describe its model: %s", self.url, exc)
                return None
            name = info.get("model") or info.get("model_name") or info.get("name") if isinstance(info, dict) else None
            if isinstance(name, dict):
                name = name.get("name")
            self._model_name = str(name) if name else None
        return self._model_name

    async def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        """Scores of ``texts`` against ``query``, in input order.

        Raises:
            RerankUnavailable: breaker open, timeout, connection failure, HTTP error or malformed answer.
        """
        if not self.breaker.allow():
            raise RerankUnavailable("circuit_open", f"reranker at {self.url} failed repeatedly; circuit breaker is open")
        try:
            resp = await self._client.post(
                f"{self.url}/rerank",
                json={"query": query, "texts": list(texts), "truncate": True, "raw_scores": False, "return_text": False},
            )
        except httpx.TimeoutException as exc:
            self.breaker.record_failure()
            raise RerankUnavailable("reranker_timeout", f"no answer from {self.url} within {self.timeout_s * 1000:.0f} ms") from exc
        except httpx.HTTPError as exc:
            self.breaker.record_failure()
            raise RerankUnavailable("reranker_unreachable", f"{self.url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            self.breaker.record_failure()
            raise RerankUnavailable("reranker_error", f"{self.url}/rerank answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            items = _RESPONSE.validate_json(resp.content)
            scores = [float("nan")] * len(texts)
            for item in items:
                scores[item.index] = item.score
            if any(s != s for s in scores):
                raise ValueError(f"expected one score per text ({len(texts)}), got indices {sorted(i.index for i in items)}")
        except (ValidationError, ValueError, IndexError) as exc:
            self.breaker.record_failure()
            raise RerankUnavailable("reranker_bad_response", f"{self.url}/rerank: {exc}") from exc
        self.breaker.record_success()
        return scores


__all__ = ["BreakerState", "CircuitBreaker", "RerankClient", "RerankItem", "RerankUnavailable"]
