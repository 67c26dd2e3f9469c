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

from jingpai.cjk import has_han
from jingpai.errors import UserError
from jingpai.nesting import deeper_than
from jingpai.textio import LineTooLong, UndecodableLine, numbered_lines

logger = logging.getLogger(__name__)

CorpusFormat = Literal["jsonl", "csv", "tsv"]
FORMATS: tuple[CorpusFormat, ...] = ("jsonl", "csv", "tsv")
_SUFFIXES: dict[str, CorpusFormat] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv"}


class CorpusError(UserError, ValueError):
    """A corpus file cannot be read at all (missing, unknown format, bad header)."""


@dataclass(frozen=True)
class SourceRecord:
    """A record: its fields, where it came from and its size in the file (bytes of its line)."""

    source: str
    line: int
    fields: dict
    size: int | None = None


@dataclass(frozen=True)
class BadRecord:
    """A line that is not a record.

    Attributes:
        raw: the line as text (undecodable bytes shown as U+FFFD: readable, not recoverable).
        reason: why, for the quarantine file.
        kind: the reason without its specifics (line numbers, sizes), for grouping counts.
        raw_bytes: the line's exact bytes when ``raw`` does not hold them (not valid UTF-8).
    """

    source: str
    line: int
    raw: str
    reason: str
    kind: str = ""
    raw_bytes: bytes | None = None

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", self.reason.split(":")[0])


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


DEFAULT_MAX_RECORD_BYTES = 2_000_000
"""Lines longer than this are not parsed. Segmenting and augmenting a record takes tens of times its
size in memory (a 48 MB line took 1.8 GB), and the document built from it is about 2.3 times its size,
so a record under this limit also fits the default ``--max-doc-bytes`` of 5 MB."""

DEFAULT_MAX_DEPTH = 20
"""Records nested deeper than this (objects and arrays) are quarantined before they are parsed: the
engines' default ``index.mapping.depth.limit``, so a record under it never creates a mapping the engine
refuses, and far below the ~1,000 levels where ``json.loads`` raises ``RecursionError`` (and the
thousands where an engine's parser overflows its stack)."""

OVERSIZED = "record over --max-record-bytes"
TOO_DEEP = "record nested deeper than --max-depth"
NOT_UTF8 = "not valid UTF-8"
LOOKS_GB18030 = "not valid UTF-8, decodes as GB18030 (convert the file: iconv -f GB18030 -t UTF-8)"


def _lines(path: Path, max_record_bytes: int | None = None) -> Iterator[tuple[int, str | None, bytes | BadRecord]]:
    """``(line number, decoded text, raw bytes)`` per line, 1-based; ``(number, None, BadRecord)`` for a
    line that is over ``max_record_bytes`` or not valid UTF-8."""
    for line in numbered_lines(path, max_bytes=max_record_bytes):
        if isinstance(line.error, LineTooLong):
            yield line.number, None, _oversized(path, line.number, line.raw, line.error.limit)
        elif isinstance(line.error, UndecodableLine):
            yield line.number, None, _undecodable(path, line.number, line.raw, line.error.cause)
        else:
            yield line.number, line.text, line.raw


def _oversized(path: str | Path, number: int, raw: bytes, limit: int) -> BadRecord:
    reason = f"record is {len(raw)} bytes, over the limit of {limit} (--max-record-bytes)"
    try:
        return BadRecord(str(path), number, raw.decode("utf-8"), reason, OVERSIZED)
    except UnicodeDecodeError:
        return BadRecord(str(path), number, raw.decode("utf-8", errors="replace"), reason, OVERSIZED, raw)


def _undecodable(path: str | Path, number: int, raw: bytes, exc: UnicodeDecodeError) -> BadRecord:
    reason = f"{NOT_UTF8}: {exc.reason} (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
    kind = LOOKS_GB18030 if _looks_gb18030(raw) else NOT_UTF8
    return BadRecord(str(path), number, raw.decode("utf-8", errors="replace"), reason, kind, raw)


