"""``jingpai eval``: metrics of a saved model on labelled pairs, or of a TREC run against qrels.

Examples::

    jingpai eval --model runs/cross --data ../shared/data/en/trecqa/raw-test --json
    jingpai eval --qrels qrels.txt --run run.txt

Importing this module does not import torch (the model is loaded when the command runs).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from jingpai.commands.base import JingpaiCommand
from jingpai.commands.options import MODEL_DIR
from jingpai.reranker.data import FORMATS, LABEL_MODES

logger = logging.getLogger(__name__)


@click.command(cls=JingpaiCommand)
@click.option("--model", "model_dir", type=MODEL_DIR, default=None,
              help="Model folder: saved by `jingpai train`, or a Hugging Face / sentence-transformers cross-encoder as it is.")
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
    from jingpai.reranker.evaluate import evaluate_run, to_markdown

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
            metrics, title = _evaluate_model(model_dir, data_path, fmt=fmt, label_mode=label_mode, limit=limit, batch_size=batch_size,
                                             threshold=threshold, relevant_min=relevant_min, device=device)
    except (ValueError, OSError) as exc:  # bad input of the layers below that is not (yet) a JingpaiError
        raise click.ClickException(str(exc)) from exc
    table = to_markdown(metrics, title=title)
    payload = json.dumps(metrics, indent=2)
    if write_json:
        write_json.write_text(payload + "\n")
    if write_markdown:
        write_markdown.write_text(table)
    click.echo(payload if as_json else table)


def _evaluate_model(model_dir: Path, data_path: Path, *, fmt: str, label_mode: str, limit: int | None, batch_size: int,
                    threshold: float | None, relevant_min: float, device: str | None) -> tuple[dict[str, float], str]:
    """``(metrics, table title)`` of the saved model on the labelled pairs."""
    from jingpai.reranker.base import Reranker
    from jingpai.reranker.data import read_pairs
    from jingpai.reranker.evaluate import evaluate_model

    pairs = read_pairs(data_path, format=fmt, label_mode=label_mode, limit=limit)
    model = Reranker.load(model_dir, device=device)
    metrics = evaluate_model(model, pairs, batch_size=batch_size, threshold=threshold, relevant_min=relevant_min)
    return metrics, f"{model.name} ({model_dir.name}) on {data_path.name}"


__all__ = ["evaluate"]
