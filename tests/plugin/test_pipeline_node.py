"""The jingpai OpenSearch plugin on a real node, against the gateway (the reference).

One OpenSearch 2.19.6 node is started by the harness with ``--plugins jingpai`` (the plugin built from
java/opensearch-plugin with Maven) on a free port in 9290–9299; the tiny corpus of the gateway tests is indexed
with ``jingpai index``; the real rerank service serves the tiny cross-encoder; one gateway answers the same
searches. Nothing is mocked. The gateway's answers are taken first, while the index has no default pipeline
(the gateway forwards to the same node); then ``jingpai plugin pipeline`` writes the pipelines.

Reuse a node you run (``jingpai engine up --kind opensearch --plugins jingpai``) with
``JINGPAI_TEST_OPENSEARCH_JINGPAI_URL``. Skipped (with the reason) only without ``mvn`` / ``java``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.commands.pipeline import keywords_processor
from jingpai.engine import harness
from jingpai.engine.client import Engine
from jingpai.indexer.mapping import read_meta
from jingpai.plugin.settings import GatewaySettings
from jingpai.reranker.service import create_app as create_service_app
from jingpai.serving import serve
from tests.plugin.conftest import NODE_EXT_SEARCHES, NODE_QUERIES, Searches, corpus, gateway_answers_for, ids, index_with_cli, plugin_node
from tests.plugin.test_rerank_keywords import given, kwbert_url  # noqa: F401 - a fixture: the tiny kwbert's jingpai serve

PORTS = range(9290, 9300)
#: generous: the tiny CPU reranker shares two cores with other work, and a timeout would fail open
TIMEOUT_MS = 20_000
QUERIES = NODE_QUERIES
FUSIONS = ("linear", "rrf")
EXT_SEARCHES = [
    *NODE_EXT_SEARCHES,
    {"query": {"match": {"content": "中国经济"}}, "from": 25, "size": 5, "ext": {"jingpai": {"window": 30}}},
    # _source filters that leave the rerank fields out: fetched for the window, taken out of the page again
    {"query": {"match": {"title": "中国GDP"}}, "_source": ["id"]},
    {"query": {"match": {"content": "银行利率"}}, "_source": False, "ext": {"jingpai": {"fusion": "rrf"}}},
    {"query": {"match": {"title": "中国GDP"}}, "_source": {"includes": ["id"], "excludes": ["content"]}},
]
#: invalid ext.jingpai and the field both answers' 400 name
BAD_EXT = [({"window": 0}, "window"), ({"fusion": "sum"}, "fusion"), ({"widow": 5}, "widow"), ({"window": 501}, "max_window"),
           ({"fields": []}, "fields")]
#: the breaker's reset for the fail-open tests, on both sides: long enough that no probe goes out during them
BREAKER_RESET_S = 60
#: the reasons of the searches to a dead reranker, in order, with the default breaker (3 failures open it)
DEAD_REASONS = ["reranker_unreachable"] * 3 + ["circuit_open"] * (len(QUERIES) - 3)


@pytest.fixture(scope="module")
def node() -> Iterator[Engine]:
    """An OpenSearch node WITH the jingpai plugin, built from this checkout's java/opensearch-plugin."""
    yield from plugin_node("opensearch", PORTS, "JINGPAI_TEST_OPENSEARCH_JINGPAI_URL")


