"""The API every reranking model shares, shaped like sentence-transformers' ``CrossEncoder``.

A model file (``jingpai/reranker/models/<name>.py``) subclasses :class:`Reranker`, implements
:meth:`Reranker.featurize` (texts → tensors), :meth:`Reranker.scores` (tensors → one relevance score
per pair, higher = more relevant) and :meth:`Reranker.loss`, and registers itself by name in
:mod:`jingpai.reranker.registry`. Everything else — batching, ``predict``, ``rank``, ``save`` /
``load`` — lives here once.

Saved layout (``save(dir)``)::

    dir/jingpai_model.json   {"architecture": name, "config": {...}, "keyword_dict_version": ..., "jingpai_version": ...}
    dir/model.pt             state_dict of :attr:`Reranker.net`
    dir/...                  whatever :meth:`Reranker.save_assets` writes (tokenizer, vocab, word vectors)

:meth:`Reranker.load` also takes a Hugging Face or sentence-transformers cross-encoder directory as it
is (:mod:`jingpai.reranker.hf_checkpoint`).
"""

from __future__ import annotations

import importlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, TypedDict

import numpy as np
import torch

from jingpai import __version__
from jingpai.errors import UserError

logger = logging.getLogger(__name__)

MODEL_FILE = "jingpai_model.json"
WEIGHTS_FILE = "model.pt"
#: the module :meth:`Reranker.load` hands a directory to, imported by name on first use (as the registry
#: imports the architectures): it imports the models and the checkpoint loader, which all import this module
LOADER = "jingpai.reranker.loading"

Pair = tuple[str, str]


class RankResult(TypedDict, total=False):
    """One ranked document: ``index`` into the input list, ``score``, and ``text`` when asked for."""

    index: int
    score: float
    text: str


class ModelLoadError(UserError, RuntimeError):
    """A saved model directory is missing, incomplete or names an unknown architecture."""


@dataclass(frozen=True)
class RerankerConfig:
    """Base for each architecture's frozen config dataclass (stored as JSON with the weights)."""

    max_length: int = 256

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RerankerConfig:
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ModelLoadError(f"unknown {cls.__name__} fields {unknown}; expected some of {sorted(known)}")
        return cls(**data)


