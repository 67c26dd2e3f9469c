"""Fixtures for the gateway tests: a jingpai index on both engines, a real reranker service with a tiny
model, and gateways served by uvicorn on free loopback ports (so the official clients can reach them); and what the
engine plugins' node tests (test_pipeline_node.py, test_retriever_node.py) share: a node with the jingpai plugin, the
corpus indexed by ``jingpai index``, an unreachable reranker, the gateway's answers they are compared with."""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine import harness
from jingpai.engine.client import Engine, connect
from jingpai.engine.harness import free_port  # noqa: F401  (re-exported for the tests)
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.keyword_dict import Dictionary
from jingpai.plugin.gateway import create_app
from jingpai.plugin.settings import GatewaySettings
from jingpai.reranker import registry
from jingpai.reranker.service import ServiceSettings
from jingpai.reranker.service import create_app as create_service_app
from jingpai.reranker.tiny import build_tiny_checkpoint
from jingpai.serving import ServerThread, serve

KEYWORDS = {
    "中国": {"econ": 1.5},
    "GDP": {"econ": 3.0},
    "经济": {"econ": 1.0},
    "增长": {"econ": 0.8},
    "股票": {"finance": 2.0},
    "银行": {"finance": 1.8},
    "利率": {"finance": 2.2},
    "投资": {"finance": 1.2},
}

#: d01 holds the phrase 中国GDP; d02 has both keywords but not the phrase (the augmentation case)
HANDMADE = [
    {"id": "d01", "title": "中国GDP增长放缓", "content": "国家统计局公布中国GDP数据，经济增长放缓。"},
    {"id": "d02", "title": "经济观察", "content": "GDP方面，中国表现强劲，出口和投资拉动经济。"},
    {"id": "d03", "title": "股票市场", "content": "银行股票下跌，投资者担忧利率上升。"},
    {"id": "d04", "title": "天气预报", "content": "明天北京晴，气温回升。"},
]
TOPICS = ["中国经济", "银行利率", "股票投资", "GDP增长", "经济增长"]


def corpus() -> list[dict]:
    docs = list(HANDMADE)
    for i in range(36):
        topic = TOPICS[i % len(TOPICS)]
        other = TOPICS[(i * 3 + 1) % len(TOPICS)]
        docs.append({"id": f"f{i:02d}", "title": f"{topic}简报第{i}期", "content": f"本期关注{topic}，兼谈{other}，第{i}号评论。"})
    return docs


def search(url: str, index: str, body: dict, **params) -> dict:
    """POST a search to ``url`` (a gateway) and return the 200 answer."""
    resp = httpx.post(f"{url}/{index}/_search", json=body, params=params, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def ids(resp: dict) -> list[str]:
    return [h["_id"] for h in resp["hits"]["hits"]]


@dataclass(frozen=True)
class Setup:
    """Everything one engine's gateway tests need."""

    engine: Engine
    index: str
    plain_index: str
    gateway_url: str
    dictionary: Dictionary


@pytest.fixture(scope="session")
def dictionary(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dictionary, Path]:
    d = Dictionary.from_scores(KEYWORDS)
    directory = tmp_path_factory.mktemp("dict") / "econ"
    d.save(directory)
    return d, directory


@pytest.fixture(scope="session")
def rerank_model(tmp_path_factory: pytest.TempPathFactory):
    texts = [d["title"] + d["content"] for d in corpus()] + ["中国GDP", "中国经济增长", "银行利率"]
    base = build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-bert"), texts, seed=0)
    return registry.create("cross", base=str(base), max_length=64, device="cpu")


@pytest.fixture(scope="session")
def service_settings() -> ServiceSettings:
    return ServiceSettings(model_name="tiny-cross", device="cpu", dtype="fp32", warmup=False)


@pytest.fixture(scope="session")
def reranker_url(rerank_model, service_settings) -> Iterator[str]:
    """The real rerank service with the tiny model, over HTTP."""
    with serve(create_service_app(service_settings, rerank_model)) as server:
        yield server.url


@pytest.fixture(scope="session")
def indices(engines: dict[str, Engine], dictionary, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, str]]]:
    """``{kind: (jingpai alias, plain index)}``: the corpus indexed by ``jingpai index`` and plainly."""
    d, _ = dictionary
    tmp = tmp_path_factory.mktemp("corpus")
    path = tmp / "docs.jsonl"
    path.write_text("\n".join(json.dumps(doc, ensure_ascii=False) for doc in corpus()) + "\n", encoding="utf-8")
    made: dict[str, tuple[str, str]] = {}
    for kind, engine in engines.items():
        alias = f"test-gw-{uuid.uuid4().hex[:8]}"
        settings = IndexSettings(index=alias, text_fields=("title", "content"), id_field="id", quarantine_dir=tmp, progress=False)
        report = index_corpus(engine, [path], settings, dictionary=d)
        assert report.indexed == len(corpus())
        engine.refresh(alias)
        plain = f"{alias}-plain"
        engine.create_index(plain, mappings={"properties": {"title": {"type": "text"}, "content": {"type": "text"}}})
        for doc in corpus():
            engine.index_document(plain, doc["id"], {"title": doc["title"], "content": doc["content"]})
        engine.refresh(plain)
        made[kind] = (alias, plain)
    yield made
    for kind, (alias, _) in made.items():
        engines[kind].raw.indices.delete(index=f"{alias}*")