@pytest.fixture(scope="module")
def index(node: Engine, dictionary, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway tests' corpus indexed by ``jingpai index`` with their dictionary."""
    alias = f"test-plugin-{uuid.uuid4().hex[:8]}"
    yield index_with_cli(node, dictionary[1], tmp_path_factory.mktemp("plugin-corpus"), alias)
    node.request("DELETE", f"/_search/pipeline/{alias}-*")  # each holds the inline dictionary: do not leave them behind
    node.raw.indices.delete(index=f"{alias}*")


@pytest.fixture(scope="module")
def gateway_answers(node: Engine, index: str, reranker_url: str, unreachable: str, dictionary) -> dict[tuple[str, int], dict]:
    """The gateway's answers (:func:`tests.plugin.conftest.gateway_answers_for`), taken before any pipeline exists (the
    gateway forwards to the same node); the breaker held open as long as the pipelines' (--breaker-reset-s)."""
    answers = gateway_answers_for(node, index, dictionary[1], Searches(QUERIES, EXT_SEARCHES, [ext for ext, _ in BAD_EXT], FUSIONS),
                                  reranker_url=reranker_url, unreachable=unreachable, timeout_ms=TIMEOUT_MS, breaker_reset_s=BREAKER_RESET_S)
    assert node.get_index_settings(index).get("index.search.default_pipeline") is None
    return answers


def _write(node: Engine, index: str, reranker: str, dict_dir: Path, *extra: str) -> dict:
    args = ["plugin", "pipeline", "--index", index, "--reranker", reranker, "--dict", str(dict_dir), "--engine", node.url,
            "--timeout-ms", str(TIMEOUT_MS), *extra]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def _assert_same_hits(pipeline: dict, gateway: dict, what: str) -> None:
    assert ids(pipeline) == ids(gateway), what
    assert ids(pipeline), what
    for mine, ref in zip(pipeline["hits"]["hits"], gateway["hits"]["hits"]):
        assert mine["_score"] == pytest.approx(ref["_score"], rel=0, abs=1e-5), f"{what}: {mine['_id']}"


def test_the_node_loads_the_plugin_built_from_source(node: Engine) -> None:
    assert "jingpai" in harness.loaded_plugins(node.url)


def test_augmentation_alone_matches_the_gateway(node: Engine, index: str, gateway_answers, dictionary) -> None:
    """`jingpai plugin pipeline --mode augment` writes jingpai_keywords alone (no reranker needed); it rewrites each
    query as the gateway's augment mode, and so does the same processor composed by hand."""
    d, dict_dir = dictionary
    name = f"{index}-augment"
    processor = keywords_processor(read_meta(node, index), d, GatewaySettings(engine_url=node.url))
    node.request("PUT", f"/_search/pipeline/{name}-by-hand", body={"request_processors": [{"jingpai_keywords": processor}]})
    result = CliRunner().invoke(cli, ["plugin", "pipeline", "--index", index, "--mode", "augment", "--dict", str(dict_dir), "--engine", node.url,
                                      "--name", name])
    assert result.exit_code == 0, result.output
    written = json.loads(result.output.strip().splitlines()[-1])
    assert written["mode"] == "augment" and "fusion" not in written, written
    assert [list(p) for p in node.request("GET", f"/_search/pipeline/{name}")[name]["request_processors"]] == [["jingpai_keywords"]]
    for i, body in enumerate(QUERIES):
        assert ids(node.search(index, body, search_pipeline=f"{name}-by-hand")) == ids(node.search(index, body, search_pipeline=name)), body
        mine = node.search(index, body, search_pipeline=name)
        reference = gateway_answers[("augment", i)]
        assert reference["jingpai"]["augmented"], body  # every query reaches a dictionary keyword
        _assert_same_hits(mine, reference, f"augment {body}")
        assert mine["hits"]["total"] == reference["hits"]["total"], body


@pytest.mark.parametrize("fusion", FUSIONS)
def test_rerank_matches_the_gateway(node: Engine, index: str, gateway_answers, reranker_url: str, dictionary, fusion: str) -> None:
    """`jingpai plugin pipeline` writes the index's default pipeline; its pages equal the gateway's, scores within 1e-5."""
    _, dict_dir = dictionary
    written = _write(node, index, reranker_url, dict_dir, "--fusion", fusion, "--name", f"{index}-{fusion}")
    assert written["fusion"] == fusion and written["default_pipeline"]
    assert node.get_index_settings(index)["index.search.default_pipeline"] == f"{index}-{fusion}"
    reordered = 0
    for i, body in enumerate(QUERIES):
        mine = node.search(index, body)
        reference = gateway_answers[(fusion, i)]
        info, ref_info = mine["ext"]["jingpai"], reference["jingpai"]
        assert ref_info["reranked"] and info["reranked"], (body, info, ref_info)
        assert info["keywords"] == ref_info["keywords"] and info["augmented"] == ref_info["augmented"], body
        assert info["fusion"] == ref_info["fusion"] and info["window"] == ref_info["window"], body
        _assert_same_hits(mine, reference, f"{fusion} {body}")
        reordered += ids(mine) != ids(gateway_answers[("augment", i)])
    assert reordered > 0, "the reranker changed no page: the comparison would not see a fusion bug"


def test_a_stopped_or_unreachable_reranker_fails_open(node: Engine, index: str, gateway_answers, rerank_model, service_settings,
                                                      unreachable: str, dictionary) -> None:
    """The reranker stops after serving the pipeline, or was never there: every search still succeeds, in the engine's
    order of the augmented query, with the gateway's reasons in ``ext.jingpai``: ``reranker_unreachable`` for the
    first three, then ``circuit_open`` (the breaker of the reranker's URL is open: nothing is sent)."""
    _, dict_dir = dictionary
    breaker = ("--breaker-reset-s", str(BREAKER_RESET_S))
    with serve(create_service_app(service_settings, rerank_model)) as server:
        _write(node, index, server.url, dict_dir, "--name", f"{index}-stopped", *breaker)
        assert node.search(index, QUERIES[0])["ext"]["jingpai"]["reranked"] is True
    assert [gateway_answers[("dead", i)]["jingpai"]["reason"] for i in range(len(QUERIES))] == DEAD_REASONS
    for name in ("stopped", "unreachable"):
        if name == "unreachable":
            _write(node, index, unreachable, dict_dir, "--name", f"{index}-{name}", "--breaker-failures", "3", *breaker)
        for i, body in enumerate(QUERIES):
            info = (mine := node.search(index, body))["ext"]["jingpai"]
            reference = gateway_answers[("dead", i)]
            assert info["reranked"] is False and info["reason"] == reference["jingpai"]["reason"] == DEAD_REASONS[i], (name, i, info)
            _assert_same_hits(mine, reference, f"{name} {body}")
            _assert_same_hits(mine, gateway_answers[("augment", i)], f"{name} {body}")


def test_the_cli_prints_and_refuses_bad_input(node: Engine, index: str, reranker_url: str, dictionary, tmp_path: Path) -> None:
    _, dict_dir = dictionary
    runner = CliRunner()
    base = ["plugin", "pipeline", "--reranker", reranker_url, "--engine", node.url]
    unknown = runner.invoke(cli, [*base, "--index", "no-such-index-here", "--dict", str(dict_dir)])
    assert unknown.exit_code == 1 and "no-such-index-here" in unknown.output and "does not exist" in unknown.output
    plain = f"{index}-plain"
    node.create_index(plain, mappings={"properties": {"title": {"type": "text"}}})
    not_ours = runner.invoke(cli, [*base, "--index", plain])
    assert not_ours.exit_code == 1 and "jingpai index" in not_ours.output
    no_dict = runner.invoke(cli, [*base, "--index", index])
    assert no_dict.exit_code == 1 and "--dict" in no_dict.output
    bad_fusion = runner.invoke(cli, [*base, "--index", index, "--dict", str(dict_dir), "--fusion-weight", "3"])
    assert bad_fusion.exit_code != 0 and "weight" in bad_fusion.output
    printed = runner.invoke(cli, [*base, "--index", index, "--dict", str(dict_dir), "--fusion", "rrf", "--window", "7", "--print-only"])
    assert printed.exit_code == 0, printed.output
    body = json.loads(printed.output)
    keywords, rerank = body["request_processors"][0]["jingpai_keywords"], body["response_processors"][0]["jingpai_rerank"]
    assert keywords["text_fields"] == ["title", "content"] and keywords["dictionary"]["weights"]["GDP"] == 3.0
    assert rerank == body["request_processors"][1]["jingpai_rerank"] and rerank["fields"] == ["title", "content"]
    assert (rerank["fusion"], rerank["window"], rerank["reranker_url"]) == ("rrf", 7, reranker_url)
    assert "breaker_failures" not in rerank and "breaker_reset_s" not in rerank  # the processor's defaults, the gateway's
    printed = runner.invoke(cli, [*base, "--index", index, "--dict", str(dict_dir), "--breaker-failures", "5", "--print-only"])
    assert printed.exit_code == 0, printed.output
    rerank = json.loads(printed.output)["response_processors"][0]["jingpai_rerank"]
    assert rerank["breaker_failures"] == 5 and "breaker_reset_s" not in rerank and "rerank_concurrency" not in rerank
    no_reranker = runner.invoke(cli, ["plugin", "pipeline", "--engine", node.url, "--index", index, "--dict", str(dict_dir)])
    assert no_reranker.exit_code == 2 and "--reranker" in no_reranker.output and "--mode augment" in no_reranker.output
    augment_only = runner.invoke(cli, [*base, "--index", index, "--dict", str(dict_dir), "--mode", "augment", "--print-only"])
    assert augment_only.exit_code == 0, augment_only.output
    assert [list(p) for p in json.loads(augment_only.output)["request_processors"]] == [["jingpai_keywords"]]
    assert "response_processors" not in json.loads(augment_only.output)
    bad_breaker = runner.invoke(cli, [*base, "--index", index, "--dict", str(dict_dir), "--breaker-reset-s", "0"])
    assert bad_breaker.exit_code != 0 and "breaker_reset_s" in bad_breaker.output
    # the node refuses a bad breaker setting itself, naming it
    bad = {"reranker_url": reranker_url, "fields": ["title"], "breaker_failures": 0}
    refused = httpx.put(f"{node.url}/_search/pipeline/{index}-bad-breaker", json={"response_processors": [{"jingpai_rerank": bad}]})
    assert refused.status_code == 400 and "breaker_failures" in refused.text and "integer >= 1" in refused.text, refused.text


def test_a_searchs_own_ext_jingpai_matches_the_gateway(node: Engine, index: str, gateway_answers, reranker_url: str, dictionary) -> None:
    """A search's ext.jingpai (fusion, window, fields, query, mode) and its _source filter change the pipeline's answer
    exactly as the gateway's: the same hits, scores and documents."""
    _, dict_dir = dictionary
    _write(node, index, reranker_url, dict_dir, "--name", f"{index}-ext")
    for i, body in enumerate(EXT_SEARCHES):
        mine = node.search(index, body)
        reference = gateway_answers[("ext", i)]
        info, ref_info = mine["ext"]["jingpai"], reference["jingpai"]
        for key in ("mode", "reranked", "reason", "window", "fusion", "augmented", "keywords"):
            assert info.get(key) == ref_info.get(key), (body, key, info, ref_info)
        _assert_same_hits(mine, reference, f"ext {body}")
        assert [h.get("_source") for h in mine["hits"]["hits"]] == [h.get("_source") for h in reference["hits"]["hits"]], body
    assert {gateway_answers[("ext", i)]["jingpai"]["reason"] for i in range(len(EXT_SEARCHES))} >= {None, "augment_only", "disabled"}


def test_an_invalid_ext_jingpai_is_a_400_naming_the_field(node: Engine, index: str, gateway_answers, reranker_url: str, dictionary) -> None:
    _, dict_dir = dictionary
    _write(node, index, reranker_url, dict_dir, "--name", f"{index}-bad-ext")
    for i, (ext, field) in enumerate(BAD_EXT):
        resp = httpx.post(f"{node.url}/{index}/_search", json={"query": QUERIES[0]["query"], "ext": {"jingpai": ext}}, timeout=60)
        reference = gateway_answers[("bad", i)]
        assert reference["status"] == 400 and field in reference["text"], reference
        assert resp.status_code == 400 and field in resp.text and "ext.jingpai" in resp.text, (ext, resp.text)


def test_a_search_that_gets_no_rerank_slot_fails_open_busy(node: Engine, index: str, dictionary) -> None:
    """--rerank-concurrency 1 and a reranker that accepts connections but never answers: the first search holds the
    node's one slot until its timeout, the second takes it then, the third gets none within its timeout
    (``reranker_busy``). Every search answers, in the engine's order."""
    _, dict_dir = dictionary
    timeout_ms = 3000
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(16)
        url = f"http://127.0.0.1:{stalled.getsockname()[1]}"
        args = ["plugin", "pipeline", "--index", index, "--reranker", url, "--dict", str(dict_dir), "--engine", node.url,
                "--timeout-ms", str(timeout_ms), "--rerank-concurrency", "1", "--name", f"{index}-busy"]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        rerank = node.request("GET", f"/_search/pipeline/{index}-busy")[f"{index}-busy"]["response_processors"][0]["jingpai_rerank"]
        assert rerank["rerank_concurrency"] == 1
        with ThreadPoolExecutor(3) as pool:
            futures = []
            for _ in range(3):
                futures.append(pool.submit(node.search, index, QUERIES[0]))
                time.sleep(0.5)
            infos = [f.result()["ext"]["jingpai"] for f in futures]
    assert [i["reason"] for i in infos] == ["reranker_timeout", "reranker_timeout", "reranker_busy"], infos
    assert not any(i["reranked"] for i in infos)


def test_stored_keywords_reach_the_keyword_reranker_through_the_pipeline(node: Engine, dictionary, kwbert_url: str,  # noqa: F811
                                                                          tmp_path: Path) -> None:
    """An index with stored rerank keywords (``jingpai index --rerank-keywords``): the pipeline sends them with the texts
    they were found in, as the gateway does (the service takes one per reranked hit), and its pages equal the gateway's;
    reranked on another field, none are sent."""
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.plugin.gateway import create_app
    from jingpai.serving import ServerThread

    d, dict_dir = dictionary
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps(doc, ensure_ascii=False) for doc in corpus()) + "\n", encoding="utf-8")
    alias = f"test-plugin-rk-{uuid.uuid4().hex[:8]}"
    body = {"query": {"match": {"content": "中国经济"}}, "size": 10, "_source": ["title"]}
    other = {**body, "ext": {"jingpai": {"fields": ["content"]}}}
    try:
        settings = IndexSettings(index=alias, text_fields=("title", "content"), id_field="id", quarantine_dir=tmp_path, progress=False,
                                 rerank_keywords=True)
        assert index_corpus(node, [path], settings, dictionary=d).indexed == len(corpus())
        node.refresh(alias)
        gateway = GatewaySettings(engine_url=node.url, reranker_url=kwbert_url, window=20, dict_dirs=(dict_dir,), timeout_ms=TIMEOUT_MS)
        server = ServerThread(create_app(gateway)).start()
        try:
            before = given(kwbert_url)
            reference = httpx.post(f"{server.url}/{alias}/_search", json=body, timeout=60).json()
            sent_by_gateway = given(kwbert_url).get("taken", 0) - before.get("taken", 0)
        finally:
            server.stop()
        window = min(reference["hits"]["total"]["value"], 20)
        assert reference["jingpai"]["reranked"] and sent_by_gateway == window

        name = _write(node, alias, kwbert_url, dict_dir, "--window", "20")["pipeline"]
        pipeline = node.request("GET", f"/_search/pipeline/{name}")[name]
        assert pipeline["response_processors"][0]["jingpai_rerank"]["rerank_keywords"] == {
            "field": "jingpai.rk", "dict_version": d.version, "top_k": 20}
        before = given(kwbert_url)
        mine = node.search(alias, body)
        assert mine["ext"]["jingpai"]["reranked"], mine["ext"]
        assert given(kwbert_url).get("taken", 0) - before.get("taken", 0) == window
        _assert_same_hits(mine, reference, "stored keywords")
        # what the window fetched for the reranker (the rerank fields, the stored keywords) stays out of the page
        assert all(set(h["_source"]) == {"title"} for h in mine["hits"]["hits"]), mine["hits"]["hits"][0]["_source"]
        before = given(kwbert_url)
        assert node.search(alias, other)["ext"]["jingpai"]["reranked"]
        assert given(kwbert_url) == before
    finally:
        with contextlib.suppress(Exception):  # not written when the test failed before
            node.request("DELETE", f"/_search/pipeline/jingpai-{alias}")
        node.raw.indices.delete(index=f"{alias}*")
