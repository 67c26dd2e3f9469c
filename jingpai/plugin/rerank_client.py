"""Async client of ``jingpai serve`` or a Hugging Face TEI reranker (``POST /rerank``) with a deadline on each
whole call, a bound on the answers it reads, and a circuit breaker.

The served model is read once from ``GET /info`` (TEI's ``model_id``; ``model_name`` of older services),
and so is TEI's ``max_client_batch_size``: more texts than that are sent as several requests at once.

Every failure becomes :class:`RerankUnavailable` with a short machine-readable ``reason`` (one of
:data:`REASONS`), which the gateway reports in its ``jingpai.reason`` while returning the engine's order
(fail-open). Answers are read and validated by :mod:`jingpai.plugin.answers`: a wrong one (a score that is
not finite, indices that are no permutation, another content type, too large) is ``reranker_bad_response``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import httpx

from jingpai.errors import UnavailableError
from jingpai.plugin import answers
from jingpai.plugin.answers import MAX_ANSWER_BYTES, BadAnswer, fetch, json_body, rerank_scores

logger = logging.getLogger(__name__)
T = TypeVar("T")

BreakerState = Literal["closed", "open", "half_open"]

#: why a rerank failed: no answer in time, no connection, TEI's 429 (overloaded: the queue is full or timed
#: out), TEI's 424 (the model's forward pass failed), any other non-200, an answer that is no ranking,
#: the breaker open (the gateway adds ``reranker_busy``: no slot free)
Reason = Literal[
    "reranker_timeout", "reranker_unreachable", "reranker_overloaded", "reranker_inference_failed", "reranker_error",
    "reranker_bad_response", "circuit_open",
]
REASONS: tuple[str, ...] = Reason.__args__  # type: ignore[attr-defined]

#: the reason of a non-200 status (others: ``reranker_error``)
STATUS_REASON: dict[int, Reason] = {429: "reranker_overloaded", 424: "reranker_inference_failed"}


class RerankUnavailable(UnavailableError, RuntimeError):
    """The reranker could not score this request; ``reason`` says why (the gateway fails open)."""

    def __init__(self, reason: Reason | Literal["reranker_busy"], detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ServedModel:
    """What ``GET /info`` says of the reranker: its model and how many texts one request may hold."""

    model_id: str | None
    max_batch: int | None
    #: the keyword dictionary of a ``jingpai serve`` keyword model (``dictionary_version``): stored keywords of that
    #: version are sent with the texts (``None``: none are)
    dictionary_version: str | None = None

    @classmethod
    def from_info(cls, info: Any) -> ServedModel:
        """From a TEI ``/info`` (``model_id``, ``max_client_batch_size``) or an older ``jingpai serve`` one
        (``model_name``, ``limits.max_docs``); anything else: nothing known."""
        if not isinstance(info, dict):
            return cls(None, None)
        name = next((info[k] for k in ("model_id", "model_name", "model", "name") if info.get(k)), None)
        if isinstance(name, dict):
            name = name.get("name")
        limits = info.get("limits") if isinstance(info.get("limits"), dict) else {}
        batch = info.get("max_client_batch_size", limits.get("max_docs"))
        version = info.get("dictionary_version")
        return cls(str(name) if name else None, batch if isinstance(batch, int) and batch > 0 else None,
                   version if isinstance(version, str) and version else None)


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
        name: what it guards, as its log lines name it (``reranker``, ``embedder``).
    """

    def __init__(self, *, failure_threshold: int = 3, reset_timeout_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 name: str = "reranker") -> None:
        self.name = name
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
                logger.info("%s circuit breaker half-open: sending a probe request", self.name)
                return True
            return False

    def record_success(self) -> None:
        with self._lock:
            if self._opened_at is not None:
                logger.warning("%s recovered: circuit breaker closed", self.name)
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
                    "%s circuit breaker opened after %d consecutive failure(s); retrying in %.1f s",
                    self.name,
                    self._failures,
                    self.reset_timeout_s,
                )


