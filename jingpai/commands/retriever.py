"""CLI: ``jingpai plugin retriever`` — the Elasticsearch plugin's ``jingpai`` retriever for one jingpai index.

The jingpai Elasticsearch plugin (``java/elasticsearch-plugin``, docs/elasticsearch-plugin.md) augments and reranks
inside the node, as a retriever. This command makes it do for one index what the gateway does:

- the dictionary the index was built with (``--dict``, checked against the index's ``_meta`` version, as
  ``jingpai plugin pipeline`` checks it) is uploaded **once** as one document of the hidden index
  ``jingpai-dictionaries`` (``--dictionary-index``): the segmenter's base dictionary (jieba's ``dict.txt``, the
  gateway segmenter's), the dictionary's weights and its user dictionary — the OpenSearch pipeline's inline form.
  Its ``version`` is a hash of that content: a node loads a version on the first search that names it and keeps
  it, and a new upload is a new version, named by the retriever this command prints then;
- it prints the retriever to send as a search's ``retriever`` (or ``"query"`` replaced by it): the index's roles
  from its ``_meta.jingpai`` as the gateway's QueryRewriter reads them, the gateway's boosts, the reranker, the
  window, the fusion and the gateway's other defaults, with the index's text fields as the fields sent to the
  reranker; the inner retriever is a ``standard`` one with an example query on the text fields — put the search's
  own query there. ``--mode augment`` prints a retriever that augments alone (no reranker).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from jingpai.commands.base import JingpaiCommand
from jingpai.commands.pipeline import PipelineError, PluginMissingError, _dictionary, _meta, inline_dictionary, keyword_roles
from jingpai.commands.plugin_options import WHEN_GIVEN, plugin_options, plugin_settings

if TYPE_CHECKING:
    from jingpai.engine.client import Engine
    from jingpai.indexer.mapping import IndexMeta
    from jingpai.plugin.settings import GatewaySettings

PLUGIN_NAME = "jingpai"
#: where the dictionaries are uploaded (hidden: not matched by ``*``)
DICTIONARY_INDEX = "jingpai-dictionaries"
_INSTALL_HINT = ("start a node with it (`jingpai engine up --kind elasticsearch --plugins jingpai`) or install it on yours "
                 "(`bin/elasticsearch-plugin install file:///…/jingpai-elasticsearch-<version>.zip`, then restart the node)")


def require_retriever_plugin(engine: Engine) -> None:
    """Raise :class:`PluginMissingError` unless ``engine`` is Elasticsearch with the jingpai plugin loaded."""
    if engine.kind != "elasticsearch":
        raise PluginMissingError(f"{engine.url} is {engine.kind} {engine.version}: the jingpai retriever is an Elasticsearch plugin; "
                                 "on OpenSearch use its search pipeline (`jingpai plugin pipeline`)")
    if PLUGIN_NAME not in engine.modules():
        raise PluginMissingError(f"Elasticsearch {engine.version} at {engine.url} has no jingpai plugin: {_INSTALL_HINT}")


def dictionary_document(inline: dict[str, Any], *, index: str, dict_version: str | None) -> dict[str, Any]:
    """The uploaded document: the inline dictionary and its content hash as ``version``."""
    digest = hashlib.sha256(json.dumps(inline, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    return {"version": digest, "index": index, "dict_version": dict_version, "dictionary": inline}


def keywords_settings(meta: IndexMeta, settings: GatewaySettings, *, dictionary_index: str, doc_id: str, version: str) -> dict[str, Any]:
    """The retriever's ``keywords``: the roles the gateway's QueryRewriter reads, its boosts, the uploaded dictionary."""
    return {"dictionary": {"index": dictionary_index, "id": doc_id, "version": version}, **keyword_roles(meta, settings)}


def retriever_body(meta: IndexMeta, settings: GatewaySettings, keywords: dict[str, Any], *, inner: dict[str, Any] | None = None,
                   given: Sequence[str] = (), mode: str = "rerank") -> dict[str, Any]:
    """The ``jingpai`` retriever over ``inner`` (default: a ``standard`` one with an example multi_match on the text
    fields); ``given``: the settings of :data:`WHEN_GIVEN` also written (the retriever's defaults are the gateway's)."""
    if inner is None:
        inner = {"standard": {"query": {"multi_match": {"query": "<the search's text>", "fields": list(meta.text_fields)}}}}
    body: dict[str, Any] = {"retriever": inner, "mode": mode, "keywords": keywords}
    if mode == "rerank":
        fusion = settings.fusion_for(None)
        body.update({
            "reranker_url": settings.reranker_url,
            "fields": list(settings.rerank_fields or meta.text_fields),
            "rank_window_size": settings.window,
            "max_window": settings.max_window,
            "doc_chars": settings.doc_chars,
            "timeout_ms": settings.timeout_ms,
            "fusion": fusion.mode,
            "fusion_weight": fusion.weight,
            "rrf_k": fusion.rrf_k,
        })
        body.update({name: getattr(settings, name) for name in WHEN_GIVEN if name in given})
    return {"jingpai": body}


def upload_dictionary(engine: Engine, document: dict[str, Any], *, dictionary_index: str, doc_id: str) -> bool:
    """Put ``document`` at ``dictionary_index/doc_id`` unless that version is there already; whether it was written."""
    if not engine.index_exists(dictionary_index):
        engine.create_index(dictionary_index, settings={"index.hidden": True, "number_of_shards": 1, "auto_expand_replicas": "0-1"},
                            mappings={"dynamic": False, "properties": {"version": {"type": "keyword"}, "index": {"type": "keyword"}}})
    try:
        found = engine.request("GET", f"/{dictionary_index}/_doc/{doc_id}?_source_includes=version")
        if found.get("_source", {}).get("version") == document["version"]:
            return False
    except Exception as exc:
        if not (engine.is_api_error(exc) and getattr(exc, "status_code", getattr(getattr(exc, "meta", None), "status", None)) == 404):
            raise
    engine.index_document(dictionary_index, doc_id, document, refresh=True)
    return True


def write_retriever(engine: Engine, index: str, settings: GatewaySettings, *, dict_dir: Path | None = None, given: Sequence[str] = (),
                    mode: str = "rerank", dictionary_index: str = DICTIONARY_INDEX, inner: dict[str, Any] | None = None) -> dict[str, Any]:
    """Upload the dictionary of ``index`` (once per version) and return ``{"retriever": …, "uploaded": bool, …}``.

    Raises:
        PluginMissingError: not Elasticsearch, or no jingpai plugin on the node.
        PipelineError: unknown index, or a dictionary that is not the index's.
        NotAJingpaiIndexError: the index has no ``_meta.jingpai``.
    """
    require_retriever_plugin(engine)
    meta = _meta(engine, index)
    document = dictionary_document(inline_dictionary(_dictionary(meta, index, dict_dir)), index=index, dict_version=meta.dict_version)
    doc_id = index
    uploaded = upload_dictionary(engine, document, dictionary_index=dictionary_index, doc_id=doc_id)
    keywords = keywords_settings(meta, settings, dictionary_index=dictionary_index, doc_id=doc_id, version=document["version"])
    return {"retriever": retriever_body(meta, settings, keywords, inner=inner, given=given, mode=mode), "index": index,
            "dictionary": f"{dictionary_index}/{doc_id}", "version": document["version"], "uploaded": uploaded,
            "dict_version": meta.dict_version}


@click.command("retriever", cls=JingpaiCommand)
@plugin_options("Elasticsearch", default_engine="http://127.0.0.1:9201",
                window_help="Top hits reranked, rank_window_size (default: the gateway's, 20).")
@click.option("--dictionary-index", default=DICTIONARY_INDEX, show_default=True, help="The index the dictionary is uploaded to.")
@click.option("--query", "query_json", default=None, metavar="JSON",
              help="The inner retriever's query (JSON), e.g. '{\"match\": {\"title\": \"中国GDP\"}}' (default: an example on the text fields).")
def retriever_cmd(index: str, reranker: str | None, mode: str, dict_dir: Path | None, engine: str, fusion: str, dictionary_index: str,
                  query_json: str | None, **numeric: float | None) -> None:
    """Upload INDEX's dictionary for the jingpai Elasticsearch plugin and print the `jingpai` retriever for it."""
    from jingpai.commands.options import engine_auth
    from jingpai.engine.client import connect

    settings, given = plugin_settings(engine=engine, reranker=reranker, mode=mode, fusion=fusion,
                                      augment_hint="print an augmenting retriever", **numeric)
    inner = None
    if query_json is not None:
        try:
            inner = {"standard": {"query": json.loads(query_json)}}
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--query") from exc
    client = connect(engine, auth=engine_auth())
    try:
        written = write_retriever(client, index, settings, dict_dir=dict_dir, given=given, mode=mode,
                                  dictionary_index=dictionary_index, inner=inner)
    finally:
        client.close()
    click.echo(json.dumps(written, ensure_ascii=False, indent=2))


__all__ = ["DICTIONARY_INDEX", "PipelineError", "PluginMissingError", "dictionary_document", "keywords_settings", "require_retriever_plugin",
           "retriever_body", "retriever_cmd", "upload_dictionary", "write_retriever"]
