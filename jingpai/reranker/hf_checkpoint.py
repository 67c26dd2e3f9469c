"""Load a Hugging Face or sentence-transformers cross-encoder directory as it is (no conversion).

:meth:`jingpai.reranker.base.Reranker.load` (:func:`jingpai.reranker.loading.load`) asks :func:`detect` which loader a directory needs, and
logs the answer and the reason:

* ``jingpai`` — ``jingpai_model.json`` is there (a model ``jingpai train`` / ``Reranker.save`` wrote).
* ``sentence-transformers`` — a ``CrossEncoder`` directory: ``config_sentence_transformers.json`` with
  ``model_type: CrossEncoder`` (sentence-transformers ≥ 5), a ``modules.json`` holding only the
  sequence-classification ``Transformer``, or ``config.json`` with a ``sentence_transformers`` block
  (v4) or ``sbert_ce_default_activation_function`` (< v4).
* ``transformers`` — any other ``config.json`` whose ``architectures`` name a
  ``*ForSequenceClassification`` class (a ``save_pretrained`` cross-encoder such as
  ``cross-encoder/ms-marco-MiniLM-L6-v2`` or ``BAAI/bge-reranker-v2-m3``).

Both non-jingpai kinds load into a :class:`~jingpai.reranker.models.cross.CrossEncoderReranker` with
the checkpoint's own tokenizer and head, and the score and ``max_length`` sentence-transformers'
``CrossEncoder(dir).predict`` gives:

* score: one logit → the activation the directory names (``activation_fn``; only
  ``torch.nn.Sigmoid`` / ``torch.nn.Identity``), else ``sigmoid`` (sentence-transformers' default for
  one logit); two logits → the softmax probability of label 1, ``sigmoid(logit1 - logit0)``.
* ``max_length``: ``sentence_bert_config.json``'s ``max_seq_length`` or ``processing_kwargs`` when set,
  else the tokenizer's ``model_max_length``, capped, as sentence-transformers caps it, at the
  positions the model has (RoBERTa-family models use ``max_position_embeddings - pad_token_id - 1``).

Example:
    >>> detect(Path("/models/bge-reranker-base")).loader          # doctest: +SKIP
    'transformers'
    >>> Reranker.load("/models/bge-reranker-base").config.max_length  # doctest: +SKIP
    512
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jingpai.reranker.base import MODEL_FILE, ModelLoadError
from jingpai.reranker.models.cross import Activation, CrossConfig, CrossEncoderReranker, load_hf_config

logger = logging.getLogger(__name__)

Loader = Literal["jingpai", "sentence-transformers", "transformers"]

ST_CONFIG = "config_sentence_transformers.json"
ST_MODULES = "modules.json"
ST_MODULE_CONFIG = "sentence_bert_config.json"
#: activation_fn paths sentence-transformers writes → the activation jingpai applies
ACTIVATION_PATHS: dict[str, Activation] = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.Sigmoid": "sigmoid",
    "torch.nn.Identity": "identity",
}
#: model types whose positions start after the padding index (RoBERTa's ``create_position_ids``)
PADDING_OFFSET_TYPES = frozenset({"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text", "longformer", "roberta-prelayernorm"})
#: a tokenizer ``model_max_length`` at or above this means "not set" (transformers' VERY_LARGE_INTEGER)
UNSET_LENGTH = 10**8
#: max_length when neither the tokenizer nor the model says one
FALLBACK_MAX_LENGTH = 512


@dataclass(frozen=True)
class Checkpoint:
    """What :func:`detect` found in a directory: the loader to use and why."""

    path: Path
    loader: Loader
    reason: str
    config: dict[str, Any]
    st_config: dict[str, Any]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else {"_value": data}


def _st_modules(path: Path) -> list[dict[str, Any]] | None:
    file = path / ST_MODULES
    if not file.is_file():
        return None
    try:
        modules = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {file}: {exc}") from exc
    return modules if isinstance(modules, list) else []


def _sentence_transformers_reason(path: Path, config: dict[str, Any], st_config: dict[str, Any]) -> str | None:
    """Why ``path`` is a sentence-transformers CrossEncoder directory (``None``: it is not one).

    Raises:
        ModelLoadError: a sentence-transformers directory of another kind (a bi-encoder, extra modules).
    """
    model_type = st_config.get("model_type")
    if model_type is not None and model_type != "CrossEncoder":
        raise ModelLoadError(f"{path} is a sentence-transformers {model_type} model, not a CrossEncoder: it embeds texts "
                             "instead of scoring (query, document) pairs, so it cannot rerank")
    modules = _st_modules(path)
    if modules is not None:
        kinds = [str(m.get("type", "?")) for m in modules]
        if len(modules) != 1 or not kinds[0].endswith("Transformer") or modules[0].get("path", "") not in ("", "."):
            raise ModelLoadError(f"{path}/{ST_MODULES} lists modules {kinds}: jingpai loads a CrossEncoder made of the "
                                 "sequence-classification Transformer alone (stored in the directory itself)")
        task = _module_config(path).get("transformer_task", "sequence-classification")
        if task != "sequence-classification":
            raise ModelLoadError(f"{path}/{ST_MODULE_CONFIG} has transformer_task {task!r}; jingpai loads 'sequence-classification' "
                                 "cross-encoders only")
    if model_type == "CrossEncoder":
        return f"{ST_CONFIG} says model_type CrossEncoder"
    if modules is not None:
        return f"{ST_MODULES} holds one sequence-classification Transformer"
    if isinstance(config.get("sentence_transformers"), dict):
        return "config.json has a sentence_transformers block"
    if config.get("sbert_ce_default_activation_function"):
        return "config.json has sbert_ce_default_activation_function"
    return None


def _module_config(path: Path) -> dict[str, Any]:
    file = path / ST_MODULE_CONFIG
    return _read_json(file) if file.is_file() else {}


def detect(path: Path) -> Checkpoint:
    """The loader ``path`` needs, and the reason (see the module docstring for the rules).

    Raises:
        ModelLoadError: ``path`` is none of the three kinds; the message says what was looked for.
    """
    if (path / MODEL_FILE).is_file():
        return Checkpoint(path, "jingpai", f"{MODEL_FILE} is present", {}, {})
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"{path} is not a saved jingpai model: {MODEL_FILE} is missing, and it is no Hugging Face / "
            "sentence-transformers cross-encoder either (config.json is missing)"
        )
    config = _read_json(path / "config.json")
    st_config = _read_json(path / ST_CONFIG) if (path / ST_CONFIG).is_file() else {}
    st_reason = _sentence_transformers_reason(path, config, st_config)
    architectures = [str(a) for a in config.get("architectures") or []]
    heads = [a for a in architectures if a.endswith("ForSequenceClassification")]
    if not heads:
        raise ModelLoadError(
            f"{path}/config.json names architectures {architectures or '(none)'}, no *ForSequenceClassification: the "
            "directory has no trained scoring head, so it is no cross-encoder (a bare encoder is a --base for "
            f"`jingpai train`); expected {MODEL_FILE}, or a sequence-classification checkpoint"
        )
    if st_reason is not None:
        return Checkpoint(path, "sentence-transformers", f"{st_reason}; {heads[0]}", config, st_config)
    return Checkpoint(path, "transformers", f"no {MODEL_FILE}; config.json names {heads[0]}", config, st_config)


def _activation_path(found: Checkpoint) -> tuple[str | None, str]:
    """The activation_fn path the directory stores, and where (sentence-transformers' own order)."""
    if found.st_config.get("activation_fn"):
        return str(found.st_config["activation_fn"]), f"{ST_CONFIG} activation_fn"
    block = found.config.get("sentence_transformers")
    if isinstance(block, dict) and block.get("activation_fn"):
        return str(block["activation_fn"]), "config.json sentence_transformers.activation_fn"
    if found.config.get("sbert_ce_default_activation_function"):
        return str(found.config["sbert_ce_default_activation_function"]), "config.json sbert_ce_default_activation_function"
    return None, ""


def resolve_activation(found: Checkpoint, num_logits: int) -> tuple[Activation, str]:
    """``(activation, why)`` for a one-logit head; two logits always give ``sigmoid`` (P(label 1)).

    Raises:
        ModelLoadError: the directory names a torch activation other than Sigmoid / Identity.
    """
    stored, where = _activation_path(found)
    if num_logits == 2:
        note = f" ({where} {stored} not applied)" if stored else ""
        return "sigmoid", f"two logits: softmax probability of label 1 = sigmoid(logit1 - logit0){note}"
    if stored is None:
        return "sigmoid", "sentence-transformers' default for one logit (no activation_fn stored)"
    if stored in ACTIVATION_PATHS:
        return ACTIVATION_PATHS[stored], f"{where} {stored}"
    if stored.startswith("torch."):
        raise ModelLoadError(f"{found.path}: {where} is {stored!r}; jingpai applies only {', '.join(sorted(ACTIVATION_PATHS))}")
    # sentence-transformers refuses a non-torch activation path without trust_remote_code and uses its default
    logger.warning("%s: %s %s is no torch activation; using sigmoid, as sentence-transformers does without trust_remote_code",
                   found.path, where, stored)
    return "sigmoid", f"default sigmoid ({where} {stored} is not a torch activation)"


def usable_positions(hf_config: Any) -> tuple[int | None, str]:
    """``(tokens the model's position embeddings can take, why)``; ``None`` when the config states none.

    RoBERTa-family models number positions from ``pad_token_id + 1``, so 514 embeddings take 512 tokens.
    """
    positions = getattr(hf_config, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions <= 0:
        return None, ""
    if getattr(hf_config, "model_type", None) in PADDING_OFFSET_TYPES:
        pad = getattr(hf_config, "pad_token_id", None)
        offset = (1 if pad is None else int(pad)) + 1
        return positions - offset, f"max_position_embeddings {positions} - {offset} (positions start after the padding index)"
    return positions, f"max_position_embeddings {positions}"


def _configured_length(found: Checkpoint, tokenizer: Any) -> tuple[int | None, str]:
    module = _module_config(found.path) if found.loader == "sentence-transformers" else {}
    processing = module.get("processing_kwargs") or {}
    for bucket in ("text", "common"):
        value = (processing.get(bucket) or {}).get("max_length") if isinstance(processing, dict) else None
        if isinstance(value, int):
            return value, f"{ST_MODULE_CONFIG} processing_kwargs.{bucket}.max_length"
    if isinstance(module.get("max_seq_length"), int):
        return module["max_seq_length"], f"{ST_MODULE_CONFIG} max_seq_length"
    own = getattr(tokenizer, "model_max_length", None)
    if isinstance(own, int) and 0 < own < UNSET_LENGTH:
        return own, "tokenizer model_max_length"
    return None, ""


def resolve_max_length(found: Checkpoint, hf_config: Any, tokenizer: Any) -> tuple[int, str]:
    """``(max_length, why)``: the checkpoint's own length, capped at the positions the model has."""
    length, why = _configured_length(found, tokenizer)
    positions, positions_why = usable_positions(hf_config)
    if length is None and positions is None:
        logger.warning("%s states no max length (tokenizer or positions): using %d", found.path, FALLBACK_MAX_LENGTH)
        return FALLBACK_MAX_LENGTH, "fallback (neither tokenizer nor model states one)"
    if length is None:
        logger.info("%s: the tokenizer sets no model_max_length; using the model's %s", found.path, positions_why)
        return int(positions), positions_why  # type: ignore[arg-type]
    if positions is not None and positions < length:
        logger.info("%s: %s %d capped at %s", found.path, why, length, positions_why)
        return positions, f"{why} {length} capped at {positions_why}"
    return length, why


def load(found: Checkpoint, *, device: str | None = None) -> CrossEncoderReranker:
    """The cross-encoder in ``found.path`` as a :class:`CrossEncoderReranker`, head and tokenizer as they are.

    Raises:
        ModelLoadError: unreadable files, a head other than 1 or 2 logits, weights missing from the
            checkpoint, prompts the model expects, or an activation jingpai cannot apply.
    """
    if found.st_config.get("default_prompt_name"):
        raise ModelLoadError(f"{found.path}: {ST_CONFIG} sets default_prompt_name {found.st_config['default_prompt_name']!r}; "
                             "jingpai scores plain (query, document) pairs and does not add sentence-transformers prompts")
    hf_config = load_hf_config(found.path)
    num_logits = int(hf_config.num_labels)
    if num_logits not in (1, 2):
        raise ModelLoadError(f"{found.path} has a {num_logits}-label head; a reranker needs 1 logit (relevance) or 2 "
                             "(not relevant / relevant, label 1 = relevant)")
    activation, activation_why = resolve_activation(found, num_logits)
    model = CrossEncoderReranker(CrossConfig(base=str(found.path), num_logits=num_logits, activation=activation), device=device,
                                 require_head=True)
    # the length is read off the model's own tokenizer, once it is loaded
    max_length, length_why = resolve_max_length(found, hf_config, model.tokenizer)
    model.config = dataclasses.replace(model.config, max_length=max_length)
    logger.info("loaded %s (%s, %s): %d logit(s), score %s [%s], max_length %d [%s]", found.path, found.loader,
                type(model.net).__name__, num_logits, activation, activation_why, max_length, length_why)
    return model


__all__ = ["Checkpoint", "Loader", "detect", "load", "resolve_activation", "resolve_max_length", "usable_positions"]