class RerankClient:
    """Calls ``POST {url}/rerank`` of ``jingpai serve`` or a Hugging Face TEI reranker (or any TEI-compatible one).

    Every answer is read within ``max_answer_bytes`` and validated by :mod:`jingpai.plugin.answers` (one finite
    score per text, the indices a permutation); each call — the first one's ``GET /info`` included — ends within
    ``timeout_ms``: connect, send, wait and read, however slowly the body arrives.

    Args:
        url: base URL of the service.
        timeout_ms: the deadline of one :meth:`rerank` call, whole; the gateway's ``timeout_ms`` setting.
        breaker: circuit breaker shared by all requests of this client.
        max_answer_bytes: the largest answer read; a larger one is a bad response.

    Example:
        >>> client = RerankClient("http://127.0.0.1:8081", timeout_ms=3000)       # doctest: +SKIP
        >>> await client.rerank("中国GDP", ["中国GDP增长", "天气"])                  # doctest: +SKIP
        [0.91, 0.02]
    """

    def __init__(self, url: str, *, timeout_ms: int, breaker: CircuitBreaker | None = None, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_ms / 1000.0
        self.max_answer_bytes = max_answer_bytes
        self.breaker = breaker or CircuitBreaker()
        self._client = answers.client(self.timeout_s)
        self._served: ServedModel | None = None
        self._unsent_versions: set[str] = set()  # index dictionary versions whose keywords this reranker does not read (logged once)

    async def aclose(self) -> None:
        await self._client.aclose()

    @property
    def model_id(self) -> str | None:
        """The served model's name once ``GET /info`` told it (``None`` before, or if it does not say)."""
        return self._served.model_id if self._served is not None else None

    async def model_name(self) -> str | None:
        """The served model's name from ``GET /info`` (TEI's ``model_id``; cached; ``None`` if unknown)."""
        if self._served is None:
            try:
                await self._deadline(self._describe())
            except RerankUnavailable as exc:
                logger.info("reranker at %s did not describe its model: %s", self.url, exc)
        return self.model_id

    def _timed_out(self) -> RerankUnavailable:
        return RerankUnavailable("reranker_timeout", f"no answer from {self.url} within {self.timeout_s * 1000:.0f} ms")

    async def _deadline(self, call: Awaitable[T]) -> T:
        """``call`` ended within ``timeout_ms``, transport failures as :class:`RerankUnavailable`."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await call
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise self._timed_out() from exc
        except httpx.HTTPError as exc:
            raise RerankUnavailable("reranker_unreachable", f"{self.url}: {type(exc).__name__}: {exc}") from exc

    async def _describe(self) -> ServedModel:
        """``GET /info`` once (a reranker without one, or with an answer that is no JSON object within bounds, is
        taken as is: no name, no batch limit). Transport failures propagate (``/info`` is the first call)."""
        if self._served is None:
            try:
                answer = await fetch(self._client, "GET", f"{self.url}/info", max_bytes=self.max_answer_bytes)
                info = json_body(answer) if answer.status == 200 else None
            except BadAnswer as exc:
                logger.info("reranker at %s: /info is not read (%s)", self.url, exc)
                info = None
            self._served = ServedModel.from_info(info)
            logger.info("reranker at %s serves %s (at most %s texts per request)", self.url, self._served.model_id or "an unnamed model",
                        self._served.max_batch or "any number of")
        return self._served

    async def rerank(self, query: str, texts: Sequence[str], *, keywords: dict | None = None) -> list[float]:
        """Scores of ``texts`` against ``query``, in input order, within ``timeout_ms``. ``keywords``: the texts'
        stored keywords (``{"dictionary_version", "top_k", "words"}``, ``words`` parallel to ``texts``), sent only to a
        model whose ``/info`` names that dictionary version (a keyword model of the same dictionary).

        Raises:
            RerankUnavailable: breaker open, timeout, connection failure, HTTP error or malformed answer.
        """
        if not self.breaker.allow():
            raise RerankUnavailable("circuit_open", f"reranker at {self.url} failed repeatedly; circuit breaker is open")
        try:
            parts = await self._deadline(self._scores(query, texts, keywords))
        except RerankUnavailable:
            self.breaker.record_failure()
            raise
        self.breaker.record_success()
        return [score for part in parts for score in part]

    async def _scores(self, query: str, texts: Sequence[str], keywords: dict | None) -> list[list[float]]:
        served = await self._describe()
        size = served.max_batch or max(len(texts), 1)
        if keywords is not None and keywords["dictionary_version"] != served.dictionary_version:
            if keywords["dictionary_version"] not in self._unsent_versions:
                self._unsent_versions.add(keywords["dictionary_version"])
                logger.info("not sending the index's keywords (dictionary %s): the reranker at %s reads %s", keywords["dictionary_version"],
                            self.url, f"dictionary {served.dictionary_version}" if served.dictionary_version else "no keywords")
            keywords = None
        return await asyncio.gather(*(
            self._rerank(query, texts[i : i + size], None if keywords is None else {**keywords, "words": keywords["words"][i : i + size]})
            for i in range(0, len(texts), size)
        ))

    async def _rerank(self, query: str, texts: Sequence[str], keywords: dict | None = None) -> list[float]:
        """One ``POST /rerank`` (TEI's request: ``truncate`` on, normalized scores), its answer validated."""
        payload = {"query": query, "texts": list(texts), "truncate": True, "raw_scores": False, "return_text": False}
        if keywords is not None:
            payload["keywords"] = keywords
        try:
            answer = await fetch(self._client, "POST", f"{self.url}/rerank", max_bytes=self.max_answer_bytes, payload=payload)
            if answer.status != 200:
                reason = STATUS_REASON.get(answer.status, "reranker_error")
                raise RerankUnavailable(reason, f"{self.url}/rerank answered HTTP {answer.status}: {answer.text()}")
            return rerank_scores(json_body(answer), len(texts))
        except BadAnswer as exc:
            raise RerankUnavailable("reranker_bad_response", f"{self.url}/rerank: {exc}") from exc


__all__ = [
    "REASONS", "STATUS_REASON", "BreakerState", "CircuitBreaker", "Reason", "RerankClient", "RerankUnavailable", "ServedModel",
]
