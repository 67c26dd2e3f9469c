"""CLI: ``jingpai gateway`` (the ``_search`` gateway), ``jingpai tune`` (measure its fusion settings) and
``jingpai plugin …`` (native integrations).

Settings come from, highest first: command-line options, ``JINGPAI_GATEWAY_*`` environment variables,
the ``--config`` file (TOML/JSON, keys = :class:`~jingpai.plugin.settings.GatewaySettings` fields), the
defaults. :func:`build_settings` is the one place that merges them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from jingpai.plugin.settings import GATEWAY_MODES, GatewayConfigError, GatewaySettings, load_config_file
from jingpai.reranker.fusion import FUSION_MODES

logger = logging.getLogger(__name__)

ENV = "JINGPAI_GATEWAY_"

#: CLI parameter name -> settings field
_OPTION_FIELDS: dict[str, str] = {
    "engine": "engine_url",
    "reranker": "reranker_url",
    "host": "host",
    "port": "port",
    "mode": "mode",
    "window": "window",
    "max_window": "max_window",
    "rerank_fields": "rerank_fields",
    "doc_chars": "doc_chars",
    "timeout_ms": "timeout_ms",
    "rerank_concurrency": "rerank_concurrency",
    "msearch_rerank_concurrency": "msearch_rerank_concurrency",
    "expose_internals": "expose_internals",
    "breaker_failures": "breaker_failures",
    "breaker_reset_s": "breaker_reset_s",
    "dicts": "dict_dirs",
    "keywords_top_k": "keywords_top_k",
    "engine_timeout_s": "engine_timeout_s",
    "meta_ttl_s": "meta_ttl_s",
    "fusion": "fusion",
    "fusion_weight": "fusion_weight",
    "rrf_k": "rrf_k",
}


def build_settings(ctx: click.Context, values: dict[str, Any], config: Path | None) -> GatewaySettings:
    """Merge CLI/env values over the config file over the defaults into :class:`GatewaySettings`.

    Raises:
        click.ClickException: a bad config file or setting (the message names it).
    """
    merged: dict[str, Any] = {}
    try:
        if config is not None:
            merged.update(load_config_file(config))
        for param, field_name in _OPTION_FIELDS.items():
            source = ctx.get_parameter_source(param)
            value = values.get(param)
            explicit = source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")
            if explicit or (field_name not in merged and value not in (None, ())):
                merged[field_name] = value
        if isinstance(merged.get("rerank_fields"), str):
            merged["rerank_fields"] = tuple(f.strip() for f in merged["rerank_fields"].split(",") if f.strip())
        if "dict_dirs" in merged:
            merged["dict_dirs"] = tuple(Path(d) for d in merged["dict_dirs"])
        if not merged.get("engine_url"):
            raise click.ClickException(f"no engine URL: pass --engine URL, set {ENV}ENGINE or engine_url in --config")
        return GatewaySettings(**merged)
    except (GatewayConfigError, TypeError) as exc:
        raise click.ClickException(str(exc)) from exc


@click.command("gateway")
@click.option("--engine", envvar=f"{ENV}ENGINE", metavar="URL", help="Elasticsearch/OpenSearch URL requests are forwarded to.")
@click.option("--reranker", envvar=f"{ENV}RERANKER", metavar="URL", help="`jingpai serve` URL (TEI /rerank); omit to disable reranking.")
@click.option("--host", envvar=f"{ENV}HOST", default="127.0.0.1", show_default=True,
              help="Address to bind; loopback by default (0.0.0.0 serves every interface, as in the container).")
@click.option("--port", envvar=f"{ENV}PORT", type=int, default=8080, show_default=True, help="Port clients call instead of the engine's.")
@click.option("--config", "config", envvar=f"{ENV}CONFIG", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML/JSON file of GatewaySettings fields (CLI and env win).")
@click.option("--mode", envvar=f"{ENV}MODE", type=click.Choice(GATEWAY_MODES), default="rerank", show_default=True,
              help="Default behaviour; ?jingpai=off|augment|rerank overrides it per request.")
@click.option("--window", envvar=f"{ENV}WINDOW", type=int, default=GatewaySettings.window, show_default=True,
              help="Top engine hits reranked; pages past them continue in the engine's order.")
@click.option("--max-window", envvar=f"{ENV}MAX_WINDOW", type=int, default=500, show_default=True,
              help="Requests with from+size beyond this are not reranked.")
@click.option("--rerank-fields", envvar=f"{ENV}RERANK_FIELDS", metavar="F1,F2",
              help="Document fields sent to the reranker (default: the index's text fields).")
@click.option("--doc-chars", envvar=f"{ENV}DOC_CHARS", type=int, default=512, show_default=True, help="Characters of each document sent.")
@click.option("--timeout-ms", envvar=f"{ENV}TIMEOUT_MS", type=int, default=GatewaySettings.timeout_ms, show_default=True,
              help="Reranker timeout; on timeout the engine order is served (reason reranker_timeout).")
@click.option("--rerank-concurrency", envvar=f"{ENV}RERANK_CONCURRENCY", type=int, default=GatewaySettings.rerank_concurrency,
              show_default=True, help="Reranker calls in flight at once, gateway-wide (a search waits timeout-ms for a slot).")
@click.option("--msearch-rerank-concurrency", envvar=f"{ENV}MSEARCH_RERANK_CONCURRENCY", type=int,
              default=GatewaySettings.msearch_rerank_concurrency, show_default=True,
              help="Reranker calls in flight at once for one _msearch request.")
@click.option("--expose-internals/--no-expose-internals", envvar=f"{ENV}EXPOSE_INTERNALS", default=GatewaySettings.expose_internals,
              show_default=True, help="Show engine/reranker URLs in /_jingpai/health and error bodies.")
@click.option("--breaker-failures", envvar=f"{ENV}BREAKER_FAILURES", type=int, default=3, show_default=True,
              help="Consecutive reranker failures that open the circuit breaker.")
@click.option("--breaker-reset-s", envvar=f"{ENV}BREAKER_RESET_S", type=float, default=10.0, show_default=True,
              help="Seconds an open breaker waits before a probe request.")
@click.option("--dict", "dicts", envvar=f"{ENV}DICT", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Keyword dictionary directory (repeatable); an index uses the one matching its dictionary version.")
@click.option("--keywords-top-k", envvar=f"{ENV}KEYWORDS_TOP_K", type=int, default=10, show_default=True,
              help="Dictionary keywords of a query added to its augmented search.")
@click.option("--engine-timeout-s", envvar=f"{ENV}ENGINE_TIMEOUT_S", type=float, default=120.0, show_default=True,
              help="Seconds a request to the engine may take before the gateway answers 504.")
@click.option("--meta-ttl-s", envvar=f"{ENV}META_TTL_S", type=float, default=30.0, show_default=True,
              help="Seconds an index's field roles / dictionary version are cached.")
@click.option("--fusion", envvar=f"{ENV}FUSION", type=click.Choice(FUSION_MODES), default=GatewaySettings.fusion, show_default=True,
              help="How engine and model scores combine; per index: the indices table of --config.")
@click.option("--fusion-weight", envvar=f"{ENV}FUSION_WEIGHT", type=float, default=GatewaySettings.fusion_weight, show_default=True,
              help="The engine's weight in [0, 1] for linear/rrf fusion (the model's is 1 - w).")
@click.option("--rrf-k", envvar=f"{ENV}RRF_K", type=int, default=GatewaySettings.rrf_k, show_default=True, help="RRF constant k.")
@click.pass_context
def gateway(ctx: click.Context, config: Path | None, **values: Any) -> None:
    """Serve the engine's REST API with keyword augmentation and reranking of _search / _msearch.

    Point an Elasticsearch/OpenSearch client at http://HOST:PORT instead of the engine; everything
    other than searches on jingpai indices passes through unchanged.
    """
    import uvicorn

    from jingpai.plugin.gateway import create_app

    settings = build_settings(ctx, values, config)
    try:
        app = create_app(settings)
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"cannot start the gateway: {exc}") from exc
    click.echo(
        f"jingpai gateway on http://{settings.host}:{settings.port} → engine {settings.engine_url}, "
        f"reranker {settings.reranker_url or '(none)'}, mode {settings.mode}, window {settings.window}",
        err=True,
    )
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", http=app.state.http_protocol)


def setting_hint(field_name: str) -> str:
    """Where an operator sets ``field_name``: its ``jingpai gateway`` option, environment variable and
    config-file key, read off the command itself so log messages never name an option that does not exist.

    >>> setting_hint("timeout_ms")
    '--timeout-ms (env JINGPAI_GATEWAY_TIMEOUT_MS, config key timeout_ms)'
    """
    for param in gateway.params:
        if isinstance(param, click.Option) and _OPTION_FIELDS.get(param.name or "") == field_name:
            return f"{param.opts[0]} (env {param.envvar}, config key {field_name})"
    return f"config key {field_name}"


def _csv(kind: type, text: str | None, option: str) -> tuple | None:
    if text is None:
        return None
    try:
        return tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise click.BadParameter(f"expected comma-separated {kind.__name__}s, got {text!r}", param_hint=option) from exc


@click.command("tune")
@click.option("--engine", envvar=f"{ENV}ENGINE", required=True, metavar="URL", help="Elasticsearch/OpenSearch holding the index.")
@click.option("--index", "index", required=True, help="The jingpai index (or alias) to search.")
@click.option("--reranker", envvar=f"{ENV}RERANKER", required=True, metavar="URL", help="`jingpai serve` URL.")
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
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("tune"), show_default=True,
              help="Writes gateway.toml (best settings), tune.png (metric vs weight) and tune.json (every row).")
def tune(engine: str, index: str, reranker: str, dicts: tuple[Path, ...], pairs: Path | None, qrels: Path | None, queries: Path | None,
         config: Path | None, windows: str | None, weights: str | None, rrf_ks: str | None, metric: str, never_worse: bool,
         text_field: str | None, limit: int | None, concurrency: int, out_dir: Path) -> None:
    """Measure engine order, augmentation and every fusion × window on labelled queries; write the best.

    Runs the real gateway in-process; each query is reranked once (at the largest window) and every fusion
    is computed from those scores. Example:

        jingpai tune --engine http://127.0.0.1:9200 --index questions --reranker http://127.0.0.1:8081 \\
            --dict dicts/zh --pairs held_out_training_pairs.tsv --out tune-questions

    Tune on labelled queries held out from the model's *training* data, never on the split you report.
    """
    from rich.console import Console
    from rich.table import Table

    from jingpai.engine.client import EngineConnectionError, connect
    from jingpai.indexer.mapping import NotAJingpaiIndexError, read_meta
    from jingpai.plugin import tune as tuning
    from jingpai.plugin import tune_output

    if (pairs is None) == (qrels is None) or (qrels is None) != (queries is None):
        raise click.UsageError("give either --pairs FILE, or --qrels FILE with --queries FILE")
    grid = {
        name: value for name, value in (
            ("windows", _csv(int, windows, "--windows")), ("weights", _csv(float, weights, "--weights")), ("rrf_ks", _csv(int, rrf_ks, "--rrf-k")),
        ) if value is not None
    }
    try:
        base = load_config_file(config) if config is not None else {}
        dicts = dicts or tuple(Path(d) for d in base.get("dict_dirs", ()))  # --dict wins, as for the gateway
        settings = tuning.TuneSettings(
            engine_url=engine, index=index, reranker_url=reranker, dict_dirs=dicts, metric=metric, text_field=text_field,
            limit=limit, concurrency=concurrency, base=base, **grid,
        )
        client = connect(engine)
        field = text_field or read_meta(client, index).text_fields[0]
        labelled = tuning.queries_from_pairs(client, index, pairs, text_field=field) if pairs else tuning.queries_from_trec(qrels, queries)
        rows = tuning.run_tune(settings, labelled, text_field=field)
    except (tuning.TuneError, GatewayConfigError, EngineConnectionError, NotAJingpaiIndexError) as exc:
        raise click.ClickException(str(exc)) from exc
    best = tuning.best_row(rows, metric, never_worse_than="augmented" if never_worse else None)
    n_queries = min(len(labelled), limit or len(labelled))

    table = Table(title=f"jingpai tune — {index}, {n_queries} queries (best {metric} in bold)")
    for name in ("fusion", "window", "engine w", "rrf k", *tuning.METRICS):
        table.add_column(name, justify="left" if name == "fusion" else "right")
    for row in rows:
        cells = [row.fusion, "" if row.window is None else str(row.window), "" if row.weight is None else f"{row.weight:g}",
                 "" if row.rrf_k is None else str(row.rrf_k), *(f"{row.metrics[m]:.4f}" for m in tuning.METRICS)]
        table.add_row(*cells, style="bold" if row == best else None)
    console = Console()
    # piped or captured output defaults to 80 columns, which would squeeze the metric columns into ellipses
    Console(width=max(console.width, 130)).print(table)

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gateway.toml").write_text(tune_output.settings_file(settings, best, queries=n_queries), encoding="utf-8")
    (out_dir / "tune.json").write_text(json.dumps([
        {"fusion": r.fusion, "window": r.window, "weight": r.weight, "rrf_k": r.rrf_k, **r.metrics} for r in rows
    ], indent=1), encoding="utf-8")
    tune_output.plot(rows, out_dir / "tune.png", metric=metric)
    click.echo(f"best {metric}: {best.label()} ({best.metrics[metric]:.4f}); wrote {out_dir / 'gateway.toml'} "
               f"(jingpai gateway --config {out_dir / 'gateway.toml'}), {out_dir / 'tune.png'}, {out_dir / 'tune.json'}")


@click.group("plugin")
def plugin_group() -> None:
    """Native engine integrations (no gateway): OpenSearch rerank pipeline, Elasticsearch inference endpoint."""


@plugin_group.command("opensearch-pipeline")
@click.option("--engine", envvar=f"{ENV}ENGINE", required=True, metavar="URL", help="OpenSearch URL (needs ML Commons + neural-search).")
@click.option("--service", required=True, metavar="URL", help="`jingpai serve` URL as OpenSearch reaches it.")
@click.option("--name", default="jingpai-rerank", show_default=True, help="Connector, model and pipeline name.")
@click.option("--fields", default="title,content", show_default=True, help="Document fields sent to the reranker.")
@click.option("--print-only", is_flag=True, help="Print the request bodies instead of creating them.")
def opensearch_pipeline_cmd(engine: str, service: str, name: str, fields: str, print_only: bool) -> None:
    """Create an ML Commons connector + remote model + `rerank` search pipeline pointing at jingpai serve."""
    from jingpai.plugin import native

    settings = _native_settings(service, name, fields)
    if print_only:
        click.echo(json.dumps({
            "connector": native.opensearch_connector(settings),
            "model": native.opensearch_model(settings, "<connector_id>"),
            "pipeline": native.opensearch_pipeline(settings, "<model_id>"),
        }, ensure_ascii=False, indent=2))
        return
    from jingpai.engine.client import EngineConnectionError, connect

    try:
        result = native.install_opensearch_pipeline(connect(engine), settings)
    except (native.NativeIntegrationError, EngineConnectionError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(result))


@plugin_group.command("es-inference")
@click.option("--engine", envvar=f"{ENV}ENGINE", required=True, metavar="URL", help="Elasticsearch >= 8.19 URL (needs x-pack-inference).")
@click.option("--service", required=True, metavar="URL", help="`jingpai serve` URL as Elasticsearch reaches it.")
@click.option("--name", default="jingpai-rerank", show_default=True, help="Inference endpoint id.")
@click.option("--print-only", is_flag=True, help="Print the request body instead of creating it.")
def es_inference_cmd(engine: str, service: str, name: str, print_only: bool) -> None:
    """Create a `custom` rerank inference endpoint pointing at jingpai serve (for text_similarity_reranker)."""
    from jingpai.plugin import native

    settings = _native_settings(service, name, "title,content")
    if print_only:
        click.echo(json.dumps(native.elasticsearch_inference_endpoint(settings), ensure_ascii=False, indent=2))
        return
    from jingpai.engine.client import EngineConnectionError, connect

    try:
        result = native.install_elasticsearch_inference(connect(engine), settings)
    except (native.NativeIntegrationError, EngineConnectionError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(result))


def _native_settings(service: str, name: str, fields: str):
    from jingpai.plugin.native import NativeSettings

    try:
        return NativeSettings(service_url=service, name=name, document_fields=tuple(f.strip() for f in fields.split(",") if f.strip()))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


__all__ = ["build_settings", "gateway", "plugin_group", "setting_hint", "tune"]
