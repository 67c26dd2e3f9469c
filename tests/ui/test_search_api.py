"""The UI's search API on a real indexed corpus, real engines (both kinds), a real rerank service and the
gateway's own search path."""

from __future__ import annotations

import httpx
import pytest

from jingpai.ui.app import CSP, UiSettings

from .conftest import IMG_CONTENT, SCRIPT_TITLE, start_gateway

pytestmark = pytest.mark.engine


def text(segments: list[dict]) -> str:
    return "".join(s["text"] for s in segments)


def test_indices_lists_the_jingpai_index_as_default(ui_setup):
    resp = httpx.get(f"{ui_setup.ui}api/indices", timeout=30)
    assert resp.status_code == 200
    assert resp.headers["content-security-policy"] == CSP
    data = resp.json()
    assert data["default"] == ui_setup.index
    choice = next(c for c in data["indices"] if c["name"] == ui_setup.index)
    assert choice == {"name": ui_setup.index, "jingpai": True, "text_fields": ["title", "content"]}
    assert not any(c["name"].startswith(".") for c in data["indices"])


def test_search_returns_both_orders_with_scores_and_moves(ui_setup):
    resp = ui_setup.search(q="苹果 手机", size=8)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["query"] == "苹果 手机" and data["index"] == ui_setup.index
    assert data["reranked"] is True and data["reason"] is None and data["banner"] is None
    assert data["model"] == "tiny-ui"
    assert "苹果" in data["keywords"] and "手机" in data["keywords"]

    engine, jingpai = data["engine"], data["jingpai"]
    assert engine["mode"] == "off" and jingpai["mode"] == "rerank"
    assert len(engine["hits"]) == 8 and len(jingpai["hits"]) == 8

    # the engine column is exactly what the engine answers for the same query
    direct = ui_setup.engine.search(ui_setup.index, {"query": {"multi_match": {"query": "苹果 手机", "fields": ["title", "content"]}}, "size": 8})
    assert [h["id"] for h in engine["hits"]] == [h["_id"] for h in direct["hits"]["hits"]]
    assert [h["engine_score"] for h in engine["hits"]] == pytest.approx([h["_score"] for h in direct["hits"]["hits"]])

    scores = [h["fused_score"] for h in jingpai["hits"]]
    assert all(isinstance(s, float) for s in scores)
    assert scores == sorted(scores, reverse=True)
    # the gateway's default fusion (linear, engine weight 0.5) ran, and each hit has all three scores
    assert data["fusion"] == {"mode": "linear", "weight": 0.5}
    assert all(isinstance(h["engine_score"], float) and isinstance(h["model_score"], float) for h in jingpai["hits"])
    for rank, hit in enumerate(jingpai["hits"], start=1):
        assert hit["rank"] == rank
        if hit["new"]:
            assert hit["engine_rank"] is None and hit["moved"] is None
        else:
            assert hit["moved"] == hit["engine_rank"] - rank
    # a hit in both columns shows its model and fused scores on the engine side too
    shared = {h["id"]: (h["model_score"], h["fused_score"]) for h in jingpai["hits"]}
    for hit in engine["hits"]:
        assert (hit["model_score"], hit["fused_score"]) == shared.get(hit["id"], (None, None))


def test_keywords_are_marked_in_titles_and_snippets(ui_setup):
    data = ui_setup.search(q="苹果 手机").json()
    marked = [s["text"] for h in data["jingpai"]["hits"] for s in h["title"] + h["snippet"] if s["kw"]]
    assert marked and set(marked) <= set(data["keywords"])
    hit = data["engine"]["hits"][0]
    assert hit["category"] and hit["date"]


def test_rerank_off_keeps_augmentation(ui_setup):
    data = ui_setup.search(q="苹果 手机", rerank="false").json()
    assert data["jingpai"]["mode"] == "augment"
    assert data["reranked"] is False and data["reason"] == "augment_only" and data["banner"] is None
    assert data["augmented"] is True
    assert all(h["model_score"] is None and h["fused_score"] is None for h in data["jingpai"]["hits"])
    assert data["fusion"] is None


def test_everything_off_gives_the_engine_order_twice(ui_setup):
    data = ui_setup.search(q="苹果 手机", rerank="false", augment="false").json()
    assert data["jingpai"]["mode"] == "off"
    assert [h["id"] for h in data["jingpai"]["hits"]] == [h["id"] for h in data["engine"]["hits"]]
    assert all(h["moved"] == 0 for h in data["jingpai"]["hits"])