@pytest.fixture(scope="session")
def gateways(engines, indices, reranker_url, dictionary) -> Iterator[dict[str, str]]:
    """One default gateway per engine (window 20, dictionary loaded), ``{kind: url}``."""
    _, dict_dir = dictionary
    servers = []
    urls: dict[str, str] = {}
    for kind, engine in engines.items():
        settings = GatewaySettings(engine_url=engine.url, reranker_url=reranker_url, window=20, dict_dirs=(dict_dir,), timeout_ms=20_000)
        servers.append(ServerThread(create_app(settings)).start())
        urls[kind] = servers[-1].url
    yield urls
    for server in servers:
        server.stop()


@pytest.fixture
def setup(engine: Engine, indices, gateways, dictionary) -> Setup:
    alias, plain = indices[engine.kind]
    return Setup(engine=engine, index=alias, plain_index=plain, gateway_url=gateways[engine.kind], dictionary=dictionary[0])


# --- the engine plugins' node tests -------------------------------------------------------------------------------

#: the searches both plugins' node tests compare with the gateway (each test adds its own)
NODE_QUERIES = [
    {"query": {"match": {"title": "中国GDP"}}},
    {"query": {"match": {"content": "银行利率"}}, "size": 5},
    {"query": {"multi_match": {"query": "经济增长", "fields": ["title", "content"]}}},
    {"query": {"bool": {"must": [{"match": {"title": "股票投资"}}], "filter": [{"exists": {"field": "content"}}]}}},
    {"query": {"match": {"content": "中国经济"}}, "from": 5, "size": 5},
]
#: searches with their own ext.jingpai, the gateway's keys (the gateway's default mode, rerank, and fusion, linear)
NODE_EXT_SEARCHES = [
    {"query": {"match": {"content": "中国经济"}}, "ext": {"jingpai": {"fusion": "rrf", "rrf_k": 5, "fusion_weight": 0.3}}},
    {"query": {"match": {"title": "中国GDP"}}, "size": 3, "ext": {"jingpai": {"window": 4}}},
    # a page across the end of a window of 6
    {"query": {"match": {"content": "中国经济"}}, "from": 3, "size": 5, "ext": {"jingpai": {"window": 6, "fusion": "replace"}}},
    {"query": {"match": {"title": "中国GDP"}}, "ext": {"jingpai": {"fields": ["content"]}}},
    {"query": {"match": {"title": "股票投资"}}, "ext": {"jingpai": {"query": "银行利率"}}},
    {"query": {"match": {"title": "中国GDP"}}, "ext": {"jingpai": {"mode": "augment", "window": 999}}},
    {"query": {"match": {"title": "中国GDP"}}, "ext": {"jingpai": {"mode": "off"}}},
]


def free_port_in(ports: range) -> int:
    """The first port of ``ports`` free on loopback (each node test has a range of its own)."""
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.fail(f"no free port in {ports.start}-{ports.stop - 1} for the plugin node")


