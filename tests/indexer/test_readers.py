"""Corpus readers: every line is a record or a BadRecord with a reason; file-level problems raise."""

from __future__ import annotations

from pathlib import Path

import pytest

from jingpai.indexer.readers import BadRecord, CorpusError, SourceRecord, read_corpus


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
        (5, "line 5 is not valid UTF-8"),
    ]


def test_tsv_without_header_uses_columns_and_flags_wrong_column_counts(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.tsv", "体育\t比赛开始\n财经\n娱乐\t电影\t多余\n".encode())
    records = list(read_corpus(path, columns=("label", "content")))
    assert isinstance(records[0], SourceRecord) and records[0].fields == {"label": "体育", "content": "比赛开始"}
    assert [(r.line, r.reason) for r in records[1:]] == [
        (2, "expected 2 columns (label, content), found 1"),
        (3, "expected 2 columns (label, content), found 3"),
    ]


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
