"""``jingpai engine up|down|status``: a local loopback Elasticsearch/OpenSearch node.

Options are generated from :class:`~jingpai.engine.harness.EngineSettings`; the harness's
:class:`~jingpai.engine.harness.EngineError` ends as one ``Error: …`` line (:class:`JingpaiGroup`).
"""

from __future__ import annotations

from pathlib import Path

import click

from jingpai.commands.base import JingpaiGroup
from jingpai.commands.options import Opt, settings_from, settings_options
from jingpai.engine.settings import (
    KNN_PLUGIN_VERSIONS, MODULE_NAMES, PLUGIN_NAMES, SECURITY_DEFAULT_VERSION, SECURITY_PLUGIN_VERSIONS, EngineSettings,
)

#: how EngineSettings' fields look on the command line (env ``JINGPAI_ENGINE_*``)
NODE_OPTIONS: dict[str, Opt] = {
    "kind": Opt(help="Which engine."),
    "version": Opt(help="Distribution version (default: the tested one)."),
    "port": Opt(help="HTTP port on 127.0.0.1 (default 9200 OpenSearch, 9201 Elasticsearch)."),
}
HEAP_OPTIONS: dict[str, Opt] = {
    "heap": Opt(help="JVM heap size."),
    "modules": Opt(
        csv=True,
        metavar="NAME,…",
        help=f"OpenSearch only: modules to add from Maven Central ({', '.join(MODULE_NAMES)}); "
        "Elasticsearch 8.19's are not published there.",
    ),
    "plugins": Opt(
        csv=True,
        metavar="NAME,…",
        help=f"Plugins to install (OpenSearch: {', '.join(PLUGIN_NAMES)}; Elasticsearch: jingpai). knn: k-NN from Maven Central, for "
        f"`jingpai index --vectors` (pinned OpenSearch versions {', '.join(KNN_PLUGIN_VERSIONS)}); jingpai: on OpenSearch the "
        "jingpai_keywords / jingpai_rerank search-pipeline processors, built with `mvn` from java/opensearch-plugin "
        "(or JINGPAI_OPENSEARCH_PLUGIN_SRC) for `jingpai plugin pipeline`; on Elasticsearch the jingpai retriever, built from "
        "java/elasticsearch-plugin (or JINGPAI_ELASTICSEARCH_PLUGIN_SRC) for `jingpai plugin retriever`; security: the OpenSearch security plugin (TLS with a CA made locally, an "
        f"admin user; OpenSearch {', '.join(SECURITY_PLUGIN_VERSIONS)} only, {SECURITY_DEFAULT_VERSION} without --version).",
    ),
}
_kind_port = {name: NODE_OPTIONS[name] for name in ("kind", "port")}

# not generated from EngineSettings.cache_dir: the option names the cache's parent (the engines live in
# its engines/ folder) and it reads JINGPAI_CACHE_DIR, the cache variable of all of jingpai
_cache = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    envvar="JINGPAI_CACHE_DIR",
    help="Cache for distributions and node data [env JINGPAI_CACHE_DIR].",
)


@click.group(cls=JingpaiGroup)
def engine() -> None:
    """Start, stop and inspect a local Elasticsearch/OpenSearch node (loopback only)."""


def _engines_dir(cache_dir: Path | None) -> Path | None:
    return cache_dir / "engines" if cache_dir else None


def _harness():  # noqa: ANN202 - the harness module
    # imported when a command runs: the node module loads httpx, which `jingpai engine --help` must not pay for
    from jingpai.engine import harness

    return harness


@engine.command()
@settings_options("engine", EngineSettings, NODE_OPTIONS)
@_cache
@settings_options("engine", EngineSettings, HEAP_OPTIONS)
def up(cache_dir: Path | None, **values) -> None:
    """Download (once), configure and start a node; print its URL."""
    settings = settings_from(EngineSettings, values, {**NODE_OPTIONS, **HEAP_OPTIONS}, cache_dir=_engines_dir(cache_dir))
    with_modules = f" with modules {', '.join(settings.modules)}" if settings.modules else ""
    with_modules += f"{' and' if settings.modules else ' with'} plugins {', '.join(settings.plugins)}" if settings.plugins else ""
    click.echo(f"starting {settings.kind} {settings.resolved_version}{with_modules} on {settings.url} …", err=True)
    node = _harness().start(settings)
    click.echo(f"{node.kind} {node.version} ready (pid {node.pid}, log {node.log_file})", err=True)
    security = node.extra.get("security")
    if security:
        click.echo(f"secured: TLS with the CA {security['ca_file']} (pass it as --engine-ca-file / JINGPAI_ENGINE_CA_FILE), "
                   f"user {security['admin_user']}, password in {security['admin_password_file']}; create users and roles "
                   "with the security REST API (jingpai.engine.security.SecurityAdmin, docs/security.md)", err=True)
    click.echo(node.url)


def _ports(nodes) -> str:
    return ", ".join(str(n.port) for n in nodes)


@engine.command()
@settings_options("engine", EngineSettings, _kind_port)
@_cache
@click.option("--all", "all_nodes", is_flag=True, help="Without --port: stop every running node of this kind.")
@click.option("--purge", is_flag=True, help="Also delete the node's data and logs.")
def down(kind: str, port: int | None, cache_dir: Path | None, all_nodes: bool, purge: bool) -> None:
    """Stop a node that `jingpai engine up` started: the one on --port, else the one of --kind that runs."""
    engines_dir = _engines_dir(cache_dir)
    stop, running, run_dir = _harness().stop, _harness().running, _harness().run_dir
    if port is not None:
        if all_nodes:
            raise click.UsageError("--all stops every node of a kind; leave out --port with it")
        settings = EngineSettings(kind=kind, port=port, cache_dir=engines_dir)  # type: ignore[arg-type]
        if stop(settings, purge=purge):
            click.echo(f"stopped {kind} on {settings.url}")
            return
        others = running(kind, engines_dir)  # type: ignore[arg-type]
        hint = f"; {kind} runs on port(s) {_ports(others)}: pass one of them with --port" if others else ""
        click.echo(f"no running {kind} node on {settings.url}{hint}")
        return
    nodes = running(kind, engines_dir)  # type: ignore[arg-type]
    if not nodes:
        click.echo(f"no running {kind} node (none of the nodes recorded under {run_dir(engines_dir)} runs)")
        return
    if len(nodes) > 1 and not all_nodes:
        raise click.ClickException(
            f"{len(nodes)} {kind} nodes run, on ports {_ports(nodes)}; choose one with --port or stop them all with --all"
        )
    for node in nodes:
        stop(EngineSettings(kind=kind, port=node.port, cache_dir=engines_dir), purge=purge)  # type: ignore[arg-type]
        click.echo(f"stopped {kind} on {node.url}")


@engine.command(name="status")
@_cache
def status_cmd(cache_dir: Path | None) -> None:
    """List the nodes this harness started, on any port, and whether they run."""
    engines_dir = _engines_dir(cache_dir)
    nodes = _harness().status(engines_dir)
    if not nodes:
        click.echo(f"no nodes recorded under {_harness().run_dir(engines_dir)}")
    for node in nodes:
        state = "running" if node.alive else "stopped"
        modules = f"  modules {','.join(node.modules)}" if node.modules else ""
        modules += f"  plugins {','.join(node.plugins)}" if node.plugins else ""
        click.echo(
            f"{node.kind:<14} {node.version:<9} port {node.port:<6} {state:<8} pid {node.pid:<8} {node.url}  "
            f"log {node.log_file}{modules}"
        )