def plugin_node(kind: str, ports: range, env: str) -> Iterator[Engine]:
    """A ``kind`` node WITH the jingpai plugin built from this checkout (``yield from`` it in a fixture): the one
    ``env`` names, or one the harness starts on a port of ``ports`` and stops after. Skipped without mvn / java."""
    missing = [tool for tool in ("mvn", "java") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: the {kind} plugin needs Java 17 and Maven (scripts/bootstrap installs them)")
    given = os.environ.get(env)
    settings = None if given else harness.EngineSettings(kind=kind, port=free_port_in(ports), plugins=("jingpai",))
    try:
        client = connect(given or harness.start(settings).url)
        yield client
        client.close()
    finally:
        if settings is not None:
            harness.stop(settings, purge=True)


def index_with_cli(node: Engine, dict_dir: Path, tmp: Path, alias: str) -> str:
    """The gateway tests' corpus indexed into ``alias`` by ``jingpai index`` with their dictionary, refreshed."""
    path = tmp / "docs.jsonl"
    path.write_text("\n".join(json.dumps(doc, ensure_ascii=False) for doc in corpus()) + "\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["index", "run", str(path), "--index", alias, "--engine", node.url, "--dict", str(dict_dir),
                                      "--id-field", "id", "--text-fields", "title,content", "--quarantine-dir", str(tmp), "--no-progress"])
    assert result.exit_code == 0, result.output
    node.refresh(alias)
    return alias


@pytest.fixture(scope="module")
def unreachable() -> str:
    """A reranker URL nothing listens on."""
    return f"http://127.0.0.1:{free_port()}"


def post_json(url: str, body: dict, **params: str) -> dict:
    """POST ``body`` to ``url`` and return the 200 answer."""
    resp = httpx.post(url, json=body, params=params, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp.json()


@dataclass(frozen=True)
class Searches:
    """What a node test compares with the gateway: its searches, the ``ext.jingpai`` ones and the invalid ``ext.jingpai``s."""

    queries: Sequence[dict]
    ext_searches: Sequence[dict]
    bad_ext: Sequence[dict]
    fusions: Sequence[str] = ("linear", "rrf")


def gateway_answers_for(node: Engine, index: str, dict_dir: Path, searches: Searches, *, reranker_url: str, unreachable: str,
                        timeout_ms: int, breaker_reset_s: float) -> dict[tuple[str, int], dict]:
    """``{(mode, search number): gateway response}`` from a gateway in front of ``node``: augment and each fusion of
    ``searches.queries``, rerank by an unreachable reranker (``dead``, the queries in order, with the default breaker:
    it opens after the third failure and stays open ``breaker_reset_s``), the ``ext`` searches, and the ``bad`` ones
    (``{"status", "text"}``)."""
    answers: dict[tuple[str, int], dict] = {}
    for url, modes in ((reranker_url, ("augment", *searches.fusions)), (unreachable, ("dead",))):
        settings = GatewaySettings(engine_url=node.url, reranker_url=url, window=20, dict_dirs=(dict_dir,), timeout_ms=timeout_ms,
                                   breaker_reset_s=breaker_reset_s)
        server = ServerThread(create_app(settings)).start()
        try:
            for i, body in enumerate(searches.queries):
                for mode in modes:
                    params = {"jingpai": "augment"} if mode == "augment" else {"jingpai": "rerank", "jingpai_fusion": "linear" if mode == "dead" else mode}
                    answers[(mode, i)] = post_json(f"{server.url}/{index}/_search", body, **params)
            if url == reranker_url:
                for i, body in enumerate(searches.ext_searches):
                    answers[("ext", i)] = post_json(f"{server.url}/{index}/_search", body)
                for i, ext in enumerate(searches.bad_ext):
                    resp = httpx.post(f"{server.url}/{index}/_search", json={"query": searches.queries[0]["query"], "ext": {"jingpai": ext}},
                                      timeout=120)
                    answers[("bad", i)] = {"status": resp.status_code, "text": resp.text}
        finally:
            server.stop()
    return answers


@pytest.fixture(scope="session")
def secured(opensearch_secured, dictionary, rerank_model, service_settings, tmp_path_factory: pytest.TempPathFactory):
    """The secured node's index, users (``one``, ``dls``, ``nomap``, ``nosearch``), captured rerank service and gateway
    (with the UI), shared by every secured test (:func:`tests.plugin.secured.secured_cluster`)."""
    from tests.plugin.secured import secured_cluster

    yield from secured_cluster(opensearch_secured, dictionary, rerank_model, service_settings, tmp_path_factory.mktemp("secured"))
