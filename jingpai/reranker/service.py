"""The rerank HTTP service behind ``jingpai serve``: one model, several client conventions.

Routes (see ``docs/service.md``):

* ``POST /rerank`` — Hugging Face TEI: ``{query, texts, truncate?, raw_scores?, return_text?}`` →
  ``[{index, score, text?}]`` best first. Callers with first-stage scores add ``scores`` (parallel to
  ``texts``) and optionally ``fusion``, ``fusion_weight``, ``rrf_k`` (:mod:`jingpai.reranker.fusion`):
  ``score`` is then the fused score and ``model_score`` the model's.
* ``POST /v1/rerank``, ``POST /v2/rerank`` — Cohere / Jina: ``{model?, query, documents, top_n?,
  return_documents?}`` (``model``: the served name, or left out) → ``{results: [{index, relevance_score,
  document?}], …}`` best first.
* ``POST /opensearch/text_similarity`` — OpenSearch ML connector: ``{query_text, text_docs}`` →
  ``{inference_results: [{output: [{name: "similarity", data_type: "FLOAT32", shape: [1], data: [s]}]}]}``
  in input order.
* ``GET /health``, ``GET /info``, ``GET /metrics`` (Prometheus), ``GET /openapi.json``, ``GET /docs``.

Every scoring route feeds one :class:`BatchingEngine`: the (query, document) pairs of concurrent
requests are merged, sorted by length and cut into batches whose padded size stays within
``max_batch_tokens``; each batch runs on one worker thread under ``torch.inference_mode()`` and, when
the dtype is not fp32, ``torch.autocast``. A batch that raises is re-run request by request so only the
request that caused the error fails.

Example:
    >>> from jingpai.reranker.base import Reranker
    >>> app = create_app(ServiceSettings(max_docs=100), Reranker.load("models/cross"))  # doctest: +SKIP
    >>> uvicorn.run(app, host="127.0.0.1", port=8081)                                   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import math
import re
import time
import uuid
import warnings
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

import numpy as np
import torch
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from jingpai.cjk import HAN_CLASS
from jingpai import __version__
from jingpai.reranker.base import Pair, Reranker
from jingpai.reranker.fusion import FUSION_MODES, FusionError, FusionMode, FusionSpec, fused_order, ranks_of

logger = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]
DType = Literal["auto", "bf16", "fp16", "fp32", "int8"]
LongDocs = Literal["truncate", "max-chunks"]

DTYPES: dict[str, torch.dtype | None] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None, "int8": None}

#: where each limit is set, so error messages can tell the client (and the operator) what to change
_LIMIT_SOURCE = {
    "max_docs": "--max-docs / JINGPAI_SERVE_MAX_DOCS",
    "max_body_bytes": "--max-body-bytes / JINGPAI_SERVE_MAX_BODY_BYTES",
    "max_query_chars": "--max-query-chars / JINGPAI_SERVE_MAX_QUERY_CHARS",
    "max_length": "--max-length / JINGPAI_SERVE_MAX_LENGTH",
    "queue_timeout_ms": "--queue-timeout-ms / JINGPAI_SERVE_QUEUE_TIMEOUT_MS",
}


# ---------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ServiceSettings:
    """Everything ``jingpai serve`` can be told (built from CLI options / env in one place).

    Attributes:
        model_name: name reported by ``/info`` and in Cohere/Jina responses (``None``: the architecture).
        model_dir: where the model was loaded from (reported by ``/info`` only with ``expose_model_dir``).
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``; used by the CLI to load the model.
        dtype: ``auto`` (GPU: bf16, or fp16 where bf16 is unsupported; CPU: bf16 where the CPU has native
            bf16 — AMX or AVX512-BF16 — else fp32), ``bf16``, ``fp16``, ``fp32`` or ``int8``. bf16/fp16 run
            the forward pass under ``torch.autocast`` (on a GPU the weights are cast instead). ``int8`` (CPU
            only, opt-in) quantizes the model's linear layers to int8 with dynamic activation scales:
            ~2-2.5× the fp32 speed on CPUs without native bf16, scores within ~1e-2 of fp32.
        max_batch_tokens: padded tokens (pairs × longest pair) per forward pass.
        max_length: tokens per (query, document) pair (``None``: the model's saved ``max_length``).
        max_docs: documents per request (more → 413).
        max_body_bytes: request body size (more → 413).
        max_query_chars: query length in characters (more → 422).
        queue_timeout_ms: how long a request may wait before its first batch starts (more → 503 with
            ``Retry-After``).
        batch_wait_ms: how long the batcher waits for more requests after the first one arrives (0: take
            whatever is queued when the worker is free — concurrent requests still merge while it is busy).
        long_docs: ``truncate`` (pairs longer than ``max_length`` are cut, the document side first) or
            ``max-chunks`` (a long document is split into overlapping chunks that each fit, and scores the
            best chunk).
        max_chunks_per_doc: chunks scored per document in ``max-chunks`` mode (the rest of the document is
            ignored).
        threads: torch intra-op threads (``None``: torch's default); applied by the CLI.
        warmup: run one tiny batch at start-up so the first request does not pay for lazy initialisation.
        expose_model_dir: ``/info`` reports ``model_dir`` (off by default: a server path tells clients
            nothing they need and tells an attacker about the host's layout).
    """

    model_name: str | None = None
    model_dir: Path | None = None
    device: Device = "auto"
    dtype: DType = "auto"
    max_batch_tokens: int = 16384
    max_length: int | None = None
    max_docs: int = 1000
    max_body_bytes: int = 4 * 1024 * 1024
    max_query_chars: int = 2048
    queue_timeout_ms: int = 30_000
    batch_wait_ms: float = 0.0
    long_docs: LongDocs = "truncate"
    max_chunks_per_doc: int = 8
    threads: int | None = None
    warmup: bool = True
    expose_model_dir: bool = False

    def __post_init__(self) -> None:
        for name, choices in (("device", Device), ("dtype", DType), ("long_docs", LongDocs)):
            value = getattr(self, name)
            if value not in get_args(choices):
                raise ValueError(f"{name}={value!r} is not valid; expected one of {', '.join(get_args(choices))}")
        for name in ("max_batch_tokens", "max_docs", "max_body_bytes", "max_query_chars", "queue_timeout_ms", "max_chunks_per_doc"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_length", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 (or unset), got {value}")
        if self.max_length is not None and self.max_length < 8:
            raise ValueError(f"max_length must be >= 8 tokens, got {self.max_length}")
        if self.batch_wait_ms < 0:
            raise ValueError(f"batch_wait_ms must be >= 0, got {self.batch_wait_ms}")


def resolve_device(device: Device) -> str:
    """``auto`` → ``cuda`` when available else ``cpu``.

    Raises:
        ValueError: ``cuda`` was asked for but torch sees no CUDA device.
    """
    if device == "auto":
        resolved = "cuda" if torch.cuda.is_available() else "cpu"
        logger.info("device auto → %s", resolved)
        return resolved
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but torch.cuda.is_available() is False; use --device cpu or auto")
    return device


def cpu_has_native_bf16() -> bool:
    """Whether the CPU advertises native bf16 matrix instructions (Intel AMX or AVX512-BF16)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"amx_bf16", "avx512_bf16"})
    except OSError:
        logger.info("cannot read /proc/cpuinfo; assuming the CPU has no native bf16")
    return False


def resolve_dtype(dtype: DType, device: torch.device) -> Literal["bf16", "fp16", "fp32", "int8"]:
    """The concrete compute dtype for ``dtype`` on ``device`` (see :class:`ServiceSettings`).

    Raises:
        ValueError: ``int8`` on a device other than the CPU.
    """
    if dtype == "int8" and device.type != "cpu":
        raise ValueError(f"dtype='int8' (dynamic int8 quantization) runs on the CPU only, not on {device.type}; use bf16 or fp16 there")
    if dtype != "auto":
        if dtype == "fp16" and device.type == "cpu":
            logger.warning("fp16 autocast on CPU is usually slower than bf16 or fp32")
        return dtype
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16"
        logger.info("this GPU has no bf16 support; dtype auto → fp16")
        return "fp16"
    if device.type == "cpu":
        if cpu_has_native_bf16():
            return "bf16"
        logger.info("CPU without AMX/AVX512-BF16: dtype auto → fp32 (bf16 would be emulated and slower)")
        return "fp32"
    logger.info("dtype auto on device %s → fp32", device)
    return "fp32"


def quantize_int8(net: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``net`` whose ``nn.Linear`` layers run in int8 (weights per tensor, activations scaled per batch).

    Raises:
        ValueError: this torch build has no quantized CPU engine.
    """
    engines = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    if not engines:
        raise ValueError("dtype='int8' needs a quantized CPU engine (fbgemm/x86/onednn/qnnpack); this torch build has none")
    linears = sum(isinstance(m, torch.nn.Linear) for m in net.modules())
    logger.info("quantizing %d linear layers to int8 (dynamic activations, engine %s)", linears, torch.backends.quantized.engine)
    with warnings.catch_warnings():
        # torch marks its quantized tensor types as deprecated; they are still the fastest int8 path on CPUs
        # without AMX/VNNI, and this is the one place that uses them
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.ao.quantization.quantize_dynamic(net, {torch.nn.Linear}, dtype=torch.qint8).eval()


# ---------------------------------------------------------------------------------------- errors


class ServiceError(Exception):
    """An error the service reports to the client; :func:`error_response` turns it into HTTP."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "internal"


class PayloadTooLargeError(ServiceError):
    """Body, document count or a pair over a configured limit."""

    status_code = 413
    error_type = "payload_too_large"


class InvalidInputError(ServiceError):
    """A request the model cannot score (query too long, no documents, input the model rejects)."""

    status_code = 422
    error_type = "validation"


class QueueTimeoutError(ServiceError):
    """The request waited longer than ``queue_timeout_ms`` for its first batch."""

    status_code = 503
    error_type = "overloaded"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ServiceClosedError(ServiceError):
    """The batching engine was shut down."""

    status_code = 503
    error_type = "unavailable"


class ScoringError(ServiceError):
    """The model's forward pass failed for this request."""

    status_code = 500
    error_type = "backend"


def error_response(exc: Exception) -> JSONResponse:
    """The one place that maps exceptions to HTTP responses: ``{"error": message, "error_type": kind}``."""
    headers: dict[str, str] = {}
    if isinstance(exc, ServiceError):
        status, kind, message = exc.status_code, exc.error_type, str(exc)
        if isinstance(exc, QueueTimeoutError):
            headers["Retry-After"] = str(exc.retry_after_s)
    elif isinstance(exc, StarletteHTTPException) and exc.status_code == 400 and exc.__cause__ is not None:
        # FastAPI's answer to a body it cannot even decode (not UTF-8/16/32 text); its own detail names no cause
        status, kind = 400, "bad_request"
        message = f"the body could not be read as JSON text ({type(exc.__cause__).__name__}: {exc.__cause__})"
    elif isinstance(exc, StarletteHTTPException):  # routing: 404, 405
        status, kind, message = exc.status_code, "http", str(exc.detail)
        headers.update(exc.headers or {})
    elif isinstance(exc, RequestValidationError):
        status, kind = 422, "validation"
        message = "; ".join(_describe_validation_error(err) for err in exc.errors())
    else:
        logger.exception("unhandled error", exc_info=exc)
        status, kind, message = 500, "internal", f"internal error: {type(exc).__name__}: {exc}"
    return JSONResponse({"error": message, "error_type": kind}, status_code=status, headers=headers)


def _describe_validation_error(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
    if err.get("type") == "json_invalid":
        return f"the body is not valid JSON (at character {loc}: {err.get('ctx', {}).get('error', 'invalid')})"
    if err.get("type") == "extra_forbidden":
        return f"{loc}: unknown field (see /openapi.json for the accepted fields)"
    if loc == "body" and err.get("type") in ("missing", "model_attributes_type"):
        return "the body must be a JSON object sent with content-type: application/json (see /openapi.json)"
    if err.get("type") == "too_short":
        n = err.get("ctx", {}).get("min_length", 1)
        return f"{loc} must hold at least {n} item{'s' if n != 1 else ''}"
    if loc == "model" and err.get("type") == "literal_error":
        expected = err.get("ctx", {}).get("expected", "?")
        return f"model {err.get('input')!r} is not served here; this service serves {expected} (send that name or leave model out)"
    return f"{loc}: {err.get('msg', 'invalid')}"


# ---------------------------------------------------------------------------------------- text lengths


class TextMeasure:
    """Token counts and token-window cuts of texts, as the model will see them.

    Models with a fast Hugging Face tokenizer (``model.tokenizer``) are measured exactly; others use a
    cheap estimate (one token per CJK character, one per Latin word piece of up to 6 letters, one per
    other symbol), which only steers batching and chunking — the model still truncates on its own.
    """

    _UNIT = re.compile(rf"[{HAN_CLASS}]|[^\W{HAN_CLASS}]+|[^\w\s]", re.UNICODE)

    def __init__(self, model: Reranker) -> None:
        tokenizer = getattr(model, "tokenizer", None)
        # an own copy of the Rust tokenizer, without truncation or padding: it keeps per-call state, so
        # sharing it with the worker thread's featurize() would corrupt batches. It is called directly:
        # the transformers wrapper's per-token Python conversion costs as much as tokenizing.
        self._tokenizer: Any = None
        if getattr(tokenizer, "is_fast", False):
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
            self._tokenizer.no_truncation()
            self._tokenizer.no_padding()
        if self._tokenizer is not None:
            self.pair_overhead = int(tokenizer.num_special_tokens_to_add(pair=True))
            self.exact = True
        else:
            logger.info("model %s has no fast tokenizer: batch budgets and chunks use estimated token counts", model.name)
            self.pair_overhead = 3
            self.exact = False

    def spans(self, texts: Sequence[str], *, cap: int) -> list[tuple[list[tuple[int, int]], bool]]:
        """Per text: the (start, end) character spans of its first ``cap`` tokens, and whether it has more.

        Only a prefix of a long text is tokenized (grown until it holds ``cap`` tokens that are far enough
        from the cut to be tokenized as in the whole text), so a 100 kB document costs what ``cap`` tokens
        cost.
        """
        if self._tokenizer is None:
            return [self._capped(self._estimated_spans(t), cap) for t in texts]

        def judge(text: str, prefix: str, enc: Any) -> tuple[list[tuple[int, int]], bool] | None:
            spans = list(enc.offsets)
            if len(prefix) == len(text):
                return self._capped(spans, cap)
            # a token ending well before the cut is the same token in the whole text
            stable = [sp for sp in spans if sp[1] <= len(prefix) - 32]
            return (stable[:cap], True) if len(stable) > cap else None

        # CJK: one token per character; Latin text needs a longer prefix (grown)
        return self._grow(texts, 2 * cap + 64, judge, lambda t: self._capped(self._estimated_spans(t), cap))

    def _grow(self, texts: Sequence[str], chars: int, judge: Callable[[str, str, Any], Any], estimate: Callable[[str], Any]) -> list[Any]:
        """``judge(text, prefix, encoding)`` per text on prefixes of ``chars`` characters, 4× longer for
        those it answers ``None`` (too short to tell); ``estimate(text)`` where the tokenizer refuses one."""
        out: list[Any] = [None] * len(texts)
        todo = list(range(len(texts)))
        while todo:
            prefixes = [texts[i][:chars] for i in todo]
            retry = []
            for i, prefix, enc in zip(todo, prefixes, self._encode(prefixes), strict=True):
                out[i] = estimate(texts[i]) if enc is None else judge(texts[i], prefix, enc)
                if out[i] is None:
                    retry.append(i)
            todo = retry
            chars *= 4
        return out

    @staticmethod
    def _capped(spans: list[tuple[int, int]], cap: int) -> tuple[list[tuple[int, int]], bool]:
        return spans[:cap], len(spans) > cap

    def _encode(self, texts: list[str]) -> list[Any]:
        """Rust ``Encoding`` per text (no special tokens); ``None`` where the tokenizer refuses a text."""
        assert self._tokenizer is not None
        try:
            return self._tokenizer.encode_batch(texts, add_special_tokens=False)
        except Exception as exc:  # noqa: BLE001 - measuring only steers batching; the model judges the input
            if len(texts) == 1:
                logger.info("tokenizer cannot measure a text (%s: %s); using the estimate", type(exc).__name__, exc)
                return [None]
            return [self._encode([t])[0] for t in texts]

    def cuts(self, texts: Sequence[str], *, cap: int) -> list[tuple[int, int, bool]]:
        """Per text: ``(tokens, end, more)`` — its token count up to ``cap``, the character offset where its
        first ``cap`` tokens end, and whether it has more than ``cap`` tokens.

        What :meth:`spans` says, without building every token's span: the cheap path for truncation.
        """
        if self._tokenizer is None:
            return [self._cut_of(*self._capped(self._estimated_spans(t), cap)) for t in texts]

        def judge(text: str, prefix: str, enc: Any) -> tuple[int, int, bool] | None:
            n = len(enc)
            if len(prefix) == len(text):
                k = min(n, cap)
                return k, enc.token_to_chars(k - 1)[1] if k else 0, n > cap
            if n > cap and enc.token_to_chars(cap)[1] <= len(prefix) - 32:
                # token ``cap`` ends well before the cut, so the first ``cap`` are as in the whole text
                return cap, enc.token_to_chars(cap - 1)[1], True
            return None

        # CJK text needs about one character per token; Latin text (~4 per token) takes the retry
        return self._grow(texts, cap + cap // 4 + 64, judge, lambda t: self._cut_of(*self._capped(self._estimated_spans(t), cap)))

    @staticmethod
    def _cut_of(spans: list[tuple[int, int]], more: bool) -> tuple[int, int, bool]:
        return len(spans), spans[-1][1] if spans else 0, more

    def _estimated_spans(self, text: str) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for m in self._UNIT.finditer(text):
            start, end = m.span()
            # long Latin words become several word pieces in a real tokenizer
            spans.extend((s, min(s + 6, end)) for s in range(start, end, 6))
        return spans

    def lengths(self, texts: Sequence[str], *, cap: int = 1 << 30) -> list[int]:
        """Tokens per text without special tokens; ``cap + 1`` stands for "more than ``cap``"."""
        return [n + more for n, _end, more in self.cuts(texts, cap=cap)]

    @staticmethod
    def windows(text: str, spans: list[tuple[int, int]], *, size: int, stride: int, limit: int) -> list[str]:
        """Up to ``limit`` substrings of at most ``size`` tokens starting every ``stride`` tokens (from :meth:`spans`)."""
        out: list[str] = []
        for start in range(0, len(spans), stride):
            end = min(start + size, len(spans))
            out.append(text[spans[start][0] : spans[end - 1][1]])
            if end == len(spans) or len(out) == limit:
                break
        return out


# ---------------------------------------------------------------------------------------- metrics


class ServiceMetrics:
    """Prometheus metrics of one app (own registry, so several apps can live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("jingpai_rerank_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.request_seconds = Histogram("jingpai_rerank_request_seconds", "HTTP request latency", ["route"], registry=r)
        self.pairs = Counter("jingpai_rerank_pairs", "(query, document) pairs scored, chunks included", registry=r)
        self.batches = Counter("jingpai_rerank_batches", "forward passes run", registry=r)
        self.failed_batches = Counter("jingpai_rerank_failed_batches", "forward passes that raised", registry=r)
        self.queue_timeouts = Counter("jingpai_rerank_queue_timeouts", "requests answered 503 after waiting too long", registry=r)
        buckets_n = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
        self.batch_pairs = Histogram("jingpai_rerank_batch_pairs", "pairs per forward pass", buckets=buckets_n, registry=r)
        self.batch_requests = Histogram("jingpai_rerank_batch_requests", "requests merged into one forward pass", buckets=buckets_n, registry=r)
        self.batch_tokens = Histogram(
            "jingpai_rerank_batch_tokens", "padded tokens per forward pass",
            buckets=(64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072), registry=r,
        )
        self.queue_seconds = Histogram("jingpai_rerank_queue_seconds", "time from arrival to the first batch", registry=r)
        self.inference_seconds = Histogram("jingpai_rerank_inference_seconds", "featurize + forward time per batch", registry=r)


# ---------------------------------------------------------------------------------------- batching engine


@dataclass(eq=False)
class _Job:
    pairs: list[Pair]
    lengths: list[int]
    enqueued: float
    deadline: float
    started: asyncio.Future[None]
    done: asyncio.Future[np.ndarray]
    expired: bool = False


@dataclass(eq=False)
class _Item:
    job: int
    pos: int
    length: int


@dataclass(frozen=True)
class _Launched:
    """A batch whose forward pass was started: its (possibly not yet computed) scores and bookkeeping."""

    scores: torch.Tensor
    pairs: int
    requests: int
    tokens: int
    started: float
    record: bool


@dataclass
class _RoundOutcome:
    scores: dict[int, np.ndarray] = field(default_factory=dict)
    errors: dict[int, ServiceError] = field(default_factory=dict)


class BatchingEngine:
    """Merges the pairs of concurrent requests into token-budgeted, length-sorted batches.

    One asyncio task collects queued requests; one worker thread runs featurize + forward, so the event
    loop keeps accepting requests while the model computes.

    Args:
        model: the loaded reranker (already on its device).
        settings: service settings (``max_batch_tokens``, ``queue_timeout_ms``, ``batch_wait_ms``).
        metrics: where to record batch sizes and timings.
        dtype: ``bf16``/``fp16`` run under autocast; ``fp32`` does not.
    """

    def __init__(self, model: Reranker, settings: ServiceSettings, metrics: ServiceMetrics, *, dtype: Literal["bf16", "fp16", "fp32", "int8"]) -> None:
        self.model = model
        self.settings = settings
        self.metrics = metrics
        self.autocast_dtype = DTYPES[dtype]
        # on a GPU the weights themselves are cast once (see RerankService): no per-batch cast kernels,
        # which dominate a launch-bound forward pass of short pairs
        self.cast_inputs = model.device.type == "cuda" and self.autocast_dtype is not None
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
        return self._closed

    async def score(self, pairs: list[Pair], lengths: list[int]) -> np.ndarray:
        """Raw model scores for ``pairs`` in input order (``lengths``: padded token cost of each pair).

        Raises:
            QueueTimeoutError: the first batch did not start within ``queue_timeout_ms``.
            InvalidInputError: the model could not featurize this request's input.
            ScoringError: the forward pass failed for this request.
            ServiceClosedError: the engine is shut down.
        """
        if self._closed:
            raise ServiceClosedError("the rerank engine is shut down")
        if not pairs:
            return np.empty(0, dtype=np.float32)
        self._ensure_started()
        loop = asyncio.get_running_loop()
        timeout = self.settings.queue_timeout_ms / 1000
        now = loop.time()
        job = _Job(pairs, lengths, now, now + timeout, loop.create_future(), loop.create_future())
        self._queue.append(job)
        self._queued_tokens += sum(lengths)
        assert self._wakeup is not None and self._full is not None
        self._wakeup.set()
        if self._queued_tokens >= self.settings.max_batch_tokens:
            self._full.set()
        try:
            await asyncio.wait_for(asyncio.shield(job.started), timeout=timeout)
        except TimeoutError:
            job.expired = True
            self.metrics.queue_timeouts.inc()
            raise QueueTimeoutError(
                f"the request waited more than {self.settings.queue_timeout_ms} ms for the model "
                f"(queue_timeout_ms, {_LIMIT_SOURCE['queue_timeout_ms']}); retry later",
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
        await loop.run_in_executor(self._executor, functools.partial(self._forward, [("warmup", "warmup")], requests=1, record=False))

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

    # -------------------------------------------------------------- collector (event loop)

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
        assert self._wakeup is not None and self._full is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            if self.settings.batch_wait_ms > 0 and self._queued_tokens < self.settings.max_batch_tokens:
                try:
                    await asyncio.wait_for(self._full.wait(), timeout=self.settings.batch_wait_ms / 1000)
                except TimeoutError:
                    pass
            jobs = self._take_round(loop.time())
            if not self._queue:
                self._wakeup.clear()
            if self._queued_tokens < self.settings.max_batch_tokens:
                self._full.clear()
            if not jobs:
                continue
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
        while self._queue and (not jobs or tokens < self.settings.max_batch_tokens):
            job = self._queue.popleft()
            cost = sum(job.lengths)
            self._queued_tokens -= cost
            if job.expired or job.done.done() or now > job.deadline:
                continue  # its handler answers 503 (or is gone)
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
            if current and (len(current) + 1) * lengths[i] > self.settings.max_batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _run_round(self, jobs: list[_Job]) -> _RoundOutcome:
        items = [_Item(j, p, length) for j, job in enumerate(jobs) for p, length in enumerate(job.lengths)]
        results = {j: np.empty(len(job.pairs), dtype=np.float32) for j, job in enumerate(jobs)}
        outcome = _RoundOutcome()
        # software pipeline: batch k+1 is tokenized on the CPU while the device still runs batch k (CUDA
        # kernels launch asynchronously; only collecting the scores waits), so a GPU is not left idle
        # between batches. On a CPU the forward pass is synchronous and this is plain sequential work.
        pending: tuple[list[_Item], list[int], _Launched | ServiceError] | None = None
        for batch in [*self.plan([it.length for it in items]), None]:
            launched: tuple[list[_Item], list[int], _Launched | ServiceError] | None = None
            if batch is not None:
                members = [items[i] for i in batch if items[i].job not in outcome.errors]
                if members:
                    job_ids = sorted({it.job for it in members})
                    pairs = [jobs[it.job].pairs[it.pos] for it in members]
                    try:
                        launched = (members, job_ids, self._launch(pairs, requests=len(job_ids)))
                    except ServiceError as exc:
                        launched = (members, job_ids, exc)
            if pending is not None:
                self._settle(jobs, results, outcome, *pending)
            pending = launched
        outcome.scores = {j: r for j, r in results.items() if j not in outcome.errors}
        return outcome

    def _settle(
        self,
        jobs: list[_Job],
        results: dict[int, np.ndarray],
        outcome: _RoundOutcome,
        members: list[_Item],
        job_ids: list[int],
        launched: _Launched | ServiceError,
    ) -> None:
        """Collect one launched batch into ``results``; a failed merged batch is re-run request by request."""
        try:
            if isinstance(launched, ServiceError):
                raise launched
            scores = self._wait(launched)
        except ServiceError as exc:
            if len(job_ids) == 1:
                outcome.errors[job_ids[0]] = exc
                return
            # a merged batch failed: re-run each request alone so only the one at fault fails
            logger.warning("a batch of %d requests failed (%s); re-running them one by one", len(job_ids), exc)
            for j in job_ids:
                if j in outcome.errors:
                    continue
                mine = [it for it in members if it.job == j]
                try:
                    own = self._forward([jobs[j].pairs[it.pos] for it in mine], requests=1)
                except ServiceError as own_exc:
                    outcome.errors[j] = own_exc
                    continue
                for it, s in zip(mine, own, strict=True):
                    results[j][it.pos] = s
            return
        for it, s in zip(members, scores, strict=True):
            results[it.job][it.pos] = s

    def _forward(self, pairs: list[Pair], *, requests: int, record: bool = True) -> np.ndarray:
        """Scores of ``pairs``, computed now (featurize, forward, wait for the result)."""
        return self._wait(self._launch(pairs, requests=requests, record=record))

    def _launch(self, pairs: list[Pair], *, requests: int, record: bool = True) -> _Launched:
        """Featurize ``pairs`` and start their forward pass; on a GPU this returns before it finishes."""
        model = self.model
        t0 = time.perf_counter()
        try:
            features = model.featurize(pairs)
        except Exception as exc:
            self.metrics.failed_batches.inc()
            logger.warning("featurize failed for %d pairs: %s: %s", len(pairs), type(exc).__name__, exc)
            raise InvalidInputError(f"the model could not read this request's input: {type(exc).__name__}: {exc}") from exc
        try:
            with torch.inference_mode():
                batch = model.to_device(features)
                if self.cast_inputs:
                    batch = {k: v.to(self.autocast_dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in batch.items()}
                    scores = model.scores(batch)
                else:
                    enabled = self.autocast_dtype is not None
                    with torch.autocast(model.device.type, dtype=self.autocast_dtype or torch.bfloat16, enabled=enabled):
                        scores = model.scores(batch)
                scores = scores.float()
        except Exception as exc:
            self.metrics.failed_batches.inc()
            logger.warning("forward pass failed for %d pairs: %s: %s", len(pairs), type(exc).__name__, exc)
            raise ScoringError(f"scoring failed: {type(exc).__name__}: {exc}") from exc
        ids = features.get("input_ids")
        tokens = int(ids.numel()) if isinstance(ids, torch.Tensor) else 0
        return _Launched(scores, len(pairs), requests, tokens, t0, record)

    def _wait(self, launched: _Launched) -> np.ndarray:
        """Wait for a launched forward pass and return its scores (recording the batch's metrics)."""
        try:
            with torch.inference_mode():
                out = launched.scores.cpu().numpy()
        except Exception as exc:  # asynchronous device errors surface here
            self.metrics.failed_batches.inc()
            logger.warning("forward pass failed for %d pairs: %s: %s", launched.pairs, type(exc).__name__, exc)
            raise ScoringError(f"scoring failed: {type(exc).__name__}: {exc}") from exc
        if out.shape != (launched.pairs,):
            self.metrics.failed_batches.inc()
            raise ScoringError(f"model {self.model.name} returned scores of shape {tuple(out.shape)} for {launched.pairs} pairs")
        if not launched.record:
            return out
        self.metrics.batches.inc()
        self.metrics.pairs.inc(launched.pairs)
        self.metrics.batch_pairs.observe(launched.pairs)
        self.metrics.batch_requests.observe(launched.requests)
        if launched.tokens:
            self.metrics.batch_tokens.observe(launched.tokens)
        # on a GPU this includes the time the batch waited behind the previous one on the device
        self.metrics.inference_seconds.observe(time.perf_counter() - launched.started)
        return out


# ---------------------------------------------------------------------------------------- scoring service


class RerankService:
    """Request-level logic shared by every API shape: limits, truncation/chunking, score scaling.

    Args:
        model: the loaded reranker.
        settings: service settings.
        metrics: the app's metrics.

    Example:
        >>> service = RerankService(model, ServiceSettings(), ServiceMetrics())           # doctest: +SKIP
        >>> await service.score("中国GDP", ["影响中国GDP的因素", "天气"], field="texts")   # doctest: +SKIP
        array([ 0.41, -1.2], dtype=float32)
    """

    def __init__(self, model: Reranker, settings: ServiceSettings, metrics: ServiceMetrics) -> None:
        self.model = model
        self.settings = settings
        self.metrics = metrics
        model.net.eval()  # a freshly loaded net may still be in training mode (dropout on)
        self.max_length = int(settings.max_length or model.config.max_length)
        self.dtype = resolve_dtype(settings.dtype, model.device)
        if model.device.type == "cuda" and self.dtype != "fp32":
            logger.info("casting the model's weights to %s on %s", self.dtype, model.device)
            model.net.to(DTYPES[self.dtype])
        if self.dtype == "int8":
            model.net = quantize_int8(model.net)
        self.measure = TextMeasure(model)
        self.engine = BatchingEngine(model, settings, metrics, dtype=self.dtype)
        # token counting/chunking runs off the event loop on one thread of its own (TextMeasure is not
        # thread-safe), in parallel with the model's worker thread
        self._prep = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jingpai-rerank-prep")

    @property
    def model_name(self) -> str:
        return self.settings.model_name or self.model.name

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """Scores in [0, 1]: sigmoid of a one-logit head; probability-like scores pass through."""
        if self.model.num_labels == 1:
            return (1.0 / (1.0 + np.exp(-raw.astype(np.float64)))).astype(np.float32)
        return raw

    def check(self, query: str, documents: Sequence[str], *, query_field: str, docs_field: str) -> None:
        """Apply the per-request limits.

        Raises:
            PayloadTooLargeError: more than ``max_docs`` documents.
            InvalidInputError: empty document list, or a query over ``max_query_chars``.
        """
        s = self.settings
        if len(documents) > s.max_docs:
            raise PayloadTooLargeError(
                f"{docs_field} holds {len(documents)} documents; the limit is max_docs={s.max_docs} ({_LIMIT_SOURCE['max_docs']})"
            )
        if not documents:
            raise InvalidInputError(f"{docs_field} must hold at least one document")
        if len(query) > s.max_query_chars:
            raise InvalidInputError(
                f"{query_field} is {len(query)} characters long; the limit is max_query_chars={s.max_query_chars} "
                f"({_LIMIT_SOURCE['max_query_chars']})"
            )

    def _prepare(
        self, query: str, documents: Sequence[str], *, truncate: bool, chunks: int, doc_tokens: int | None, docs_field: str
    ) -> tuple[list[Pair], list[int], list[int]]:
        """Pairs to score, their padded lengths, and the document each pair belongs to."""
        m = self.measure
        budget = self.max_length - m.pair_overhead
        q_len = m.lengths([query])[0]  # whole (the query is at most max_query_chars long)
        # room for a document next to the query (longest-first truncation never cuts the query below
        # half the budget, so neither does chunking)
        room = max(budget - min(q_len, budget // 2), 1)
        stride = max(room - room // 8, 1)
        # a cut document must stay longer than the query whenever the whole one was: longest-first truncation
        # gives the odd token to the longer side, so otherwise the pair would differ from the uncut one
        doc_cap = max(self.max_length, q_len + 1) if doc_tokens is None else min(doc_tokens, self.max_length)
        if chunks > 1:
            doc_cap = max(doc_cap, room + stride * (chunks - 1))
        if doc_tokens is not None:
            doc_cap = min(doc_cap, doc_tokens)
        pairs: list[Pair] = []
        lengths: list[int] = []
        owner: list[int] = []
        # chunking needs every token's span; plain truncation only needs where the kept tokens end
        measured = m.spans(documents, cap=doc_cap) if chunks > 1 else [(None, *cut) for cut in m.cuts(documents, cap=doc_cap)]
        for i, (doc, measure) in enumerate(zip(documents, measured, strict=True)):
            if chunks > 1:
                spans, more = measure
                n_tokens, end = len(spans), (spans[-1][1] if spans else 0)
            else:
                spans, n_tokens, end, more = measure
            d_len = n_tokens + more
            if more:
                # the model would cut the tail anyway (the first max_length tokens decide the truncated
                # pair); cutting here saves tokenizing it again
                doc = doc[:end]
                if doc_tokens is not None and n_tokens == doc_tokens:
                    d_len = doc_tokens
            if not truncate and q_len + d_len > budget:
                size = f"more than {self.max_length}" if more and doc_tokens is None else str(q_len + d_len + m.pair_overhead)
                raise PayloadTooLargeError(
                    f"{docs_field}[{i}] is {size} tokens together with the query; the limit is max_length={self.max_length} "
                    f"({_LIMIT_SOURCE['max_length']}); send truncate=true to cut it"
                )
            if chunks > 1 and d_len > room:
                for part in m.windows(doc, spans, size=room, stride=stride, limit=chunks):
                    pairs.append((query, part))
                    lengths.append(min(q_len + room, budget) + m.pair_overhead)
                    owner.append(i)
                continue
            pairs.append((query, doc))
            lengths.append(min(q_len + d_len, budget) + m.pair_overhead)
            owner.append(i)
        return pairs, lengths, owner

    async def score(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = True,
        max_chunks: int | None = None,
        doc_tokens: int | None = None,
        query_field: str = "query",
        docs_field: str = "documents",
    ) -> np.ndarray:
        """Raw scores of ``documents`` against ``query``, in input order.

        Args:
            query, documents: the request.
            truncate: ``False`` rejects pairs longer than ``max_length`` (413) instead of cutting them.
            max_chunks: chunks per long document (``None``: the service's ``long_docs`` setting; capped by
                ``max_chunks_per_doc``).
            doc_tokens: cut each document to this many tokens first (Cohere v2 ``max_tokens_per_doc``).
            query_field, docs_field: field names used in error messages.
        """
        self.check(query, documents, query_field=query_field, docs_field=docs_field)
        if max_chunks is None:
            max_chunks = self.settings.max_chunks_per_doc if self.settings.long_docs == "max-chunks" else 1
        max_chunks = max(1, min(max_chunks, self.settings.max_chunks_per_doc))
        # tokenizing a large request takes a while: keep it off the event loop
        prepare = functools.partial(
            self._prepare, query, documents, truncate=truncate, chunks=max_chunks, doc_tokens=doc_tokens, docs_field=docs_field
        )
        pairs, lengths, owner = await asyncio.get_running_loop().run_in_executor(self._prep, prepare)
        raw = await self.engine.score(pairs, lengths)
        if len(pairs) == len(documents):
            return raw
        best = np.full(len(documents), -np.inf, dtype=np.float32)
        np.maximum.at(best, np.asarray(owner), raw)
        return best

    async def start(self) -> None:
        """Warm the model up (unless ``settings.warmup`` is off)."""
        if self.settings.warmup:
            await self.engine.warmup()

    async def close(self) -> None:
        """Stop the batching engine and the preparation thread."""
        await self.engine.close()
        self._prep.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------------------- API models


def _integral(value: Any) -> Any:
    # JSON Schema counts 3.0 as an integer (clients and schemathesis send such); strict int alone refuses it
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: a JSON integer ≥ 1: ``3`` or ``3.0``, never ``"3"``, ``true`` or ``3.5`` (the bound sits inside the
#: annotation: outside it, pydantic would write ``ge`` instead of ``minimum`` into the JSON schema)
PositiveJsonInt = Annotated[int, Field(ge=1), BeforeValidator(_integral)]


class _Strict(BaseModel):
    # strict: a value must already have its schema type (``0`` is no boolean, ``"3"`` no integer), so
    # whatever the OpenAPI schema calls invalid is refused rather than quietly coerced
    model_config = ConfigDict(extra="forbid", strict=True)


class TeiRerankRequest(_Strict):
    """Hugging Face text-embeddings-inference ``/rerank`` request."""

    query: str
    texts: list[str] = Field(min_length=1)
    truncate: bool | None = Field(None, description="false: reject pairs over max_length (413) instead of cutting them")
    raw_scores: bool = Field(False, description="true: the model's raw score instead of a [0, 1] relevance")
    return_text: bool = False
    scores: list[float] | None = Field(
        None, description="first-stage (engine) scores parallel to texts: score becomes the fusion of these with the model's"
    )
    fusion: FusionMode | None = Field(None, description=f"with scores: {' | '.join(FUSION_MODES)} (default {FusionSpec.mode})")
    fusion_weight: float | None = Field(
        None, ge=0.0, le=1.0, description=f"the first-stage scores' weight for linear/rrf (default {FusionSpec.weight})"
    )
    rrf_k: PositiveJsonInt | None = Field(None, description=f"RRF constant (default {FusionSpec.rrf_k})")

    def fusion_spec(self) -> FusionSpec | None:
        """The requested fusion (``None``: no ``scores``, plain reranking).

        Raises:
            InvalidInputError: fusion parameters without ``scores``, or ``scores`` not parallel to ``texts``.
        """
        asked = [name for name in ("fusion", "fusion_weight", "rrf_k") if getattr(self, name) is not None]
        if self.scores is None:
            if asked and self.fusion != "replace":
                raise InvalidInputError(f"{', '.join(asked)} need scores: the first-stage scores, one per text")
            return None
        if len(self.scores) != len(self.texts):
            raise InvalidInputError(f"scores holds {len(self.scores)} values for {len(self.texts)} texts; expected one per text")
        try:
            return FusionSpec().override(fusion=self.fusion, fusion_weight=self.fusion_weight, rrf_k=self.rrf_k)
        except FusionError as exc:
            raise InvalidInputError(str(exc)) from exc


class TeiRank(BaseModel):
    index: int
    score: float
    model_score: float | None = Field(None, description="the model's own score, when score is a fusion (request had scores)")
    text: str | None = None


class CohereDocument(_Strict):
    text: str


class CohereRerankRequest(_Strict):
    """Cohere / Jina rerank request.

    ``create_app`` narrows ``model`` to the served model's name: a request naming another model is
    refused (422) rather than silently answered by this one.
    """

    model: str | None = Field(None, description="the served model's name (see /info), or left out")
    query: str
    documents: list[str | CohereDocument] = Field(min_length=1)
    top_n: PositiveJsonInt | None = None
    return_documents: bool = False
    max_chunks_per_doc: PositiveJsonInt | None = Field(None, description="Cohere v1: score the best of up to N chunks of long documents")
    max_tokens_per_doc: PositiveJsonInt | None = Field(None, description="Cohere v2: cut each document to N tokens")


class CohereResult(BaseModel):
    index: int
    relevance_score: float
    document: CohereDocument | None = None


class ApiVersion(BaseModel):
    version: str


class CohereMeta(BaseModel):
    api_version: ApiVersion


class CohereRerankResponse(BaseModel):
    id: str
    model: str
    results: list[CohereResult]
    meta: CohereMeta


class TextSimilarityRequest(_Strict):
    """OpenSearch ML Commons ``text_similarity`` input."""

    query_text: str
    text_docs: list[str] = Field(min_length=1)


class ModelTensor(BaseModel):
    name: Literal["similarity"] = "similarity"
    data_type: Literal["FLOAT32"] = "FLOAT32"
    shape: list[int] = Field(default_factory=lambda: [1])
    data: list[float]


class ModelTensorOutput(BaseModel):
    output: list[ModelTensor]


class TextSimilarityResponse(BaseModel):
    inference_results: list[ModelTensorOutput]


class ErrorBody(BaseModel):
    """Every error response: a message naming the bad value or the limit (and where it is set), and its kind."""

    error: str
    error_type: str = Field(
        description="validation | bad_request | payload_too_large | overloaded | unavailable | backend | internal | http"
    )


#: the errors a scoring route can answer (``responses=`` of the routes; 422 replaces FastAPI's own schema,
#: whose ``{"detail": [...]}`` shape this service never sends)
_SCORING_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "the body is not text (not UTF-8/16/32)"},
    413: {
        "model": ErrorBody,
        "description": "body over max_body_bytes, more documents than max_docs, or truncate=false and a pair over max_length",
    },
    422: {
        "model": ErrorBody,
        "description": "invalid JSON; an unknown or missing field; a value of the wrong type or range; an empty document list; "
        "a query over max_query_chars; another model's name; input the model cannot read",
    },
    500: {"model": ErrorBody, "description": "the model's forward pass failed for this request"},
    503: {"model": ErrorBody, "description": "waited longer than queue_timeout_ms (with Retry-After), or the service is shutting down"},
}


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Limits(BaseModel):
    max_docs: int
    max_body_bytes: int
    max_query_chars: int
    max_length: int
    max_batch_tokens: int
    queue_timeout_ms: int


class Info(BaseModel):
    model_name: str
    architecture: str
    model_dir: str | None = Field(None, description="where the model was loaded from; only with --expose-model-dir")
    dictionary_version: str | None = None
    jingpai_version: str
    device: str
    dtype: str
    attention: str | None = None
    score: str
    long_docs: str
    max_chunks_per_doc: int
    token_counts: Literal["exact", "estimated"]
    limits: Limits


# ---------------------------------------------------------------------------------------- ASGI plumbing


class _BodyLimitAndMetrics:
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
                await error_response(exc)(scope, receive, send_wrapper)
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
            f"request body is {what}; the limit is max_body_bytes={self.limit} ({_LIMIT_SOURCE['max_body_bytes']})"
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


# ---------------------------------------------------------------------------------------- app


def create_app(settings: ServiceSettings, model: Reranker) -> FastAPI:
    """The FastAPI app serving ``model`` under ``settings``.

    ``settings.max_length`` (when set) replaces the model's own ``config.max_length``.

    Args:
        settings: service settings.
        model: a loaded reranker, already on its device (``Reranker.load(dir, device=...)``).

    Returns:
        The app; run it with uvicorn. The batching engine starts with the first request (or at start-up
        when the server runs the lifespan) and stops at shutdown.

    Raises:
        ValueError: ``settings.max_length`` exceeds the model's position embeddings.
    """
    if settings.max_length is not None and settings.max_length != model.config.max_length:
        positions = getattr(getattr(model.net, "config", None), "max_position_embeddings", None)
        if isinstance(positions, int) and settings.max_length > positions:
            raise ValueError(f"max_length={settings.max_length} exceeds the model's max_position_embeddings={positions}")
        logger.info("max_length %d replaces the model's saved %d", settings.max_length, model.config.max_length)
        model.config = dataclasses.replace(model.config, max_length=settings.max_length)
    metrics = ServiceMetrics()
    service = RerankService(model, settings, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        yield
        await service.close()

    app = FastAPI(
        title="jingpai rerank service",
        version=__version__,
        description="Reranks documents for a query with one jingpai model; TEI, Cohere/Jina and OpenSearch ML request shapes.",
        lifespan=lifespan,
    )
    app.state.service = service
    for exc_type in (ServiceError, RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(exc_type, lambda request, exc: error_response(exc))

    @app.post("/rerank", response_model=list[TeiRank], response_model_exclude_none=True, tags=["rerank"], responses=_SCORING_ERRORS)
    async def tei_rerank(req: TeiRerankRequest) -> list[TeiRank]:
        """TEI-compatible rerank: all texts, best first; with ``scores``, fused with those first-stage scores."""
        spec = req.fusion_spec()
        raw = await service.score(req.query, req.texts, truncate=req.truncate is not False, query_field="query", docs_field="texts")
        scores = raw if req.raw_scores else service.normalize(raw)
        if spec is None:
            order = np.argsort(-scores, kind="stable")
            return [TeiRank(index=int(i), score=float(scores[i]), text=req.texts[i] if req.return_text else None) for i in order]
        engine_ranks = ranks_of(req.scores)
        try:
            fused = spec.fuse(req.scores, scores, engine_ranks=engine_ranks)
        except FusionError as exc:
            raise InvalidInputError(str(exc)) from exc
        # ties of the fused score keep the first-stage order
        return [
            TeiRank(index=int(i), score=float(fused[i]), model_score=float(scores[i]), text=req.texts[i] if req.return_text else None)
            for i in fused_order(fused, engine_ranks)
        ]

    # the served name is known only here: narrowing the field's type makes the schema's enum and the
    # validation one and the same
    served = service.model_name
    cohere_request = create_model(
        "CohereRerankRequest", __base__=CohereRerankRequest, __doc__=CohereRerankRequest.__doc__,
        model=(Literal[served] | None, Field(None, description=f"the served model's name, {served!r}, or left out")),  # type: ignore[valid-type]
    )

    def cohere(version: str):  # noqa: ANN202
        async def rerank(req: CohereRerankRequest) -> CohereRerankResponse:
            texts = [d if isinstance(d, str) else d.text for d in req.documents]
            raw = await service.score(
                req.query, texts, max_chunks=req.max_chunks_per_doc, doc_tokens=req.max_tokens_per_doc,
                query_field="query", docs_field="documents",
            )
            scores = service.normalize(raw)
            order = np.argsort(-scores, kind="stable")[: req.top_n]
            results = [
                CohereResult(
                    index=int(i), relevance_score=float(scores[i]),
                    document=CohereDocument(text=texts[i]) if req.return_documents else None,
                )
                for i in order
            ]
            return CohereRerankResponse(
                id=str(uuid.uuid4()), model=service.model_name, results=results, meta=CohereMeta(api_version=ApiVersion(version=version))
            )

        rerank.__doc__ = f"Cohere/Jina-compatible rerank (API v{version}): top_n results, best first."
        # FastAPI validates against the annotation; the annotations here are strings naming module-level types
        rerank.__annotations__["req"] = cohere_request
        return rerank

    for version in ("1", "2"):
        app.post(
            f"/v{version}/rerank", response_model=CohereRerankResponse, response_model_exclude_none=True, tags=["rerank"],
            name=f"cohere_rerank_v{version}", responses=_SCORING_ERRORS,
        )(cohere(version))

    @app.post("/opensearch/text_similarity", response_model=TextSimilarityResponse, tags=["rerank"], responses=_SCORING_ERRORS)
    async def opensearch_text_similarity(req: TextSimilarityRequest) -> TextSimilarityResponse:
        """OpenSearch ML connector shape: one similarity tensor per document, in input order."""
        raw = await service.score(req.query_text, req.text_docs, query_field="query_text", docs_field="text_docs")
        scores = service.normalize(raw)
        return TextSimilarityResponse(inference_results=[ModelTensorOutput(output=[ModelTensor(data=[float(s)])]) for s in scores])

    @app.get("/health", response_model=Health, tags=["service"], responses={503: {"model": ErrorBody, "description": "the engine is shut down"}})
    async def health() -> Health:
        """Liveness: 200 while the service accepts requests."""
        if service.engine.closed:
            raise ServiceClosedError("the rerank engine is shut down")
        return Health()

    @app.get("/info", response_model=Info, tags=["service"])
    async def info() -> Info:
        """What is served: model, architecture, dictionary version, device, dtype and limits."""
        hf_config = getattr(model.net, "config", None)
        return Info(
            model_name=service.model_name,
            architecture=model.name,
            model_dir=str(settings.model_dir) if settings.model_dir and settings.expose_model_dir else None,
            dictionary_version=model.keyword_dict_version,
            jingpai_version=__version__,
            device=str(model.device),
            dtype=service.dtype,
            attention=getattr(hf_config, "_attn_implementation", None),
            score="sigmoid(logit)" if model.num_labels == 1 else "probability",
            long_docs=settings.long_docs,
            max_chunks_per_doc=settings.max_chunks_per_doc,
            token_counts="exact" if service.measure.exact else "estimated",
            limits=Limits(
                max_docs=settings.max_docs, max_body_bytes=settings.max_body_bytes, max_query_chars=settings.max_query_chars,
                max_length=service.max_length, max_batch_tokens=settings.max_batch_tokens, queue_timeout_ms=settings.queue_timeout_ms,
            ),
        )

    @app.get(
        "/metrics", tags=["service"], response_class=Response,
        responses={200: {"description": "Prometheus text exposition format", "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    )
    async def prometheus_metrics() -> Response:
        """Prometheus text format: requests, pairs, batch sizes, queue time, inference time."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    routes = {r.path for r in app.routes if hasattr(r, "path")}
    app.add_middleware(_BodyLimitAndMetrics, limit=settings.max_body_bytes, metrics=metrics, routes=routes)
    return app


__all__ = [
    "BatchingEngine",
    "InvalidInputError",
    "PayloadTooLargeError",
    "QueueTimeoutError",
    "RerankService",
    "ScoringError",
    "ServiceClosedError",
    "ServiceError",
    "ServiceMetrics",
    "ServiceSettings",
    "TextMeasure",
    "create_app",
    "cpu_has_native_bf16",
    "error_response",
    "resolve_device",
    "resolve_dtype",
]
