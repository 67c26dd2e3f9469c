"""The service's forward pass compiled once for every batch shape (:class:`CompiledScores`, ``--compile``).

``torch.compile`` (inductor) fuses what eager PyTorch runs as separate memory-bound kernels — GELU,
layer norms, residual adds, attention's scaling and masking — and, with ``freezing`` on a CPU, folds the
weights into the graph, prepacked for oneDNN (AMX / AVX512). On a CPU with AMX the matmuls already run
near their peak in eager mode, so those other kernels are most of what is left: measured 1.2–1.7× the
eager bf16 forward pass of MiniLM-L6 (docs/service.md).

Compiling costs seconds (~20 s for MiniLM on 2 cores) and a new graph per new input shape would cost
that again, in the middle of serving. So the service compiles once, at start-up, for all shapes:

* the batch and length dimensions are marked dynamic, so one graph serves every (pairs × tokens);
* a one-pair batch is sent as two copies of the pair (torch specializes size-1 dimensions, which would
  take a second graph), and its first score is kept;
* an all-ones attention mask that featurize left out (it means "no padding") is put back, so a batch
  with and without padding take the same graph.

While serving nothing is compiled: a batch the graph does not fit (a model that reads a size the graph
did not make dynamic, such as ``use-bi``'s packed tokens) runs eager, and the first one is logged as a warning.

Before serving, the compiled scores of :data:`~jingpai.reranker.service.model_copy.PROBE_PAIRS` (padded)
and of one pair (unpadded) are checked against the eager ones; a failure to compile, or a drift beyond
the tolerance, keeps the eager forward pass and is logged with the reason.

Example:
    >>> scores = compile_scores(model, eager_scores)      # doctest: +SKIP
    >>> scores is None or scores(batch).shape == (len(batch["input_ids"]),)   # doctest: +SKIP
    True
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from jingpai.reranker.base import Reranker
from jingpai.reranker.service.probe import PROBE_PAIRS, PROBE_TOLERANCE

logger = logging.getLogger(__name__)

#: the forward function of a batch already on the model's device: features → one score per pair
ScoresFn = Callable[[dict[str, torch.Tensor]], torch.Tensor]


class CompiledScores:
    """``eager(batch)`` compiled with ``torch.compile``, fed so that one graph serves every batch shape.

    Args:
        eager: the service's eager forward (features on the device → scores); it is what gets compiled.
        device_type: ``cpu`` turns on inductor's weight freezing (weights folded and prepacked for oneDNN).
    """

    def __init__(self, eager: ScoresFn, *, device_type: str) -> None:
        options = {"freezing": True} if device_type == "cpu" else {}
        # dynamic=False: sizes are made dynamic where this class marks them (batch, length), not every
        # integer the model reads (head counts, hidden sizes stay constants the compiler can fold)
        self._eager = eager
        self._compiled = torch.compile(eager, dynamic=False, options=options)
        self._mask_inputs: set[str] = set()
        self._serving = False
        #: batches served eager because the compiled graph did not fit them (see :meth:`serve`)
        self.eager_batches = 0

    def serve(self) -> None:
        """From now on never compile: a batch the compiled graph does not fit runs eager (the first one is warned about).

        A model whose code reads a size the graph did not make dynamic (packed tokens, a branch on a
        length) would otherwise compile a new graph in the middle of a request: tens of seconds.
        """
        self._serving = True

    def remember_masks(self, batch: dict[str, torch.Tensor]) -> None:
        """Note which inputs the warm-up batch masked, so an unpadded batch gets an all-ones mask there."""
        self._mask_inputs = {k for k in batch if k.endswith("attention_mask")}

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scores of ``batch`` (on the device); call it under ``torch.inference_mode()``."""
        # a graph's guards tell inference tensors from normal ones: featurize makes normal tensors on a
        # CPU, the copy to a GPU inference ones. All become inference tensors (a copy of the token ids:
        # kilobytes), so that both take one graph
        batch = {k: v.clone() if isinstance(v, torch.Tensor) and not v.is_inference() else v for k, v in batch.items()}
        ids = batch.get("input_ids")
        if isinstance(ids, torch.Tensor):
            for name in self._mask_inputs - batch.keys():
                # featurize drops an all-ones mask (no padding); the same graph takes it back
                batch[name] = torch.ones_like(ids)
        n = _batch_size(batch)
        if n == 1:
            batch = {k: torch.cat([v, v]) if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == 1 else v
                     for k, v in batch.items()}
        for value in batch.values():
            if isinstance(value, torch.Tensor):
                for dim in range(min(value.dim(), 2)):
                    torch._dynamo.maybe_mark_dynamic(value, dim)
        scores = self._run(batch)
        return scores[:1] if n == 1 else scores

    def _run(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if not self._serving:
            return self._compiled(batch)
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                return self._compiled(batch)
        except RuntimeError as exc:
            if "fail_on_recompile" not in str(exc):
                raise
        return self._eager_fallback(batch)

    def _eager_fallback(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        self.eager_batches += 1
        shape = tuple(tuple(v.shape) for v in batch.values() if isinstance(v, torch.Tensor))
        # warned once: a model whose batches never fit (use-bi's packed tokens) would repeat it per shape
        log = logger.warning if self.eager_batches == 1 else logger.debug
        log("compile: a batch of input shapes %s does not fit the compiled graph; served eager (no compiling while serving)%s",
            shape, "; later ones are logged at debug level" if self.eager_batches == 1 else "")
        return self._eager(batch)


def _batch_size(batch: dict[str, torch.Tensor]) -> int:
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.dim():
            return int(value.shape[0])
    return 0


def compile_scores(model: Reranker, eager: ScoresFn, *, tolerance: float | None = None) -> CompiledScores | None:
    """``eager`` compiled for ``model``'s service, or ``None`` (logged) when compiling fails or drifts.

    Compiles and checks two probe batches — the padded :data:`PROBE_PAIRS` and one unpadded pair — so
    serving starts with the graph built; the compiled scores must stay within ``tolerance`` (default
    :data:`PROBE_TOLERANCE`) of the eager ones.
    """
    tolerance = PROBE_TOLERANCE if tolerance is None else tolerance
    compiled = CompiledScores(eager, device_type=model.device.type)
    started = time.perf_counter()
    drift = 0.0
    try:
        with torch.inference_mode():
            for i, pairs in enumerate((PROBE_PAIRS, PROBE_PAIRS[:1])):
                batch = model.to_device(model.featurize(pairs))
                if i == 0:
                    compiled.remember_masks(batch)
                reference = eager(batch).float()
                got = compiled(batch).float()
                if got.shape != reference.shape:
                    raise ValueError(f"compiled scores have shape {tuple(got.shape)}, eager {tuple(reference.shape)}")
                drift = max(drift, float((got - reference).abs().max()))
    except Exception as exc:  # noqa: BLE001 - any failure means: serve the eager forward pass, which works
        logger.warning("compile: model %s could not be compiled (%s: %s); serving the eager forward pass",
                       model.name, type(exc).__name__, exc)
        return None
    if not drift <= tolerance:
        logger.warning("compile: model %s's compiled probe scores move by %.4f (> %.2f); serving the eager forward pass",
                       model.name, drift, tolerance)
        return None
    logger.info("compile: model %s compiled in %.1f s (probe scores within %.1e of eager)", model.name, time.perf_counter() - started, drift)
    compiled.serve()
    return compiled


__all__ = ["CompiledScores", "ScoresFn", "compile_scores"]
