"""`jingpai index` against both real engines: augmentation, quarantine, versions (failures: test_failures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine.client import Engine
from jingpai.indexer.mapping import read_meta
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.indexer.versions import delete_old_versions, list_versions
from jingpai.keyword_dict import Dictionary

def _settings(index: str, tmp_path: Path, **kw) -> IndexSettings:
    return IndexSettings(index=index, id_field="id", quarantine_dir=tmp_path, progress=False, **kw)


def test_documents_get_segmented_and_keyword_fields(engine: Engine, index_name: str, tmp_path: Path, dictionary: Dictionary) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps({"id": "a", "title": "沪指大涨", "content": "沪指今日收涨，楼市成交回暖。"}, ensure_ascii=False) + "\n"
        + json.dumps({"id": "b", "title": "央行公告", "content": "央行开展逆回购操作。"}, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    report = index_corpus(engine, [corpus], _settings(index_name, tmp_path), dictionary=dictionary)
    assert (report.read, report.indexed, report.rejected) == (2, 2, 0)

    meta = read_meta(engine, index_name)
    assert meta.text_fields == ("title", "content")
    assert meta.dict_version == dictionary.version
    assert meta.seg_fields == {"title": "jingpai.seg.title", "content": "jingpai.seg.content"}

    doc = engine.search(index_name, {"query": {"ids": {"values": ["a"]}}})["hits"]["hits"][0]["_source"]
    assert doc["jingpai"]["keywords"][0] == "沪指"  # highest score × tf
    assert set(doc["jingpai"]["keywords"]) == {"沪指", "楼市"}
    assert "沪指" in doc["jingpai"]["seg"]["content"].split(" ")

    # the dictionary word is one token in the segmented field; a raw-field query still works too
    seg_hits = engine.search(index_name, {"query": {"match": {"jingpai.seg.content": "沪指"}}})["hits"]["hits"]
    assert [h["_id"] for h in seg_hits] == ["a"]
    kw_hits = engine.search(index_name, {"query": {"term": {"jingpai.keywords": "央行"}}})["hits"]["hits"]
    assert [h["_id"] for h in kw_hits] == ["b"]
    raw_hits = engine.search(index_name, {"query": {"match": {"title": "公告"}}})["hits"]["hits"]
    assert [h["_id"] for h in raw_hits] == ["b"]


def test_every_record_is_indexed_or_quarantined(engine: Engine, index_name: str, tmp_path: Path, news_jsonl: Path, dictionary: Dictionary) -> None:
    lines = news_jsonl.read_text(encoding="utf-8").splitlines()
    bad = [
        '{"id": "x1", "title": "断行',                                     # malformed JSON
        json.dumps({"id": "x2", "category": "空"}),                         # no text field
        json.dumps({"id": "x3", "title": 42}),                              # text field not a string
        json.dumps({"id": "x4", "title": "大", "content": "长" * 3000}, ensure_ascii=False),  # over-size
    ]
    mixed = lines[:50] + bad[:2] + lines[50:120] + bad[2:] + lines[120:]
    corpus = tmp_path / "mixed.jsonl"
    corpus.write_text("\n".join(mixed) + "\n", encoding="utf-8")

    report = index_corpus(
        engine, [corpus], _settings(index_name, tmp_path, max_doc_bytes=8000, batch_size=64, max_rejected=0.02),
        dictionary=dictionary,
    )
    assert report.read == len(mixed)
    assert (report.indexed, report.rejected) == (len(lines), 4)
    assert engine.count(index_name) == len(lines)

    rejected = [json.loads(line) for line in report.quarantine_file.read_text(encoding="utf-8").splitlines()]
    assert [(r["line"], r["reason"].split(":")[0]) for r in rejected] == [
        (51, "malformed JSON"),
        (52, "missing text field"),
        (123, "text field 'title' must be a string, got int"),
        (124, "document is 19611 bytes with jingpai's fields (the record alone is 9043 bytes), over the limit of 8000 (--max-doc-bytes)"),
    ]
    assert rejected[1]["record"] == {"id": "x2", "category": "空"}
    assert rejected[0]["record"] == bad[0]


def test_lone_surrogate_is_quarantined_not_fatal(engine: Engine, index_name: str, tmp_path: Path) -> None:
    corpus = tmp_path / "surrogate.jsonl"
    # a JSON escape of half a surrogate pair parses into a str that is not encodable text
    corpus.write_text('{"title": "坏\\ud800字"}\n{"title": "好字"}\n', encoding="utf-8")
    settings = IndexSettings(index=index_name, quarantine_dir=tmp_path, progress=False, max_rejected=0.5)
    report = index_corpus(engine, [corpus], settings)
    assert (report.read, report.indexed, report.rejected) == (2, 1, 1)
    (rejected,) = [json.loads(line) for line in report.quarantine_file.read_text(encoding="utf-8").splitlines()]
    assert rejected["reason"] == "field 'title' is not valid Unicode text: lone surrogate '\\ud800'"
    assert rejected["record"] == {"title": "坏\ud800字"}


def test_engine_rejected_bulk_item_is_quarantined(engine: Engine, index_name: str, tmp_path: Path) -> None:
    corpus = tmp_path / "conflict.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps(d, ensure_ascii=False)
            for d in [{"id": "1", "title": "数字", "n": 5}, {"id": "2", "title": "文字", "n": "不是数字"}, {"id": "3", "title": "再来", "n": 7}]
        )
        + "\n",
        encoding="utf-8",
    )
    report = index_corpus(engine, [corpus], _settings(index_name, tmp_path, batch_size=1, max_rejected=0.5))
    assert (report.indexed, report.rejected) == (2, 1)
    (rejected,) = [json.loads(line) for line in report.quarantine_file.read_text(encoding="utf-8").splitlines()]
    assert rejected["line"] == 2 and rejected["record"]["id"] == "2"
    assert rejected["reason"].startswith("engine rejected the document: ")
    assert "parsing_exception" in rejected["reason"]


def test_new_dictionary_builds_new_version_and_swaps_alias(
    engine: Engine, index_name: str, tmp_path: Path, news_jsonl: Path, dictionary: Dictionary, dictionary_v2: Dictionary
) -> None:
    first = index_corpus(engine, [news_jsonl], _settings(index_name, tmp_path), dictionary=dictionary)
    again = index_corpus(engine, [news_jsonl], _settings(index_name, tmp_path), dictionary=dictionary)
    assert again.physical_index == first.physical_index and not again.alias_swapped
    assert engine.count(index_name) == 200  # re-run: same ids, no duplicates

    second = index_corpus(engine, [news_jsonl], _settings(index_name, tmp_path), dictionary=dictionary_v2)
    assert second.physical_index != first.physical_index and second.alias_swapped
    assert engine.alias_targets(index_name) == [second.physical_index]
    assert read_meta(engine, index_name).dict_version == dictionary_v2.version

    versions = list_versions(engine, index_name)
    assert [(v.name, v.aliased, v.docs) for v in versions] == [
        (first.physical_index, False, 200),
        (second.physical_index, True, 200),
    ]
    assert delete_old_versions(engine, index_name) == [first.physical_index]
    assert [v.name for v in list_versions(engine, index_name)] == [second.physical_index]


def test_new_physical_index_is_built_without_refresh_or_replicas_then_restored(
    engine: Engine, index_name: str, tmp_path: Path, news_jsonl: Path, dictionary: Dictionary
) -> None:
    keys = ("index.refresh_interval", "index.number_of_replicas")
    seen: list[tuple] = []

    def watch(report) -> None:
        current = engine.get_index_settings(report.physical_index)
        seen.append(tuple(current.get(k) for k in keys))

    first = index_corpus(engine, [news_jsonl], _settings(index_name, tmp_path, batch_size=50), dictionary=dictionary, on_progress=watch)
    assert seen == [("-1", "0")] * 4  # nobody searches a physical index before the alias points at it
    after = engine.get_index_settings(first.physical_index)
    assert "index.refresh_interval" not in after and after["index.number_of_replicas"] == "1"
    assert engine.count(index_name) == 200

    # a re-run into the index behind the alias leaves its settings alone: it is being searched
    seen.clear()
    again = index_corpus(engine, [news_jsonl], _settings(index_name, tmp_path, batch_size=50), dictionary=dictionary, on_progress=watch)
    assert again.physical_index == first.physical_index
    assert seen == [(None, "1")] * 4
    assert engine.count(index_name) == 200


def test_settings_reject_bad_concurrency() -> None:
    with pytest.raises(ValueError, match=r"^concurrency \(bulk requests in flight\) must be >= 1, got 0$"):
        IndexSettings(index="x", concurrency=0)


def test_cli_index_status_and_errors(engine: Engine, index_name: str, tmp_path: Path, news_jsonl: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["index", str(news_jsonl), "--index", index_name, "--engine", engine.url, "--id-field", "id",
         "--quarantine-dir", str(tmp_path), "--no-progress"],
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("read 200 / indexed 200 / rejected 0 / ")
    status = runner.invoke(cli, ["index", "status", index_name, "--engine", engine.url])
    assert status.exit_code == 0
    assert status.output.startswith(f"* {index_name}-nodict-1 ")

    bad = runner.invoke(cli, ["index", str(news_jsonl), "--index", index_name, "--engine", "http://127.0.0.1:9", "--no-progress"])
    assert bad.exit_code == 1
    assert "Error: no engine answers at http://127.0.0.1:9" in bad.output
