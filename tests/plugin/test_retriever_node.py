"""The jingpai Elasticsearch plugin (the ``jingpai`` retriever) on a real node, against the gateway (the reference).

One Elasticsearch 8.19.21 node is started by the harness with ``--plugins jingpai`` (the plugin built from
java/elasticsearch-plugin with Maven) on a free port in 9280–9289, on the Basic licence it starts with; the tiny corpus
of the gateway tests is indexed with ``jingpai index`` into a **2-shard** index (the rerank window is global: the top
hits of both shards); the real rerank service serves the tiny cross-encoder; one gateway answers the same searches.
Nothing is mocked. ``jingpai plugin retriever`` uploads the dictionary and gives the retriever; each search sends the
gateway's query as the retriever's inner ``standard`` query, with the same from / size / ext.jingpai.

Reuse a node you run (``jingpai engine up --kind elasticsearch --plugins jingpai``) with
``JINGPAI_TEST_ELASTICSEARCH_JINGPAI_URL``. Skipped (with the reason) only without ``mvn`` / ``java``.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine import harness
from jingpai.engine.client import Engine
from jingpai.reranker.service import create_app as create_service_app
from jingpai.serving import serve
from tests.plugin.conftest import NODE_EXT_SEARCHES, NODE_QUERIES, Searches, gateway_answers_for, ids, index_with_cli, plugin_node

PORTS = range(9280, 9290)
#: generous: the tiny CPU reranker shares two cores with other work, and a timeout would fail open
TIMEOUT_MS = 20_000
QUERIES = [
    *NODE_QUERIES,
    # after the page inside the window: one across its end (reranked hits, then the engine's order and scores), and one
    # past it (the engine's own page, beyond_window)
    {"query": {"match": {"content": "中国经济"}}, "from": 15, "size": 10},
    {"query": {"match": {"content": "中国经济"}}, "from": 25, "size": 5},
]
FUSIONS = ("linear", "rrf")
EXT_SEARCHES = NODE_EXT_SEARCHES
#: invalid ext.jingpai and the field both 400s name (the shared Overrides' checks: the field, then the valid keys, as
#: the OpenSearch plugin's; the problem's wording is pydantic's in the gateway)
BAD_EXT = [({"window": 0}, "window"), ({"fusion": "sum"}, "fusion"), ({"widow": 5}, "widow")]
BREAKER_RESET_S = 60
#: the reasons of the searches to a dead reranker, in order, with the default breaker (3 failures open it); the last
#: page starts past the window: the engine's own, nothing sent
DEAD_REASONS = ["reranker_unreachable"] * 3 + ["circuit_open"] * (len(QUERIES) - 4) + ["beyond_window"]


@pytest.fixture(scope="module")
def node() -> Iterator[Engine]:
    """An Elasticsearch node WITH the jingpai plugin, built from this checkout's java/elasticsearch-plugin."""
    yield from plugin_node("elasticsearch", PORTS, "JINGPAI_TEST_ELASTICSEARCH_JINGPAI_URL")


