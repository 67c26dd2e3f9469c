"""What a failing `jingpai index` run guarantees, on both real engines: the alias stays unless the new
index passes its check, cluster refusals stop the run instead of rejecting the corpus, the quarantine
keeps every rejected record (across runs, byte-exact), and a killed engine loses nothing on resume."""

from __future__ import annotations

import base64
import json
import os
import random
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine import harness
from jingpai.engine.client import Engine, connect
from jingpai.indexer.pipeline import BuildCheckError, EngineRefusedError, IndexingError, IndexSettings, index_corpus
from jingpai.indexer.versions import list_versions
from jingpai.keyword_dict import Dictionary


def _settings(index: str, tmp_path: Path, **kw) -> IndexSettings:
    return IndexSettings(index=index, id_field="id", quarantine_dir=tmp_path, progress=False, **kw)


def _quarantined(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _index(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["index", *args, "--no-progress"])
    return result.exit_code, result.output


# ---------------------------------------------------------------- 1. the alias moves only to a sound index


def _bad_corpus(kind: str, tmp_path: Path, news_jsonl: Path) -> tuple[Path, dict, str]:
    """``(file, extra settings, expected failure)`` for each way a run used to empty the live alias."""
    if kind == "empty":
        path = tmp_path / "empty.jsonl"
        path.write_bytes(b"")
        return path, {}, r"the corpus has no records \(empty files or blank lines only\)"
    if kind == "binary":
        path = tmp_path / "blob.jsonl"
        path.write_bytes(random.Random(0).randbytes(20_000))
        return path, {}, r"it is empty: all \d+ records read were rejected"
    if kind == "wrong-columns":
        path = tmp_path / "docs.tsv"
        path.write_text("".join(f"n{i}\t新闻{i}\n" for i in range(50)), encoding="utf-8")
        return path, {"columns": ("id", "category", "content")}, r"it is empty: all 50 records read were rejected"
    if kind == "over-max-rejected":
        lines = news_jsonl.read_text(encoding="utf-8").splitlines()
        path = tmp_path / "mostly.jsonl"
        path.write_text("\n".join(lines[:190] + ["{broken"] * 10) + "\n", encoding="utf-8")
        return path, {}, r"10 of 200 records read \(5\.0%\) were rejected, over --max-rejected 0\.01 \(1\.0%\)"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["empty", "binary", "wrong-columns", "over-max-rejected"])
def test_failed_build_leaves_the_alias_and_deletes_the_new_index(
    kind: str, engine: Engine, index_name: str, tmp_path: Path, news_jsonl: Path, dictionary: Dictionary,
    dictionary_v2: Dictionary,
) -> None:
    live = index_corpus(engine, [news_jsonl], _settings(index_name, tmp_path), dictionary=dictionary)
    path, extra, failure = _bad_corpus(kind, tmp_path, news_jsonl)

    # a new dictionary version: the run builds a new physical index that would replace the live one
    with pytest.raises(BuildCheckError, match=rf"^{index_name}-\w+-2 did not replace the live index: {failure}\. "
                       rf"The alias {index_name} still points at {live.physical_index}; the new index "
                       rf"{index_name}-\w+-2 was deleted\. Fix the input \(see .*\) and re-run, or pass --force"):
        index_corpus(engine, [path], _settings(index_name, tmp_path, **extra), dictionary=dictionary_v2)
    assert engine.alias_targets(index_name) == [live.physical_index]
    assert engine.count(index_name) == 200
    assert [v.name for v in list_versions(engine, index_name)] == [live.physical_index]

    forced = index_corpus(engine, [path], _settings(index_name, tmp_path, force=True, **extra), dictionary=dictionary_v2)
    assert forced.alias_swapped and engine.alias_targets(index_name) == [forced.physical_index]
    assert forced.check_failure is not None


def test_run_without_dict_does_not_replace_a_dictionary_index(
    engine: Engine, index_name: str, tmp_path: Path, news_jsonl: Path, dictionary: Dictionary
) -> None:
    live = index_corpus(engine, [news_jsonl], _settings(index_name, tmp_path), dictionary=dictionary)
    with pytest.raises(BuildCheckError, match=rf"the live index was built with dictionary {dictionary.version[:12]}\w* and "
                       r"this run has none \(--dict\), so its documents have no keywords"):
        index_corpus(engine, [news_jsonl], _settings(index_name, tmp_path))
    assert engine.alias_targets(index_name) == [live.physical_index]


