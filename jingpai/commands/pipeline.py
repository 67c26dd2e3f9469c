"""CLI: ``jingpai plugin pipeline`` — the OpenSearch plugin's search pipeline for one jingpai index.

The jingpai OpenSearch plugin (``java/opensearch-plugin``, docs/opensearch-plugin.md) augments and reranks
inside the node. This command writes the pipeline that makes it do for one index what the gateway does:

- ``jingpai_keywords`` gets the index's roles from its ``_meta.jingpai`` exactly as the gateway's
  :class:`~jingpai.plugin.augment.QueryRewriter` reads them (:func:`~jingpai.indexer.mapping.read_meta`: text
  fields, segmented fields, keyword and weight fields, weight encoding) and the gateway's default boosts;
- its dictionary is sent **inline**: the segmenter's base dictionary (jieba's ``dict.txt``, the one the
  gateway's rjieba segmenter carries, about 5.6 MB as JSON), the jingpai dictionary's weights and its user
  dictionary. The other form, ``dictionary_dir``, names a folder in the node's ``config/jingpai/``, which a
  remote CLI cannot write; the inline form goes through the REST API (OpenSearch's default
  ``http.max_content_length`` is 100 MB) into the cluster state, like any pipeline;
- ``jingpai_rerank`` (both halves, the same settings) gets the reranker, the fusion, the window and the
  gateway's other defaults, with the index's text fields as the fields sent to the reranker; the circuit
  breaker's ``breaker_failures`` / ``breaker_reset_s``, ``rerank_concurrency`` and ``max_answer_bytes`` only when
  given (the processor's defaults are the gateway's); ``--mode augment`` writes ``jingpai_keywords`` alone (no reranker);
- the pipeline becomes the index's ``index.search.default_pipeline`` (on an alias: on its physical indices,
  so run the command again after ``jingpai index`` builds a new one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from jingpai.commands.base import JingpaiCommand
from jingpai.commands.plugin_options import WHEN_GIVEN, plugin_options, plugin_settings
from jingpai.errors import UnavailableError, UserError

if TYPE_CHECKING:
    from jingpai.engine.client import Engine
    from jingpai.indexer.mapping import IndexMeta
    from jingpai.keyword_dict import Dictionary
    from jingpai.plugin.settings import GatewaySettings

#: the plugin's name in ``GET _nodes/plugins`` (its descriptor's ``name``)
PLUGIN_NAME = "jingpai"
_INSTALL_HINT = ("start a node with it (`jingpai engine up --kind opensearch --plugins jingpai`) or install it on yours "
                 "(`bin/opensearch-plugin install file:///…/jingpai-opensearch-<version>.zip`, then restart the node)")


class PipelineError(UserError, ValueError):
    """The pipeline cannot be written: unknown index, a dictionary that does not match the index, a node without
    the jingpai plugin, or the node refused the pipeline (its reason is in the message)."""


class PluginMissingError(UnavailableError, RuntimeError):
    """The node answering at the engine URL has no jingpai plugin."""


def base_dictionary() -> tuple[dict[str, int], int]:
    """jieba's dictionary (word → frequency) and its total: the gateway segmenter's base dictionary."""
    import jieba

    path = Path(jieba.__file__).parent / "dict.txt"
    freq: dict[str, int] = {}
    total = 0
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            parts = line.split(" ")
            if len(parts) >= 2:
                freq[parts[0]] = int(parts[1])
                total += int(parts[1])
    return freq, total


def inline_dictionary(dictionary: Dictionary | None) -> dict[str, Any]:
    """The ``dictionary`` object of ``jingpai_keywords``: the base dictionary plus ``dictionary``'s weights and
    user-dictionary words (``None``: jieba's alone, as the gateway segments an index built without a dictionary)."""
    base, total = base_dictionary()
    out: dict[str, Any] = {"base_total": total, "base": base}
    if dictionary is not None:
        out["weights"] = dictionary.weights()
        out["userdict"] = [[line.split(" ")[0], int(line.split(" ")[1])] for line in dictionary.userdict_lines()]
    return out


def keyword_roles(meta: IndexMeta, settings: GatewaySettings) -> dict[str, Any]:
    """The roles of an index with ``meta`` as the gateway's QueryRewriter reads them, and its boosts: what both plugins'
    augmentation is configured with (``jingpai_keywords``, the retriever's ``keywords``)."""
    return {
        "text_fields": list(meta.text_fields),
        "seg_fields": dict(meta.seg_fields),
        "keywords_field": meta.keywords_field,
        "weights_field": meta.weights_field,
        "weight_encoding": meta.weight_encoding,
        "keywords_top_k": settings.keywords_top_k,
        "seg_boost": settings.seg_boost,
        "keyword_boost": settings.keyword_boost,
        "weight_boost": settings.weight_boost,
    }


def keywords_processor(meta: IndexMeta, dictionary: Dictionary | None, settings: GatewaySettings) -> dict[str, Any]:
    """``jingpai_keywords`` for an index with ``meta``: the roles the gateway's QueryRewriter reads, its boosts."""
    return {**keyword_roles(meta, settings), "dictionary": inline_dictionary(dictionary)}


def rerank_processor(meta: IndexMeta, settings: GatewaySettings, *, given: Sequence[str] = ()) -> dict[str, Any]:
    """``jingpai_rerank`` with the gateway's settings (fields: the gateway's rerank fields, else the index's text fields;
    ``rerank_keywords``: how the index stored its rerank keywords, when it did); ``given``: the settings of :data:`WHEN_GIVEN` also written, from ``settings`` (the others are left to the processor,
    whose defaults are the gateway's)."""
    fusion = settings.fusion_for(None)
    processor = {
        "reranker_url": settings.reranker_url,
        "fields": list(settings.rerank_fields or meta.text_fields),
        "window": settings.window,
        "max_window": settings.max_window,
        "doc_chars": settings.doc_chars,
        "timeout_ms": settings.timeout_ms,
        "fusion": fusion.mode,
        "fusion_weight": fusion.weight,
        "rrf_k": fusion.rrf_k,
    }
    processor.update({name: getattr(settings, name) for name in WHEN_GIVEN if name in given})
    if meta.rerank_keywords is not None:
        # the index's stored keywords (jingpai index --rerank-keywords) go with the texts they were found in, as the
        # gateway sends them; the processor checks each hit's digest against the text it sends
        stored = meta.rerank_keywords
        processor["rerank_keywords"] = {"field": stored.field, "dict_version": stored.dict_version, "top_k": stored.top_k}
    return processor


def pipeline_body(meta: IndexMeta, dictionary: Dictionary | None, settings: GatewaySettings, *, given: Sequence[str] = (),
                  mode: str = "rerank") -> dict[str, Any]:
    """The whole pipeline: augmentation, then the rerank's request half; the rerank's response half (``given``: the
    settings of :data:`WHEN_GIVEN` written). ``mode="augment"``: augmentation alone."""
    keywords = keywords_processor(meta, dictionary, settings)
    if mode == "augment":
        return {"description": "jingpai: keyword augmentation", "request_processors": [{"jingpai_keywords": keywords}]}
    rerank = rerank_processor(meta, settings, given=given)
    return {
        "description": f"jingpai: keyword augmentation and rerank ({rerank['fusion']}) by {settings.reranker_url}",
        "request_processors": [{"jingpai_keywords": keywords}, {"jingpai_rerank": rerank}],
        "response_processors": [{"jingpai_rerank": dict(rerank)}],
    }


def _meta(engine: Engine, index: str) -> IndexMeta:
    from jingpai.indexer.mapping import read_meta

    try:
        return read_meta(engine, index)
    except Exception as exc:
        if engine.is_api_error(exc) and getattr(exc, "status_code", None) == 404:
            raise PipelineError(f"index {index!r} does not exist on {engine.url}; index it first with `jingpai index … --index {index}`") from exc
        raise


def _dictionary(meta: IndexMeta, index: str, dict_dir: Path | None) -> Dictionary | None:
    """The dictionary the index was built with (checked against its ``_meta`` version, as the gateway looks it up)."""
    from jingpai.keyword_dict import Dictionary

    if dict_dir is None:
        if meta.dict_version is not None:
            raise PipelineError(f"index {index!r} was built with dictionary version {meta.dict_version}: pass its folder with --dict")
        return None
    dictionary = Dictionary.load(dict_dir)
    if meta.dict_version is not None and dictionary.version != meta.dict_version:
        raise PipelineError(
            f"--dict {dict_dir} holds dictionary version {dictionary.version}, but index {index!r} was built with "
            f"{meta.dict_version}: pass that version's folder (the gateway would not augment with another one)"
        )
    return dictionary


def require_plugin(engine: Engine) -> None:
    """Raise :class:`PluginMissingError` unless ``engine`` is OpenSearch with the jingpai plugin loaded."""
    if engine.kind != "opensearch":
        raise PluginMissingError(f"{engine.url} is {engine.kind} {engine.version}: the jingpai plugin is for OpenSearch only; "
                                 "use the gateway (`jingpai gateway`) in front of Elasticsearch")
    if PLUGIN_NAME not in engine.modules():
        raise PluginMissingError(f"OpenSearch {engine.version} at {engine.url} has no jingpai plugin: {_INSTALL_HINT}")


def install_pipeline(engine: Engine, index: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """``PUT _search/pipeline/<name>`` and make it ``index``'s default pipeline; what was done, as a dict."""
    try:
        engine.request("PUT", f"/_search/pipeline/{name}", body=body)
    except Exception as exc:
        # a secured node's 401/403 names the user and the permission (cluster:admin/search/pipeline/put), not the body
        problem = engine.access_error(exc, action=f"write search pipeline {name!r}")
        if problem is not None:
            raise problem from exc
        if engine.is_api_error(exc):
            raise PipelineError(f"{engine.url} refused search pipeline {name!r}: {getattr(exc, 'info', None) or exc}") from exc
        raise
    try:
        engine.put_index_settings(index, {"index.search.default_pipeline": name})
    except Exception as exc:
        problem = engine.access_error(exc, action=f"make {name!r} the default pipeline of {index!r}")
        if problem is not None:
            raise problem from exc
        raise
    return {"pipeline": name, "index": index, "default_pipeline": True}


def write_pipeline(engine: Engine, index: str, settings: GatewaySettings, *, dict_dir: Path | None = None,
                   name: str | None = None, given: Sequence[str] = (), mode: str = "rerank") -> dict[str, Any]:
    """Write the pipeline for ``index`` (a jingpai index or alias) on ``engine`` and set it as the index's default
    (``mode="augment"``: augmentation alone).

    Raises:
        PluginMissingError: not OpenSearch, or no jingpai plugin on the node.
        PipelineError: unknown index, a dictionary that is not the index's, or the node refused the pipeline.
        NotAJingpaiIndexError: the index has no ``_meta.jingpai``.
    """
    require_plugin(engine)
    meta = _meta(engine, index)
    body = pipeline_body(meta, _dictionary(meta, index, dict_dir), settings, given=given, mode=mode)
    result = install_pipeline(engine, index, name or f"jingpai-{index}", body)
    written = {**result, "mode": mode, "text_fields": list(meta.text_fields), "dict_version": meta.dict_version}
    if mode == "augment":
        return written
    rerank = body["response_processors"][0]["jingpai_rerank"]
    return {**written, "fusion": rerank["fusion"], "fusion_weight": rerank["fusion_weight"], "window": rerank["window"]}


@click.command("pipeline", cls=JingpaiCommand)
@plugin_options("OpenSearch", default_engine="http://127.0.0.1:9200", window_help="Top hits reranked (default: the gateway's, 20).")
@click.option("--name", default=None, help="Pipeline name (default: jingpai-<index>).")
@click.option("--print-only", is_flag=True, help="Print the pipeline (without the inline base dictionary) instead of writing it.")
def pipeline_cmd(index: str, reranker: str | None, mode: str, dict_dir: Path | None, engine: str, fusion: str, name: str | None,
                 print_only: bool, **numeric: float | None) -> None:
    """Write the jingpai OpenSearch plugin's search pipeline for INDEX and make it the index's default."""
    from jingpai.commands.options import engine_auth
    from jingpai.engine.client import connect

    settings, written_when_given = plugin_settings(engine=engine, reranker=reranker, mode=mode, fusion=fusion,
                                                   augment_hint="write augmentation alone", **numeric)
    client = connect(engine, auth=engine_auth())
    try:
        if print_only:
            meta = _meta(client, index)
            body = pipeline_body(meta, _dictionary(meta, index, dict_dir), settings, given=written_when_given, mode=mode)
            body["request_processors"][0]["jingpai_keywords"]["dictionary"]["base"] = "<jieba's dict.txt: word -> frequency>"
            click.echo(json.dumps(body, ensure_ascii=False, indent=2))
            return
        click.echo(json.dumps(write_pipeline(client, index, settings, dict_dir=dict_dir, name=name, given=written_when_given, mode=mode),
                              ensure_ascii=False))
    finally:
        client.close()


__all__ = ["PipelineError", "PluginMissingError", "base_dictionary", "inline_dictionary", "pipeline_body", "pipeline_cmd",
           "require_plugin", "write_pipeline"]
