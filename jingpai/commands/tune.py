"""CLI: ``jingpai tune`` — measure the gateway's fusion and window on labelled queries, write the best
as a gateway settings file (:mod:`jingpai.plugin.tune`, :mod:`jingpai.plugin.tune_output`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from jingpai.commands.base import JingpaiCommand
from jingpai.commands.options import SHARED_ENGINE_ENV, engine_auth, engine_auth_options
from jingpai.plugin.settings import ENV_PREFIX, load_config_file

if TYPE_CHECKING:
    from jingpai.plugin.tune import LabelledQuery, TuneRow, TuneSettings

ENV = ENV_PREFIX


def _csv(kind: type, text: str | None, option: str) -> tuple | None:
    if text is None:
        return None
    try:
        return tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise click.BadParameter(f"expected comma-separated {kind.__name__}s, got {text!r}", param_hint=option) from exc


def _grid(windows: str | None, weights: str | None, rrf_ks: str | None) -> dict[str, tuple]:
    """The grid options given (the others keep :class:`~jingpai.plugin.tune.TuneSettings`' defaults)."""
    given = (("windows", _csv(int, windows, "--windows")), ("weights", _csv(float, weights, "--weights")),
             ("rrf_ks", _csv(int, rrf_ks, "--rrf-k")))
    return {name: value for name, value in given if value is not None}


def _labelled(settings: TuneSettings, pairs: Path | None, qrels: Path | None, queries: Path | None) -> tuple[str, list[LabelledQuery]]:
    """The text field searched and the labelled queries, from ``--pairs`` or ``--qrels`` + ``--queries``."""
    from jingpai.engine.client import EngineConnectionError, connect
    from jingpai.indexer.mapping import NotAJingpaiIndexError, read_meta
    from jingpai.plugin import tune as tuning

    try:
        client = connect(settings.engine_url, auth=settings.auth)
        field = settings.text_field or read_meta(client, settings.index).text_fields[0]
        if pairs is not None:
            return field, tuning.queries_from_pairs(client, settings.index, pairs, text_field=field)
    except (EngineConnectionError, NotAJingpaiIndexError) as exc:  # not (yet) jingpai errors that the command reports
        raise click.ClickException(str(exc)) from exc
    assert qrels is not None and queries is not None
    return field, tuning.queries_from_trec(qrels, queries)


#: hybrid + rerank rows printed (the best by the metric; tune.json has every one)
PIPELINE_ROWS_SHOWN = 10


def _print_table(rows: list[TuneRow], best: TuneRow, *, index: str, n_queries: int, metric: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from jingpai.plugin.tune import METRICS

    table = Table(title=f"jingpai tune — {index}, {n_queries} queries (best {metric} in bold)")
    for name in ("fusion", "window", "engine w", "rrf k", "first stage", *METRICS):
        table.add_column(name, justify="left" if name in ("fusion", "first stage") else "right")
    pipeline = sorted((r for r in rows if r.first_stage is not None), key=lambda r: -r.metrics[metric])
    for row in [r for r in rows if r.first_stage is None] + pipeline[:PIPELINE_ROWS_SHOWN]:
        stage = "" if row.first_stage is None else f"hybrid-{row.first_stage.label()}" + (", both lists' top" if row.rerank_window == "both" else "")
        cells = [row.fusion, "" if row.window is None else str(row.window), "" if row.weight is None else f"{row.weight:g}",
                 "" if row.rrf_k is None else str(row.rrf_k), stage, *(f"{row.metrics[m]:.4f}" for m in METRICS)]
        table.add_row(*cells, style="bold" if row == best else None)
    if len(pipeline) > PIPELINE_ROWS_SHOWN:
        table.caption = f"hybrid + rerank: the best {PIPELINE_ROWS_SHOWN} of {len(pipeline)} settings shown (tune.json has all)"
    console = Console()
    # piped or captured output defaults to 80 columns, which would squeeze the metric columns into ellipses
    Console(width=max(console.width, 130)).print(table)


def _write(out_dir: Path, settings: TuneSettings, rows: list[TuneRow], best: TuneRow, *, n_queries: int,
           never_worse_than: str | None) -> None:
    """``gateway.toml`` (the best settings), ``tune.json`` (every row) and ``tune.png`` (metric vs weight)."""
    from jingpai.plugin import tune_output
    from jingpai.plugin.tune import best_pipeline
    from jingpai.plugin.tune_hybrid import best_hybrid

    out_dir.mkdir(parents=True, exist_ok=True)
    hybrid = best_hybrid(rows, settings.metric)
    pipeline = best_pipeline(rows, settings.metric, never_worse_than=never_worse_than)
    text = tune_output.settings_file(settings, best, queries=n_queries, hybrid=hybrid, pipeline=pipeline)
    (out_dir / "gateway.toml").write_text(text, encoding="utf-8")
    if hybrid is not None:
        click.echo(f"best hybrid first stage by {settings.metric}: {hybrid.label()} ({hybrid.metrics[settings.metric]:.4f})")
    if pipeline is not None:
        click.echo(f"best hybrid + rerank by {settings.metric}: {pipeline.label()} ({pipeline.metrics[settings.metric]:.4f}); "
                   f"BM25 + rerank: {best.metrics[settings.metric]:.4f}")
    (out_dir / "tune.json").write_text(json.dumps([
        {"fusion": r.fusion, "window": r.window, "weight": r.weight, "rrf_k": r.rrf_k,
         "first_stage": None if r.first_stage is None else r.first_stage.describe(), "rerank_window": r.rerank_window, **r.metrics} for r in rows
    ], indent=1), encoding="utf-8")
    tune_output.plot(rows, out_dir / "tune.png", metric=settings.metric)
    for warning in _noise_warnings(rows, best, pipeline, metric=settings.metric, n_queries=n_queries):
        click.echo(f"WARNING: {warning}", err=True)
    click.echo(f"best {settings.metric}: {best.label()} ({best.metrics[settings.metric]:.4f}); wrote {out_dir / 'gateway.toml'} "
               f"(jingpai gateway --config {out_dir / 'gateway.toml'}), {out_dir / 'tune.png'}, {out_dir / 'tune.json'}")


def _noise_warnings(rows: list[TuneRow], best: TuneRow, pipeline: TuneRow | None, *, metric: str, n_queries: int) -> list[str]:
    """Each choice written whose gain over what it replaces is within noise: BM25 + rerank over the augmented
    order, hybrid + rerank over BM25 + rerank."""
    from jingpai.plugin.tune_noise import noise_warning

    augmented = next(r for r in rows if r.fusion == "augmented" and r.window is None)
    found = [noise_warning(best, augmented, metric, n_queries)]
    if pipeline is not None:
        found.append(noise_warning(pipeline, best, metric, n_queries))
    return [w for w in found if w]


@click.command("tune", cls=JingpaiCommand)
@click.option("--engine", envvar=["JINGPAI_TUNE_ENGINE", SHARED_ENGINE_ENV, f"{ENV}ENGINE"], required=True, metavar="URL", help="Elasticsearch/OpenSearch holding the index.")
@engine_auth_options("tune")
@click.option("--index", "index", required=True, help="The jingpai index (or alias) to search.")
@click.option("--reranker", envvar=["JINGPAI_TUNE_RERANKER", f"{ENV}RERANKER"], required=True, metavar="URL", help="`jingpai serve` URL.")
@click.option("--dict", "dicts", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Keyword dictionary directory (repeatable), for the gateway's augmentation (default: --config's dict_dirs).")
@click.option("--pairs", type=click.Path(exists=True, path_type=Path),
              help="Labelled pairs (q1<TAB>q2<TAB>label …): every question indexed; q1 searches for q2, its own document excluded.")
@click.option("--qrels", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="TREC qrels naming the index's _ids (with --queries).")
@click.option("--queries", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="qid<TAB>query text, one per line (with --qrels).")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Gateway settings file to start from (rerank fields, boosts …); the written file keeps them.")
@click.option("--windows", metavar="W1,W2", help="Rerank windows to try (default 10,20,50).")
@click.option("--weights", metavar="W1,W2", help="Engine weights to try for linear and rrf (default 0,0.1,…,1).")
@click.option("--rrf-k", "rrf_ks", metavar="K1,K2", help="RRF constants to try (default 10,30,60).")
@click.option("--metric", default="P@1", show_default=True, help="Picks the best settings: P@1, P@3, P@5, P@10, MRR, nDCG@10 or MAP.")
@click.option("--never-worse", is_flag=True,
              help="Choose only among settings at least the augmented order at every P@1/3/5/10 (the best overall when none is).")
@click.option("--text-field", help="Indexed field queried and matched against the pairs' questions (default: the index's first text field).")
@click.option("--limit", type=int, help="Evaluate at most this many queries.")
@click.option("--concurrency", type=int, default=4, show_default=True, help="Searches sent to the gateway at once.")
@click.option("--hybrid", is_flag=True, help="Also tune the hybrid first stage (BM25 + kNN, index built with --vectors): fusion and BM25 weight, "
                                             "with the rerank fusion chosen on its windows; writes hybrid = false when BM25 + rerank does better.")
@click.option("--embedder", "embed_url", metavar="URL", help="Embedding service for --hybrid (TEI /embed; default: --reranker).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("tune"), show_default=True,
              help="Writes gateway.toml (best settings), tune.png (metric vs weight) and tune.json (every row).")
def tune(engine: str, index: str, reranker: str, dicts: tuple[Path, ...], pairs: Path | None, qrels: Path | None, queries: Path | None,
         config: Path | None, windows: str | None, weights: str | None, rrf_ks: str | None, metric: str, never_worse: bool,
         text_field: str | None, limit: int | None, concurrency: int, hybrid: bool, embed_url: str | None, out_dir: Path) -> None:
    """Measure engine order, augmentation and every fusion × window on labelled queries; write the best.

    Runs the real gateway in-process; each query is reranked once (at the largest window) and every fusion
    is computed from those scores. Example:

        jingpai tune --engine http://127.0.0.1:9200 --index questions --reranker http://127.0.0.1:8081 \\
            --dict dicts/zh --pairs held_out_training_pairs.tsv --out tune-questions

    Tune on labelled queries held out from the model's *training* data, never on the split you report.
    """
    from jingpai.plugin import tune as tuning

    if (pairs is None) == (qrels is None) or (qrels is None) != (queries is None):
        raise click.UsageError("give either --pairs FILE, or --qrels FILE with --queries FILE")
    grid = _grid(windows, weights, rrf_ks)
    base = load_config_file(config) if config is not None else {}
    dicts = dicts or tuple(Path(d) for d in base.get("dict_dirs", ()))  # --dict wins, as for the gateway
    settings = tuning.TuneSettings(
        engine_url=engine, index=index, reranker_url=reranker, dict_dirs=dicts, metric=metric, text_field=text_field,
        limit=limit, concurrency=concurrency, base=base, hybrid=hybrid, embed_url=embed_url, auth=engine_auth(), **grid,
    )
    field, labelled = _labelled(settings, pairs, qrels, queries)
    rows = tuning.run_tune(settings, labelled, text_field=field)
    best = tuning.best_row(rows, settings.metric, never_worse_than="augmented" if never_worse else None)
    n_queries = min(len(labelled), settings.limit or len(labelled))
    _print_table(rows, best, index=index, n_queries=n_queries, metric=settings.metric)
    _write(out_dir, settings, rows, best, n_queries=n_queries, never_worse_than="augmented" if never_worse else None)


__all__ = ["tune"]
