"""The gateway against real engines (both kinds), a real rerank service and the official clients."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from elasticsearch import Elasticsearch
from opensearchpy import OpenSearch

from tests.plugin.conftest import Setup, ids, search

pytestmark = pytest.mark.engine

PHRASE = {"match_phrase": {"content": "中国GDP"}}
BROAD = {"match": {"content": "中国经济增长"}}


def official_client(setup: Setup):
    if setup.engine.kind == "elasticsearch":
        return Elasticsearch(setup.gateway_url, request_timeout=60)
    return OpenSearch([setup.gateway_url], timeout=60)


def client_search(client, index: str, body: dict) -> dict:
    if isinstance(client, Elasticsearch):
        return dict(client.search(index=index, **body))
    return dict(client.search(index=index, body=body))


# ------------------------------------------------------------------ augmentation


def test_augmentation_recalls_keyword_matches_through_official_client(setup: Setup) -> None:
    direct = setup.engine.search(setup.index, {"query": PHRASE, "size": 50})
    assert ids(direct) == ["d01"]  # the phrase alone misses d02
    client = official_client(setup)
    resp = client_search(client, setup.index, {"query": PHRASE, "size": 50})
    found = set(ids(resp))
    assert {"d01", "d02"} <= found  # d02 shares the dictionary keywords 中国 and GDP
    assert "d04" not in found
    info = resp["jingpai"]
    assert info["augmented"] is True
    assert set(info["keywords"]) >= {"中国", "GDP"}
    assert info["reranked"] is True


def test_augment_only_keeps_filters_and_must_not(setup: Setup) -> None:
    body = {"query": {"bool": {"must": [PHRASE], "must_not": [{"ids": {"values": ["d02"]}}]}}, "size": 50}
    resp = search(setup.gateway_url, setup.index, body, jingpai="augment")
    assert "d02" not in ids(resp) and "d01" in ids(resp)
    assert len(ids(resp)) > 1  # widened by keywords (other docs mention 中国 / GDP)
    assert resp["jingpai"]["reason"] == "augment_only" and resp["jingpai"]["reranked"] is False


def test_index_dictionary_not_loaded_falls_back_to_plain_query(setup: Setup, reranker_url: str) -> None:
    from jingpai.plugin.gateway import create_app
    from jingpai.plugin.settings import GatewaySettings
    from tests.plugin.conftest import serve

    app = create_app(GatewaySettings(engine_url=setup.engine.url, reranker_url=reranker_url, timeout_ms=20_000))
    with serve(app) as gw:
        resp = search(gw.url, setup.index, {"query": PHRASE})
    assert ids(resp) == ["d01"]
    assert resp["jingpai"]["augmented"] is False
    assert resp["jingpai"]["augment_reason"] == "dictionary_not_loaded"


# ------------------------------------------------------------------ reranking


def test_rerank_orders_window_by_model_scores(setup: Setup, rerank_model) -> None:
    engine_order = search(setup.gateway_url, setup.index, {"query": BROAD, "size": 20}, jingpai="augment")
    resp = search(setup.gateway_url, setup.index, {"query": BROAD, "size": 20}, jingpai_fusion="replace")
    info = resp["jingpai"]
    assert info["reranked"] is True and info["reason"] is None
    assert info["model"] == "tiny-cross" and info["window"] == 20 and info["took_rerank_ms"] >= 0
    assert info["fusion"] == {"mode": "replace"}
    hits = resp["hits"]["hits"]
    assert sorted(ids(resp)) == sorted(ids(engine_order))
    # the engine's own score and rank are kept on each hit
    engine_rank = {h["_id"]: (r, h["_score"]) for r, h in enumerate(engine_order["hits"]["hits"], start=1)}
    for hit in hits:
        rank, score = engine_rank[hit["_id"]]
        assert hit["_jingpai"]["engine_rank"] == rank
        assert hit["_jingpai"]["engine_score"] == pytest.approx(score)
    # the order is the model's: score each (query, title + content) pair directly
    texts = [f"{h['_source']['title']}\n{h['_source']['content']}" for h in engine_order["hits"]["hits"]]
    expected = rerank_model.predict([("中国经济增长", t) for t in texts])
    # (scores of a tiny random model can tie to 1e-7; batching may flip such ties, so compare scores, not ids)
    score_of = {h["_id"]: float(s) for h, s in zip(engine_order["hits"]["hits"], expected)}
    in_gateway_order = [score_of[i] for i in ids(resp)]
    assert all(a >= b - 1e-5 for a, b in zip(in_gateway_order, in_gateway_order[1:])), in_gateway_order
    # the gateway asks for normalised scores (raw_scores: false): the sigmoid of the model's logit
    normalised = sorted((1 / (1 + math.exp(-x)) for x in expected.tolist()), reverse=True)
    assert [h["_score"] for h in hits] == pytest.approx(normalised, abs=1e-4)
    assert [h["_jingpai"]["model_score"] for h in hits] == [h["_score"] for h in hits]
    assert ids(resp) != ids(engine_order)  # the model does reorder this window


def test_pages_inside_the_window_do_not_overlap(setup: Setup) -> None:
    body = {"query": BROAD}
    first = search(setup.gateway_url, setup.index, {**body, "from": 0, "size": 5})
    second = search(setup.gateway_url, setup.index, {**body, "from": 5, "size": 5})
    both = search(setup.gateway_url, setup.index, {**body, "from": 0, "size": 10})
    assert len(ids(first)) == len(ids(second)) == 5
    assert not set(ids(first)) & set(ids(second))
    assert ids(first) + ids(second) == ids(both)
    assert first["jingpai"]["window"] == second["jingpai"]["window"] == 20


def test_pages_past_the_window_continue_in_engine_order_and_url_params(setup: Setup) -> None:
    engine = search(setup.gateway_url, setup.index, {"query": BROAD, "size": 30}, jingpai="augment")
    window = search(setup.gateway_url, setup.index, {"query": BROAD, "size": 20})
    beyond = search(setup.gateway_url, setup.index, {"query": BROAD}, **{"from": "20", "size": "5"})
    assert beyond["jingpai"]["window"] == 20 and beyond["jingpai"]["reranked"] is False
    assert beyond["jingpai"]["reason"] == "beyond_window"
    assert ids(beyond) == ids(engine)[20:25]
    straddling = search(setup.gateway_url, setup.index, {"query": BROAD}, **{"from": "15", "size": "10"})
    assert straddling["jingpai"]["window"] == 20 and straddling["jingpai"]["reranked"] is True
    assert ids(straddling) == ids(window)[15:20] + ids(engine)[20:25]
    assert all("_jingpai" not in h for h in straddling["hits"]["hits"][5:])  # past the window: the engine's hits


def test_ext_jingpai_is_stripped_and_applied(setup: Setup) -> None:
    body = {"query": BROAD, "size": 3, "ext": {"jingpai": {"window": 6, "fields": ["title"], "query": "银行利率"}}}
    resp = search(setup.gateway_url, setup.index, body)  # the engine would reject an unknown ext section
    assert resp["jingpai"]["window"] == 6 and resp["jingpai"]["reranked"] is True
    assert len(ids(resp)) == 3


def test_bad_ext_jingpai_is_a_400_naming_the_field(setup: Setup) -> None:
    resp = httpx.post(f"{setup.gateway_url}/{setup.index}/_search", json={"query": BROAD, "ext": {"jingpai": {"window": 0, "colour": 1}}})
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "jingpai_illegal_argument_exception"
    assert "window: Input should be greater than or equal to 1 (got 0)" in error["reason"]
    assert "colour: Extra inputs are not permitted" in error["reason"]
    bad_mode = httpx.get(f"{setup.gateway_url}/{setup.index}/_search", params={"jingpai": "fast"})
    assert bad_mode.status_code == 400
    assert bad_mode.json()["error"]["reason"] == "unknown ?jingpai='fast'; expected one of off, augment, rerank"


def test_jingpai_off_is_exactly_the_engine(setup: Setup) -> None:
    body = {"query": BROAD, "size": 7}
    direct = setup.engine.search(setup.index, body)
    resp = search(setup.gateway_url, setup.index, body, jingpai="off")
    assert resp["hits"] == direct["hits"]
    assert resp["jingpai"] == {
        "mode": "off", "reranked": False, "reason": "disabled", "augmented": False, "augment_reason": None,
        "keywords": [], "model": None, "window": None, "took_rerank_ms": None, "fusion": None,
    }
    # the same answer whether the body is forwarded unread (above) or read and planned: an ext.jingpai
    # section is taken off (the engine would refuse it), an escaped one too
    with_ext = search(setup.gateway_url, setup.index, {**body, "ext": {"jingpai": {"window": 5}}}, jingpai="off")
    raw = json.dumps({**body, "ext": {"jingpai": {"window": 5}}}).replace('"jingpai"', '"\\u006aingpai"')
    escaped = httpx.post(f"{setup.gateway_url}/{setup.index}/_search", params={"jingpai": "off"}, content=raw,
                         headers={"content-type": "application/json"})
    assert escaped.status_code == 200, escaped.text
    for resp in (with_ext, escaped.json()):
        assert resp["hits"] == direct["hits"] and resp["jingpai"]["reason"] == "disabled"


@pytest.mark.parametrize(
    ("extra", "params", "reason"),
    [
        ({"sort": [{"jingpai.keywords": "asc"}]}, {}, "sort"),
        ({"search_after": [3], "sort": ["_doc"]}, {}, "search_after"),
        ({"size": 0}, {}, "size_0"),
        ({"size": 0, "aggs": {"n": {"terms": {"field": "jingpai.keywords"}}}}, {}, "aggregations_only"),
        ({}, {"scroll": "1m"}, "scroll"),
    ],
)
def test_not_reranked_cases_return_engine_results(setup: Setup, extra: dict, params: dict, reason: str) -> None:
    body = {"query": BROAD, **extra}
    reference = search(setup.gateway_url, setup.index, body, jingpai="augment", **params)
    resp = search(setup.gateway_url, setup.index, body, **params)
    assert resp["jingpai"]["reranked"] is False and resp["jingpai"]["reason"] == reason
    assert resp["hits"]["hits"] == reference["hits"]["hits"]
    assert "aggregations" not in resp or resp["aggregations"] == reference["aggregations"]


def test_point_in_time_search_is_not_reranked(setup: Setup) -> None:
    gw = setup.gateway_url
    if setup.engine.kind == "elasticsearch":
        pit = httpx.post(f"{gw}/{setup.index}/_pit", params={"keep_alive": "1m"}).json()["id"]
    else:
        pit = httpx.post(f"{gw}/{setup.index}/_search/point_in_time", params={"keep_alive": "1m"}).json()["pit_id"]
    resp = httpx.post(f"{gw}/_search", json={"query": BROAD, "pit": {"id": pit, "keep_alive": "1m"}}).json()
    assert resp["jingpai"]["reason"] == "pit" and resp["jingpai"]["reranked"] is False
    assert len(resp["hits"]["hits"]) == 10


def test_plain_index_passes_unchanged(setup: Setup) -> None:
    body = {"query": BROAD, "size": 5}
    direct = setup.engine.search(setup.plain_index, body)
    resp = search(setup.gateway_url, setup.plain_index, body)
    assert resp["hits"] == direct["hits"]
    assert resp["jingpai"]["reason"] == "not_a_jingpai_index"


# ------------------------------------------------------------------ msearch


def test_msearch_reranks_each_search(setup: Setup) -> None:
    client = official_client(setup)
    searches = [
        {"index": setup.index}, {"query": BROAD, "size": 5},
        {"index": setup.index}, {"query": BROAD, "size": 5, "sort": [{"jingpai.keywords": "asc"}]},
        {"index": setup.plain_index}, {"query": BROAD, "size": 5},
        {"index": "no-such-index-jingpai"}, {"query": BROAD},
    ]
    if isinstance(client, Elasticsearch):
        resp = dict(client.msearch(searches=searches))
    else:
        resp = dict(client.msearch(body=searches))
    first, second, third, fourth = resp["responses"]
    single = search(setup.gateway_url, setup.index, {"query": BROAD, "size": 5})
    assert first["jingpai"]["reranked"] is True and ids(first) == ids(single)
    assert second["jingpai"]["reason"] == "sort"
    assert third["jingpai"]["reason"] == "not_a_jingpai_index"
    assert fourth["status"] == 404 and fourth["error"]["type"] == "index_not_found_exception"


# ------------------------------------------------------------------ pass-through


def test_other_apis_pass_through_unchanged(setup: Setup) -> None:
    gw, direct = setup.gateway_url, setup.engine.url
    cat_gw = httpx.get(f"{gw}/_cat/indices/{setup.index}*", params={"format": "json", "h": "index,docs.count"})
    cat_direct = httpx.get(f"{direct}/_cat/indices/{setup.index}*", params={"format": "json", "h": "index,docs.count"})
    assert cat_gw.status_code == 200 and cat_gw.json() == cat_direct.json()
    doc_gw = httpx.get(f"{gw}/{setup.index}/_doc/d02")
    assert doc_gw.json() == httpx.get(f"{direct}/{setup.index}/_doc/d02").json()
    missing_gw = httpx.post(f"{gw}/no-such-index-jingpai/_search", json={"query": BROAD})
    missing_direct = httpx.post(f"{direct}/no-such-index-jingpai/_search", json={"query": BROAD})
    assert missing_gw.status_code == missing_direct.status_code == 404
    assert missing_gw.json() == missing_direct.json()
    bad_gw = httpx.post(f"{gw}/{setup.index}/_search", content=b"{not json", headers={"content-type": "application/json"})
    bad_direct = httpx.post(f"{direct}/{setup.index}/_search", content=b"{not json", headers={"content-type": "application/json"})
    assert bad_gw.status_code == bad_direct.status_code and bad_gw.status_code >= 400
    assert bad_gw.json()["error"]["type"] == bad_direct.json()["error"]["type"]


def test_official_client_index_lifecycle_through_gateway(setup: Setup) -> None:
    client = official_client(setup)
    name = f"{setup.index}-client"
    if isinstance(client, Elasticsearch):
        client.indices.create(index=name, mappings={"properties": {"t": {"type": "text"}}})
        client.index(index=name, id="1", document={"t": "银行利率"}, refresh=True)
    else:
        client.indices.create(index=name, body={"mappings": {"properties": {"t": {"type": "text"}}}})
        client.index(index=name, id="1", body={"t": "银行利率"}, refresh=True)
    assert client.indices.exists(index=name)
    assert client.get(index=name, id="1")["_source"] == {"t": "银行利率"}
    assert client.count(index=name)["count"] == 1
    client.indices.delete(index=name)
    assert not client.indices.exists(index=name)
