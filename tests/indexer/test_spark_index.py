"""``jingpai index --spark`` on local[2]: the same documents, ids and quarantine as the local path, on both engines.

One Spark session for the module (JVM start-up is seconds), with both connectors' jars from Maven Central.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jingpai.engine.client import Engine
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.indexer.spark_index import ConnectorUnusableError, index_corpus_spark
from jingpai.indexer.spark_settings import SparkIndexSettings

pytestmark = [pytest.mark.spark, pytest.mark.engine]

#: (engine, writer) runs: the Elasticsearch connector cannot write to the integ-test node (it has no GET /);
#: test_the_elasticsearch_connector_names_the_missing_root_endpoint shows its error instead
WRITERS = [("opensearch", "connector"), ("opensearch", "bulk"), ("elasticsearch", "bulk")]



@pytest.fixture(scope="module")
def cnews(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The whole cnews sample (1,000 articles) as JSONL with ids."""
    out = tmp_path_factory.mktemp("cnews") / "cnews.jsonl"
    rows = []
    with (shared_data / "zh" / "cnews_sample" / "docs.tsv").open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            label, article = line.rstrip("\n").split("\t", 1)
            rows.append({"id": f"c{i}", "category": label, "title": article.split("。")[0][:60], "content": article[:1500]})
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return out


@pytest.fixture
def names(engine: Engine) -> Iterator[tuple[str, str]]:
    base = f"test-{uuid.uuid4().hex[:8]}"
    yield base + "-local", base + "-spark"
    engine.raw.indices.delete(index=f"{base}*")


def documents(engine: Engine, alias: str) -> dict[str, dict]:
    return {hit["_id"]: hit["_source"] for hit in engine.scan(alias)}


def settings(index: str, tmp_path: Path, **kw) -> IndexSettings:
    return IndexSettings(index=index, quarantine_dir=tmp_path, progress=False, **kw)


@pytest.mark.parametrize(("engine", "writer"), WRITERS, indirect=["engine"])
def test_spark_indexes_the_same_documents_as_the_local_path(
    spark, engine: Engine, names, cnews: Path, dictionary, tmp_path: Path, writer: str,
) -> None:
    local_name, spark_name = names
    local = index_corpus(engine, [cnews], settings(local_name, tmp_path, id_field="id"), dictionary=dictionary)
    report = index_corpus_spark(engine, [cnews], settings(spark_name, tmp_path, id_field="id"),
                                SparkIndexSettings(writer=writer), dictionary=dictionary, spark=spark)
    assert (report.read, report.indexed, report.rejected) == (local.read, local.indexed, 0) == (1000, 1000, 0)
    assert report.alias_swapped and engine.alias_targets(spark_name) == [report.physical_index]
    assert engine.get_mapping(report.physical_index)[report.physical_index] == \
        engine.get_mapping(local.physical_index)[local.physical_index]
    spark_docs, local_docs = documents(engine, spark_name), documents(engine, local_name)
    assert len(spark_docs) == 1000 and spark_docs == local_docs
    assert any(doc["jingpai"]["keywords"] for doc in spark_docs.values())


def test_the_elasticsearch_connector_names_the_missing_root_endpoint(engines, spark, cnews: Path, tmp_path: Path) -> None:
    engine = engines["elasticsearch"]
    with pytest.raises(ConnectorUnusableError, match=r"rest-root.*--spark-writer bulk"):
        index_corpus_spark(engine, [cnews], settings("test-never", tmp_path, id_field="id"),
                           SparkIndexSettings(writer="connector"), spark=spark)
    assert engine.indices("test-never*") == {}


def test_auto_without_id_field_writes_content_hash_ids_like_the_local_path(
    spark, engine: Engine, names, cnews: Path, tmp_path: Path,
) -> None:
    local_name, spark_name = names
    index_corpus(engine, [cnews], settings(local_name, tmp_path))
    report = index_corpus_spark(engine, [cnews], settings(spark_name, tmp_path), SparkIndexSettings(), spark=spark)
    assert report.indexed == 1000
    assert documents(engine, spark_name) == documents(engine, local_name)


def test_a_rerun_writes_the_same_ids_into_the_same_index(spark, engine: Engine, names, cnews: Path, tmp_path: Path) -> None:
    _, name = names
    writer = "connector" if engine.kind == "opensearch" else "bulk"
    first = index_corpus_spark(engine, [cnews], settings(name, tmp_path, id_field="id"), SparkIndexSettings(writer=writer), spark=spark)
    ids = set(documents(engine, name))
    again = index_corpus_spark(engine, [cnews], settings(name, tmp_path, id_field="id"), SparkIndexSettings(writer=writer), spark=spark)
    assert again.physical_index == first.physical_index
    engine.refresh(name)
    assert engine.count(name) == 1000 and set(documents(engine, name)) == ids


def quarantined(path: Path) -> list[tuple]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return sorted((e["source"], e["line"], e["reason"], json.dumps(e["record"], ensure_ascii=False), e.get("record_base64"))
                  for e in lines)


@pytest.mark.parametrize(("engine", "writer"), WRITERS, indirect=["engine"])
def test_bad_records_are_quarantined_as_on_the_local_path(
    spark, engine: Engine, names, cnews: Path, tmp_path: Path, writer: str,
) -> None:
    corpus = tmp_path / "bad.jsonl"
    good = cnews.read_bytes().splitlines(keepends=True)[:300]
    bad = [b"{not json\n", b'{"id": "b1", "category": "x"}\n', "\u65e0\u6548".encode("gb18030") + b"\n",
           b'[1, 2]\n', b"\n", b'{"id": "b2", "title": "\xe6\x96\x87", "content": "' + b"x" * 9000 + b'"}\n',
           b'{"id": "m1", "title": "\xe6\x96\x87", "n": {"a": 1}}\n', b'{"id": "m2", "title": "\xe6\x96\x87", "n": "flat"}\n']
    corpus.write_bytes(b"".join(good[:100] + bad[:4] + good[100:200] + bad[4:] + good[200:]))
    local_name, spark_name = names
    limits = {"id_field": "id", "max_record_bytes": 6000, "max_rejected": 0.5}
    local_q, spark_q = tmp_path / "local", tmp_path / "spark"
    local = index_corpus(engine, [corpus], IndexSettings(index=local_name, quarantine_dir=local_q, progress=False, **limits))
    report = index_corpus_spark(engine, [corpus], IndexSettings(index=spark_name, quarantine_dir=spark_q, progress=False, **limits),
                                SparkIndexSettings(writer=writer), spark=spark)
    assert (report.read, report.indexed, report.rejected) == (local.read, local.indexed, local.rejected) == (307, 301, 6)
    engine_rejected = [e for e in quarantined(spark_q / f"{spark_name}.rejected.jsonl") if "engine rejected" in e[2]]
    others = [e for e in quarantined(spark_q / f"{spark_name}.rejected.jsonl") if "engine rejected" not in e[2]]
    assert others == [e for e in quarantined(local_q / f"{local_name}.rejected.jsonl") if "engine rejected" not in e[2]]
    # one of the two records whose field n conflicts is rejected by the engine, whichever came second
    (rejected,) = engine_rejected
    assert rejected[1] in (207, 208) and json.loads(rejected[3])["id"] == ("m1" if rejected[1] == 207 else "m2")
    assert report.reasons.keys() == local.reasons.keys()
    engine.refresh(spark_name)
    assert engine.count(spark_name) == 301