def test_hostile_strings_come_back_as_data(ui_setup):
    query = '<script>alert(1)</script>"><img src=x onerror=alert(2)> 360公司'
    resp = ui_setup.search(q=query, size=50)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.headers["content-security-policy"] == CSP
    data = resp.json()
    assert data["query"] == query
    hostile = next(h for h in data["engine"]["hits"] if h["id"] == "hostile-1")
    assert text(hostile["title"]) == SCRIPT_TITLE
    assert text(hostile["snippet"]) == IMG_CONTENT


def test_bad_parameters_name_the_problem(ui_setup):
    resp = httpx.get(f"{ui_setup.ui}api/search", params={"index": ui_setup.index}, timeout=30)
    assert resp.status_code == 422
    assert resp.json()["error"].startswith("invalid search parameters: q: Field required")
    resp = ui_setup.search(q="x", index="bad/index")
    assert resp.status_code == 422
    assert "index 'bad/index' is not a valid index name" in resp.json()["error"]
    resp = ui_setup.search(q="x", size=500)
    assert resp.status_code == 422 and resp.json()["error"] == "size 500 exceeds the UI's max_size 50"
    resp = ui_setup.search(q="x", index="no-such-index-ui")
    assert resp.status_code == 404
    assert resp.json()["error"].startswith("reading the mapping of index 'no-such-index-ui' failed: HTTP 404")


def test_reranker_down_shows_the_fail_open_banner(ui_setup, demo_dictionary):
    _, dict_dir = demo_dictionary
    from jingpai.engine.harness import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    server = start_gateway(ui_setup.engine.url, dead, dict_dir, timeout_ms=500)
    try:
        data = httpx.get(f"{server.url}/_jingpai/ui/api/search", params={"q": "苹果 手机", "index": ui_setup.index}, timeout=60).json()
    finally:
        server.stop()
    assert data["reranked"] is False
    assert data["banner"].startswith(f"Reranker unavailable ({data['reason']}): the jingpai column shows the engine order (fail-open).")
    assert data["augmented"] is True
    assert all(h["model_score"] is None and h["fused_score"] is None for h in data["jingpai"]["hits"])
    assert data["fusion"] is None


@pytest.mark.parametrize(("case", "reason"), [("infinity", "reranker_bad_response"), ("trickle_one_byte_per_200ms", "reranker_timeout")])
def test_a_faulty_reranker_shows_the_fail_open_banner(ui_setup, demo_dictionary, case: str, reason: str):
    """Issue 53 through the UI's search (the gateway's path in-process): a score of Infinity was the gateway's 500, a
    trickled body held the search far past timeout_ms; both are now the engine order with the fail-open banner."""
    import time

    from bench.standin_reranker import StandIn

    _, dict_dir = demo_dictionary
    with StandIn(case) as standin:
        server = start_gateway(ui_setup.engine.url, standin.url, dict_dir, timeout_ms=500)
        try:
            started = time.monotonic()
            resp = httpx.get(f"{server.url}/_jingpai/ui/api/search", params={"q": "苹果 手机", "index": ui_setup.index}, timeout=60)
            took = time.monotonic() - started
        finally:
            server.stop()
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert (data["reranked"], data["reason"]) == (False, reason)
    assert data["banner"] == f"Reranker unavailable ({reason}): the jingpai column shows the engine order (fail-open)."
    assert all(h["model_score"] is None for h in data["jingpai"]["hits"])
    assert took < 0.5 + 3.0, f"{case} held the UI's search {took:.1f} s"  # the trickle alone would take minutes


def test_no_reranker_configured_banner_and_ui_banner(ui_setup, demo_dictionary):
    _, dict_dir = demo_dictionary
    server = start_gateway(ui_setup.engine.url, None, dict_dir, ui=UiSettings(banner="Demo without a model."))
    try:
        data = httpx.get(f"{server.url}/_jingpai/ui/api/search", params={"q": "苹果", "index": ui_setup.index}, timeout=60).json()
        indices = httpx.get(f"{server.url}/_jingpai/ui/api/indices", timeout=30).json()
    finally:
        server.stop()
    assert data["reason"] == "no_reranker_configured"
    assert data["banner"] == (
        "Demo without a model. Reranker unavailable (the gateway has no reranker configured): the jingpai column shows the engine order."
    )
    assert indices["banner"] == "Demo without a model."
