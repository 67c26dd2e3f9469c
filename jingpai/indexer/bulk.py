"""Bulk writes of one indexing run: batches in flight, retries, and what a failed item means.

A :class:`BulkWriter` sends the run's documents in bulk requests of ``batch_size``, up to
``concurrency`` of them in flight while the caller builds the next batch, each retried with
exponential backoff while the engine is unreachable. A failed item is quarantined when it is the
document's fault, and stops the run with :class:`EngineRefusedError` when it is the index's or the
cluster's (:func:`jingpai.indexer.checks.is_refusal`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tenacity import before_sleep_log, retry, retry_if_exception, stop_after_attempt, wait_exponential
from tqdm import tqdm

from jingpai.engine.client import Engine
from jingpai.errors import JingpaiError, UnavailableError
from jingpai.indexer.checks import alias_state, is_refusal, item_error, item_kind
from jingpai.indexer.quarantine import Quarantine

if TYPE_CHECKING:
    from jingpai.indexer.report import IndexReport
    from jingpai.indexer.settings import IndexSettings

logger = logging.getLogger(__name__)


class IndexingError(JingpaiError, RuntimeError):
    """Indexing stopped (engine unreachable after all retries, or a bad setting)."""


class EngineUnreachableError(IndexingError, UnavailableError):
    """The engine stayed unreachable through all retries of a request; re-run to resume."""


class EngineRefusedError(IndexingError, UnavailableError):
    """The engine refused writes to the whole index or cluster (write block, disk flood-stage
    watermark, read-only or closed index, no permission): not the documents' fault, so they are not
    quarantined. The physical index is kept and the alias untouched; re-run to resume once fixed."""


#: where a document came from (file, line, fields), to quarantine it if the engine rejects it
Origin = tuple[str, int, dict]


def batches(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of ``size`` items (the last may be shorter)."""
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class BulkWriter:
    """Writes documents to one physical index; use as a context manager (it owns the sender threads).

    Up to ``settings.concurrency`` bulk requests are in flight while the next batch is built, so the
    engine indexes (on as many write threads) while Python works. Batches are settled in the order they
    were sent, which keeps the documents' origins aligned with the per-item results. The first batch
    travels alone: fields the mapping leaves dynamic get their type from the first records of the
    corpus, as with sequential requests, rather than from whichever of two concurrent batches lands first.

    Args:
        engine: the cluster.
        physical: the physical index written to.
        settings: the run's options (``batch_size``, ``concurrency``, ``retries``, ``retry_max_wait_s``,
            ``progress``, ``index``).
        quarantine: where documents the engine rejects go.
        report: the run's report; ``indexed`` and ``rejected`` are kept up to date.
        live_before: what the alias pointed at before the run (for the refusal message).
        on_progress: called after every settled bulk request with the running report.
    """

    def __init__(
        self, engine: Engine, physical: str, settings: IndexSettings, *, quarantine: Quarantine, report: IndexReport,
        live_before: list[str], on_progress: Callable[[IndexReport], None] | None = None,
    ) -> None:
        self.engine = engine
        self.physical = physical
        self.settings = settings
        self.quarantine = quarantine
        self.report = report
        self.live_before = live_before
        self.on_progress = on_progress
        #: the result of the ``prepare`` callable given to :meth:`start` (once :meth:`write` returned)
        self.prepared: Any = None
        self._setup: Future | None = None
        self._origins: deque[Origin] = deque()
        self._inflight: deque[tuple[Future, int]] = deque()
        self._send = retry(
            retry=retry_if_exception(engine.is_transient),
            stop=stop_after_attempt(max(1, settings.retries)),
            wait=wait_exponential(multiplier=0.5, max=settings.retry_max_wait_s),
            before_sleep=before_sleep_log(logger, logging.WARNING),
            reraise=True,
        )(lambda chunk: list(engine.bulk(chunk, chunk_size=len(chunk))))
        self._sender = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="jingpai-bulk")
        self._bar = tqdm(total=None, unit="doc", disable=not settings.progress, desc=f"indexing {settings.index}")

    def __enter__(self) -> BulkWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._sender.shutdown(wait=True)  # requests in flight finish before the quarantine closes
        finally:
            self._bar.close()

    def start(self, prepare: Callable[[], Any]) -> None:
        """Run ``prepare`` (creating the index: the engine waits for its shard) on a sender thread, so it
        overlaps building the first batch; its result becomes :attr:`prepared`."""
        self._setup = self._sender.submit(prepare)

    def write(self, documents: Iterable[tuple[Origin, dict]]) -> None:
        """Send every ``(origin, bulk action)`` and settle every request.

        Raises:
            EngineUnreachableError: a request failed through all retries.
            EngineRefusedError: the engine refused writes to the index or the cluster.
        """
        limit = 1
        for chunk in batches(documents, self.settings.batch_size):
            self._ready()
            while len(self._inflight) >= limit:
                self._settle(*self._inflight.popleft())
                limit = self.settings.concurrency
            self._origins.extend(origin for origin, _ in chunk)
            self._inflight.append((self._sender.submit(self._send, [action for _, action in chunk]), len(chunk)))
        self._ready()
        while self._inflight:
            self._settle(*self._inflight.popleft())

    def _ready(self) -> None:
        if self._setup is not None:
            try:
                self.prepared = self._outcome(self._setup)
            finally:
                self._setup = None

    def _outcome(self, future: Future) -> Any:
        """The future's result; an engine that stays unreachable becomes :class:`EngineUnreachableError`,
        an error answer :class:`EngineRefusedError`."""
        try:
            return future.result()
        except Exception as exc:
            if self.engine.is_transient(exc):
                raise EngineUnreachableError(
                    f"engine at {self.engine.url} unreachable after {self.settings.retries} attempts ({exc}); "
                    f"{self.report.indexed} documents are in {self.physical} — re-run the same command to resume"
                ) from exc
            if self.engine.is_api_error(exc):
                raise self._refused(str(exc)) from exc
            raise

    def _settle(self, future: Future, size: int) -> None:
        refusal: str | None = None
        for ok, item in self._outcome(future):
            source, line, fields = self._origins.popleft()
            if ok:
                self.report.indexed += 1
            elif is_refusal(item):
                refusal = refusal or item_error(item).removeprefix("engine rejected the document: ")
            else:
                self.quarantine.add(source, line, fields, item_error(item), kind=item_kind(item))
        self.quarantine.flush()
        self.report.rejected = self.quarantine.count
        self._bar.update(size)
        self._bar.set_postfix(rejected=self.report.rejected)
        if refusal is not None:
            raise self._refused(refusal)
        if self.on_progress is not None:
            self.on_progress(self.report)

    def _refused(self, error: str) -> EngineRefusedError:
        physical = self.physical
        return EngineRefusedError(
            f"the engine refused to write to {physical}: {error.rstrip('; .')}. This is the index's or the cluster's state "
            f"(write block, disk watermark, read-only or closed index, permissions), not the documents', so none "
            f"were quarantined for it; {self.report.indexed} documents are in {physical} and "
            f"{alias_state(self.settings.index, self.live_before)}. Fix the cluster (e.g. remove the block, free "
            f"disk, open the index) and re-run the same command to resume"
        )


__all__ = ["BulkWriter", "EngineRefusedError", "EngineUnreachableError", "IndexingError", "Origin", "batches"]
