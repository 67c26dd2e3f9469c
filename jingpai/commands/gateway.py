"""CLI: ``jingpai gateway`` (the ``_search`` gateway, :mod:`jingpai.plugin.gateway`).

Settings come from, highest first: command-line options, ``JINGPAI_GATEWAY_*`` environment variables,
the ``--config`` file (TOML/JSON, keys = :class:`~jingpai.plugin.settings.GatewaySettings` fields), the
defaults. The options are generated from the settings dataclass (:mod:`jingpai.commands.options`; their
flags are :data:`~jingpai.plugin.settings.CLI_FLAGS`) and :func:`build_settings` is the one place that
merges the four. ``--ui`` adds the demo UI (:mod:`jingpai.ui.app`), which the gateway does not serve itself.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import click

from jingpai.commands.base import JingpaiCommand
from jingpai.commands.options import Opt, cli_values, settings_options
from jingpai.plugin.settings import CLI_FLAGS, ENV_PREFIX, GatewayConfigError, GatewaySettings, load_config_file, setting_hint

logger = logging.getLogger(__name__)

ENV = ENV_PREFIX


def _flagged(spec: dict[str, Opt]) -> dict[str, Opt]:
    """``spec`` with each option's flag from :data:`CLI_FLAGS`, the names :func:`setting_hint` gives operators."""
    return {name: dataclasses.replace(opt, flag=CLI_FLAGS[name]) for name, opt in spec.items()}


#: the options before ``--config`` in ``--help``: where the gateway listens and what it talks to
_CONNECT: dict[str, Opt] = _flagged({
    "engine_url": Opt(metavar="URL", help="Elasticsearch/OpenSearch URL requests are forwarded to."),
    "engine_ca_file": Opt(type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE",
                          help="PEM file of the CA that signed an https:// engine's certificate (default: the system's CAs). The gateway "
                               "has no engine credentials: each request goes on with the client's own."),
    "reranker_url": Opt(metavar="URL", help="`jingpai serve` URL (TEI /rerank); omit to disable reranking."),
    "host": Opt(help="Address to bind; loopback by default (0.0.0.0 serves every interface, as in the container)."),
    "port": Opt(help="Port clients call instead of the engine's."),
})
#: the options after ``--config``: how searches are augmented and reranked
_BEHAVIOUR: dict[str, Opt] = _flagged({
    "mode": Opt(help="Default behaviour; ?jingpai=off|augment|rerank overrides it per request."),
    "window": Opt(help="Top engine hits reranked; pages past them continue in the engine's order."),
    "max_window": Opt(help="Requests with from+size beyond this are not reranked."),
    "rerank_fields": Opt(csv=True, metavar="F1,F2", help="Document fields sent to the reranker (default: the index's text fields)."),
    "doc_chars": Opt(help="Characters of each document sent."),
    "timeout_ms": Opt(help="Deadline of a whole reranker call; past it the engine order is served (reason reranker_timeout)."),
    "max_answer_bytes": Opt(help="Largest reranker/embedder answer read; a larger one fails open (reason reranker_bad_response)."),
    "rerank_concurrency": Opt(help="Reranker calls in flight at once, gateway-wide (a search waits timeout-ms for a slot)."),
    "msearch_rerank_concurrency": Opt(help="Reranker calls in flight at once for one _msearch request."),
    "expose_internals": Opt(help="Show engine/reranker URLs in /_jingpai/health and error bodies."),
    "breaker_failures": Opt(help="Consecutive reranker failures that open the circuit breaker."),
    "breaker_reset_s": Opt(help="Seconds an open breaker waits before a probe request."),
    "dict_dirs": Opt(multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
                     help="Keyword dictionary directory (repeatable); an index uses the one matching its dictionary version."),
    "dict_root": Opt(type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR",
                     help="Directory of `jingpai dict build --out` directories; a version an index needs is loaded from it on first use "
                          "(POST /_jingpai/reload rescans it)."),
    "keywords_top_k": Opt(help="Dictionary keywords of a query added to its augmented search."),
    "engine_timeout_s": Opt(help="Seconds a request to the engine may take before the gateway answers 504."),
    "max_body_depth": Opt(help="Deepest nesting of a JSON body (or NDJSON line: _bulk, _msearch) forwarded; deeper ones get a 400."),
    "meta_ttl_s": Opt(help="Seconds an index's field roles / dictionary version are cached."),
    "fusion": Opt(help="How engine and model scores combine; per index: the indices table of --config."),
    "fusion_weight": Opt(help="The engine's weight in [0, 1] for linear/rrf fusion (the model's is 1 - w)."),
    "rrf_k": Opt(help="RRF constant k."),
    "embed_url": Opt(metavar="URL", help="Embedding service (TEI /embed: `jingpai serve` with use-bi) for hybrid search (default: --reranker)."),
    "embed_timeout_ms": Opt(help="Deadline of a whole embedding call; past it BM25 alone is served (jingpai.hybrid.reason embed_timeout)."),
    "hybrid": Opt(help="On indices with vectors (index --vectors), also run the query as kNN and fuse both lists before reranking."),
    "hybrid_fusion": Opt(help="rrf or linear fusion of the BM25 and kNN lists; per index: the indices table of --config."),
    "hybrid_weight": Opt(help="BM25's weight in [0, 1] in the hybrid fusion (kNN's is 1 - w)."),
    "hybrid_k": Opt(help="Neighbours the kNN search asks for (default: as deep as the BM25 list)."),
    "hybrid_rrf_k": Opt(help="RRF constant k of the hybrid fusion."),
    "hybrid_rerank_window": Opt(help="fused: rerank the fused list's top --window; both: every hit in the top --window of either list "
                                     "(up to 2x the work; the reranker sees all BM25 + rerank would have seen)."),
})
#: GatewaySettings field -> how its option looks (defaults and types come from GatewaySettings)
SPEC: dict[str, Opt] = {**_CONNECT, **_BEHAVIOUR}

