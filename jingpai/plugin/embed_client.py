"""Async client of an embedding service's TEI ``POST /embed`` (``jingpai serve`` with a bi-encoder such as
``use-bi``, or Hugging Face TEI) with a deadline on each whole call, a bound on the answers it reads
(:mod:`jingpai.plugin.answers`, the reranker client's rules), a circuit breaker and a small cache of query vectors.

The gateway embeds a hybrid search's query text with it. Every failure becomes :class:`EmbedUnavailable`
with a short machine-readable ``reason`` (one of :data:`EMBED_REASONS`), which the gateway reports in
``jingpai.hybrid.reason`` while serving BM25's hits alone (fail-open), as :mod:`jingpai.plugin.rerank_client`
does for reranking.

Example:
    >>> client = EmbedClient("http://127.0.0.1:8081", timeout_ms=1000)     # doctest: +SKIP
    >>> await client.embed("花呗怎么还款")                                    # doctest: +SKIP
    [0.013, -0.094, ...]
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Literal

import httpx
from cachetools import LRUCache
from jingpai.errors import UnavailableError
from jingpai.plugin import answers
from jingpai.plugin.answers import MAX_ANSWER_BYTES, BadAnswer, embed_vectors, fetch, json_body
from jingpai.plugin.rerank_client import CircuitBreaker
from jingpai.reranker.identity import digest

logger = logging.getLogger(__name__)

#: why an embedding failed: no answer in time, no connection, HTTP 429 (the service's queue is full or timed
#: out), any other non-200 (a cross-encoder answers 400: it cannot embed), an answer that is not one vector
#: of the index's dimension, the breaker open, a served model other than the one the index's vectors come from
EmbedReason = Literal["embed_timeout", "embed_unreachable", "embed_overloaded", "embed_error", "embed_bad_response", "embed_circuit_open",
                      "embed_model_mismatch"]
EMBED_REASONS: tuple[str, ...] = EmbedReason.__args__  # type: ignore[attr-defined]

#: query texts whose vectors are kept (paging through one query's results embeds it once)
CACHE_SIZE = 1024
#: seconds the served model's identity (``GET /info``'s ``vector_model``) is trusted before it is asked again: a
#: service restarted with other weights is noticed within this time
IDENTITY_TTL_S = 30.0

class EmbedUnavailable(UnavailableError, RuntimeError):
    """The query could not be embedded; ``reason`` says why (the gateway serves BM25 alone)."""

    def __init__(self, reason: EmbedReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class EmbedClient:
    """Calls ``POST {url}/embed`` (TEI's request: one text, ``truncate`` on, ``normalize`` on).

    Args:
        url: base URL of the service.
        timeout_ms: the deadline of one call, whole (connect, send, wait, read); the gateway's ``embed_timeout_ms``.
        breaker: circuit breaker shared by all requests of this client (default: 3 failures, 10 s).
        clock: monotonic time source of the default breaker and of :attr:`last_took_ms`.
        max_answer_bytes: the largest answer read; a larger one is a bad response.
    """

    def __init__(self, url: str, *, timeout_ms: int, breaker: CircuitBreaker | None = None,
                 clock: Callable[[], float] = time.monotonic, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_ms / 1000.0
        self.max_answer_bytes = max_answer_bytes
        self.breaker = breaker or CircuitBreaker(clock=clock, name="embedder")
        self._clock = clock
        self._client = answers.client(self.timeout_s)
        self._cache: LRUCache[tuple[str, int | None], list[float]] = LRUCache(maxsize=CACHE_SIZE)
        self._identity: tuple[float, str | None] | None = None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def served_model(self) -> str | None:
        """The served model's identity (``/info``'s ``vector_model``, e.g. ``emb@1fe640341cd9``), asked at most once per
        :data:`IDENTITY_TTL_S`; ``None``: the service does not say (TEI, a model not loaded from a folder) or ``/info``
        did not answer (logged; the check is skipped, the embedding itself reports real failures)."""
        now = self._clock()
        if self._identity is not None and now - self._identity[0] < IDENTITY_TTL_S:
            return self._identity[1]
        identity = None
        try:
            async with asyncio.timeout(self.timeout_s):
                answer = await fetch(self._client, "GET", f"{self.url}/info", max_bytes=self.max_answer_bytes)
            identity = json_body(answer).get("vector_model") if answer.status == 200 else None
        except (httpx.HTTPError, TimeoutError, BadAnswer, AttributeError) as exc:
            logger.info("embedder at %s: /info did not say which model it serves (%s); the model check is skipped", self.url, exc)
        self._identity = (now, identity if isinstance(identity, str) else None)
        return self._identity[1]

    async def embed(self, text: str, *, dims: int | None = None, model: str | None = None) -> list[float]:
        """The unit vector of ``text``.

        Args:
            dims: the dimension the vector must have (the index's ``vector_dims``); ``None``: any.
            model: the identity of the model the index's vectors come from (its ``vector_model``); when the service
                names the model it serves, their files' digests must agree. ``None``: not checked.

        Raises:
            EmbedUnavailable: breaker open, timeout, connection failure, HTTP error, an answer that is
                not one finite vector of ``dims`` components, or another model than ``model`` served.
        """
        if model is not None:
            served = await self.served_model()
            if served is not None and digest(served) != digest(model):
                raise EmbedUnavailable(
                    "embed_model_mismatch",
                    f"the index's vectors come from model {model} and the embedder at {self.url} serves {served}: query vectors of another "
                    "model would match them at random; serve the model the index was built with, or re-index with this one",
                )
        key = (text, dims)
        if key in self._cache:
            return self._cache[key]
        if not self.breaker.allow():
            raise EmbedUnavailable("embed_circuit_open", f"embedder at {self.url} failed repeatedly; circuit breaker is open")
        try:
            vector = await self._embed(text, dims)
        except EmbedUnavailable:
            self.breaker.record_failure()
            raise
        self.breaker.record_success()
        self._cache[key] = vector
        return vector

    async def _embed(self, text: str, dims: int | None) -> list[float]:
        """One ``POST /embed`` within ``timeout_ms``, its answer validated."""
        try:
            async with asyncio.timeout(self.timeout_s):
                answer = await fetch(self._client, "POST", f"{self.url}/embed", max_bytes=self.max_answer_bytes,
                                     payload={"inputs": [text], "truncate": True, "normalize": True})
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise EmbedUnavailable("embed_timeout", f"no answer from {self.url}/embed within {self.timeout_s * 1000:.0f} ms") from exc
        except httpx.HTTPError as exc:
            raise EmbedUnavailable("embed_unreachable", f"{self.url}/embed: {type(exc).__name__}: {exc}") from exc
        except BadAnswer as exc:
            raise EmbedUnavailable("embed_bad_response", f"{self.url}/embed: {exc}") from exc
        if answer.status != 200:
            reason: EmbedReason = "embed_overloaded" if answer.status == 429 else "embed_error"
            raise EmbedUnavailable(reason, f"{self.url}/embed answered HTTP {answer.status}: {answer.text()}")
        try:
            (vector,) = embed_vectors(json_body(answer), 1)
        except BadAnswer as exc:
            raise EmbedUnavailable("embed_bad_response", f"{self.url}/embed: {exc}") from exc
        if dims is not None and len(vector) != dims:
            raise EmbedUnavailable(
                "embed_bad_response",
                f"{self.url}/embed answered a {len(vector)}-d vector; the index's vectors are {dims}-d (serve the model it was indexed with)",
            )
        return vector


__all__ = ["CACHE_SIZE", "EMBED_REASONS", "IDENTITY_TTL_S", "EmbedClient", "EmbedReason", "EmbedUnavailable"]
