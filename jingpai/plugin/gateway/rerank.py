"""The gateway's reranker: the ``jingpai serve`` client behind the gateway's concurrency bounds.

Reranker calls are bounded gateway-wide (``rerank_concurrency``) and, for ``_msearch``, per request
(``msearch_rerank_concurrency``, a semaphore the caller passes in). A search that gets no slot within
``timeout_ms`` fails open like one whose reranker failed (``reason: reranker_busy``), so reranking adds at
most 2 × ``timeout_ms`` to any request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

from jingpai.plugin.rerank_client import CircuitBreaker, RerankClient, RerankUnavailable
from jingpai.plugin.settings import GatewaySettings, setting_hint


def clean_text(text: str) -> str:
    """``text`` without lone surrogates (replaced by ``?``), so it can be sent to the reranker as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def fail_open_hint(reason: str) -> str:
    """The setting an operator would raise to avoid a fail-open of ``reason`` (``""``: none helps)."""
    if reason == "reranker_timeout":
        return f"; to let the reranker finish raise {setting_hint('timeout_ms')}"
    if reason == "reranker_busy":
        return f"; to rerank more searches at once raise {setting_hint('rerank_concurrency')}"
    return ""


class BoundedReranker:
    """:class:`RerankClient` calls, at most ``rerank_concurrency`` in flight across the gateway.

    Args:
        observe: called with ``("ok" or the fail-open reason, seconds)`` after each reranker call (metrics).
    """

    def __init__(self, settings: GatewaySettings, *, observe: Callable[[str, float], None] | None = None) -> None:
        if settings.reranker_url is None:
            raise ValueError("BoundedReranker needs settings.reranker_url")
        self.settings = settings
        breaker = CircuitBreaker(failure_threshold=settings.breaker_failures, reset_timeout_s=settings.breaker_reset_s)
        self.client = RerankClient(settings.reranker_url, timeout_ms=settings.timeout_ms, breaker=breaker,
                                   max_answer_bytes=settings.max_answer_bytes)
        self.observe = observe
        self._slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None

    @property
    def slots(self) -> asyncio.Semaphore:
        """The gateway-wide bound on rerank calls in flight (``rerank_concurrency``), one per event loop."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots_loop = loop
            self._slots = asyncio.Semaphore(self.settings.rerank_concurrency)
        return self._slots

    async def scores(self, query: str, texts: Sequence[str], slots: tuple[asyncio.Semaphore, ...] = (), *,
                     keywords: dict | None = None) -> list[float]:
        """The reranker's scores, once a slot of each of ``slots`` and of the gateway-wide bound is held.
        ``keywords``: the texts' stored keywords (the service's ``keywords`` object, ``words`` parallel to ``texts``).

        Raises:
            RerankUnavailable: no slot within ``timeout_ms`` (``reranker_busy``), or the reranker failed.
        """
        settings = self.settings
        async with contextlib.AsyncExitStack() as held:
            try:
                async with asyncio.timeout(settings.timeout_ms / 1000):
                    for slot in (*slots, self.slots):
                        await slot.acquire()
                        held.callback(slot.release)
            except TimeoutError as exc:
                raise RerankUnavailable(
                    "reranker_busy",
                    f"no rerank slot free within {settings.timeout_ms} ms ({settings.rerank_concurrency} calls at once "
                    f"gateway-wide, {settings.msearch_rerank_concurrency} per _msearch)",
                ) from exc
            return await self._call(clean_text(query), [clean_text(t) for t in texts], keywords)

    async def _call(self, query: str, texts: list[str], keywords: dict | None) -> list[float]:
        started = time.perf_counter()
        outcome = "ok"
        try:
            return await self.client.rerank(query, texts, keywords=keywords)
        except RerankUnavailable as exc:
            outcome = exc.reason
            raise
        finally:
            if self.observe is not None:
                self.observe(outcome, time.perf_counter() - started)

    async def model_name(self) -> str | None:
        return await self.client.model_name()

    async def aclose(self) -> None:
        await self.client.aclose()


__all__ = ["BoundedReranker", "clean_text", "fail_open_hint"]
