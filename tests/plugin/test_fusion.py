"""Score fusion in the gateway and paging past the rerank window (real engines, real tiny reranker)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

from jingpai.engine.client import Engine
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.plugin.gateway import create_app
from jingpai.plugin.settings import GatewaySettings
from tests.plugin.conftest import TOPICS, Setup, ids, search, serve

pytestmark = pytest.mark.engine

BROAD = {"match": {"content": "中国经济增长"}}


def min_max(values: list[float]) -> list[float]:
    low, high = min(values), max(values)
    return [1.0 if high == low else (v - low) / (high - low) for v in values]


def assert_sorted_by_score_then_engine_rank(hits: list[dict]) -> None:
    keys = [(-h["_score"], h["_jingpai"]["engine_rank"]) for h in hits]
    assert keys == sorted(keys)


# ------------------------------------------------------------------ fusion


def test_default_fusion_is_linear_half_over_the_window(setup: Setup) -> None:
    resp = search(setup.gateway_url, setup.index, {"query": BROAD, "size": 20})  # the whole window of 20
    assert resp["jingpai"]["reranked"] is True
    assert resp["jingpai"]["fusion"] == {"mode": "linear", "weight": 0.5}
    hits = resp["hits"]["hits"]
    engine = search(setup.gateway_url, setup.index, {"query": BROAD, "size": 20}, jingpai="augment")["hits"]["hits"]
    assert sorted(h["_jingpai"]["engine_rank"] for h in hits) == list(range(1, len(engine) + 1))
    for hit in hits:
        assert hit["_jingpai"]["engine_score"] == pytest.approx(engine[hit["_jingpai"]["engine_rank"] - 1]["_score"])
    engine_norm = min_max([h["_jingpai"]["engine_score"] for h in hits])
    model_norm = min_max([h["_jingpai"]["model_score"] for h in hits])
    assert [h["_score"] for h in hits] == pytest.approx([0.5 * e + 0.5 * m for e, m in zip(engine_norm, model_norm)])
    assert_sorted_by_score_then_engine_rank(hits)
    assert resp["hits"]["max_score"] == pytest.approx(hits[0]["_score"])


def test_rrf_from_ext_and_url_parameters_win_over_ext(setup: Setup) -> None:
    body = {"query": BROAD, "size": 20, "ext": {"jingpai": {"fusion": "rrf", "rrf_k": 10, "fusion_weight": 0.5}}}
    resp = search(setup.gateway_url, setup.index, body)
    assert resp["jingpai"]["fusion"] == {"mode": "rrf", "weight": 0.5, "rrf_k": 10}
    hits = resp["hits"]["hits"]
    by_model = sorted(hits, key=lambda h: (-h["_jingpai"]["model_score"], h["_jingpai"]["engine_rank"]))
    model_rank = {h["_id"]: r for r, h in enumerate(by_model, start=1)}
    expected = [1 / (10 + h["_jingpai"]["engine_rank"]) + 1 / (10 + model_rank[h["_id"]]) for h in hits]
    assert [h["_score"] for h in hits] == pytest.approx(expected)
    assert_sorted_by_score_then_engine_rank(hits)
    replaced = search(setup.gateway_url, setup.index, body, jingpai_fusion="replace")
    assert replaced["jingpai"]["fusion"] == {"mode": "replace"}
    assert all(h["_score"] == h["_jingpai"]["model_score"] for h in replaced["hits"]["hits"])


def test_engine_weight_one_never_loses_to_the_engine(setup: Setup) -> None:
    engine = search(setup.gateway_url, setup.index, {"query": BROAD, "size": 10}, jingpai="augment")
    for mode in ("linear", "rrf"):
        resp = search(setup.gateway_url, setup.index, {"query": BROAD, "size": 10}, jingpai_fusion=mode, jingpai_fusion_weight="1.0")
        assert resp["jingpai"]["reranked"] is True and resp["jingpai"]["fusion"]["weight"] == 1.0
        assert ids(resp) == ids(engine)


def test_index_overrides_sit_between_the_gateway_and_the_request(setup: Setup, reranker_url: str, dictionary) -> None:
    settings = GatewaySettings(
        engine_url=setup.engine.url, reranker_url=reranker_url, dict_dirs=(dictionary[1],), timeout_ms=20_000,
        fusion="replace", indices={"no-such-index": {"fusion": "linear"}, "test-gw-*": {"fusion": "rrf", "rrf_k": 7}},
    )
    with serve(create_app(settings)) as gw:
        by_index = search(gw.url, setup.index, {"query": BROAD})
        by_request = search(gw.url, setup.index, {"query": BROAD, "ext": {"jingpai": {"fusion_weight": 0.2}}})
        by_url = search(gw.url, setup.index, {"query": BROAD, "ext": {"jingpai": {"rrf_k": 9}}}, jingpai_rrf_k="11")
    assert by_index["jingpai"]["fusion"] == {"mode": "rrf", "weight": 0.5, "rrf_k": 7}
    assert by_request["jingpai"]["fusion"] == {"mode": "rrf", "weight": 0.2, "rrf_k": 7}
    assert by_url["jingpai"]["fusion"] == {"mode": "rrf", "weight": 0.5, "rrf_k": 11}


def test_bad_fusion_values_are_400_naming_them(setup: Setup) -> None:
    url = f"{setup.gateway_url}/{setup.index}/_search"
    resp = httpx.post(url, json={"query": BROAD}, params={"jingpai_fusion": "sum", "jingpai_rrf_k": "0"})
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "jingpai_illegal_argument_exception"
    assert resp.json()["error"]["reason"] == (
        "invalid fusion parameter: ?jingpai_fusion: Input should be 'replace', 'linear' or 'rrf' (got 'sum'); "
        "?jingpai_rrf_k: Input should be greater than or equal to 1 (got '0')"
    )
    resp = httpx.post(url, json={"query": BROAD, "ext": {"jingpai": {"fusion_weight": 1.5}}})
    assert resp.status_code == 400
    assert resp.json()["error"]["reason"].startswith(
        "invalid ext.jingpai: fusion_weight: Input should be less than or equal to 1 (got 1.5); valid keys: fusion, fusion_weight, rrf_k, mode"
    )


def test_msearch_takes_url_fusion_parameters_and_does_not_forward_them(setup: Setup) -> None:
    lines = [{"index": setup.index}, {"query": BROAD, "size": 5}]
    payload = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
    resp = httpx.post(f"{setup.gateway_url}/_msearch", content=payload.encode(), params={"jingpai_fusion": "replace"},
                      headers={"content-type": "application/x-ndjson"}, timeout=60)
    assert resp.status_code == 200, resp.text
    (first,) = resp.json()["responses"]
    assert first["jingpai"]["fusion"] == {"mode": "replace"}


# ------------------------------------------------------------------ paging past the window

N_DOCS = 130


@pytest.fixture(scope="module")
def paging_indices(engines: dict[str, Engine], dictionary, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """130 documents that all match 经济, on both engines."""
    d, _ = dictionary
    tmp = tmp_path_factory.mktemp("paging")
    path = tmp / "docs.jsonl"
    docs = [
        {"id": f"p{i:03d}", "title": f"{TOPICS[i % len(TOPICS)]}第{i}期",
         "content": "经济" + "评论" * (i % 7) + f"{TOPICS[(i * 3) % len(TOPICS)]}，第{i}号，经济" * (1 + i % 3)}
        for i in range(N_DOCS)
    ]
    path.write_text("".join(json.dumps(doc, ensure_ascii=False) + "\n" for doc in docs), encoding="utf-8")
    made: dict[str, str] = {}
    for kind, engine in engines.items():
        alias = f"test-page-{uuid.uuid4().hex[:8]}"
        settings = IndexSettings(index=alias, text_fields=("title", "content"), id_field="id", quarantine_dir=tmp, progress=False)
        assert index_corpus(engine, [path], settings, dictionary=d).indexed == N_DOCS
        engine.refresh(alias)
        made[kind] = alias
    yield made
    for kind, alias in made.items():
        engines[kind].raw.indices.delete(index=f"{alias}*")


@pytest.mark.parametrize("size", [10, 15])
def test_paging_through_all_hits_repeats_and_misses_nothing(setup: Setup, paging_indices: dict[str, str], size: int) -> None:
    index, body = paging_indices[setup.engine.kind], {"query": {"match": {"content": "经济"}}}
    everything = search(setup.gateway_url, index, {**body, "size": N_DOCS}, jingpai="off")
    assert len(ids(everything)) == N_DOCS
    seen: list[str] = []
    reasons = []
    for start in range(0, N_DOCS, size):
        page = search(setup.gateway_url, index, {**body, "from": start, "size": size})
        seen += ids(page)
        reasons.append(page["jingpai"]["reason"])
    assert len(seen) == len(set(seen)) == N_DOCS
    assert set(seen) == set(ids(everything))
    in_window = -(-20 // size)  # pages that start inside the window of 20 are reranked
    assert reasons == [None] * in_window + ["beyond_window"] * (len(reasons) - in_window)


def test_pages_inside_the_window_are_stable(setup: Setup, paging_indices: dict[str, str]) -> None:
    index, body = paging_indices[setup.engine.kind], {"query": {"match": {"content": "经济"}}}
    first = [ids(search(setup.gateway_url, index, {**body, "from": start, "size": 10})) for start in (0, 10)]
    again = [ids(search(setup.gateway_url, index, {**body, "from": start, "size": 10})) for start in (0, 10)]
    assert first == again
    whole = search(setup.gateway_url, index, {**body, "size": 20})
    assert first[0] + first[1] == ids(whole)
