"""Corpus readers: JSONL, CSV and TSV files → records, never dropping a line silently.

Every physical record of the input comes out either as a :class:`SourceRecord` (a dict of fields) or
as a :class:`BadRecord` carrying the raw text and the reason, so the indexer can quarantine it.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

CorpusFormat = Literal["jsonl", "csv", "tsv"]
FORMATS: tuple[CorpusFormat, ...] = ("jsonl", "csv", "tsv")
_SUFFIXES: dict[str, CorpusFormat] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv"}


class CorpusError(ValueError):
    """A corpus file cannot be read at all (missing, unknown format, bad header)."""


@dataclass(frozen=True)
class SourceRecord:
    source: str
    line: int
    fields: dict


@dataclass(frozen=True)
class BadRecord:
    source: str
    line: int
    raw: str
    reason: str


def detect_format(path: Path, given: CorpusFormat | None) -> CorpusFormat:
    """The explicit format, or the one the file suffix names."""
    if given is not None:
        if given not in FORMATS:
            raise CorpusError(f"unknown corpus format {given!r}; expected one of {', '.join(FORMATS)}")
        return given
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise CorpusError(
            f"{path}: cannot tell the format from the suffix {path.suffix!r}; pass --format {'|'.join(FORMATS)}"
        )
    return fmt


def _lines(path: Path) -> Iterator[tuple[int, str | None, bytes]]:
    """``(line number, decoded text or None if undecodable, raw bytes)`` per line, 1-based."""
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            raw = raw.rstrip(b"\r\n")
            try:
                yield number, raw.decode("utf-8"), raw
            except UnicodeDecodeError:
                yield number, None, raw


def _undecodable(path: Path, number: int, raw: bytes) -> BadRecord:
    return BadRecord(str(path), number, raw.decode("utf-8", errors="replace"), f"line {number} is not valid UTF-8")


def read_jsonl(path: Path) -> Iterator[SourceRecord | BadRecord]:
    for number, text, raw in _lines(path):
        if text is None:
            yield _undecodable(path, number, raw)
            continue
        if not text.strip():
            continue  # blank lines are layout, not records
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            yield BadRecord(str(path), number, text, f"malformed JSON: {exc.msg} at column {exc.colno}")
            continue
        if not isinstance(value, dict):
            yield BadRecord(str(path), number, text, f"expected a JSON object, got {type(value).__name__}")
            continue
        yield SourceRecord(str(path), number, value)


def read_delimited(
    path: Path, *, delimiter: str, columns: Sequence[str] | None = None
) -> Iterator[SourceRecord | BadRecord]:
    """CSV/TSV. The first row is the header unless ``columns`` names the columns."""
    header: list[str] | None = list(columns) if columns else None
    for number, text, raw in _lines(path):
        if text is None:
            yield _undecodable(path, number, raw)
            continue
        if not text.strip():
            continue
        if delimiter == "\t":
            row = text.split("\t")  # TSV corpora carry quotes literally
        else:
            row = next(csv.reader(io.StringIO(text), delimiter=delimiter))
        if header is None:
            header = [h.strip() for h in row]
            if len(set(header)) != len(header) or not all(header):
                raise CorpusError(f"{path}: line 1 is not a usable header (empty or repeated column names): {header}")
            continue
        if len(row) != len(header):
            yield BadRecord(
                str(path), number, text, f"expected {len(header)} columns ({', '.join(header)}), found {len(row)}"
            )
            continue
        yield SourceRecord(str(path), number, dict(zip(header, row)))


def read_corpus(
    path: str | Path, *, fmt: CorpusFormat | None = None, columns: Sequence[str] | None = None
) -> Iterator[SourceRecord | BadRecord]:
    """Records of one corpus file.

    Args:
        path: a ``.jsonl``/``.csv``/``.tsv`` file.
        fmt: force the format instead of reading it from the suffix.
        columns: CSV/TSV column names for files without a header row.

    Raises:
        CorpusError: the file is missing/empty or its format is unknown.

    Example:
        >>> for rec in read_corpus("news.jsonl"):            # doctest: +SKIP
        ...     print(rec.line, rec.fields["title"])
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file {path} does not exist")
    fmt = detect_format(path, fmt)
    if fmt == "jsonl":
        if columns:
            raise CorpusError("--columns applies to csv/tsv corpora, not jsonl")
        yield from read_jsonl(path)
    else:
        yield from read_delimited(path, delimiter="," if fmt == "csv" else "\t", columns=columns)


__all__ = ["FORMATS", "BadRecord", "CorpusError", "CorpusFormat", "SourceRecord", "detect_format", "read_corpus"]
