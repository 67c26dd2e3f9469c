"""One batch through the model (:class:`ForwardPass`): featurize, forward pass, scores, batch metrics.

The batching engine's worker thread calls it. The host work (:meth:`ForwardPass.prepare`: featurize, length
buckets) runs on a featurizing thread of its own (:meth:`ForwardPass.prepare_soon`), so the engine prepares
batch n+1 while batch n's forward pass runs (on a CPU torch computes without the GIL); :meth:`ForwardPass.start`
returns as soon as the forward pass is queued on the device (on a GPU the kernels run asynchronously), and
:meth:`ForwardPass.collect` waits for its scores.

A batch is one :data:`Task`: ``score`` (pairs → one score each, the reranking routes) or ``embed`` (texts
already cut into token ids → one vector each, ``/embed`` and ``/v1/embeddings``; the model is an
:class:`~jingpai.reranker.service.embedding.EmbeddingModel`). Both run in the same dtype, on the same
thread, counted in the same metrics; only scoring is compiled (``compile``).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from jingpai.reranker.base import Pair, Reranker
from jingpai.reranker.service.compiling import ScoresFn, compile_scores
from jingpai.reranker.service.errors import ScoringError, TokenizerError
from jingpai.reranker.service.metrics import ServiceMetrics
from jingpai.reranker.service.settings import ComputeDType

logger = logging.getLogger(__name__)

#: the torch dtype each compute dtype runs in (``None``: the weights' own fp32; int8 quantizes instead)
DTYPES: dict[str, torch.dtype | None] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None, "int8": None}

#: what a batch computes: ``score`` — one score per (query, document) pair; ``embed`` — one vector per text
Task = Literal["score", "embed"]

#: on a GPU a batch of token-id inputs is padded to a multiple of this many tokens, so a compiled or CUDA-graph
#: forward pass sees few shapes (at most max_length / 32 widths instead of one per length)
LENGTH_BUCKET = 32
#: inputs :func:`bucketed` pads: the BERT-family pair inputs (other models' tensors keep their shapes)
_TOKEN_INPUTS = {"input_ids": "pad", "token_type_ids": 0, "attention_mask": 0}


def bucketed(features: dict[str, torch.Tensor], *, pad_id: int, multiple: int = LENGTH_BUCKET) -> dict[str, torch.Tensor]:
    """``features`` right-padded to a width that is a multiple of ``multiple`` (masked positions: the model's
    scores are those of the unpadded batch), where they are exactly BERT-family token inputs; else unchanged.
    An all-ones mask left out (no padding) is put back when padding is added."""
    ids = features.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or not set(features) <= set(_TOKEN_INPUTS):
        return features
    width = ids.shape[1]
    target = -(-width // multiple) * multiple
    if target == width or width == 0:
        return features
    out = dict(features)
    if "attention_mask" not in out:
        out["attention_mask"] = torch.ones_like(ids)
    for name, tensor in out.items():
        value = pad_id if _TOKEN_INPUTS[name] == "pad" else 0
        out[name] = torch.nn.functional.pad(tensor, (0, target - width), value=value)
    return out


@dataclass(frozen=True)
class Launched:
    """A batch whose forward pass was started: its (possibly not yet computed) scores (or vectors, for
    ``embed``) and bookkeeping; ``pairs`` counts its rows (pairs or texts)."""

    scores: torch.Tensor
    task: Task
    pairs: int
    requests: int
    tokens: int
    real_tokens: int
    started: float
    record: bool


class ForwardPass:
    """Runs batches of pairs through ``model`` in ``dtype`` and records them in ``metrics``.

    Args:
        model: the service's model (already on its device; on a GPU already cast to ``dtype``).
        metrics: where batch sizes, timings and failures are counted.
        dtype: ``bf16``/``fp16`` run on weights already cast to it (floating inputs cast too), or under
            autocast where the weights stayed fp32; ``fp32``/``int8`` as is.
        compile: compile the forward pass once for every batch shape (:mod:`.compiling`); it stays eager,
            logged, where compiling fails or moves the probe scores (``compiled`` tells which).
        featurizer: a one-thread executor for the host work (:meth:`prepare_soon`); ``None``: the caller's thread.
    """

    def __init__(self, model: Reranker, metrics: ServiceMetrics, *, dtype: ComputeDType, compile: bool = False,
                 featurizer: concurrent.futures.Executor | None = None) -> None:
        self.model = model
        #: the one thread every featurize runs on (``None``: the caller's), so batch n+1 is prepared while batch n runs
        self.featurizer = featurizer
        self.metrics = metrics
        self.autocast_dtype = DTYPES[dtype]
        # where the weights themselves were cast once (a GPU, or a CPU whose probe batch passed; see
        # model_copy.serving_model) the inputs are cast instead: no per-batch weight casts under autocast
        weights = next(iter(model.net.parameters()), None) if isinstance(model.net, torch.nn.Module) else None
        self.cast_inputs = self.autocast_dtype is not None and weights is not None and weights.dtype == self.autocast_dtype
        self._scores: ScoresFn = self._eager_scores
        #: pad score batches to LENGTH_BUCKET widths (a GPU: few shapes for compiled / CUDA-graph kernels)
        self.buckets = model.device.type == "cuda"
        tokenizer = getattr(model, "tokenizer", None)
        self.pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
        self.compiled = False
        if compile:
            compiled = compile_scores(model, self._eager_scores)
            if compiled is not None:
                self._scores, self.compiled = compiled, True

    def run(
        self, pairs: Sequence[Any], *, task: Task = "score", encodings: list[Any] | None = None, requests: int, record: bool = True,
    ) -> np.ndarray:
        """Scores of ``pairs`` (vectors of token-id texts, for ``embed``), computed now (featurize, forward, wait)."""
        return self.collect(self.launch(pairs, task=task, encodings=encodings, requests=requests, record=record))

    def launch(
        self, pairs: Sequence[Any], *, task: Task = "score", encodings: list[Any] | None = None, requests: int, record: bool = True,
    ) -> Launched:
        """Featurize ``pairs`` and start their forward pass; on a GPU this returns before it finishes.

        ``encodings``: the pairs' encodings where the caller already tokenized them (the model must read
        pair encodings); a ``None`` among them is encoded here from its pair's text. With ``task="embed"``,
        ``pairs`` are texts as token ids (the model's ``text_tokens``), each computed into one vector.

        Raises:
            TokenizerError: the model could not featurize the pairs.
            ScoringError: the forward pass raised.
        """
        t0 = time.perf_counter()
        features = self.prepare_soon(pairs, task=task, encodings=encodings).result()
        return self.start(features, task=task, pairs=len(pairs), requests=requests, record=record, started=t0)

    def prepare_soon(self, pairs: Sequence[Any], *, task: Task = "score", encodings: list[Any] | None = None,
                     ) -> concurrent.futures.Future[dict[str, torch.Tensor]]:
        """:meth:`prepare` on the featurizing thread (``featurizer``; none: now, on this one); its result raises
        what :meth:`prepare` raises. Every featurize goes through that one thread, so the model's tokenizer state
        is never used by two threads at once."""
        if self.featurizer is None:
            done: concurrent.futures.Future[dict[str, torch.Tensor]] = concurrent.futures.Future()
            try:
                done.set_result(self.prepare(pairs, task=task, encodings=encodings))
            except TokenizerError as exc:
                done.set_exception(exc)
            return done
        return self.featurizer.submit(self.prepare, pairs, task=task, encodings=encodings)

    def prepare(self, pairs: Sequence[Any], *, task: Task = "score", encodings: list[Any] | None = None) -> dict[str, torch.Tensor]:
        """The model's input tensors of ``pairs`` (host work only: no forward pass), bucketed on a GPU.

        Raises:
            TokenizerError: the model could not featurize the pairs.
        """
        try:
            # an embed batch holds texts as token ids, read by the model's featurize_tokens (an EmbeddingModel)
            features = self.model.featurize_tokens(pairs) if task == "embed" else self._featurize(pairs, encodings)  # type: ignore[attr-defined]
        except Exception as exc:
            self.metrics.failed_batches.inc()
            logger.warning("featurize failed for %d pairs: %s: %s", len(pairs), type(exc).__name__, exc)
            raise TokenizerError(f"the model could not read this request's input: {type(exc).__name__}: {exc}") from exc
        if self.buckets and task == "score":
            features = bucketed(features, pad_id=self.pad_id)
        return features

    def start(self, features: dict[str, torch.Tensor], *, task: Task = "score", pairs: int, requests: int, record: bool = True,
              started: float | None = None) -> Launched:
        """Start the forward pass of prepared ``features`` (``pairs`` rows); on a GPU this returns before it finishes.

        Raises:
            ScoringError: the forward pass raised.
        """
        t0 = time.perf_counter() if started is None else started
        try:
            with torch.inference_mode():
                # only scoring is compiled; embedding runs eager in the same dtype
                batch = self.model.to_device(features)
                forward = functools.partial(self._eager, self.model.embeddings) if task == "embed" else self._scores  # type: ignore[attr-defined]
                scores = forward(batch).float()
        except Exception as exc:
            self.metrics.failed_batches.inc()
            logger.warning("forward pass failed for %d pairs: %s: %s", pairs, type(exc).__name__, exc)
            raise ScoringError(f"{'embedding' if task == 'embed' else 'scoring'} failed: {type(exc).__name__}: {exc}") from exc
        ids = features.get("input_ids")
        tokens = int(ids.numel()) if isinstance(ids, torch.Tensor) else 0
        mask = features.get("attention_mask")
        # featurize drops an all-ones mask: no mask means no padding
        has_mask = isinstance(mask, torch.Tensor) and isinstance(ids, torch.Tensor) and mask.shape == ids.shape
        real = int(mask.sum()) if has_mask else tokens
        return Launched(scores, task, pairs, requests, tokens, real, t0, record)

    def _featurize(self, pairs: list[Pair], encodings: list[Any] | None) -> dict[str, torch.Tensor]:
        if encodings is None:
            return self.model.featurize(pairs)
        missing = [i for i, e in enumerate(encodings) if e is None]
        if missing:
            encodings = list(encodings)
            for i, e in zip(missing, self.model.pair_encodings([pairs[i] for i in missing]), strict=True):
                encodings[i] = e
        return self.model.featurize_encodings(encodings)

    def _eager_scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scores of a batch already on the device, in the service's dtype (what ``compile`` compiles)."""
        return self._eager(self.model.scores, batch)

    def _eager(self, forward: ScoresFn, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``forward(batch)`` in the service's dtype: inputs cast where the weights were, else under autocast."""
        if self.cast_inputs:
            batch = {k: v.to(self.autocast_dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in batch.items()}
            return forward(batch)
        enabled = self.autocast_dtype is not None
        with torch.autocast(self.model.device.type, dtype=self.autocast_dtype or torch.bfloat16, enabled=enabled):
            return forward(batch)

    def collect(self, launched: Launched) -> np.ndarray:
        """Wait for a launched forward pass and return its scores (recording the batch's metrics).

        Raises:
            ScoringError: the device failed the batch, or the model returned scores of the wrong shape.
        """
        try:
            with torch.inference_mode():
                out = launched.scores.cpu().numpy()
        except Exception as exc:  # asynchronous device errors surface here
            self.metrics.failed_batches.inc()
            logger.warning("forward pass failed for %d pairs: %s: %s", launched.pairs, type(exc).__name__, exc)
            raise ScoringError(f"scoring failed: {type(exc).__name__}: {exc}") from exc
        if (out.shape != (launched.pairs,)) if launched.task == "score" else (out.ndim != 2 or len(out) != launched.pairs):
            self.metrics.failed_batches.inc()
            what, rows = ("scores", "pairs") if launched.task == "score" else ("vectors", "texts")
            raise ScoringError(f"model {self.model.name} returned {what} of shape {tuple(out.shape)} for {launched.pairs} {rows}")
        if launched.record:
            self._record(launched)
        return out

    def _record(self, launched: Launched) -> None:
        m = self.metrics
        m.batches.inc()
        (m.embedded if launched.task == "embed" else m.pairs).inc(launched.pairs)
        m.batch_pairs.observe(launched.pairs)
        m.batch_requests.observe(launched.requests)
        if launched.tokens:
            m.batch_tokens.observe(launched.tokens)
            m.padded_tokens.inc(launched.tokens)
            m.real_tokens.inc(launched.real_tokens)
        # on a GPU this includes the time the batch waited behind the previous one on the device
        m.inference_seconds.observe(time.perf_counter() - launched.started)


__all__ = ["DTYPES", "LENGTH_BUCKET", "ForwardPass", "Launched", "Task", "bucketed"]
