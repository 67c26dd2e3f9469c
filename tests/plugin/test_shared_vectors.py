"""Shared test vectors between the gateway (Python) and the OpenSearch plugin (Java, java/opensearch-plugin).

The vectors under ``tests/vectors/`` are written from the Python implementation (``python
tests/plugin/test_shared_vectors.py`` rewrites them) and read by both sides: these tests assert the Python
code still reproduces them, the plugin's JUnit tests assert the Java code does (scores within 1e-6).

- ``fusion.json``: :meth:`FusionSpec.fuse` and :func:`fused_order` over windows as the gateway calls them
  (engine ranks 1..n), including missing engine scores, ties, one-document and all-equal windows.
- ``paging.json``: the gateway's :func:`finish` on a window of hits (window, ``from``/``size``, hits past the
  window, the texts sent to the reranker, the page's ids and scores).
- ``augment.json``: :class:`QueryRewriter` on match / match_phrase / multi_match / query_string queries. The
  segmenter's base dictionary is carried as the subset of jieba's dictionary the queries can reach (every
  dictionary word that is a substring of a query, and the dictionary's total frequency): jieba's DAG only
  looks up substrings of the text, so the subset segments exactly as the whole dictionary does.
- ``overrides.json``: the gateway's :func:`parse_search` and :func:`plan_search` on searches with an ``ext.jingpai``
  (mode, window, fields, query, fusion; invalid ones too): the mode, the reason a search is not reranked, the window,
  the query text, the rerank fields, the fusion and the ``from``/``size`` asked of the engine, or the field an error
  names. The plugin reads a pipeline's settings as the gateway's (:data:`OVERRIDE_SETTINGS`).
- ``stored_keywords.json``: :func:`stored_keywords` and :func:`text_digest` (``jingpai index --rerank-keywords``): a
  hit's stored keywords are sent only when their digest is that of the text the reranker gets, in the stored shape.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).resolve().parents[1] / "vectors"

# ------------------------------------------------------------------------------------------ fusion

FUSION_WINDOWS: list[dict[str, Any]] = [
    {"name": "doc_example", "engine": [9.0, 5.0, 1.0], "model": [0.1, 0.9, 0.5]},
    {"name": "bm25_window", "engine": [12.3, 11.9, 11.9, 8.25, 7.0, 6.5, 3.1, 3.0],
     "model": [0.02, 0.97, 0.4, 0.4, 0.88, 0.13, 0.97, 0.5]},
    {"name": "model_ties", "engine": [5.0, 4.0, 3.0, 2.0], "model": [0.5, 0.5, 0.5, 0.9]},
    {"name": "engine_all_equal", "engine": [2.0, 2.0, 2.0], "model": [0.3, 0.1, 0.2]},
    {"name": "model_all_equal", "engine": [3.0, 2.0, 1.0], "model": [0.7, 0.7, 0.7]},
    {"name": "one_document", "engine": [4.2], "model": [0.25]},
    {"name": "engine_scores_missing", "engine": [None, None, None, None], "model": [0.1, 0.4, 0.3, 0.9]},
    {"name": "engine_score_partly_missing", "engine": [3.0, None, 1.0], "model": [0.2, 0.1, 0.9]},
    {"name": "negative_scores", "engine": [-0.5, -1.25, -3.0, -3.5], "model": [-2.0, 1.5, 0.0, 1.5]},
    {"name": "twenty", "engine": [round(20.0 - 0.37 * i * i / 10, 4) for i in range(20)],
     "model": [round(math.sin(i * 1.7) * 0.5 + 0.5, 6) for i in range(20)]},
]

FUSION_SPECS: list[dict[str, Any]] = [
    {"mode": "replace"},
    {"mode": "linear", "weight": 0.5},
    {"mode": "linear", "weight": 0.0},
    {"mode": "linear", "weight": 0.3},
    {"mode": "linear", "weight": 1.0},
    {"mode": "rrf", "weight": 0.5, "rrf_k": 60},
    {"mode": "rrf", "weight": 0.8, "rrf_k": 1},
    {"mode": "rrf", "weight": 0.25, "rrf_k": 10},
]


def fusion_vectors() -> dict:
    from jingpai.reranker.fusion import FusionSpec, fused_order

    cases = []
    for window in FUSION_WINDOWS:
        for spec in FUSION_SPECS:
            fusion = FusionSpec(**spec)
            ranks = list(range(1, len(window["model"]) + 1))
            fused = fusion.fuse(window["engine"], window["model"], engine_ranks=ranks)
            cases.append({**window, "fusion": spec, "fused": [float(x) for x in fused],
                          "order": [int(i) for i in fused_order(fused)]})
    return {"about": "FusionSpec.fuse(engine, model, engine_ranks=1..n) and fused_order(fused), as the gateway's finish() calls them",
            "cases": cases}


# ------------------------------------------------------------------------------------------ paging

PAGING: list[dict[str, Any]] = [
    {"name": "first_page", "hits": 30, "window": 20, "from": 0, "size": 10, "fusion": {"mode": "linear", "weight": 0.5}},
    {"name": "second_page", "hits": 30, "window": 20, "from": 10, "size": 10, "fusion": {"mode": "linear", "weight": 0.5}},
    {"name": "page_across_window", "hits": 30, "window": 20, "from": 15, "size": 10, "fusion": {"mode": "rrf", "weight": 0.5, "rrf_k": 60}},
    {"name": "fewer_hits_than_window", "hits": 7, "window": 20, "from": 0, "size": 5, "fusion": {"mode": "replace"}},
    {"name": "small_window", "hits": 12, "window": 5, "from": 0, "size": 8, "fusion": {"mode": "rrf", "weight": 0.7, "rrf_k": 10}},
    {"name": "doc_chars_cut", "hits": 4, "window": 4, "from": 1, "size": 2, "fusion": {"mode": "linear", "weight": 0.2}, "doc_chars": 5},
]


def _hits(n: int) -> list[dict]:
    hits = []
    for i in range(n):
        source: dict[str, Any] = {"title": f"标题{i}号 GDP", "content": f"第{i}篇的正文，中国经济。" * (1 + i % 3)}
        if i % 5 == 3:
            source.pop("content")
        if i % 7 == 6:
            source["title"] = ["多值", "标题", str(i)]
        hits.append({"_index": "docs", "_id": f"d{i:02d}", "_score": round(25.0 - 0.75 * i - (0.5 if i % 4 == 0 else 0.0), 4),
                     "_source": source})
    return hits


def _model_scores(texts: list[str]) -> list[float]:
    # a deterministic stand-in for the reranker: the vectors carry the scores, the Java side replays them
    return [round((sum(ord(c) for c in t) % 997) / 997.0, 6) for t in texts]


class _ReplayReranker:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    async def scores(self, query: str, texts, slots=(), *, keywords: dict | None = None) -> list[float]:
        self.calls.append((query, list(texts)))
        return _model_scores(list(texts))

    async def model_name(self) -> str:
        return "replay"


def _finish(case: dict) -> tuple[dict, list[tuple[str, list[str]]]]:
    from jingpai.plugin.gateway.finish import finish
    from jingpai.plugin.gateway.plan import SearchPlan
    from jingpai.plugin.gateway.source import SourceFold
    from jingpai.reranker.fusion import FusionSpec

    plan = SearchPlan(body={}, params={}, mode="rerank", rerank=True, query_text="中国GDP", from_=case["from"], size=case["size"],
                      window=case["window"], fusion=FusionSpec(**case["fusion"]), source=SourceFold(("title", "content")))
    reranker = _ReplayReranker()
    data = {"took": 3, "hits": {"total": {"value": case["hits"], "relation": "eq"}, "max_score": 25.0, "hits": _hits(case["hits"])}}
    finished = asyncio.run(finish(plan, data, reranker, doc_chars=case.get("doc_chars", 512)))  # type: ignore[arg-type]
    return finished.data, reranker.calls


def paging_vectors() -> dict:
    cases = []
    for case in PAGING:
        data, calls = _finish(case)
        ((query, texts),) = calls
        page = data["hits"]["hits"]
        cases.append({
            **case, "doc_chars": case.get("doc_chars", 512), "query": query, "input": _hits(case["hits"]), "texts": texts,
            "model_scores": _model_scores(texts),
            "page": [{"_id": h["_id"], "_score": h["_score"], **({"_jingpai": h["_jingpai"]} if "_jingpai" in h else {})} for h in page],
            "max_score": data["hits"]["max_score"],
        })
    return {"about": "the gateway's finish(): rerank the window (fields title, content joined by newlines, cut to doc_chars), "
                     "fuse, keep hits past the window in the engine's order, cut the page from/size", "cases": cases}


# ------------------------------------------------------------------------------------------ augmentation

AUG_KEYWORDS = {
    "中国": {"econ": 1.5}, "GDP": {"econ": 3.0}, "经济": {"econ": 1.0}, "增长": {"econ": 0.8}, "股票": {"finance": 2.0},
    "银行": {"finance": 1.8}, "利率": {"finance": 2.2}, "投资": {"finance": 1.2}, "花呗": {"fin": 2.75}, "借呗": {"fin": 2.5},
    "蚂蚁借呗": {"fin": 3.25}, "提前还款": {"fin": 1.9}, "A股市场": {"finance": 2.4}, "360公司": {"tech": 2.1},
}
AUG_FREQ = {"花呗": 120, "借呗": 90, "蚂蚁借呗": 40, "A股市场": 7, "360公司": 3}

AUG_QUERIES: list[Any] = [
    {"match": {"title": "中国GDP增长"}},
    {"match": {"content": {"query": "花呗可以提前还款吗", "operator": "and"}}},
    {"match_phrase": {"title": "蚂蚁借呗的利率是多少"}},
    {"multi_match": {"query": "A股市场 银行股票", "fields": ["title^2", "content"]}},
    {"multi_match": {"query": "360公司的投资", "fields": ["ti*"]}},
    {"multi_match": {"query": "中国经济"}},
    {"query_string": {"query": "title:中国 AND (GDP OR 利率) -股票"}},
    {"query_string": {"query": "借呗 额度", "default_field": "content"}},
    {"simple_query_string": {"query": "\"银行 利率\" +投资", "fields": ["content"]}},
    {"bool": {"must": [{"match": {"title": "花呗借呗"}}], "filter": [{"term": {"lang": "zh"}}],
              "must_not": [{"match": {"content": "股票"}}], "should": [{"match": {"content": "花呗分期"}}]}},
    {"dis_max": {"queries": [{"match": {"title": "中国银行"}}, {"match": {"other": "中国银行"}}]}},
    {"function_score": {"query": {"match": {"title": "GDP增长"}}, "boost_mode": "sum"}},
    {"match": {"title": "今天天气怎么样"}},
    {"match": {"title": "iPhone15 Pro 价格 3999元"}},
    {"match": {"title": {"query": "   ", "boost": 2}}},
    {"term": {"title": "中国"}},
]

AUG_CONFIGS: list[dict[str, Any]] = [
    {"name": "defaults", "weight_encoding": "term_frequency", "settings": {}},
    {"name": "all_boosts_term_frequency", "weight_encoding": "term_frequency",
     "settings": {"seg_boost": 1.0, "keyword_boost": 0.5, "weight_boost": 0.3, "keywords_top_k": 2}},
    {"name": "all_boosts_rank_features", "weight_encoding": "rank_features",
     "settings": {"seg_boost": 0.4, "keyword_boost": 1.0, "weight_boost": 1.0}},
]


def _texts(query: Any, text_fields: tuple[str, ...]) -> list[str]:
    from jingpai.plugin.augment import find_full_text

    return [c.text for c in find_full_text(query, text_fields)]


def augment_vectors() -> dict:
    from jingpai.commands.pipeline import base_dictionary  # the dictionary `jingpai plugin pipeline` uploads
    from jingpai.indexer.mapping import IndexMeta
    from jingpai.keyword_dict import Dictionary, Segmenter
    from jingpai.plugin.augment import QueryRewriter

    dictionary = Dictionary.from_scores(AUG_KEYWORDS, freqs=AUG_FREQ)
    segmenter = Segmenter(dictionary)
    text_fields = ("title", "content")
    base, total = base_dictionary()
    texts = [t for q in AUG_QUERIES for t in _texts(q, text_fields)]
    subset = {t[i:j]: base[t[i:j]] for t in texts for i in range(len(t)) for j in range(i + 1, len(t) + 1) if base.get(t[i:j])}
    configs = []
    for config in AUG_CONFIGS:
        meta = IndexMeta(text_fields=text_fields, dict_version=dictionary.version, weight_encoding=config["weight_encoding"],
                         entity_encoding="nested")
        rewriter = QueryRewriter(meta, dictionary=dictionary, segmenter=segmenter, **config["settings"])
        cases = []
        for query in AUG_QUERIES:
            result = rewriter(query)
            cases.append({"query": query, "expected": result.query, "augmented": result.augmented,
                          "keywords": [[w, s] for w, s in result.keywords], "query_text": result.query_text})
        configs.append({**config, "meta": {"text_fields": list(text_fields), "seg_fields": meta.seg_fields,
                                           "keywords_field": meta.keywords_field, "weights_field": meta.weights_field,
                                           "weight_encoding": meta.weight_encoding},
                        "cases": cases})
    userdict = [[line.split(" ")[0], int(line.split(" ")[1])] for line in dictionary.userdict_lines()]
    return {
        "about": "QueryRewriter on queries against an index with text fields title, content; the segmenter is rjieba (HMM off) "
                 "with jieba's dictionary plus the jingpai dictionary's words (added only when jieba lacks them)",
        "segmenter": {"base_total": total, "base": dict(sorted(subset.items())),
                      "tokens": {t: segmenter.cut(t) for t in dict.fromkeys(texts)}},
        "dictionary": {"weights": dictionary.weights(), "userdict": userdict},
        "configs": configs,
    }


# ------------------------------------------------------------------------------------------ ext.jingpai overrides

#: the gateway's settings and the equal pipeline settings the Java side replays the cases with
OVERRIDE_SETTINGS: dict[str, Any] = {"window": 20, "max_window": 50, "fusion": {"mode": "linear", "weight": 0.5, "rrf_k": 60},
                                     "fields": ["title", "content"]}
_MATCH = {"match": {"title": "中国GDP"}}
OVERRIDE_CASES: list[dict[str, Any]] = [
    {"name": "none", "body": {"query": _MATCH}},
    {"name": "empty", "body": {"query": _MATCH, "ext": {"jingpai": {}}}},
    {"name": "mode_off", "body": {"query": _MATCH, "ext": {"jingpai": {"mode": "off"}}}},
    {"name": "mode_augment", "body": {"query": _MATCH, "ext": {"jingpai": {"mode": "augment", "window": 999}}}},
    {"name": "mode_rerank", "body": {"query": _MATCH, "ext": {"jingpai": {"mode": "rerank"}}}},
    {"name": "window", "body": {"query": _MATCH, "size": 5, "ext": {"jingpai": {"window": 8}}}},
    {"name": "window_whole_number", "body": {"query": _MATCH, "ext": {"jingpai": {"window": 12.0}}}},
    {"name": "window_max", "body": {"query": _MATCH, "ext": {"jingpai": {"window": 50}}}},
    {"name": "window_page_beyond", "body": {"query": _MATCH, "from": 10, "size": 5, "ext": {"jingpai": {"window": 10}}}},
    {"name": "window_page_across", "body": {"query": _MATCH, "from": 5, "size": 10, "ext": {"jingpai": {"window": 10}}}},
    {"name": "window_over_max", "body": {"query": _MATCH, "ext": {"jingpai": {"window": 51}}}},
    {"name": "window_zero", "body": {"query": _MATCH, "ext": {"jingpai": {"window": 0}}}},
    {"name": "window_fraction", "body": {"query": _MATCH, "ext": {"jingpai": {"window": 2.5}}}},
    {"name": "window_text", "body": {"query": _MATCH, "ext": {"jingpai": {"window": "ten"}}}},
    {"name": "window_numeric_text", "body": {"query": _MATCH, "ext": {"jingpai": {"window": "10"}}}},
    {"name": "window_boolean", "body": {"query": _MATCH, "ext": {"jingpai": {"window": True}}}},
    {"name": "fields", "body": {"query": _MATCH, "ext": {"jingpai": {"fields": ["content"]}}}},
    {"name": "fields_empty", "body": {"query": _MATCH, "ext": {"jingpai": {"fields": []}}}},
    {"name": "fields_not_strings", "body": {"query": _MATCH, "ext": {"jingpai": {"fields": [1, 2]}}}},
    {"name": "query", "body": {"query": _MATCH, "ext": {"jingpai": {"query": "国内生产总值"}}}},
    {"name": "query_without_full_text", "body": {"query": {"term": {"lang": "zh"}}, "ext": {"jingpai": {"query": "国内生产总值"}}}},
    {"name": "no_full_text", "body": {"query": {"term": {"lang": "zh"}}, "ext": {"jingpai": {"fusion": "rrf"}}}},
    {"name": "query_empty", "body": {"query": _MATCH, "ext": {"jingpai": {"query": ""}}}},
    {"name": "fusion_rrf", "body": {"query": _MATCH, "ext": {"jingpai": {"fusion": "rrf"}}}},
    {"name": "fusion_rrf_k", "body": {"query": _MATCH, "ext": {"jingpai": {"fusion": "rrf", "rrf_k": 5, "fusion_weight": 0.7}}}},
    {"name": "fusion_weight_only", "body": {"query": _MATCH, "ext": {"jingpai": {"fusion_weight": 0.2}}}},
    {"name": "fusion_replace", "body": {"query": _MATCH, "ext": {"jingpai": {"fusion": "replace"}}}},
    {"name": "fusion_unknown", "body": {"query": _MATCH, "ext": {"jingpai": {"fusion": "sum"}}}},
    {"name": "fusion_weight_over", "body": {"query": _MATCH, "ext": {"jingpai": {"fusion_weight": 1.5}}}},
    {"name": "fusion_weight_numeric_text", "body": {"query": _MATCH, "ext": {"jingpai": {"fusion_weight": "0.3"}}}},
    {"name": "fusion_weight_integer", "body": {"query": _MATCH, "ext": {"jingpai": {"fusion_weight": 1}}}},
    {"name": "rrf_k_zero", "body": {"query": _MATCH, "ext": {"jingpai": {"fusion": "rrf", "rrf_k": 0}}}},
    {"name": "mode_unknown", "body": {"query": _MATCH, "ext": {"jingpai": {"mode": "fast"}}}},
    {"name": "unknown_key", "body": {"query": _MATCH, "ext": {"jingpai": {"widow": 10}}}},
    {"name": "model_and_hybrid_accepted", "body": {"query": _MATCH, "ext": {"jingpai": {"model": "any", "hybrid": {"enabled": True, "k": 5}}}}},
    {"name": "hybrid_shorthand", "body": {"query": _MATCH, "ext": {"jingpai": {"hybrid": False}}}},
    {"name": "hybrid_unknown_key", "body": {"query": _MATCH, "ext": {"jingpai": {"hybrid": {"kk": 5}}}}},
    {"name": "sorted", "body": {"query": _MATCH, "sort": [{"date": "desc"}], "ext": {"jingpai": {"window": 5}}}},
    {"name": "page_over_max_window", "body": {"query": _MATCH, "from": 45, "size": 10, "ext": {"jingpai": {"window": 10}}}},
    # _source folding: the window returns the rerank fields whatever the search's filter
    {"name": "source_false", "body": {"query": _MATCH, "_source": False}},
    {"name": "source_true", "body": {"query": _MATCH, "_source": True}},
    {"name": "source_list", "body": {"query": _MATCH, "_source": ["id"]}},
    {"name": "source_pattern", "body": {"query": _MATCH, "_source": "tit*"}},
    {"name": "source_includes_excludes", "body": {"query": _MATCH, "_source": {"includes": ["id"], "excludes": ["content"]}}},
    {"name": "source_excludes_only", "body": {"query": _MATCH, "_source": {"excludes": ["tit?e"]}}},
    {"name": "source_list_ext_fields", "body": {"query": _MATCH, "_source": ["id", "title"], "ext": {"jingpai": {"fields": ["content"]}}}},
    {"name": "source_not_reranked", "body": {"query": _MATCH, "_source": False, "ext": {"jingpai": {"mode": "augment"}}}},
]


def override_vectors() -> dict:
    from jingpai.indexer.mapping import IndexMeta
    from jingpai.plugin.augment import find_full_text
    from jingpai.plugin.gateway.errors import BadGatewayRequest
    from jingpai.plugin.gateway.plan import Planner, parse_search, plan_search, shape_reason
    from jingpai.plugin.settings import GatewaySettings
    from jingpai.reranker.fusion import FusionSpec

    fusion = FusionSpec(**OVERRIDE_SETTINGS["fusion"])
    settings = GatewaySettings(engine_url="http://engine:9200", reranker_url="http://reranker:8081", window=OVERRIDE_SETTINGS["window"],
                               max_window=OVERRIDE_SETTINGS["max_window"], fusion=fusion.mode, fusion_weight=fusion.weight, rrf_k=fusion.rrf_k)
    meta = IndexMeta(tuple(OVERRIDE_SETTINGS["fields"]), None, "term_frequency", "nested")
    planner = Planner(settings)
    cases = []
    for case in OVERRIDE_CASES:
        body = case["body"]
        out: dict[str, Any] = {**case, "from": body.get("from", 0), "size": body.get("size", 10),
                               "shape_reason": shape_reason(body, {}, planner),
                               "query_text": " ".join(dict.fromkeys(c.text for c in find_full_text(body["query"], meta.text_fields)))}
        try:
            plan = plan_search(parse_search("docs", body, {}, settings=settings), meta, planner)
        except BadGatewayRequest as exc:
            # the field the message names first, as the plugin names it (a list item's index dropped)
            message = str(exc)
            field = "window" if "max_window" in message else re.sub(r"\.\d+$", "", message.split(": ")[1])
            cases.append({**out, "error": message, "error_field": field})
            continue
        cases.append({**out, "plan": {
            "mode": plan.mode, "reason": plan.reason, "window": plan.window, "query_text": plan.query_text if plan.rerank else None,
            "fields": list(plan.fields) if plan.rerank else None, "fusion": plan.fusion.describe() if plan.fusion else None,
            "engine_from": plan.body.get("from"), "engine_size": plan.body.get("size"),
            "source": {"added": list(plan.source.added), "drop": plan.source.drop, "engine_source": plan.body.get("_source")}
            if plan.rerank else None,
        }})
    return {"about": "the gateway's parse_search + plan_search on a jingpai index with text fields title, content (no dictionary "
                     "loaded: query_text is the full-text clauses' texts); settings: the gateway's and the pipeline's", "settings":
            OVERRIDE_SETTINGS, "cases": cases}


# ------------------------------------------------------------------------------------------ stored keywords

STORED_TEXTS = ["标题\n正文", "中国GDP增长", "", "a" * 600, "😀 emoji 与 全角，标点", "Ünïcode\ttab"]


def stored_keyword_vectors() -> dict:
    """Digests of texts, and the stored keywords the gateway sends for hits of each shape."""
    from jingpai.indexer.rerank_keywords import RERANK_KEYWORDS_FIELD, text_digest
    from jingpai.plugin.gateway.source import stored_keywords

    text = "中国GDP增长"
    good = {"sha1": text_digest(text), "words": ["GDP", "中国"]}
    sources: list[tuple[str, dict]] = [
        ("stored", {"jingpai": {"rk": good}}),
        ("dotted_key", {"jingpai.rk": good}),
        ("other_text", {"jingpai": {"rk": {**good, "sha1": text_digest("另一段")}}}),
        ("none_stored", {"title": text}),
        ("no_words", {"jingpai": {"rk": {"sha1": good["sha1"]}}}),
        ("words_not_strings", {"jingpai": {"rk": {**good, "words": ["GDP", 3]}}}),
        ("words_not_a_list", {"jingpai": {"rk": {**good, "words": "GDP"}}}),
        ("not_an_object", {"jingpai": {"rk": "GDP"}}),
        ("empty_words", {"jingpai": {"rk": {**good, "words": []}}}),
    ]
    cases = [{"name": name, "source": source, "field": RERANK_KEYWORDS_FIELD, "text": text,
              "words": stored_keywords({"_source": source}, RERANK_KEYWORDS_FIELD, text)} for name, source in sources]
    return {"about": "text_digest (16 hex digits of the SHA-1 of the UTF-8 text) and stored_keywords(hit, field, text) of the gateway",
            "digests": [{"text": t, "digest": text_digest(t)} for t in STORED_TEXTS], "cases": cases}


GENERATORS = {"fusion.json": fusion_vectors, "paging.json": paging_vectors, "augment.json": augment_vectors,
              "overrides.json": override_vectors, "stored_keywords.json": stored_keyword_vectors}


def _write() -> None:
    VECTORS.mkdir(parents=True, exist_ok=True)
    for name, make in GENERATORS.items():
        (VECTORS / name).write_text(json.dumps(make(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {VECTORS / name}")


def _close(actual: Any, expected: Any, path: str = "") -> None:
    """Equal JSON, numbers within 1e-9 (what the Python side must reproduce; Java gets 1e-6)."""
    if isinstance(expected, float) or isinstance(actual, float):
        assert isinstance(actual, (int, float)) and actual == pytest.approx(expected, rel=0, abs=1e-9), path
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected), path
        for key in expected:
            _close(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected)):
            _close(a, e, f"{path}[{i}]")
    else:
        assert actual == expected, path


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_python_reproduces_the_shared_vectors(name: str) -> None:
    path = VECTORS / name
    assert path.exists(), f"{path} is missing: run python {Path(__file__).relative_to(VECTORS.parents[1])}"
    if name == "augment.json":
        pytest.importorskip("jieba", reason="the augmentation vectors' base dictionary subset is read from jieba's dict.txt")
    stored = json.loads(path.read_text(encoding="utf-8"))
    _close(json.loads(json.dumps(GENERATORS[name](), ensure_ascii=False)), stored)


def test_the_dictionary_subset_segments_like_the_whole_dictionary() -> None:
    """The claim the augmentation vectors rest on, checked with the reference jieba on the subset."""
    jieba = pytest.importorskip("jieba")
    stored = json.loads((VECTORS / "augment.json").read_text(encoding="utf-8"))
    seg = stored["segmenter"]
    tokenizer = jieba.Tokenizer()
    freq: dict[str, int] = {}
    for word, count in seg["base"].items():
        freq[word] = count
        for i in range(1, len(word)):
            freq.setdefault(word[:i], 0)
    tokenizer.FREQ, tokenizer.total, tokenizer.initialized = freq, seg["base_total"], True
    for word, count in stored["dictionary"]["userdict"]:
        if not tokenizer.FREQ.get(word):
            tokenizer.add_word(word, count, "n")
    for text, tokens in seg["tokens"].items():
        assert [t for t in tokenizer.lcut(text, HMM=False) if t.strip()] == tokens, text


if __name__ == "__main__":
    sys.path.insert(0, str(VECTORS.parents[1]))
    _write()
