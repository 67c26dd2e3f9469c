"""Fixtures for the gateway tests: a jingpai index on both engines, a real reranker service with a tiny
model, and gateways served by uvicorn on free loopback ports (so the official clients can reach them)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from jingpai.engine.client import Engine
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