class Reranker(ABC):
    """A (query, document) relevance model.

    Subclasses set :attr:`name` and :attr:`config_class`, build :attr:`net` (a ``torch.nn.Module``) in
    ``__init__``, and implement :meth:`featurize`, :meth:`scores` and :meth:`loss`.

    Args:
        config: the architecture's config.
        device: ``"cpu"``, ``"cuda"``, … (``None``: CUDA when available, else CPU).

    Example:
        >>> model = registry.create("cross", base="path/to/minilm")      # doctest: +SKIP
        >>> model.rank("哪些因素会影响中国的GDP", ["中国GDP增长的因素", "今天天气"], top_k=1)  # doctest: +SKIP
        [{'index': 0, 'score': 0.93}]
    """

    name: ClassVar[str]
    config_class: ClassVar[type[RerankerConfig]] = RerankerConfig
    #: what ``scores`` returns: 1 — a logit (sigmoid makes it a probability); otherwise a probability-like
    #: score in [0, 1] (classification heads). A model may set it per instance (a ``cross`` model whose
    #: activation is ``sigmoid`` returns probabilities).
    num_labels: int = 1
    #: whether :meth:`featurize` reads a text past the tokens the model keeps: a keyword model ranks the dictionary
    #: words of the whole text (its top k), so a caller that cuts a document to those tokens (the rerank service) must
    #: hand it the whole text to score as :meth:`predict` does
    reads_whole_text: ClassVar[bool] = False

    def __init__(self, config: RerankerConfig, *, device: str | None = None) -> None:
        self.config = config
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.keyword_dict_version: str | None = None
        self.net: torch.nn.Module

    # ------------------------------------------------------------------ to implement

    @abstractmethod
    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        """Turn text pairs into the input tensors of :attr:`net` (on CPU; moved to the device later)."""

    @abstractmethod
    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One float relevance score per pair, shape ``[B]``; higher = more relevant."""

    @abstractmethod
    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        """Training loss for a featurized batch and its labels (0/1, or graded levels)."""

    # ------------------------------------------------------------------ optional: inputs from token ids

    @property
    def reads_pair_encodings(self) -> bool:
        """Whether :meth:`featurize_encodings` builds this model's inputs from pair encodings of its
        :attr:`tokenizer` (token ids a caller already computed), as :meth:`featurize` would from the text."""
        return False

    def pair_encodings(self, pairs: Sequence[Pair]) -> list[Any]:
        """The Rust tokenizer's ``Encoding`` of each pair (special tokens added, cut to ``max_length``).

        Raises:
            TypeError: the model builds its inputs from text only (:attr:`reads_pair_encodings` is false).
        """
        raise TypeError(f"model {self.name} builds its inputs from text only; call featurize()")

    def featurize_encodings(self, encodings: Sequence[Any]) -> dict[str, torch.Tensor]:
        """Input tensors from pair encodings (:meth:`pair_encodings`, or each side's encoding joined by a
        :class:`~jingpai.reranker.pair_encoding.PairEncoder`): what :meth:`featurize` makes of the pairs.

        Raises:
            TypeError: the model builds its inputs from text only (:attr:`reads_pair_encodings` is false).
        """
        raise TypeError(f"model {self.name} builds its inputs from text only; call featurize()")

    def use_logit_scores(self) -> bool:
        """Make :meth:`scores` return the logit whose sigmoid it returns now (``num_labels`` becomes 1), where
        the model computes its score that way; returns whether it changed. The rerank service calls it on its
        own copy: the default answer (the sigmoid) stays the same, and ``raw_scores: true`` gets the logit,
        as TEI gives it. A model whose score is a probability of another kind (a softmax over levels) keeps
        it and returns ``False``, the default here.
        """
        return False

    def give_keywords(self, texts: Sequence[str], words: Sequence[Sequence[str] | None], *, version: str, top_k: int) -> int:
        """Take ``words[i]`` as the dictionary keywords of ``texts[i]`` (best first, the top ``top_k`` ranked with
        dictionary ``version``: what ``jingpai index --rerank-keywords`` stores), so that scoring those texts need
        not find them again; returns how many were taken. A keyword model takes them only from its own dictionary
        version (:class:`~jingpai.reranker.text_keywords.TextKeywords`); a model that reads no keywords takes none,
        the default here."""
        return 0

    def save_assets(self, directory: Path) -> None:
        """Write tokenizer / vocabulary / other files needed to rebuild the model (not the weights)."""

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> Reranker:
        """Rebuild an untrained model from its config and the files :meth:`save_assets` wrote."""
        return cls(config, device=device)

    # ------------------------------------------------------------------ shared API

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``batch`` on the model's device. To a GPU the copy goes through pinned memory: only then is it
        asynchronous, so the host can prepare the next batch while the device is still busy."""
        pin = self.device.type == "cuda"
        return {
            k: (v.pin_memory() if pin and v.device.type == "cpu" else v).to(self.device, non_blocking=True)
            if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()
        }

    @torch.inference_mode()
    def predict(
        self,
        pairs: Sequence[Pair],
        *,
        batch_size: int = 32,
        autocast_dtype: torch.dtype | None = None,
    ) -> np.ndarray:
        """Score ``(query, document)`` pairs.

        Args:
            pairs: text pairs.
            batch_size: pairs per forward pass (pairs are sorted by length to cut padding).
            autocast_dtype: e.g. ``torch.bfloat16`` to run under autocast; ``None`` runs in fp32.

        Returns:
            ``float32`` array of shape ``[len(pairs)]`` in input order.
        """
        if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(p, str) for p in pairs):
            raise TypeError("predict() takes a list of (query, document) pairs, not a single pair")
        self.net.eval()
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        out = np.empty(len(pairs), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = self.to_device(self.featurize([pairs[i] for i in idx]))
            with torch.autocast(self.device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
                s = self.scores(batch)
            out[idx] = s.float().cpu().numpy()
        return out

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_k: int | None = None,
        return_documents: bool = False,
        batch_size: int = 32,
    ) -> list[RankResult]:
        """Score every document against ``query`` and return them best first.

        Returns:
            ``[{"index": i, "score": s, "text"?: doc}, …]`` sorted by descending score, cut to ``top_k``.
        """
        scores = self.predict([(query, doc) for doc in documents], batch_size=batch_size)
        order = np.argsort(-scores, kind="stable")
        if top_k is not None:
            order = order[:top_k]
        results: list[RankResult] = []
        for i in order:
            rec: RankResult = {"index": int(i), "score": float(scores[i])}
            if return_documents:
                rec["text"] = documents[i]
            results.append(rec)
        return results

    def save(self, directory: str | Path) -> Path:
        """Write config, weights and assets to ``directory`` (created if needed)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        meta = {
            "architecture": self.name,
            "config": self.config.to_dict(),
            "keyword_dict_version": self.keyword_dict_version,
            "jingpai_version": __version__,
        }
        (path / MODEL_FILE).write_text(json.dumps(meta, ensure_ascii=False, indent=2))
        torch.save(self.net.state_dict(), path / WEIGHTS_FILE)
        self.save_assets(path)
        return path

    @classmethod
    def load(cls, directory: str | Path, *, device: str | None = None, overrides: dict[str, Any] | None = None) -> Reranker:
        """Load a model directory as it is; which loader reads it is decided and logged with the reason.

        Accepted (see :mod:`jingpai.reranker.hf_checkpoint`): a saved jingpai model (``jingpai_model.json``
        names the architecture), a Hugging Face ``*ForSequenceClassification`` cross-encoder
        (``save_pretrained``), or a sentence-transformers ``CrossEncoder`` directory; the last two load
        as a ``cross`` model with their own tokenizer, head, ``max_length`` and score activation.
        ``overrides`` replaces config fields of a saved jingpai model that shape no weight (``dropout``,
        loss weights), for training on from its weights.

        Raises:
            ModelLoadError: the directory is none of these, lacks files, or names an unknown architecture.
        """
        return importlib.import_module(LOADER).load(directory, expected=cls, device=device, overrides=overrides)


__all__ = ["LOADER", "MODEL_FILE", "WEIGHTS_FILE", "ModelLoadError", "Pair", "RankResult", "Reranker", "RerankerConfig"]
