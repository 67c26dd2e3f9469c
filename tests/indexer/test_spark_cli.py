"""``jingpai index --spark`` through the real click command on local[2], and CSV/TSV headers after blank lines.

The command uses the active Spark session when there is one (and leaves it running), so the module
starts one session with both connectors' jars and every command below runs on it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine.client import Engine
from jingpai.indexer import spark_input
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.indexer.spark_index import index_corpus_spark
from jingpai.indexer.spark_settings import SparkIndexSettings

pytestmark = [pytest.mark.spark, pytest.mark.engine]


@pytest.fixture
def name(engine: Engine) -> Iterator[str]:
    base = f"test-{uuid.uuid4().hex[:8]}"
    yield base
    engine.raw.indices.delete(index=f"{base}*")


@pytest.fixture
def corpus(tmp_path: Path, news_jsonl: Path) -> Path:
    """40 news records with 2 bad lines (lines 11 and 33) and a blank line 22 between them."""
    good = news_jsonl.read_bytes().splitlines(keepends=True)[:40]
    path = tmp_path / "small.jsonl"
    path.write_bytes(b"".join(good[:10] + [b"{not json\n"] + good[10:20] + [b"\n"] + good[20:30] + [b"[1, 2]\n"] + good[30:]))
    return path


def index_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["index", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(("engine", "writer"), [("opensearch", "connector"), ("opensearch", "bulk"), ("elasticsearch", "bulk")], indirect=["engine"])  # no ES connector: see test_spark_index
def test_the_command_indexes_on_spark_and_quarantines(spark, engine: Engine, name: str, corpus: Path, tmp_path: Path, writer: str) -> None:
    code, output = index_cli(
        str(corpus), "--index", name, "--engine", engine.url, "--id-field", "id", "--quarantine-dir", str(tmp_path),
        "--no-progress", "--max-rejected", "0.1", "--spark", "--master", "local[2]", "--spark-writer", writer,
    )
    assert code == 0, output
    assert output.startswith("read 42 / indexed 40 / rejected 2 / ")
    [physical] = engine.alias_targets(name)
    assert physical.startswith(f"{name}-nodict-")
    engine.refresh(name)
    assert engine.count(name) == 40
    lines = [json.loads(line) for line in (tmp_path / f"{name}.rejected.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted((e["source"], e["line"], e["reason"].split(":")[0]) for e in lines) == [
        (str(corpus), 11, "malformed JSON"), (str(corpus), 33, "expected a JSON object, got list"),
    ]
    assert not spark.sparkContext._jsc.sc().isStopped()  # the command left the module's session running


def test_a_bad_spark_option_is_one_line(engine: Engine, corpus: Path, tmp_path: Path) -> None:
    code, output = index_cli(str(corpus), "--index", "test-never", "--engine", engine.url, "--quarantine-dir", str(tmp_path),
                             "--spark", "--spark-writer", "nope")
    assert code == 2  # click's usage error: the choices come from SparkIndexSettings.writer's Literal
    [error] = [line for line in output.splitlines() if line.startswith("Error")]
    assert error == "Error: Invalid value for '--spark-writer': 'nope' is not one of 'auto', 'connector', 'bulk'."
    assert "Traceback" not in output
    assert engine.indices("test-never*") == {}


def test_spark_without_pyspark_is_one_line(without_pyspark: None, monkeypatch: pytest.MonkeyPatch, engine: Engine, corpus: Path,
                                           tmp_path: Path) -> None:
    code, output = index_cli(str(corpus), "--index", "test-never", "--engine", engine.url, "--quarantine-dir", str(tmp_path),
                             "--spark", "--spark-writer", "bulk")
    monkeypatch.undo()
    assert code != 0
    [line] = output.strip().splitlines()
    assert line.startswith("Error: --spark needs PySpark, which is not installed: pip install 'jingpai[spark]'")
    assert engine.indices("test-never*") == {}


HEADED = {
    "csv": "\n  \n\nid,title,content\n" "a1,沪指大涨,\"央行降准，沪指大涨\"\n" "\n" "a2,楼市,\"楼市, 成交回暖\"\n" "a3,只有两列\n" "a4,央行,央行公开市场操作\n",
    "tsv": "\n\t\n" "id\ttitle\tcontent\n" "b1\t沪指大涨\t央行降准，沪指大涨\n" "b2\t楼市\n" "\n" "b3\t央行\t央行公开市场操作\n",
}


@pytest.mark.parametrize("reading", ["whole files", "blocks"])
@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_a_header_after_blank_lines_is_read_as_locally(
    spark, engine: Engine, name: str, tmp_path: Path, fmt: str, reading: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    if reading == "blocks":
        monkeypatch.setattr(spark_input, "WHOLE_FILE_BYTES", 0)
    path = tmp_path / f"headed.{fmt}"
    path.write_text(HEADED[fmt], encoding="utf-8")
    local_q, spark_q = tmp_path / "local", tmp_path / "spark"
    common = {"id_field": "id", "max_rejected": 0.5, "progress": False}
    local = index_corpus(engine, [path], IndexSettings(index=name + "-local", quarantine_dir=local_q, **common))
    report = index_corpus_spark(engine, [path], IndexSettings(index=name + "-spark", quarantine_dir=spark_q, **common),
                                SparkIndexSettings(writer="bulk"), spark=spark)
    assert (report.read, report.indexed, report.rejected) == (local.read, local.indexed, local.rejected)
    assert report.indexed == (3 if fmt == "csv" else 2) and report.rejected == 1
    local_docs = {hit["_id"]: hit["_source"] for hit in engine.scan(name + "-local")}
    assert {hit["_id"]: hit["_source"] for hit in engine.scan(name + "-spark")} == local_docs
    assert "id" not in local_docs  # the header row is no document

    def quarantined(folder: Path, index: str) -> list[tuple]:
        entries = [json.loads(line) for line in (folder / f"{index}.rejected.jsonl").read_text(encoding="utf-8").splitlines()]
        return [(e["source"], e["line"], e["reason"], e["record"]) for e in entries]

    expected = quarantined(local_q, name + "-local")
    assert quarantined(spark_q, name + "-spark") == expected
    assert [e[1] for e in expected] == ([8] if fmt == "csv" else [5])


def test_both_readings_number_the_same_lines(spark, tmp_path: Path) -> None:
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"".join(b'{"id": "%d", "title": "t"}\n' % i if i % 7 else b"\n" for i in range(30000)) + b"no newline at the end")
    settings = IndexSettings(index="x")
    files = spark_input.read_headers(spark, spark_input.list_files(spark, [str(path)], settings), settings)
    whole = spark_input.read_lines(spark, files)
    blocks = spark_input.read_lines(spark, files, whole_file_bytes=0)
    try:
        assert whole.cached is None and blocks.cached is not None
        expected = [(str(path), number, raw) for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1)]
        assert sorted(whole.rdd.collect()) == sorted(blocks.rdd.collect()) == expected
        assert whole.rdd.getNumPartitions() == blocks.rdd.getNumPartitions() == 2
    finally:
        blocks.release()
