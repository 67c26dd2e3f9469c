"""Search planning on plain data (no engine, no server): windows, reasons, fusion overrides, ``_source``
folding, and the plan's immutability."""

from __future__ import annotations

import dataclasses

import pytest

from jingpai.indexer.mapping import IndexMeta
from jingpai.plugin.gateway import BadGatewayRequest, NotOursToJudge
from jingpai.plugin.gateway.meta import Credentials, meta_of
from jingpai.plugin.gateway.models import take_fusion
from jingpai.plugin.gateway.plan import Planner, parse_search, plan_search, unchanged_plan
from jingpai.plugin.settings import GatewaySettings
from jingpai.reranker.fusion import FusionSpec

META = IndexMeta(text_fields=("title", "content"), dict_version=None, weight_encoding="term_frequency", entity_encoding="nested")
SETTINGS = GatewaySettings(engine_url="http://e:9200", reranker_url="http://r:8081", window=20, max_window=100,
                           indices={"products": {"fusion": "rrf", "rrf_k": 30}})
MATCH = {"query": {"match": {"title": "中国GDP"}}}


def plan(body: dict, params: dict | None = None, *, index: str | None = "docs", meta: IndexMeta | None = META,
         settings: GatewaySettings = SETTINGS, **kwargs):
    search = parse_search(index, body, params or {}, settings=settings, **kwargs)
    return plan_search(search, meta, Planner(settings))


def test_a_full_text_search_reranks_the_window_whatever_the_page() -> None:
    p = plan({**MATCH, "from": 5, "size": 10})
    assert (p.rerank, p.reason, p.window, p.from_, p.size) == (True, None, 20, 5, 10)
    assert (p.body["from"], p.body["size"], p.query_text, p.fields) == (0, 20, "中国GDP", ("title", "content"))
    assert p.rewritten and p.info()["window"] == 20
    p = plan({**MATCH, "size": 30}, {"from": "10"})
    assert (p.body["size"], "from" not in p.params) == (40, True)  # from + size past the window: fetched whole
    assert plan({**MATCH, "ext": {"jingpai": {"window": 50}}}).window == 50
    with pytest.raises(BadGatewayRequest, match="ext.jingpai.window 500 exceeds the gateway's max_window 100"):
        plan({**MATCH, "ext": {"jingpai": {"window": 500}}})


@pytest.mark.parametrize(("body", "params", "kwargs", "reason"), [
    (MATCH, {}, {"mode_param": "off"}, "disabled"),
    (MATCH, {}, {"mode_param": "augment"}, "augment_only"),
    (MATCH, {"scroll": "1m"}, {}, "scroll"),
    ({**MATCH, "sort": [{"date": "desc"}]}, {}, {}, "sort"),
    ({**MATCH, "size": 0, "aggs": {}}, {}, {}, "aggregations_only"),
    ({**MATCH, "from": 95, "size": 10}, {}, {}, "window_exceeded"),
    ({**MATCH, "from": 20}, {}, {}, "beyond_window"),
    ({"query": {"term": {"id": "x"}}}, {}, {}, "no_full_text_query"),
])
def test_reasons_a_search_is_not_reranked(body: dict, params: dict, kwargs: dict, reason: str) -> None:
    p = plan(body, params, **kwargs)
    assert (p.rerank, p.reason, p.info()["reason"]) == (False, reason, reason)


def test_reasons_that_need_no_index() -> None:
    assert plan(MATCH, meta=None).reason == "not_a_jingpai_index"
    assert plan(MATCH, index=None, meta=None).augment_reason == "no_target_index"
    no_reranker = GatewaySettings(engine_url="http://e:9200")
    assert plan(MATCH, settings=no_reranker).reason == "no_reranker_configured"
    with pytest.raises(NotOursToJudge):
        plan({**MATCH, "size": "ten"})


def test_fusion_overrides_url_over_ext_over_index_over_gateway() -> None:
    assert plan(MATCH).fusion == FusionSpec()
    assert plan(MATCH, index="products").fusion == FusionSpec(mode="rrf", rrf_k=30)
    ext = {**MATCH, "ext": {"jingpai": {"fusion": "linear", "fusion_weight": 0.2}}}
    assert plan(ext, index="products").fusion == FusionSpec(mode="linear", weight=0.2, rrf_k=30)
    params = {"jingpai_fusion_weight": "0.9", "size": "5"}
    fusion = take_fusion(params)
    assert params == {"size": "5"}  # the gateway's parameters never reach the engine
    assert plan(ext, params, index="products", fusion_param=fusion).fusion == FusionSpec(mode="linear", weight=0.9, rrf_k=30)
    with pytest.raises(BadGatewayRequest, match=r"\?jingpai_rrf_k: Input should be greater than or equal to 1"):
        take_fusion({"jingpai_rrf_k": "0"})


def test_source_filters_are_widened_for_the_rerank_fields_and_folded_from_the_url() -> None:
    p = plan({**MATCH, "_source": ["id"]})
    assert (p.body["_source"], p.source.added, p.source.drop) == (["id", "title", "content"], ("title", "content"), False)
    p = plan(MATCH, {"_source": "false"})
    assert (p.body["_source"], p.source.drop, "_source" in p.params) == ({"includes": ["title", "content"]}, True, False)
    p = plan({**MATCH, "_source": {"excludes": ["content"]}})
    assert (p.fields, p.source.added) == (("title",), ())


def test_the_plan_is_frozen_and_leaves_the_request_alone() -> None:
    body = {**MATCH, "ext": {"jingpai": {"window": 10}, "other": 1}}
    search = parse_search("docs", body, {"filter_path": "hits.hits._id"}, settings=SETTINGS)
    p = plan_search(search, META, Planner(SETTINGS))
    assert body["ext"] == {"jingpai": {"window": 10}, "other": 1} and "from" not in search.body
    assert search.params == {"filter_path": "hits.hits._id"} and "filter_path" not in p.params and p.filter_path is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.reason = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.params["size"] = "1"  # type: ignore[index]
    unchanged = unchanged_plan(body, {}, "rerank")
    assert unchanged.body == {**MATCH, "ext": {"other": 1}} and unchanged.rewritten and unchanged.reason == "unsupported_request"


def test_meta_needs_every_physical_index_built_by_jingpai_and_keys_by_credentials() -> None:
    ours = {"mappings": {"_meta": {"jingpai": META.to_dict()}}}
    assert meta_of({"docs-1": ours, "docs-2": ours}, "docs") == META
    assert meta_of({"docs-1": ours, "other": {"mappings": {}}}, "docs") is None
    alice = Credentials.of([("Authorization", "Basic YQ=="), ("Accept", "application/json"), ("Connection", "close")])
    bob = Credentials.of([("authorization", "Basic Yg=="), ("accept", "application/json")])
    assert alice.headers == (("Authorization", "Basic YQ=="), ("Accept", "application/json"))
    assert alice.key != bob.key and alice.key == Credentials.of([("Authorization", "Basic YQ==")]).key
