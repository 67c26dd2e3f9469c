"""The service's own copy of the model, made ready to serve; the caller's model is never changed.

:func:`serving_model` deep-copies the loaded reranker, then changes only the copy: ``max_length`` from
the settings replaces its config's, it goes into eval mode, a model that scores the sigmoid of a logit
scores the logit (:meth:`~jingpai.reranker.base.Reranker.use_logit_scores`), and its weights are cast (bf16/fp16 on a
GPU; bf16 on a CPU when a probe batch scores the same) or its linear layers quantized (``int8``). A caller that hands its model over to the service
(``jingpai serve`` loads one for the service alone) passes ``copy=False`` and saves a second copy's
memory.

Example:
    >>> own, dtype = serving_model(model, ServiceSettings(dtype="int8"))        # doctest: +SKIP
    >>> own is model, own.net is model.net, dtype                              # doctest: +SKIP
    (False, False, 'int8')
"""

from __future__ import annotations

import copy as copying
import dataclasses
import logging
import warnings

import torch

from jingpai.reranker.base import Reranker
from jingpai.reranker.service.errors import ServiceSettingsError
from jingpai.reranker.service.forward import DTYPES
from jingpai.reranker.service.probe import PROBE_PAIRS, PROBE_TOLERANCE
from jingpai.reranker.service.settings import ComputeDType, ServiceSettings, resolve_dtype

logger = logging.getLogger(__name__)


def check_max_length(model: Reranker, settings: ServiceSettings) -> None:
    """Refuse a ``settings.max_length`` beyond the model's position embeddings.

    Raises:
        ServiceSettingsError: naming both numbers.
    """
    if settings.max_length is None or settings.max_length == model.config.max_length:
        return
    from jingpai.reranker.hf_checkpoint import usable_positions

    # RoBERTa-family models (XLM-R: 514 embeddings) take fewer tokens than they have position embeddings
    hf_config = getattr(model.net, "config", None)
    usable, _ = usable_positions(hf_config)
    if usable is not None and settings.max_length > usable:
        embeddings = hf_config.max_position_embeddings
        detail = "" if usable == embeddings else f" ({usable} usable: positions start after the padding index)"
        raise ServiceSettingsError(
            f"max_length={settings.max_length} exceeds the model's max_position_embeddings={embeddings}{detail}"
        )


def quantize_int8(net: torch.nn.Module) -> torch.nn.Module:
    """``net`` with its ``nn.Linear`` layers swapped, in place, for int8 ones (weights per tensor,
    activations scaled per batch); pass a net the caller owns.

    Raises:
        ServiceSettingsError: this torch build has no quantized CPU engine.
    """
    engines = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    if not engines:
        raise ServiceSettingsError("dtype='int8' needs a quantized CPU engine (fbgemm/x86/onednn/qnnpack); this torch build has none")
    linears = sum(isinstance(m, torch.nn.Linear) for m in net.modules())
    logger.info("quantizing %d linear layers to int8 (dynamic activations, engine %s)", linears, torch.backends.quantized.engine)
    with warnings.catch_warnings():
        # torch marks its quantized tensor types as deprecated; they are still the fastest int8 path on CPUs
        # without AMX/VNNI, and this is the one place that uses them
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.ao.quantization.quantize_dynamic(net, {torch.nn.Linear}, dtype=torch.qint8, inplace=True).eval()


def cast_weights_if_faithful(model: Reranker, *, tolerance: float = PROBE_TOLERANCE) -> bool:
    """Cast ``model``'s weights to bf16 on the CPU when its scores on :data:`PROBE_PAIRS` stay within
    :data:`PROBE_TOLERANCE` (``tolerance``) of fp32; otherwise keep the fp32 weights, bit for bit (the
    service then runs under autocast). Returns whether it cast.

    Casting once saves autocast's per-forward weight casts (5–8 % of a MiniLM pass on 2 cores); a model
    whose layers have no bf16 CPU kernel, or lose accuracy in bf16 (normalisations, recurrent state),
    falls back, and the fallback is logged.
    """
    # bf16 → fp32 does not give the fp32 weights back: a fallback restores them from here
    original = {k: v.detach().clone() for k, v in model.net.state_dict().items()}
    try:
        with torch.inference_mode():
            reference = model.scores(model.to_device(model.featurize(PROBE_PAIRS))).float()
            model.net.to(torch.bfloat16)
            cast = model.scores(model.to_device(_bf16_inputs(model.featurize(PROBE_PAIRS)))).float()
        drift = float((cast - reference).abs().max())
    except Exception as exc:  # noqa: BLE001 - any failure means: keep autocast, which handles op fallbacks
        _restore(model, original)
        logger.warning("bf16 weights: model %s fails a probe batch in bf16 (%s: %s); serving fp32 weights under bf16 autocast",
                       model.name, type(exc).__name__, exc)
        return False
    if not drift <= tolerance:
        _restore(model, original)
        logger.warning("bf16 weights: model %s's probe scores move by %.4f (> %.2f) in bf16; serving fp32 weights under bf16 autocast",
                       model.name, drift, tolerance)
        return False
    logger.info("casting the model's weights to bf16 on cpu (probe scores within %.1e of fp32)", drift)
    return True


def _restore(model: Reranker, original: dict[str, torch.Tensor]) -> None:
    model.net.float()
    model.net.load_state_dict(original)


def _bf16_inputs(features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.to(torch.bfloat16) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in features.items()}


def serving_model(model: Reranker, settings: ServiceSettings, *, copy: bool = True) -> tuple[Reranker, ComputeDType]:
    """The model the service runs, and its resolved compute dtype.

    Args:
        model: a loaded reranker, already on its device.
        settings: the service's settings (``max_length``, ``dtype``).
        copy: ``False``: change ``model`` itself (the caller hands it over and will not use it again).

    Raises:
        ServiceSettingsError: ``max_length`` beyond the model's positions, or a dtype this device or
            torch build cannot run.
    """
    check_max_length(model, settings)
    dtype = resolve_dtype(settings.dtype, model.device)
    own = copying.deepcopy(model) if copy else model
    if settings.max_length is not None and settings.max_length != own.config.max_length:
        logger.info("max_length %d replaces the model's saved %d", settings.max_length, own.config.max_length)
        own.config = dataclasses.replace(own.config, max_length=settings.max_length)
    own.net.eval()  # a freshly loaded net may still be in training mode (dropout on)
    if own.use_logit_scores():
        # TEI's raw_scores: true answers a one-logit head's logit; the default answer is its sigmoid either way
        logger.info("serving %s's logits (raw_scores: true answers them; the score is their sigmoid)", own.name)
    if own.device.type == "cuda" and dtype != "fp32":
        # on a GPU the weights are cast once: no per-batch cast kernels under autocast
        logger.info("casting the model's weights to %s on %s", dtype, own.device)
        own.net.to(DTYPES[dtype])
    elif own.device.type == "cpu" and dtype == "bf16":
        cast_weights_if_faithful(own)
    if dtype == "int8":
        own.net = quantize_int8(own.net)
    return own, dtype


__all__ = ["PROBE_PAIRS", "PROBE_TOLERANCE", "cast_weights_if_faithful", "check_max_length", "quantize_int8", "serving_model"]