@pytest.fixture(scope="module")
def index(node: Engine, dictionary, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway tests' corpus indexed by ``jingpai index`` with their dictionary, on 2 shards."""
    _, dict_dir = dictionary
    alias = f"test-retriever-{uuid.uuid4().hex[:8]}"
    node.request("PUT", f"/_index_template/{alias}", body={"index_patterns": [f"{alias}*"], "priority": 500,
                                                           "template": {"settings": {"number_of_shards": 2, "number_of_replicas": 0}}})
    yield index_with_cli(node, dict_dir, tmp_path_factory.mktemp("retriever-corpus"), alias)
    node.raw.indices.delete(index=f"{alias}*")
    node.request("DELETE", f"/_index_template/{alias}")
    node.raw.options(ignore_status=404).delete(index="jingpai-dictionaries", id=alias)


@pytest.fixture(scope="module")
def gateway_answers(node: Engine, index: str, reranker_url: str, unreachable: str, dictionary) -> dict[tuple[str, int], dict]:
    """The gateway's answers on the same index (:func:`tests.plugin.conftest.gateway_answers_for`)."""
    return gateway_answers_for(node, index, dictionary[1], Searches(QUERIES, EXT_SEARCHES, [ext for ext, _ in BAD_EXT], FUSIONS),
                               reranker_url=reranker_url, unreachable=unreachable, timeout_ms=TIMEOUT_MS, breaker_reset_s=BREAKER_RESET_S)


def _retriever(node: Engine, index: str, dict_dir: Path, *extra: str) -> dict:
    """``jingpai plugin retriever``'s output (the dictionary uploaded, the retriever printed)."""
    result = CliRunner().invoke(cli, ["plugin", "retriever", "--index", index, "--dict", str(dict_dir), "--engine", node.url,
                                      "--timeout-ms", str(TIMEOUT_MS), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _search(node: Engine, index: str, retriever: dict, body: dict) -> tuple[dict, dict]:
    """``body`` sent through ``retriever`` (its query as the inner standard retriever's): the answer and X-Jingpai."""
    search = {k: v for k, v in body.items() if k != "query"}
    search["retriever"] = copy.deepcopy(retriever)
    search["retriever"]["jingpai"]["retriever"] = {"standard": {"query": body["query"]}}
    resp = httpx.post(f"{node.url}/{index}/_search", json=search, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp.json(), json.loads(resp.headers["x-jingpai"])


def _pairs(resp: dict) -> list[tuple[str, float]]:
    return [(h["_id"], h["_score"]) for h in resp["hits"]["hits"]]


def _assert_same_hits(mine: dict, gateway: dict, what: str) -> None:
    """The same ids in the same order (ties included: the rank-feature phase keeps the gateway's order), scores within
    1e-5, the same ``_source``."""
    assert _pairs(mine) and [h["_id"] for h in mine["hits"]["hits"]] == [h["_id"] for h in gateway["hits"]["hits"]], (
        f"{what}: {_pairs(mine)} != the gateway's {_pairs(gateway)}")
    for hit, ref in zip(mine["hits"]["hits"], gateway["hits"]["hits"]):
        assert hit["_score"] == pytest.approx(ref["_score"], rel=0, abs=1e-5), f"{what}: {hit['_id']}"
        assert hit["_source"] == ref["_source"], f"{what}: {hit['_id']}"


def _assert_same_hit_info(info: dict, gateway: dict, what: str) -> None:
    """X-Jingpai's ``hits``: each page hit's gateway ``_jingpai`` in the page's order (engine rank, engine and model
    scores within 1e-5; null for a hit past the window, which the gateway gives none)."""
    ref = [h.get("_jingpai") for h in gateway["hits"]["hits"]]
    assert len(info["hits"]) == len(ref) and any(ref), (what, info["hits"])
    for mine, theirs in zip(info["hits"], ref):
        if theirs is None:
            assert mine is None, (what, info["hits"])
            continue
        assert mine["engine_rank"] == theirs["engine_rank"], (what, mine, theirs)
        for key in ("engine_score", "model_score"):
            assert mine[key] == pytest.approx(theirs[key], rel=0, abs=1e-5), (what, key, mine, theirs)


def test_the_node_loads_the_plugin_on_the_basic_licence(node: Engine) -> None:
    assert "jingpai" in harness.loaded_plugins(node.url)
    assert node.request("GET", "/_license")["license"]["type"] == "basic"


def test_augmentation_alone_matches_the_gateway(node: Engine, index: str, gateway_answers, dictionary) -> None:
    """``--mode augment``: the retriever rewrites each query as the gateway's augment mode (no reranker needed)."""
    _, dict_dir = dictionary
    written = _retriever(node, index, dict_dir, "--mode", "augment")
    assert written["retriever"]["jingpai"]["mode"] == "augment" and "reranker_url" not in written["retriever"]["jingpai"]
    for i, body in enumerate(QUERIES):
        mine, info = _search(node, index, written["retriever"], body)
        reference = gateway_answers[("augment", i)]
        assert reference["jingpai"]["augmented"] and info["augmented"], (body, info)
        assert info["keywords"] == reference["jingpai"]["keywords"] and info["reason"] == "augment_only", (body, info)
        _assert_same_hits(mine, reference, f"augment {body}")
        assert mine["hits"]["total"] == reference["hits"]["total"], body


@pytest.mark.parametrize("fusion", FUSIONS)
def test_rerank_matches_the_gateway(node: Engine, index: str, gateway_answers, reranker_url: str, dictionary, fusion: str) -> None:
    """The retriever's pages equal the gateway's (ids, order, scores within 1e-5) on a 2-shard index — a page inside the
    window, one across its end and one past it, rrf's ties in the gateway's order; the dictionary is uploaded once (a
    second run finds its version there)."""
    _, dict_dir = dictionary
    written = _retriever(node, index, dict_dir, "--reranker", reranker_url, "--fusion", fusion)
    assert written["retriever"]["jingpai"]["fusion"] == fusion
    assert _retriever(node, index, dict_dir, "--reranker", reranker_url, "--fusion", fusion)["uploaded"] is False
    reordered, ties, across = 0, 0, 0
    for i, body in enumerate(QUERIES):
        mine, info = _search(node, index, written["retriever"], body)
        scores = [h["_score"] for h in mine["hits"]["hits"]]
        ties += any(a == b for a, b in pairwise(scores))
        if body.get("from", 0) < 20 < body.get("from", 0) + body.get("size", 10):
            # fused scores, then the engine's: a page a sort by score would reorder (the case it pins)
            across += scores != sorted(scores, reverse=True)
        reference = gateway_answers[(fusion, i)]
        ref_info = reference["jingpai"]
        assert info["reranked"] is ref_info["reranked"], (body, info, ref_info)
        assert info["keywords"] == ref_info["keywords"] and info["augmented"] == ref_info["augmented"], body
        assert info["reason"] == ref_info["reason"], (body, info, ref_info)
        if ref_info["reranked"]:
            assert info["fusion"] == ref_info["fusion"] and info["window"] == ref_info["window"], body
        _assert_same_hits(mine, reference, f"{fusion} {body}")
        if ref_info["reranked"]:
            _assert_same_hit_info(info, reference, f"{fusion} {body}")
        reordered += ids(mine) != ids(gateway_answers[("augment", i)])
    assert reordered > 0, "the reranker changed no page: the comparison would not see a fusion bug"
    assert across == 1, "the page across the window's end is in score order: it would not see a re-sort by score"
    if fusion == "rrf":
        assert ties > 0, "no rrf page has tied scores: the comparison would not see a tie order that is not the gateway's"


def test_ext_jingpai_overrides_match_the_gateway(node: Engine, index: str, gateway_answers, reranker_url: str, dictionary) -> None:
    """A search's ext.jingpai (window, fusion, fields, query, mode) does what the gateway's does; a bad one is the
    gateway's error, HTTP 400."""
    _, dict_dir = dictionary
    retriever = _retriever(node, index, dict_dir, "--reranker", reranker_url)["retriever"]
    for i, body in enumerate(EXT_SEARCHES):
        mine, info = _search(node, index, retriever, body)
        reference = gateway_answers[("ext", i)]
        assert (info["reranked"], info["reason"], info["mode"]) == (reference["jingpai"]["reranked"], reference["jingpai"]["reason"],
                                                                    reference["jingpai"]["mode"]), (body, info, reference["jingpai"])
        _assert_same_hits(mine, reference, f"ext {body}")
    for i, (ext, field) in enumerate(BAD_EXT):
        search = {"retriever": copy.deepcopy(retriever), "ext": {"jingpai": ext}}
        search["retriever"]["jingpai"]["retriever"] = {"standard": {"query": QUERIES[0]["query"]}}
        resp = httpx.post(f"{node.url}/{index}/_search", json=search, timeout=60)
        reference = gateway_answers[("bad", i)]
        assert resp.status_code == reference["status"] == 400, resp.text
        prefix, keys = f"invalid ext.jingpai: {field}: ", "; valid keys: fusion, fusion_weight, rrf_k, mode, window, fields, model, query, hybrid"
        for reason in (resp.json()["error"]["reason"], json.loads(reference["text"])["error"]["reason"]):
            assert prefix in reason and keys in reason, (reason, reference)


def test_a_stopped_or_unreachable_reranker_fails_open(node: Engine, index: str, gateway_answers, rerank_model, service_settings,
                                                      unreachable: str, dictionary) -> None:
    """The reranker stops after serving, or was never there: every search still succeeds, in the engine's order of the
    augmented query, with the gateway's reasons: ``reranker_unreachable`` for the first three, then ``circuit_open``."""
    _, dict_dir = dictionary
    breaker = ("--breaker-reset-s", str(BREAKER_RESET_S))
    with serve(create_service_app(service_settings, rerank_model)) as server:
        stopped = _retriever(node, index, dict_dir, "--reranker", server.url, *breaker)["retriever"]
        assert _search(node, index, stopped, QUERIES[0])[1]["reranked"] is True
    assert [gateway_answers[("dead", i)]["jingpai"]["reason"] for i in range(len(QUERIES))] == DEAD_REASONS
    dead = _retriever(node, index, dict_dir, "--reranker", unreachable, *breaker)["retriever"]
    for name, retriever in (("stopped", stopped), ("unreachable", dead)):
        for i, body in enumerate(QUERIES):
            mine, info = _search(node, index, retriever, body)
            reference = gateway_answers[("dead", i)]
            assert info["reranked"] is False and info["reason"] == reference["jingpai"]["reason"] == DEAD_REASONS[i], (name, i, info)
            _assert_same_hits(mine, reference, f"{name} {body}")
            _assert_same_hits(mine, gateway_answers[("augment", i)], f"{name} {body}")


def test_inside_a_compound_retriever_it_augments_but_refuses_to_rerank(node: Engine, index: str, gateway_answers, reranker_url: str,
                                                                      dictionary) -> None:
    """Nested in Elasticsearch's own compound ``rescorer`` retriever (server, Basic): a reranking ``jingpai`` retriever is
    HTTP 400 naming why (the outer retriever's second search would re-sort the gateway's page); one with ``"mode":
    "augment"`` becomes its augmented inner retriever, the gateway's augment page (a rescore of weight 0 keeps it)."""
    _, dict_dir = dictionary
    body = QUERIES[0]
    rescore = {"window_size": 10, "query": {"rescore_query": {"match_all": {}}, "query_weight": 1.0, "rescore_query_weight": 0.0}}
    for mode, extra in (("rerank", ("--reranker", reranker_url)), ("augment", ("--mode", "augment"))):
        inner = copy.deepcopy(_retriever(node, index, dict_dir, *extra)["retriever"])
        inner["jingpai"]["retriever"] = {"standard": {"query": body["query"]}}
        resp = httpx.post(f"{node.url}/{index}/_search", json={"retriever": {"rescorer": {"retriever": inner, "rescore": rescore}}},
                          timeout=120)
        if mode == "rerank":
            assert resp.status_code == 400, resp.text
            assert "[jingpai] retriever: cannot rerank inside another retriever" in resp.json()["error"]["reason"], resp.text
        else:
            assert resp.status_code == 200, resp.text
            assert ids(resp.json()) == ids(gateway_answers[("augment", 0)]), resp.text


def test_the_cli_refuses_what_it_cannot_serve(node: Engine, index: str, reranker_url: str, dictionary) -> None:
    _, dict_dir = dictionary
    runner = CliRunner()
    base = ["plugin", "retriever", "--reranker", reranker_url, "--engine", node.url]
    unknown = runner.invoke(cli, [*base, "--index", "no-such-index-here", "--dict", str(dict_dir)])
    assert unknown.exit_code == 1 and "no-such-index-here" in unknown.output and "does not exist" in unknown.output
    no_dict = runner.invoke(cli, [*base, "--index", index])
    assert no_dict.exit_code == 1 and "--dict" in no_dict.output
    no_reranker = runner.invoke(cli, ["plugin", "retriever", "--index", index, "--engine", node.url])
    assert no_reranker.exit_code == 2 and "--reranker URL is required" in no_reranker.output
    # a retriever naming a reranker host the node does not allow: the node's 400 names the setting
    retriever = _retriever(node, index, dict_dir, "--reranker", reranker_url)["retriever"]
    retriever["jingpai"]["reranker_url"] = "http://reranker.invalid:8080"
    retriever["jingpai"]["retriever"] = {"standard": {"query": QUERIES[0]["query"]}}
    resp = httpx.post(f"{node.url}/{index}/_search", json={"retriever": retriever}, timeout=60)
    assert resp.status_code == 400 and "jingpai.reranker.allowed_hosts" in resp.text, resp.text