def test_cli_exits_non_zero_and_keeps_the_alias(engine: Engine, index_name: str, tmp_path: Path, news_jsonl: Path) -> None:
    common = ["--index", index_name, "--engine", engine.url, "--id-field", "id", "--quarantine-dir", str(tmp_path)]
    code, output = _index(str(news_jsonl), *common)
    assert code == 0, output
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, output = _index(str(empty), *common, "--rebuild")
    assert code == 1
    assert output.splitlines()[-1] == (
        f"Error: {index_name}-nodict-2 did not replace the live index: the corpus has no records (empty files or blank "
        f"lines only). The alias {index_name} still points at {index_name}-nodict-1; the new index {index_name}-nodict-2 "
        f"was deleted. Fix the input (see {tmp_path / f'{index_name}.rejected.jsonl'}) and re-run, or pass --force to swap anyway"
    )
    assert engine.count(index_name) == 200

    # rejections within --max-rejected still let the new index through
    lines = news_jsonl.read_text(encoding="utf-8").splitlines()
    some = tmp_path / "some.jsonl"
    some.write_text("\n".join(lines + ["{broken"] * 3) + "\n", encoding="utf-8")
    code, output = _index(str(some), *common, "--rebuild", "--max-rejected", "0.02")
    assert code == 0, output
    assert engine.alias_targets(index_name) == [f"{index_name}-nodict-2"]


# ---------------------------------------------------------------- 2, 3. the quarantine keeps every rejected record


def test_quarantine_is_appended_across_runs(engine: Engine, index_name: str, tmp_path: Path) -> None:
    first = tmp_path / "a.jsonl"
    first.write_text('{"id": "1", "title": "好"}\n{"id": "2"}\n', encoding="utf-8")
    second = tmp_path / "b.jsonl"
    second.write_text('{"id": "3", "title": "好"}\n{"id": "4", "title": 5}\n', encoding="utf-8")
    r1 = index_corpus(engine, [first], _settings(index_name, tmp_path, max_rejected=0.5))
    r2 = index_corpus(engine, [second], _settings(index_name, tmp_path, max_rejected=0.5))
    assert r1.quarantine_file == r2.quarantine_file and r1.run_id != r2.run_id
    assert [(q["run"], q["record"]["id"]) for q in _quarantined(r2.quarantine_file)] == [(r1.run_id, "2"), (r2.run_id, "4")]
    assert (r1.rejected, r2.rejected) == (1, 1)  # each report counts its own run


def test_undecodable_lines_keep_their_bytes_and_the_summary_groups_reasons(
    engine: Engine, index_name: str, tmp_path: Path
) -> None:
    gbk = [json.dumps({"id": f"g{i}", "title": f"第{i}条新闻标题"}, ensure_ascii=False).encode("gbk") for i in range(8)]
    corpus = tmp_path / "gbk.jsonl"
    corpus.write_bytes(b"\n".join(gbk) + b"\n")
    code, output = _index(str(corpus), "--index", index_name, "--engine", engine.url, "--quarantine-dir", str(tmp_path))
    assert code == 1
    assert output.splitlines()[1:3] == [
        f"8 rejected records appended to {tmp_path / f'{index_name}.rejected.jsonl'} (run {output.split('(run ')[1].split(')')[0]}):",
        "        8 × not valid UTF-8, decodes as GB18030 (convert the file: iconv -f GB18030 -t UTF-8) (line 1, 2, 3, 4, 5, …)",
    ]
    rejected = _quarantined(tmp_path / f"{index_name}.rejected.jsonl")
    assert [base64.b64decode(q["record_base64"]) for q in rejected] == gbk  # recoverable byte for byte
    assert json.loads(base64.b64decode(rejected[0]["record_base64"]).decode("gbk"))["title"] == "第0条新闻标题"

    # a 200 KB binary file: a few summary lines, not one per line of the file
    blob = tmp_path / "blob.jsonl"
    blob.write_bytes(random.Random(1).randbytes(200_000))
    code, output = _index(str(blob), "--index", index_name, "--engine", engine.url, "--quarantine-dir", str(tmp_path))
    assert code == 1
    assert len(output) < 2000, output
    assert "× not valid UTF-8 (line 1, 2, 3, 4, 5, …)" in output