#: CLI parameter name -> settings field (the parameters are named after the fields)
_OPTION_FIELDS: dict[str, str] = {name: name for name in SPEC}


def build_settings(ctx: click.Context, values: dict[str, Any], config: Path | None) -> GatewaySettings:
    """Merge CLI/env values over the config file over the defaults into :class:`GatewaySettings`.

    A value given on the command line or in the environment always wins; an option's default fills a
    field only where the config file does not set it.

    Raises:
        click.ClickException: a bad config file or setting (the message names it).
    """
    try:
        merged: dict[str, Any] = load_config_file(config) if config is not None else {}
        for name, value in cli_values(values, SPEC).items():
            source = ctx.get_parameter_source(name)
            explicit = source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")
            if explicit or (name not in merged and value != ()):
                merged[name] = value
        if isinstance(merged.get("rerank_fields"), str):
            merged["rerank_fields"] = tuple(f.strip() for f in merged["rerank_fields"].split(",") if f.strip())
        if not merged.get("engine_url"):
            raise click.ClickException(f"no engine URL: pass --engine URL, set {ENV}ENGINE or engine_url in --config")
        return GatewaySettings(**merged)
    except (GatewayConfigError, TypeError) as exc:
        raise click.ClickException(str(exc)) from exc


@click.command("gateway", cls=JingpaiCommand)
@settings_options("gateway", GatewaySettings, _CONNECT)
@click.option("--config", "config", envvar=f"{ENV}CONFIG", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML/JSON file of GatewaySettings fields (CLI and env win).")
@settings_options("gateway", GatewaySettings, _BEHAVIOUR)
@click.option("--ui", is_flag=True, envvar=f"{ENV}UI", help="Also serve the demo UI at /_jingpai/ui/ (engine order next to jingpai order; "
              "anyone who can reach the gateway can use it).")
@click.pass_context
def gateway(ctx: click.Context, config: Path | None, ui: bool, **values: Any) -> None:
    """Serve the engine's REST API with keyword augmentation and reranking of _search / _msearch.

    Point an Elasticsearch/OpenSearch client at http://HOST:PORT instead of the engine; everything
    other than searches on jingpai indices passes through unchanged.
    """
    import uvicorn

    from jingpai.plugin.gateway import create_app

    settings = build_settings(ctx, values, config)
    routes = []
    if ui:
        from jingpai.ui.app import ui_routes

        routes = ui_routes()
    try:
        app = create_app(settings, routes=routes)
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"cannot start the gateway: {exc}") from exc
    click.echo(
        f"jingpai gateway on http://{settings.host}:{settings.port} → engine {settings.engine_url}, "
        f"reranker {settings.reranker_url or '(none)'}, mode {settings.mode}, window {settings.window}"
        + (f", UI at http://{settings.host}:{settings.port}/_jingpai/ui/" if ui else ""),
        err=True,
    )
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
                http=app.state.http_protocol)


__all__ = ["SPEC", "build_settings", "gateway", "setting_hint"]
