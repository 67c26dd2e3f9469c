"""A model directory → the loaded reranker: what :meth:`jingpai.reranker.base.Reranker.load` does.

Which loader reads the directory is decided by :func:`jingpai.reranker.hf_checkpoint.detect` and logged with
the reason: a saved jingpai model is rebuilt from its architecture (:mod:`jingpai.reranker.registry`), config,
assets and weights; a Hugging Face or sentence-transformers cross-encoder loads as a ``cross`` model.

:mod:`jingpai.reranker.base` names this module by string (:data:`~jingpai.reranker.base.LOADER`) and imports
it on first use: this module imports the models and the checkpoint loader, which all import the base, so
the base imports none of them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from jingpai.reranker import hf_checkpoint, pretrained, registry
from jingpai.reranker.models import bi
from jingpai.reranker.base import MODEL_FILE, WEIGHTS_FILE, ModelLoadError, Reranker

logger = logging.getLogger(__name__)


def load(
    directory: str | Path,
    *,
    expected: type[Reranker] = Reranker,
    device: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Reranker:
    """The model saved in ``directory`` (see :meth:`~jingpai.reranker.base.Reranker.load`).

    Args:
        expected: the class the caller asked through (``KeywordBertReranker.load``): a model of another
            architecture is refused.
        overrides: config fields replaced before the model is rebuilt (a saved jingpai model only) — the
            fields that shape no weight, such as ``dropout`` or a loss weight, when training continues from
            the saved weights (``jingpai train --init-from``).

    Raises:
        ModelLoadError: the directory is no model directory, lacks files, names an unknown architecture,
            or holds a model that is not an ``expected``; ``overrides`` names an unknown field, or one that
            changes the shape of a saved weight.
    """
    path = pretrained.resolve(directory)
    if not (path / MODEL_FILE).is_file() and bi.st_pooling(path) is not None:
        return _bi_encoder(path, expected=expected, device=device)
    found = hf_checkpoint.detect(path)
    logger.info("loading %s with the %s loader: %s", path, found.loader, found.reason)
    if found.loader != "jingpai":
        hf_cls = registry.get("cross")
        if expected is not Reranker and not issubclass(hf_cls, expected):
            raise ModelLoadError(f"{path} holds a Hugging Face cross-encoder (loaded as 'cross'), not {expected.name!r}")
        if overrides:
            raise ModelLoadError(f"{path} holds a Hugging Face cross-encoder: config overrides {sorted(overrides)} apply to saved jingpai models only")
        return hf_checkpoint.load(found, device=device)
    meta = json.loads((path / MODEL_FILE).read_text())
    model_cls = registry.get(meta["architecture"])
    if expected is not Reranker and not issubclass(model_cls, expected):
        raise ModelLoadError(f"{path} holds a {meta['architecture']!r} model, not {expected.name!r}")
    saved = dict(meta["config"])
    if overrides:
        unknown = sorted(set(overrides) - set(model_cls.config_class.__dataclass_fields__))
        if unknown:
            raise ModelLoadError(f"unknown {meta['architecture']} config field(s) {unknown}; expected some of "
                                 f"{sorted(model_cls.config_class.__dataclass_fields__)}")
        saved.update(overrides)
    config = model_cls.config_class.from_dict(saved)
    model = model_cls.from_assets(config, path, device=device)
    state = torch.load(path / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    try:
        model.net.load_state_dict(state)
    except RuntimeError as exc:
        if not overrides:
            raise
        changed = sorted(k for k in overrides if meta["config"].get(k) != overrides[k])
        raise ModelLoadError(f"the saved weights of {path} do not fit its config with {changed} changed: "
                             "override only fields that shape no weight (dropout, loss weights)") from exc
    model.net.to(model.device)
    model.keyword_dict_version = meta.get("keyword_dict_version")
    return model


def _bi_encoder(path: Path, *, expected: type[Reranker], device: str | None) -> Reranker:
    """A sentence-transformers bi-encoder folder (``bge-small-zh`` as converted) as a zero-shot ``bi`` model."""
    logger.info("loading %s with the sentence-transformers bi-encoder loader: 1_Pooling/config.json declares its pooling", path)
    if expected is not Reranker and not issubclass(bi.BiEncoderReranker, expected):
        raise ModelLoadError(f"{path} holds a sentence-transformers bi-encoder (loaded as 'bi'), not {expected.name!r}")
    return bi.BiEncoderReranker.from_sentence_transformers(path, device=device)


__all__ = ["load"]
