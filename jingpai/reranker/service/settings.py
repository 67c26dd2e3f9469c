"""What the rerank service can be told (:class:`ServiceSettings`) and how ``auto`` device/dtype resolve.

>>> ServiceSettings(max_docs=100, dtype="fp32").max_docs
100
>>> ServiceSettings(dtype="int4")
Traceback (most recent call last):
    ...
jingpai.reranker.service.errors.ServiceSettingsError: dtype='int4' is not valid; expected one of auto, bf16, fp16, fp32, int8
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from jingpai.reranker.service.errors import ServiceSettingsError

if TYPE_CHECKING:  # torch is imported where a device is resolved: `jingpai serve --help` needs none of it
    import torch

logger = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]
DType = Literal["auto", "bf16", "fp16", "fp32", "int8"]
#: a resolved :data:`DType`
ComputeDType = Literal["bf16", "fp16", "fp32", "int8"]
LongDocs = Literal["truncate", "max-chunks"]

#: where each limit is set, so error messages can tell the client (and the operator) what to change.
#: These name `jingpai serve`'s flag and variable, which the core otherwise does not know: the messages
#: are part of the HTTP API, and tests/reranker/test_service*.py pin them word for word.
LIMIT_SOURCE = {
    "max_docs": "--max-docs / JINGPAI_SERVE_MAX_DOCS",
    "max_body_bytes": "--max-body-bytes / JINGPAI_SERVE_MAX_BODY_BYTES",
    "max_query_chars": "--max-query-chars / JINGPAI_SERVE_MAX_QUERY_CHARS",
    "max_length": "--max-length / JINGPAI_SERVE_MAX_LENGTH",
    "queue_timeout_ms": "--queue-timeout-ms / JINGPAI_SERVE_QUEUE_TIMEOUT_MS",
}


@dataclass(frozen=True)
class ServiceSettings:
    """Everything the rerank service can be told (``jingpai serve`` builds it from its options).

    Attributes:
        model_name: name reported by ``/info`` and in Cohere/Jina responses (``None``: the architecture).
        model_dir: where the model was loaded from (reported by ``/info`` only with ``expose_model_dir``).
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``; used by the CLI to load the model.
        dtype: ``auto`` (GPU: bf16, or fp16 where bf16 is unsupported; CPU: bf16 where the CPU has native
            bf16 — AMX or AVX512-BF16 — else fp32), ``bf16``, ``fp16``, ``fp32`` or ``int8``. bf16/fp16 run
            the forward pass under ``torch.autocast`` (on a GPU the weights are cast instead). ``int8`` (CPU
            only, opt-in) quantizes the model's linear layers to int8 with dynamic activation scales:
            ~2-2.5× the fp32 speed on CPUs without native bf16, scores within ~1e-2 of fp32.
        max_batch_tokens: padded tokens (pairs × longest pair) per forward pass (``None``: the device's
            default, :data:`DEFAULT_MAX_BATCH_TOKENS`).
        max_length: tokens per (query, document) pair (``None``: the model's saved ``max_length``).
        max_docs: documents per request (more → 413).
        max_body_bytes: request body size (more → 413).
        max_query_chars: query length in characters (more → 422).
        queue_timeout_ms: how long a request may wait before its first batch starts (more → 429 with
            ``Retry-After``).
        batch_wait_ms: how long the batcher waits for more requests after the first one arrives (0: take
            whatever is queued when the worker is free — concurrent requests still merge while it is busy).
        long_docs: ``truncate`` (pairs longer than ``max_length`` are cut, the document side first) or
            ``max-chunks`` (a long document is split into overlapping chunks that each fit, and scores the
            best chunk).
        max_chunks_per_doc: chunks scored per document in ``max-chunks`` mode (the rest of the document is
            ignored).
        threads: torch intra-op threads (``None``: torch's default); applied by the CLI.
        compile: compile the forward pass with ``torch.compile`` at start-up, once for every batch shape
            (inductor; on a CPU the weights are frozen into the graph). On an AMX CPU: 1.2–1.7× the eager
            bf16 forward on fixed batches, 0.8–1.5× inside the service, for ~20 s more start-up (MiniLM,
            2 cores). Where compiling fails or the compiled probe scores move by more than 0.02 the service
            stays eager, and logs why (``/info`` ``compiled`` says which).
        warmup: run one tiny batch at start-up so the first request does not pay for lazy initialisation.
        expose_model_dir: ``/info`` reports ``model_dir`` (off by default: a server path tells clients
            nothing they need and tells an attacker about the host's layout).
    """

    model_name: str | None = None
    model_dir: Path | None = None
    device: Device = "auto"
    dtype: DType = "auto"
    max_batch_tokens: int | None = None
    max_length: int | None = None
    max_docs: int = 1000
    max_body_bytes: int = 4 * 1024 * 1024
    max_query_chars: int = 2048
    queue_timeout_ms: int = 30_000
    batch_wait_ms: float = 0.0
    long_docs: LongDocs = "truncate"
    max_chunks_per_doc: int = 8
    threads: int | None = None
    compile: bool = False
    warmup: bool = True
    expose_model_dir: bool = False

    def __post_init__(self) -> None:
        """Refuse values the service cannot run with.

        Raises:
            ServiceSettingsError: (also a ``ValueError``) naming the field, the value and what is valid.
        """
        for name, choices in (("device", Device), ("dtype", DType), ("long_docs", LongDocs)):
            value = getattr(self, name)
            if value not in get_args(choices):
                raise ServiceSettingsError(f"{name}={value!r} is not valid; expected one of {', '.join(get_args(choices))}")
        for name in ("max_docs", "max_body_bytes", "max_query_chars", "queue_timeout_ms", "max_chunks_per_doc"):
            if getattr(self, name) < 1:
                raise ServiceSettingsError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_batch_tokens", "max_length", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ServiceSettingsError(f"{name} must be >= 1 (or unset), got {value}")
        if self.max_length is not None and self.max_length < 8:
            raise ServiceSettingsError(f"max_length must be >= 8 tokens, got {self.max_length}")
        if self.batch_wait_ms < 0:
            raise ServiceSettingsError(f"batch_wait_ms must be >= 0, got {self.batch_wait_ms}")


#: padded tokens per forward pass where ``max_batch_tokens`` is unset. A CPU runs fastest on batches whose
#: activations stay in its caches: on a 2-core AMX Xeon (MiniLM-L6, bf16, lengths 128 and 256) batches of
#: 2-4k tokens scored 1.3-1.4x the pairs/s of 16k-token ones (docs/service.md); a GPU needs large batches
#: to fill its cores
DEFAULT_MAX_BATCH_TOKENS: dict[str, int] = {"cpu": 4096, "cuda": 16384}


def resolve_max_batch_tokens(max_batch_tokens: int | None, device: torch.device) -> int:
    """``max_batch_tokens``, or the default of ``device``'s type (:data:`DEFAULT_MAX_BATCH_TOKENS`; CUDA's for others).

    >>> import torch
    >>> resolve_max_batch_tokens(None, torch.device("cpu")), resolve_max_batch_tokens(8192, torch.device("cpu"))
    (4096, 8192)
    """
    if max_batch_tokens is not None:
        return max_batch_tokens
    return DEFAULT_MAX_BATCH_TOKENS.get(device.type, DEFAULT_MAX_BATCH_TOKENS["cuda"])


def resolve_device(device: Device) -> str:
    """``auto`` → ``cuda`` when available else ``cpu``.

    Raises:
        ServiceSettingsError: ``cuda`` was asked for but torch sees no CUDA device.
    """
    import torch

    if device == "auto":
        resolved = "cuda" if torch.cuda.is_available() else "cpu"
        logger.info("device auto → %s", resolved)
        return resolved
    if device == "cuda" and not torch.cuda.is_available():
        # names the CLI's flag: tests/reranker/test_service_commands.py pins this message
        raise ServiceSettingsError("device='cuda' was requested but torch.cuda.is_available() is False; use --device cpu or auto")
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


def resolve_dtype(dtype: DType, device: torch.device) -> ComputeDType:
    """The concrete compute dtype for ``dtype`` on ``device`` (see :class:`ServiceSettings`).

    Raises:
        ServiceSettingsError: ``int8`` on a device other than the CPU.
    """
    import torch

    if dtype == "int8" and device.type != "cpu":
        raise ServiceSettingsError(f"dtype='int8' (dynamic int8 quantization) runs on the CPU only, not on {device.type}; use bf16 or fp16 there")
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


__all__ = ["LIMIT_SOURCE", "ComputeDType", "DType", "Device", "LongDocs", "ServiceSettings", "cpu_has_native_bf16",
           "resolve_device", "resolve_dtype", "resolve_max_batch_tokens", "DEFAULT_MAX_BATCH_TOKENS"]
