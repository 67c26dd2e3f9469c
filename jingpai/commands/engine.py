"""``jingpai engine up|down|status``: a local loopback Elasticsearch/OpenSearch node."""

from __future__ import annotations

from pathlib import Path

import click

from jingpai.engine.harness import ENGINE_KINDS, EngineError, EngineSettings, run_dir, running, start, status, stop

_kind = click.option(
    "--kind", type=click.Choice(ENGINE_KINDS), default="opensearch", show_default=True, help="Which engine."
)
_version = click.option("--version", "version", default=None, help="Distribution version (default: the tested one).")
_port = click.option("--port", type=int, default=None, help="HTTP port on 127.0.0.1 (default 9200 OpenSearch, 9201 Elasticsearch).")
_cache = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    envvar="JINGPAI_CACHE_DIR",
    help="Cache for distributions and node data [env JINGPAI_CACHE_DIR].",
)


@click.group()
def engine() -> None:
    """Start, stop and inspect a local Elasticsearch/OpenSearch node (loopback only)."""


def _settings(kind: str, version: str | None, port: int | None, cache_dir: Path | None, **extra) -> EngineSettings:
    return EngineSettings(kind=kind, version=version, port=port, cache_dir=cache_dir / "engines" if cache_dir else None, **extra)


@engine.command()
@_kind
@_version
@_port
@_cache
@click.option("--heap", default="512m", show_default=True, help="JVM heap size.")
def up(kind: str, version: str | None, port: int | None, cache_dir: Path | None, heap: str) -> None:
    """Download (once), configure and start a node; print its URL."""
    settings = _settings(kind, version, port, cache_dir, heap=heap)
    click.echo(f"starting {kind} {settings.resolved_version} on {settings.url} …", err=True)
    try:
        node = start(settings)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{node.kind} {node.version} ready (pid {node.pid}, log {node.log_file})", err=True)
    click.echo(node.url)


def _ports(nodes) -> str:
    return ", ".join(str(n.port) for n in nodes)


@engine.command()
@_kind
@_port
@_cache
@click.option("--all", "all_nodes", is_flag=True, help="Without --port: stop every running node of this kind.")
@click.option("--purge", is_flag=True, help="Also delete the node's data and logs.")
def down(kind: str, port: int | None, cache_dir: Path | None, all_nodes: bool, purge: bool) -> None:
    """Stop a node that `jingpai engine up` started: the one on --port, else the one of --kind that runs."""
    engines_dir = cache_dir / "engines" if cache_dir else None
    if port is not None:
        if all_nodes:
            raise click.UsageError("--all stops every node of a kind; leave out --port with it")
        settings = _settings(kind, None, port, cache_dir)
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
        stop(_settings(kind, None, node.port, cache_dir), purge=purge)
        click.echo(f"stopped {kind} on {node.url}")


@engine.command(name="status")
@_cache
def status_cmd(cache_dir: Path | None) -> None:
    """List the nodes this harness started, on any port, and whether they run."""
    engines_dir = cache_dir / "engines" if cache_dir else None
    nodes = status(engines_dir)
    if not nodes:
        click.echo(f"no nodes recorded under {run_dir(engines_dir)}")
    for node in nodes:
        state = "running" if node.alive else "stopped"
        click.echo(f"{node.kind:<14} {node.version:<9} port {node.port:<6} {state:<8} pid {node.pid:<8} {node.url}  log {node.log_file}")
