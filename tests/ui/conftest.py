"""Fixtures for the UI tests: the shipped demo corpus (plus hostile documents) indexed on both engines, the
demo dictionary, a real rerank service with a tiny ``cross`` model, and gateways (which serve the UI) on
free loopback ports."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from jingpai.engine.client import Engine
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.plugin.gateway import create_app
from jingpai.plugin.settings import GatewaySettings
from jingpai.reranker import registry
from jingpai.reranker.service import ServiceSettings
from jingpai.reranker.service import create_app as create_service_app
from jingpai.reranker.tiny import build_tiny_checkpoint
from jingpai.ui.app import UiSettings
from jingpai.serving import ServerThread
from jingpai.jobs.demo import DEMO_CORPUS, DemoSettings, build_demo_dictionary, read_jsonl

#: if any of these ran, the page's <body> would carry a data-pwned attribute (visible in a DOM dump)
SCRIPT_TITLE = "<script>document.body.setAttribute('data-pwned','script')</script>360公司安全通告"
IMG_CONTENT = '"><img src=x onerror="document.body.setAttribute(\'data-pwned\',\'img\')"> 360公司提醒用户升级浏览器。'
HOSTILE = [
    {"id": "hostile-1", "title": SCRIPT_TITLE, "content": IMG_CONTENT, "category": "科技", "date": "2024-12-31"},
    {"id": "hostile-2", "title": "苹果<b>加粗</b>&amp;实体", "content": "苹果 手机 <iframe src=//evil.example></iframe>", "category": "<i>cat</i>"},
]


def demo_records() -> list[dict]:
    return read_jsonl(DEMO_CORPUS) + HOSTILE


@pytest.fixture(scope="session")
def demo_dictionary(tmp_path_factory: pytest.TempPathFactory):
    """``(Dictionary, dir)`` built by the demo's own step from the shipped corpus (no THUCNews: empty data dir)."""
    tmp = tmp_path_factory.mktemp("ui-dict")
    settings = DemoSettings(engine_url="http://127.0.0.1:1", data_dir=tmp / "no-data", cache_dir=tmp / "cache")
    return build_demo_dictionary(settings, lambda _msg: None)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved, untrained tiny ``cross`` model whose vocabulary covers the demo corpus."""
    tmp = tmp_path_factory.mktemp("ui-model")
    texts = [f"{r['title']}{r['content']}" for r in demo_records()] + ["360公司", "苹果 手机"]
    base = build_tiny_checkpoint(tmp / "base", texts, seed=0)
    model = registry.create("cross", base=str(base), max_length=64, device="cpu")
    return model.save(tmp / "model")


@pytest.fixture(scope="session")
def reranker_url(tiny_model_dir: Path) -> Iterator[str]:
    from jingpai.reranker.base import Reranker

    model = Reranker.load(tiny_model_dir, device="cpu")
    app = create_service_app(ServiceSettings(model_name="tiny-ui", device="cpu", dtype="fp32", warmup=False), model)
    server = ServerThread(app, host="127.0.0.1", port=0, name="reranker").start()
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def ui_indices(engines: dict[str, Engine], demo_dictionary, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``{kind: alias}``: the demo corpus + hostile documents indexed by ``index_corpus`` on each engine."""
    dictionary, _ = demo_dictionary
    tmp = tmp_path_factory.mktemp("ui-corpus")
    path = tmp / "docs.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in demo_records()) + "\n", encoding="utf-8")
    made: dict[str, str] = {}
    for kind, engine in engines.items():
        alias = f"test-ui-{uuid.uuid4().hex[:8]}"
        settings = IndexSettings(index=alias, id_field="id", quarantine_dir=tmp, progress=False)
        report = index_corpus(engine, [path], settings, dictionary=dictionary)
        assert report.indexed == len(demo_records()), report.summary()
        made[kind] = alias
    yield made
    for kind, alias in made.items():
        engines[kind].raw.indices.delete(index=f"{alias}*")


def start_gateway(engine_url: str, reranker_url: str | None, dict_dir: Path, *, ui: UiSettings | None = None, timeout_ms: int = 20_000) -> ServerThread:
    settings = GatewaySettings(engine_url=engine_url, reranker_url=reranker_url, dict_dirs=(dict_dir,), window=30, timeout_ms=timeout_ms)
    from jingpai.ui.app import ui_routes  # the gateway serves no UI of its own

    app = create_app(settings, routes=ui_routes())
    if ui is not None:
        app.state.jingpai_ui = ui
    return ServerThread(app, host="127.0.0.1", port=0, name="gateway").start()


@pytest.fixture(scope="session")
def ui_gateways(engines: dict[str, Engine], ui_indices, reranker_url: str, demo_dictionary) -> Iterator[dict[str, str]]:
    """``{kind: gateway URL}`` with the reranker and the demo dictionary."""
    _, dict_dir = demo_dictionary
    servers = {kind: start_gateway(engine.url, reranker_url, dict_dir, ui=UiSettings(default_index=ui_indices[kind])) for kind, engine in engines.items()}
    yield {kind: server.url for kind, server in servers.items()}
    for server in servers.values():
        server.stop()


@dataclass(frozen=True)
class UiSetup:
    engine: Engine
    index: str
    gateway_url: str

    @property
    def ui(self) -> str:
        return f"{self.gateway_url}/_jingpai/ui/"

    def search(self, **params) -> httpx.Response:
        params.setdefault("index", self.index)
        return httpx.get(f"{self.ui}api/search", params=params, timeout=60)


@pytest.fixture
def ui_setup(engine: Engine, ui_indices, ui_gateways) -> UiSetup:
    return UiSetup(engine=engine, index=ui_indices[engine.kind], gateway_url=ui_gateways[engine.kind])