# ---------------------------------------------------------------- 4. a cluster refusal stops the run


def test_write_block_stops_the_run_without_quarantining_and_resumes(
    engine: Engine, index_name: str, tmp_path: Path, news_jsonl: Path, dictionary: Dictionary, dictionary_v2: Dictionary
) -> None:
    live = index_corpus(engine, [news_jsonl], _settings(index_name, tmp_path), dictionary=dictionary)
    quarantine = tmp_path / f"{index_name}.rejected.jsonl"
    settings = _settings(index_name, tmp_path, batch_size=40, concurrency=1)
    blocked: list[str] = []

    def block_after_first_batch(report) -> None:
        if not blocked:
            engine.put_index_settings(report.physical_index, {"index.blocks.write": "true"})
            blocked.append(report.physical_index)

    refusal = (rf"^the engine refused to write to {index_name}-\w+-2: cluster_block_exception: index \[{index_name}-\w+-2\] "
               r"blocked by: \[FORBIDDEN/8/index write \(api\)\]\. This is the index's or the cluster's state .* none were "
               rf"quarantined for it; \d+ documents are in {index_name}-\w+-2 and the alias {index_name} still points at "
               rf"{live.physical_index}\. Fix the cluster .* re-run the same command to resume$")
    with pytest.raises(EngineRefusedError, match=refusal):  # mid-run
        index_corpus(engine, [news_jsonl], settings, dictionary=dictionary_v2, on_progress=block_after_first_batch)
    (physical,) = blocked
    with pytest.raises(EngineRefusedError, match=refusal):  # still blocked when resuming
        index_corpus(engine, [news_jsonl], settings, dictionary=dictionary_v2)
    assert _quarantined(quarantine) == []
    assert engine.alias_targets(index_name) == [live.physical_index]

    engine.put_index_settings(physical, {"index.blocks.write": None})
    engine.raw.indices.close(index=physical)
    with pytest.raises(EngineRefusedError, match=rf"^the engine refused to write to {physical}: index_closed_exception: closed\. "):
        index_corpus(engine, [news_jsonl], settings, dictionary=dictionary_v2)
    assert _quarantined(quarantine) == []
    assert engine.alias_targets(index_name) == [live.physical_index]

    engine.raw.indices.open(index=physical)
    engine.request("GET", f"/_cluster/health/{physical}?wait_for_status=yellow&timeout=30s")
    resumed = index_corpus(engine, [news_jsonl], settings, dictionary=dictionary_v2)
    assert (resumed.physical_index, resumed.read, resumed.indexed, resumed.rejected) == (physical, 200, 200, 0)
    assert resumed.alias_swapped and engine.alias_targets(index_name) == [physical]
    assert engine.count(index_name) == 200


# ---------------------------------------------------------------- 6. a TSV without a header row


def test_tsv_without_header_fails_before_indexing(engine: Engine, index_name: str, tmp_path: Path, shared_data: Path) -> None:
    rows = (shared_data / "zh" / "cnews_sample" / "docs.tsv").read_text(encoding="utf-8").splitlines()[:20]
    corpus = tmp_path / "docs.tsv"
    corpus.write_text("\n".join(rows) + "\n", encoding="utf-8")
    common = ["--index", index_name, "--engine", engine.url, "--quarantine-dir", str(tmp_path), "--text-fields", "content"]
    code, output = _index(str(corpus), *common)
    assert code == 1
    assert "is read as the header row, but none of its 2 columns" in output
    assert "e.g. --columns col1,content;" in output
    assert engine.indices(f"{index_name}-*") == {} and engine.alias_targets(index_name) == []

    code, output = _index(str(corpus), *common, "--columns", "col1,content")
    assert code == 0, output
    assert output.startswith("read 20 / indexed 20 / rejected 0 / ")  # line 1 is a document, not a header


# ---------------------------------------------------------------- 7. over-size records are rejected unparsed


