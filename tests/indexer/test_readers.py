"""Corpus readers: every line is a record or a BadRecord with a reason; file-level problems raise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jingpai.indexer.readers import BadRecord, CorpusError, SourceRecord, jsonl_record, read_corpus


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_jsonl_bad_lines_are_reported_with_line_numbers(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "c.jsonl",
        '{"title": "一"}\n{"title": \n\n[1, 2]\n'.encode() + b'{"title": "\xff\xfe"}\n' + '{"title": "二"}\n'.encode(),
    )
    records = list(read_corpus(path))
    good = [r for r in records if isinstance(r, SourceRecord)]
    bad = [r for r in records if isinstance(r, BadRecord)]
    assert [(r.line, r.fields["title"]) for r in good] == [(1, "一"), (6, "二")]
    assert [(r.line, r.reason) for r in bad] == [
        (2, "malformed JSON: Expecting value at column 11"),
        (4, "expected a JSON object, got list"),
        (5, "not valid UTF-8: invalid start byte (byte 0xff at offset 11)"),
    ]
    assert bad[2].raw == '{"title": "\ufffd\ufffd"}'
    assert bad[2].raw_bytes == b'{"title": "\xff\xfe"}'  # the exact bytes, for recovery


def test_gbk_lines_keep_their_bytes_and_are_named(tmp_path: Path) -> None:
    line = '{"title": "中文标题"}'.encode("gbk")
    path = _write(tmp_path / "gbk.jsonl", line + b"\n" + b"\x00\x9f\xff binary\n")
    gbk, binary = list(read_corpus(path))
    assert isinstance(gbk, BadRecord) and gbk.raw_bytes == line
    assert gbk.kind == "not valid UTF-8, decodes as GB18030 (convert the file: iconv -f GB18030 -t UTF-8)"
    assert isinstance(binary, BadRecord) and binary.kind == "not valid UTF-8"
    assert binary.raw_bytes == b"\x00\x9f\xff binary"


def test_oversized_lines_are_not_parsed(tmp_path: Path) -> None:
    big = ('{"title": "' + "长" * 1000 + '"}').encode()
    path = _write(tmp_path / "c.jsonl", big + b"\n" + b'{"title": "short"}\n')
    over, ok = list(read_corpus(path, max_record_bytes=1000))
    assert isinstance(over, BadRecord)
    assert (over.line, over.reason, over.kind) == (
        1, f"record is {len(big)} bytes, over the limit of 1000 (--max-record-bytes)", "record over --max-record-bytes",
    )
    assert over.raw == big.decode() and over.raw_bytes is None  # valid UTF-8: the text is the record
    assert isinstance(ok, SourceRecord) and ok.fields == {"title": "short"}


def test_deeply_nested_lines_are_not_parsed(tmp_path: Path) -> None:
    """A record nested deeper than --max-depth is a BadRecord naming its depth, measured without recursion
    (json.loads itself raises RecursionError on the 5,000-deep one); strings full of brackets do not count."""
    deep = '{"title": "深", "extra": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}"
    limit = '{"title": "二十", "x": ' + '{"a": ' * 18 + "[1]" + "}" * 18 + "}"  # 20 levels: the default limit
    over = '{"title": "二十一", "x": [' + '{"a": ' * 18 + "[1]" + "}" * 18 + "]}"  # 21 levels, arrays count
    brackets = json.dumps({"title": "{" * 100 + "[" * 100 + '\\"{'}, ensure_ascii=False)
    path = _write(tmp_path / "c.jsonl", "\n".join(['{"title": "一"}', deep, limit, over, brackets]).encode() + b"\n")
    records = list(read_corpus(path))
    assert [(r.line, type(r).__name__) for r in records] == [
        (1, "SourceRecord"), (2, "BadRecord"), (3, "SourceRecord"), (4, "BadRecord"), (5, "SourceRecord"),
    ]
    assert (records[1].reason, records[1].kind, records[1].raw) == (
        "record is nested 5001 levels deep (objects and arrays), over the limit of 20 (--max-depth)",
        "record nested deeper than --max-depth", deep,
    )
    assert records[3].reason == "record is nested 21 levels deep (objects and arrays), over the limit of 20 (--max-depth)"
    assert [r.line for r in read_corpus(path, max_depth=21) if isinstance(r, BadRecord)] == [2]
    # a limit beyond what Python's parser takes: still a BadRecord, never a RecursionError
    beyond = jsonl_record("c.jsonl", 2, deep, len(deep), max_depth=10_000)
    assert isinstance(beyond, BadRecord)
    assert beyond.reason == "record is nested too deeply for the JSON parser (--max-depth 10000 allows it)"


def test_csv_fields_are_flat_text_whatever_brackets_they_hold(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.csv", ("id,content\n1," + "{" * 5000 + "\n").encode())
    (record,) = read_corpus(path)
    assert isinstance(record, SourceRecord) and record.fields["content"] == "{" * 5000


def test_tsv_without_header_uses_columns_and_flags_wrong_column_counts(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.tsv", "体育\t比赛开始\n财经\n娱乐\t电影\t多余\n".encode())
    records = list(read_corpus(path, columns=("label", "content")))
    assert isinstance(records[0], SourceRecord) and records[0].fields == {"label": "体育", "content": "比赛开始"}
    assert [(r.line, r.reason, r.kind) for r in records[1:]] == [
        (2, "expected 2 columns (label, content), found 1", "expected 2 columns"),
        (3, "expected 2 columns (label, content), found 3", "expected 2 columns"),
    ]


def test_tsv_without_header_says_which_columns_to_pass(tmp_path: Path) -> None:
    path = _write(tmp_path / "docs.tsv", "体育\t马晓旭意外受伤让国奥警惕，无奈大雨格外青睐殷家军\n财经\t央行开展逆回购\n".encode())
    with pytest.raises(CorpusError) as err:
        list(read_corpus(path, text_fields=("title", "content")))
    assert str(err.value) == (
        f"{path}: line 1 is read as the header row, but none of its 2 columns (体育, 马晓旭意外受伤让国奥警惕，无奈大雨格外青…) "
        "is a text field (title, content). If the file has no header row, name its columns with --columns, "
        "e.g. --columns col1,content; if it has one, pass --text-fields with its text columns"
    )
    with pytest.raises(CorpusError, match=r"^--columns label,body names none of the text fields \(title, content\); "):
        list(read_corpus(path, columns=("label", "body"), text_fields=("title", "content")))
    records = list(read_corpus(path, columns=("label", "content"), text_fields=("title", "content")))
    assert [r.line for r in records] == [1, 2]  # no line lost to a header


def test_csv_with_header_and_quoted_commas(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.csv", 'id,title\n7,"股市,大涨"\n'.encode())
    (rec,) = list(read_corpus(path))
    assert rec.fields == {"id": "7", "title": "股市,大涨"}


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"corpus file .*missing\.jsonl does not exist"):
        list(read_corpus(tmp_path / "missing.jsonl"))
    odd = _write(tmp_path / "c.txt", b"x\n")
    with pytest.raises(CorpusError, match=r"cannot tell the format from the suffix '\.txt'; pass --format jsonl\|csv\|tsv"):
        list(read_corpus(odd))
    dup = _write(tmp_path / "d.csv", b"a,a\n1,2\n")
    with pytest.raises(CorpusError, match=r"line 1 is not a usable header"):
        list(read_corpus(dup))
