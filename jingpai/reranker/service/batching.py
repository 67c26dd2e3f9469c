"""Merging concurrent requests into token-budgeted batches (:class:`BatchingEngine`).

The (query, document) pairs of the requests queued while the model is busy are merged, sorted by length
and cut into batches whose padded size stays within ``max_batch_tokens``. One asyncio task collects the
queue; one worker thread runs the batches (:class:`~jingpai.reranker.service.forward.ForwardPass`), so
the event loop keeps accepting requests while the model computes, and one featurizing thread prepares the
next batch's input meanwhile. A merged batch that raises is re-run request by request, so only the
request that caused the error fails.

Embedding requests (:meth:`BatchingEngine.embed`: texts as token ids, one vector each) share the queue,
the token budget, the queue timeout and the worker with scoring requests: a round holding both runs each
kind in batches of its own (a forward pass computes one :data:`~jingpai.reranker.service.forward.Task`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jingpai.reranker.base import Pair, Reranker
from jingpai.reranker.service.errors import QueueTimeoutError, ScoringError, ServiceClosedError, ServiceError
from jingpai.reranker.service.forward import ForwardPass, Launched, Task
from jingpai.reranker.service.metrics import ServiceMetrics
from jingpai.reranker.service.settings import LIMIT_SOURCE, ComputeDType, ServiceSettings, resolve_max_batch_tokens

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _Job:
    pairs: Sequence[Any]  # (query, document) pairs; for task "embed", texts as token ids
    lengths: list[int]
    encodings: list[Any] | None
    enqueued: float
    deadline: float
    started: asyncio.Future[None]
    done: asyncio.Future[np.ndarray]
    task: Task = "score"
    expired: bool = False


@dataclass(eq=False)
class _Item:
    job: int
    pos: int
    length: int


@dataclass(frozen=True)
class _Batch:
    """One batch of a round: its pairs (``members``), the jobs they belong to, and its launch (or error)."""

    members: list[_Item]
    job_ids: list[int]
    launched: Launched | ServiceError


@dataclass(frozen=True)
class _Prepared:
    """One batch of a round whose featurizing was queued (``features``: its future on the featurizing thread)."""

    members: list[_Item]
    job_ids: list[int]
    task: Task
    features: concurrent.futures.Future[dict[str, Any]]


@dataclass
class _RoundOutcome:
    scores: dict[int, np.ndarray] = field(default_factory=dict)
    errors: dict[int, ServiceError] = field(default_factory=dict)


class BatchingEngine:
    """Merges the pairs of concurrent requests into token-budgeted, length-sorted batches.

    Args:
        model: the service's model (already on its device).
        settings: service settings (``max_batch_tokens``, ``queue_timeout_ms``, ``batch_wait_ms``).
        metrics: where to record batch sizes and timings.
        dtype: ``bf16``/``fp16`` run under autocast; ``fp32`` does not.
    """

    def __init__(self, model: Reranker, settings: ServiceSettings, metrics: ServiceMetrics, *, dtype: ComputeDType) -> None:
        self.model = model
        self.settings = settings
        self.metrics = metrics
        # featurizing on a thread of its own: batch n+1's host work overlaps batch n's forward pass
        self._featurizer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jingpai-featurize")
        self.forward = ForwardPass(model, metrics, dtype=dtype, compile=settings.compile, featurizer=self._featurizer)
        #: padded tokens per forward pass (the setting, else the device's default)
        self.max_batch_tokens = resolve_max_batch_tokens(settings.max_batch_tokens, model.device)
        self._queue: deque[_Job] = deque()
        self._queued_tokens = 0
        self._wakeup: asyncio.Event | None = None
        self._full: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jingpai-rerank")
        self._closed = False

    # -------------------------------------------------------------- public

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (``/health`` answers 503 then)."""
        return self._closed

    async def score(self, pairs: list[Pair], lengths: list[int], *, encodings: list[Any] | None = None) -> np.ndarray:
        """Raw model scores for ``pairs`` in input order (``lengths``: padded token cost of each pair;
        ``encodings``: each pair's encoding, ``None`` where the model is to tokenize its text; see
        :meth:`ForwardPass.launch`).

        Raises:
            QueueTimeoutError: the first batch did not start within ``queue_timeout_ms`` (overloaded).
            TokenizerError: the model could not featurize this request's input.
            ScoringError: the forward pass failed for this request.
            ServiceClosedError: the engine is shut down.
        """
        return await self._submit(pairs, lengths, encodings, task="score")

    async def embed(self, token_ids: Sequence[Sequence[int]], lengths: list[int]) -> np.ndarray:
        """Vectors ``[len(token_ids), dim]`` of texts already cut into the model's token ids (an
        :class:`~jingpai.reranker.service.embedding.EmbeddingModel`'s ``text_tokens``), in input order;
        ``lengths``: each text's token count. Queued, batched and limited as :meth:`score` is.

        Raises:
            QueueTimeoutError, TokenizerError, ScoringError, ServiceClosedError: as :meth:`score`.
        """
        return await self._submit(token_ids, lengths, None, task="embed")

    async def _submit(self, pairs: Sequence[Any], lengths: list[int], encodings: list[Any] | None, *, task: Task) -> np.ndarray:
        if self._closed:
            raise ServiceClosedError("the rerank engine is shut down")
        if not pairs:
            return np.empty(0, dtype=np.float32)
        job = self._enqueue(pairs, lengths, encodings, task)
        timeout = self.settings.queue_timeout_ms / 1000
        try:
            await asyncio.wait_for(asyncio.shield(job.started), timeout=timeout)
        except TimeoutError:
            job.expired = True
            self.metrics.queue_timeouts.inc()
            raise QueueTimeoutError(
                f"the request waited more than {self.settings.queue_timeout_ms} ms for the model "
                f"(queue_timeout_ms, {LIMIT_SOURCE['queue_timeout_ms']}); retry later",
                retry_after_s=max(1, math.ceil(timeout)),
            ) from None
        except asyncio.CancelledError:
            job.expired = True  # the client went away: skip its pairs
            raise
        return await job.done

    async def warmup(self) -> None:
        """Score one tiny pair so lazy CUDA/oneDNN initialisation happens before the first request.

        It bypasses the queue and the metrics: ``/metrics`` counts served traffic only.
        """
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, functools.partial(self.forward.run, [("warmup", "warmup")], requests=1, record=False))

    async def close(self) -> None:
        """Stop the collector and the worker thread; queued requests get :class:`ServiceClosedError`."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        while self._queue:
            job = self._queue.popleft()
            for fut in (job.started, job.done):
                if not fut.done():
                    fut.set_exception(ServiceClosedError("the rerank engine shut down before this request ran"))
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._featurizer.shutdown(wait=False, cancel_futures=True)

    # -------------------------------------------------------------- collector (event loop)

    def _enqueue(self, pairs: Sequence[Any], lengths: list[int], encodings: list[Any] | None, task: Task) -> _Job:
        self._ensure_started()
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + self.settings.queue_timeout_ms / 1000
        job = _Job(pairs, lengths, encodings, now, deadline, loop.create_future(), loop.create_future(), task=task)
        self._queue.append(job)
        self._queued_tokens += sum(lengths)
        assert self._wakeup is not None and self._full is not None
        self._wakeup.set()
        if self._queued_tokens >= self.max_batch_tokens:
            self._full.set()
        return job

    def _ensure_started(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done():
            if loop is not self._loop:
                raise RuntimeError("a BatchingEngine serves one event loop; create one app per loop")
            return
        self._loop = loop
        self._wakeup = asyncio.Event()
        self._full = asyncio.Event()
        self._task = loop.create_task(self._collect(), name="jingpai-rerank-batcher")

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._next_round(loop)
            if jobs:
                await self._serve_round(loop, jobs)

    async def _next_round(self, loop: asyncio.AbstractEventLoop) -> list[_Job]:
        """Wait for queued requests (and up to ``batch_wait_ms`` for more), then take a round of them."""
        assert self._wakeup is not None and self._full is not None
        await self._wakeup.wait()
        if self.settings.batch_wait_ms > 0 and self._queued_tokens < self.max_batch_tokens:
            try:
                await asyncio.wait_for(self._full.wait(), timeout=self.settings.batch_wait_ms / 1000)
            except TimeoutError:
                pass
        jobs = self._take_round(loop.time())
        if not self._queue:
            self._wakeup.clear()
        if self._queued_tokens < self.max_batch_tokens:
            self._full.clear()
        return jobs

    async def _serve_round(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
        """Run ``jobs`` on the worker thread and answer each one's future."""
        now = loop.time()
        for job in jobs:
            job.started.set_result(None)
            self.metrics.queue_seconds.observe(now - job.enqueued)
        try:
            outcome = await loop.run_in_executor(self._executor, self._run_round, jobs)
        except Exception as exc:  # the worker itself broke (not one batch): fail this round, keep serving
            logger.exception("rerank round failed")
            outcome = _RoundOutcome(errors={i: ScoringError(f"scoring failed: {type(exc).__name__}: {exc}") for i in range(len(jobs))})
        for i, job in enumerate(jobs):
            if job.done.done():
                continue
            if i in outcome.errors:
                job.done.set_exception(outcome.errors[i])
            else:
                job.done.set_result(outcome.scores[i])

    def _take_round(self, now: float) -> list[_Job]:
        """Queued jobs (oldest first) until their pairs fill ``max_batch_tokens``; expired ones are dropped."""
        jobs: list[_Job] = []
        tokens = 0
        while self._queue and (not jobs or tokens < self.max_batch_tokens):
            job = self._queue.popleft()
            cost = sum(job.lengths)
            self._queued_tokens -= cost
            if job.expired or job.done.done() or now > job.deadline:
                continue  # its handler answers 429 (or is gone)
            jobs.append(job)
            tokens += cost
        return jobs

    # -------------------------------------------------------------- worker thread

    def plan(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indices of ``lengths`` grouped into batches: sorted by length, each ≤ ``max_batch_tokens`` padded."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            # sorted ascending, so the newest pair is the longest: padded cost = count × its length
            if current and (len(current) + 1) * lengths[i] > self.max_batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _run_round(self, jobs: list[_Job]) -> _RoundOutcome:
        items = [_Item(j, p, length) for j, job in enumerate(jobs) for p, length in enumerate(job.lengths)]
        results: dict[int, np.ndarray] = {}  # each job's scores (or vectors), shaped by its first batch
        outcome = _RoundOutcome()
        batches: list[list[int]] = []
        for task in dict.fromkeys(job.task for job in jobs):  # a forward pass computes one task
            of_task = [i for i, it in enumerate(items) if jobs[it.job].task == task]
            batches += [[of_task[k] for k in batch] for batch in self.plan([items[i].length for i in of_task])]
        # software pipeline: batch k+1 is featurized on the featurizing thread while batch k's forward pass runs
        # here (a CPU computes it without the GIL; a GPU runs it asynchronously, and only collecting the scores
        # waits), so neither the device nor the host waits for the other between batches
        pending: _Batch | None = None
        ahead = self._prefetch(jobs, [items[i] for i in batches[0]], outcome) if batches else None
        for k in range(len(batches)):
            current = ahead
            ahead = self._prefetch(jobs, [items[i] for i in batches[k + 1]], outcome) if k + 1 < len(batches) else None
            launched = None if current is None else self._start(current)
            if pending is not None:
                self._settle(jobs, results, outcome, pending)
            pending = launched
        if pending is not None:
            self._settle(jobs, results, outcome, pending)
        outcome.scores = {j: r for j, r in results.items() if j not in outcome.errors}
        return outcome

    def _prefetch(self, jobs: list[_Job], items: list[_Item], outcome: _RoundOutcome) -> _Prepared | None:
        """Queue the featurizing of ``items`` (leaving out jobs that already failed); ``None``: nothing left."""
        members = [it for it in items if it.job not in outcome.errors]
        if not members:
            return None
        job_ids = sorted({it.job for it in members})
        pairs = [jobs[it.job].pairs[it.pos] for it in members]
        task = jobs[members[0].job].task
        return _Prepared(members, job_ids, task, self.forward.prepare_soon(pairs, task=task, encodings=self._encodings(jobs, members)))

    def _start(self, prepared: _Prepared) -> _Batch:
        """Start the forward pass of a prefetched batch (its featurizing error, or the forward pass's, in the batch)."""
        try:
            features = prepared.features.result()
            launched = self.forward.start(features, task=prepared.task, pairs=len(prepared.members), requests=len(prepared.job_ids))
            return _Batch(prepared.members, prepared.job_ids, launched)
        except ServiceError as exc:
            return _Batch(prepared.members, prepared.job_ids, exc)

    def _settle(self, jobs: list[_Job], results: dict[int, np.ndarray], outcome: _RoundOutcome, batch: _Batch) -> None:
        """Collect one launched batch into ``results``; a failed merged batch is re-run request by request."""
        try:
            if isinstance(batch.launched, ServiceError):
                raise batch.launched
            scores = self.forward.collect(batch.launched)
        except ServiceError as exc:
            if len(batch.job_ids) == 1:
                outcome.errors[batch.job_ids[0]] = exc
                return
            # a merged batch failed: re-run each request alone so only the one at fault fails
            logger.warning("a batch of %d requests failed (%s); re-running them one by one", len(batch.job_ids), exc)
            self._rerun_alone(jobs, results, outcome, batch)
            return
        for it, s in zip(batch.members, scores, strict=True):
            self._store(jobs, results, it, s)

    @staticmethod
    def _store(jobs: list[_Job], results: dict[int, np.ndarray], it: _Item, value: np.ndarray) -> None:
        """Put one pair's score (one text's vector) into its job's result, made at its first value."""
        out = results.get(it.job)
        if out is None:
            out = results[it.job] = np.empty((len(jobs[it.job].pairs), *np.shape(value)), dtype=np.float32)
        out[it.pos] = value

    @staticmethod
    def _encodings(jobs: list[_Job], members: list[_Item]) -> list[Any] | None:
        """The members' encodings (``None`` per pair whose job has none; ``None`` if no job has any)."""
        if all(jobs[j].encodings is None for j in {it.job for it in members}):
            return None
        return [None if (encs := jobs[it.job].encodings) is None else encs[it.pos] for it in members]

    def _rerun_alone(self, jobs: list[_Job], results: dict[int, np.ndarray], outcome: _RoundOutcome, batch: _Batch) -> None:
        for j in batch.job_ids:
            if j in outcome.errors:
                continue
            mine = [it for it in batch.members if it.job == j]
            try:
                own = self.forward.run(
                    [jobs[j].pairs[it.pos] for it in mine], task=jobs[j].task, encodings=self._encodings(jobs, mine), requests=1,
                )
            except ServiceError as exc:
                outcome.errors[j] = exc
                continue
            for it, s in zip(mine, own, strict=True):
                self._store(jobs, results, it, s)


__all__ = ["BatchingEngine"]
