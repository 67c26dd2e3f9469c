"""CLI: ``jingpai plugin …`` — engine integrations that need no gateway: the jingpai OpenSearch plugin's search
pipeline (``jingpai plugin pipeline``, :mod:`jingpai.commands.pipeline`), and (:mod:`jingpai.plugin.native`) an
OpenSearch ML Commons rerank pipeline and an Elasticsearch rerank inference endpoint, all calling ``jingpai serve``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from jingpai.commands.base import JingpaiGroup
from jingpai.commands.options import SHARED_ENGINE_ENV
from jingpai.commands.pipeline import pipeline_cmd
from jingpai.commands.retriever import retriever_cmd
from jingpai.plugin.settings import ENV_PREFIX

if TYPE_CHECKING:
    from jingpai.plugin.native import NativeSettings

ENV = ENV_PREFIX
#: the plugin commands' own name, the shared engine variable, then the gateway's (read before the scheme existed)
_ENGINE_ENV = ["JINGPAI_PLUGIN_ENGINE", SHARED_ENGINE_ENV, f"{ENV}ENGINE"]


def _native_settings(service: str, name: str, fields: str) -> NativeSettings:
    from jingpai.plugin.native import NativeSettings

    try:
        return NativeSettings(service_url=service, name=name, document_fields=tuple(f.strip() for f in fields.split(",") if f.strip()))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


def _install(install: Any, engine: str, settings: NativeSettings) -> None:
    """Run ``install(engine, settings)`` against ``engine`` and print its result."""
    from jingpai.engine.client import EngineConnectionError, connect

    try:
        result = install(connect(engine), settings)
    except EngineConnectionError as exc:  # not (yet) a jingpai error that the command reports
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(result))


@click.group("plugin", cls=JingpaiGroup)
def plugin_group() -> None:
    """Engine integrations (no gateway): the jingpai OpenSearch plugin's pipeline, the jingpai Elasticsearch plugin's retriever,
    ML Commons, ES inference."""


plugin_group.add_command(pipeline_cmd)
plugin_group.add_command(retriever_cmd)


@plugin_group.command("opensearch-pipeline")
@click.option("--engine", envvar=_ENGINE_ENV, required=True, metavar="URL", help="OpenSearch URL (needs ML Commons + neural-search).")
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
    _install(native.install_opensearch_pipeline, engine, settings)


@plugin_group.command("es-inference")
@click.option("--engine", envvar=_ENGINE_ENV, required=True, metavar="URL", help="Elasticsearch >= 8.19 URL (needs x-pack-inference).")
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
    _install(native.install_elasticsearch_inference, engine, settings)


__all__ = ["plugin_group"]