def _looks_gb18030(raw: bytes) -> bool:
    """Whether ``raw`` is Chinese text in GBK/GB18030, the usual non-UTF-8 encoding of Chinese corpora.
    Binary data rarely decodes strictly, and when it does it brings control characters."""
    try:
        text = raw.decode("gb18030")
    except UnicodeDecodeError:
        return False
    has_cjk = has_han(text)
    return has_cjk and not any(ch < " " and ch != "\t" for ch in text)


def read_jsonl(
    path: Path, *, max_record_bytes: int | None = None, max_depth: int = DEFAULT_MAX_DEPTH,
) -> Iterator[SourceRecord | BadRecord]:
    for number, text, raw in _lines(path, max_record_bytes):
        if text is None:
            assert isinstance(raw, BadRecord)
            yield raw
            continue
        record = jsonl_record(str(path), number, text, len(raw), max_depth=max_depth)
        if record is not None:
            yield record


def jsonl_record(
    source: str, number: int, text: str, size: int, *, max_depth: int = DEFAULT_MAX_DEPTH,
) -> SourceRecord | BadRecord | None:
    """The record of one decoded JSONL line (``None`` for a blank line: layout, not a record).

    A line nested deeper than ``max_depth`` is a :class:`BadRecord` without being parsed: its depth is
    measured on the text, iteratively (:func:`jingpai.nesting.deeper_than`)."""
    if not text.strip():
        return None
    deep = deeper_than(text, max_depth)
    if deep is not None:
        reason = f"record is nested {deep.depth} levels deep (objects and arrays), over the limit of {max_depth} (--max-depth)"
        return BadRecord(source, number, text, reason, TOO_DEEP)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return BadRecord(source, number, text, f"malformed JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        # only with a --max-depth above what Python's parser can take (about 1,000 levels)
        logger.warning("%s:%d: json.loads ran out of stack under --max-depth %d; quarantined", source, number, max_depth)
        return BadRecord(source, number, text, f"record is nested too deeply for the JSON parser (--max-depth {max_depth} allows it)", TOO_DEEP)
    if not isinstance(value, dict):
        return BadRecord(source, number, text, f"expected a JSON object, got {type(value).__name__}")
    return SourceRecord(source, number, value, size)


def delimited_record(
    source: str, number: int, text: str, size: int, *, header: Sequence[str], delimiter: str,
) -> SourceRecord | BadRecord | None:
    """The record of one decoded CSV/TSV data line under ``header`` (``None`` for a blank line)."""
    if not text.strip():
        return None
    if delimiter == "\t":
        row = text.split("\t")  # TSV corpora carry quotes literally
    else:
        row = next(csv.reader(io.StringIO(text), delimiter=delimiter))
    if len(row) != len(header):
        return BadRecord(
            source, number, text, f"expected {len(header)} columns ({', '.join(header)}), found {len(row)}",
            f"expected {len(header)} columns",
        )
    return SourceRecord(source, number, dict(zip(header, row)), size)


def decode_line(source: str, number: int, raw: bytes, max_record_bytes: int | None) -> str | BadRecord:
    """One line's text (its ``\\r\\n`` stripped), or the :class:`BadRecord` of a line that is over
    ``max_record_bytes`` or not valid UTF-8: what :func:`read_corpus` does per line, for readers that get
    the lines from elsewhere (the Spark path)."""
    raw = raw.rstrip(b"\r\n")
    if max_record_bytes is not None and len(raw) > max_record_bytes:
        return _oversized(source, number, raw, max_record_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _undecodable(source, number, raw, exc)


def parse_header(source: str, number: int, text: str, *, delimiter: str, text_fields: Sequence[str] | None) -> list[str]:
    """The column names of a CSV/TSV header line; :class:`CorpusError` when it is unusable."""
    row = text.split("\t") if delimiter == "\t" else next(csv.reader(io.StringIO(text), delimiter=delimiter))
    header = [h.strip() for h in row]
    if text_fields and not set(text_fields) & set(header):
        raise CorpusError(_no_text_column(source, number, header, text_fields))
    if len(set(header)) != len(header) or not all(header):
        raise CorpusError(f"{source}: line {number} is not a usable header (empty or repeated column names): {header}")
    return header


def read_delimited(
    path: Path,
    *,
    delimiter: str,
    columns: Sequence[str] | None = None,
    text_fields: Sequence[str] | None = None,
    max_record_bytes: int | None = None,
) -> Iterator[SourceRecord | BadRecord]:
    """CSV/TSV. The first row is the header unless ``columns`` names the columns.

    With ``text_fields``, a header (read or given) that names none of them raises :class:`CorpusError`
    saying what to pass: every record would otherwise be rejected as "missing text field", and a file
    without a header row would lose its first line to the header.
    """
    header: list[str] | None = list(columns) if columns else None
    if header is not None and text_fields and not set(text_fields) & set(header):
        raise CorpusError(
            f"--columns {','.join(header)} names none of the text fields ({', '.join(text_fields)}); "
            f"name the column holding the text after one of them, or pass --text-fields"
        )
    for number, text, raw in _lines(path, max_record_bytes):
        if text is None:
            assert isinstance(raw, BadRecord)
            if header is None:
                raise CorpusError(f"{path}: line {number} should be the header row but is unusable: {raw.reason}")
            yield raw
            continue
        if not text.strip():
            continue
        if header is None:
            header = parse_header(str(path), number, text, delimiter=delimiter, text_fields=text_fields)
            continue
        record = delimited_record(str(path), number, text, len(raw), header=header, delimiter=delimiter)
        if record is not None:
            yield record


def _no_text_column(path: str | Path, number: int, header: list[str], text_fields: Sequence[str]) -> str:
    shown = ", ".join(h if len(h) <= 20 else h[:20] + "…" for h in header)
    # the widest cell most likely holds the text: name it after the (last, usually the body) text field
    widest = max(range(len(header)), key=lambda i: len(header[i]))
    example = ",".join(text_fields[-1] if i == widest else f"col{i + 1}" for i in range(len(header)))
    return (
        f"{path}: line {number} is read as the header row, but none of its {len(header)} columns ({shown}) is a "
        f"text field ({', '.join(text_fields)}). If the file has no header row, name its columns with "
        f"--columns, e.g. --columns {example}; if it has one, pass --text-fields with its text columns"
    )


def read_corpus(
    path: str | Path,
    *,
    fmt: CorpusFormat | None = None,
    columns: Sequence[str] | None = None,
    text_fields: Sequence[str] | None = None,
    max_record_bytes: int | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Iterator[SourceRecord | BadRecord]:
    """Records of one corpus file.

    Args:
        path: a ``.jsonl``/``.csv``/``.tsv`` file.
        fmt: force the format instead of reading it from the suffix.
        columns: CSV/TSV column names for files without a header row.
        text_fields: when given, a CSV/TSV header naming none of them is an error (see
            :func:`read_delimited`).
        max_record_bytes: lines longer than this come out as a :class:`BadRecord` quoting their
            size, before any parsing (``None``: no limit).
        max_depth: JSONL lines nested deeper than this (objects and arrays) come out as a
            :class:`BadRecord` naming their depth, before any parsing. CSV/TSV fields are flat text.

    Raises:
        CorpusError: the file is missing, its format is unknown, or its header is unusable.

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
        yield from read_jsonl(path, max_record_bytes=max_record_bytes, max_depth=max_depth)
    else:
        yield from read_delimited(
            path, delimiter="," if fmt == "csv" else "\t", columns=columns, text_fields=text_fields,
            max_record_bytes=max_record_bytes,
        )


__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_RECORD_BYTES",
    "FORMATS",
    "BadRecord",
    "CorpusError",
    "CorpusFormat",
    "SourceRecord",
    "decode_line",
    "delimited_record",
    "detect_format",
    "jsonl_record",
    "parse_header",
    "read_corpus",
]