def test_oversized_record_is_quarantined_with_its_own_size(engine: Engine, index_name: str, tmp_path: Path) -> None:
    big = json.dumps({"id": "big", "title": "大", "content": "长文" * 600_000}, ensure_ascii=False)
    lines = [json.dumps({"id": f"s{i}", "title": f"短新闻{i}"}, ensure_ascii=False) for i in range(199)]
    corpus = tmp_path / "big.jsonl"
    corpus.write_text("\n".join([big, *lines]) + "\n", encoding="utf-8")
    assert IndexSettings(index="x").max_record_bytes == 2_000_000
    report = index_corpus(engine, [corpus], _settings(index_name, tmp_path, max_record_bytes=1_000_000))
    assert (report.read, report.indexed, report.rejected) == (200, 199, 1)
    (rejected,) = _quarantined(report.quarantine_file)
    size = len(big.encode("utf-8"))
    assert rejected["reason"] == f"record is {size} bytes, over the limit of 1000000 (--max-record-bytes)"
    assert rejected["record"] == big  # the record itself, unparsed
    assert report.reasons == {"record over --max-record-bytes": 1}


# ---------------------------------------------------------------- resume after kill -9 of the engine


@pytest.mark.parametrize("kind", harness.ENGINE_KINDS)
def test_engine_killed_mid_run_then_resumed_loses_nothing(kind: str, tmp_path: Path, news_jsonl: Path, dictionary: Dictionary) -> None:
    lines = news_jsonl.read_text(encoding="utf-8").splitlines()
    bad = ['{"id": "x1", "title": ', json.dumps({"id": "x2", "category": "空"})]
    corpus = tmp_path / "mixed.jsonl"
    corpus.write_text("\n".join(lines[:30] + bad[:1] + lines[30:150] + bad[1:] + lines[150:]) + "\n", encoding="utf-8")
    node = harness.EngineSettings(kind=kind, port=harness.free_port())
    harness.start(node)
    try:
        engine = connect(node.url)
        settings = _settings("outage", tmp_path, batch_size=40, retries=2, retry_max_wait_s=0.5)

        def kill_after_first_batch(report) -> None:
            if report.indexed + report.rejected >= 40:
                pid = int((node.instance_dir / "engine.pid").read_text())
                os.killpg(pid, signal.SIGKILL)

        with pytest.raises(IndexingError, match=r"unreachable after 2 attempts .* re-run the same command to resume"):
            index_corpus(engine, [corpus], settings, dictionary=dictionary, on_progress=kill_after_first_batch)

        harness.start(node)
        engine = connect(node.url)
        report = index_corpus(engine, [corpus], settings, dictionary=dictionary)
        assert (report.read, report.indexed, report.rejected) == (202, 200, 2)
        ids = [hit["_id"] for hit in engine.scan("outage", source=[])]
        assert len(ids) == len(set(ids)) == 200  # no duplicates
        final = [q for q in _quarantined(report.quarantine_file) if q["run"] == report.run_id]
        assert sorted(ids + [q["record"]["id"] if isinstance(q["record"], dict) else "x1" for q in final]) == sorted(
            [json.loads(line)["id"] for line in lines] + ["x1", "x2"]
        )  # every record is indexed or quarantined
    finally:
        harness.stop(node, purge=True)


# ---------------------------------------------------------------- 8. deeply nested records are rejected unparsed


def test_deeply_nested_record_is_quarantined_and_the_others_indexed(engine: Engine, index_name: str, tmp_path: Path) -> None:
    """The 2nd record nests an extra field 5,000 objects deep: `jingpai index` used to end in a RecursionError
    traceback with nothing indexed or quarantined."""
    deep = '{"id": "deep", "title": "深", "extra": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}"
    corpus = tmp_path / "deep.jsonl"
    corpus.write_text("\n".join(['{"id": "good", "title": "好新闻"}', deep]) + "\n", encoding="utf-8")
    code, output = _index(str(corpus), "--index", index_name, "--engine", engine.url, "--id-field", "id",
                          "--quarantine-dir", str(tmp_path), "--max-rejected", "0.5")
    assert code == 0, output
    assert "Traceback" not in output
    assert output.startswith("read 2 / indexed 1 / rejected 1 / ")
    assert "1 × record nested deeper than --max-depth (line 2)" in output
    (rejected,) = _quarantined(tmp_path / f"{index_name}.rejected.jsonl")
    assert (rejected["line"], rejected["record"]) == (2, deep)
    assert rejected["reason"] == "record is nested 5001 levels deep (objects and arrays), over the limit of 20 (--max-depth)"
    engine.refresh(index_name)
    assert engine.count(index_name) == 1
