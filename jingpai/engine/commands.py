"""``jingpai engine up|down|status``: a local loopback Elasticsearch/OpenSearch node."""

from __future__ import annotations

from pathlib import Path

import click

from jingpai.engine.harness import ENGINE_KINDS, EngineError, EngineSettings, start, status, stop

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


@engine.command()
@_kind
@_port
@_cache
@click.option("--purge", is_flag=True, help="Also delete the node's data and logs.")
def down(kind: str, port: int | None, cache_dir: Path | None, purge: bool) -> None:
    """Stop the node that `jingpai engine up` started."""
    settings = _settings(kind, None, port, cache_dir)
    if stop(settings, purge=purge):
        click.echo(f"stopped {kind} on {settings.url}")
    else:
        click.echo(f"no running {kind} node on {settings.url}")


@engine.command(name="status")
@_cache
def status_cmd(cache_dir: Path | None) -> None:
    """List the nodes this harness started and whether they run."""
    nodes = status(cache_dir / "engines" if cache_dir else None)
    if not nodes:
        click.echo("no nodes recorded")
    for node in nodes:
        state = "running" if node.alive else "stopped"
        click.echo(f"{node.kind:<14} {node.version:<9} {node.url:<24} {state:<8} pid {node.pid}  log {node.log_file}")
