"""Domain corpora as a Spark RDD of ``(domain, text)``, read by Spark and parsed like :mod:`~jingpai.keyword_dict.corpus`.

Every input — a local file, ``hdfs://``/``s3a://``/``file://`` URIs, globs — is read with Spark's text
reader (large files are split across tasks) as the lines' bytes; each line is decoded on its own, as
:func:`jingpai.textio.numbered_lines` does, and goes through the
same per-line functions as the local readers (:func:`~jingpai.keyword_dict.corpus.json_document`,
:func:`~jingpai.keyword_dict.corpus.labelled_row`), so a bad line is the same error, naming the file and
line. Tasks do not raise: each reports its first error, and the driver turns the earliest one into the
:class:`~jingpai.keyword_dict.corpus.CorpusReadError` (counting the lines of the tasks before it, only
then, for the line number).

Undecodable lines are skipped and counted like the local reader's (a few: a warning; more than
:data:`~jingpai.keyword_dict.corpus.MAX_UNDECODABLE_SHARE`: an error).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from jingpai.textio import encoding_label
from jingpai.keyword_dict.corpus import (
    MAX_UNDECODABLE_SHARE,
    CorpusReadError,
    LabelledSpec,
    check_encoding,
    check_file,
    is_jsonl,
    json_document,
    label_names,
    labelled_row,
    not_decodable,
    swapped_columns_error,
)

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: the corpus name of the background (anti-domain) corpus; domain names are never empty
BACKGROUND = ""
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB = re.compile(r"[*?\[{]")
#: stands for "file:line" in messages made inside tasks, which know neither the line number nor how to print it
_WHERE = "\x00where\x00"
_DOC, _SUMMARY = 0, 1


@dataclass(frozen=True)
class Source:
    """One input: ``kind`` says how its lines are read; ``domain`` names a ``domain``/``background`` corpus."""

    kind: Literal["domain", "labelled", "background"]
    path: str
    domain: str = BACKGROUND


def spark_only(path: str) -> bool:
    """Whether only Spark's reader can read ``path``: a URI (``hdfs://…``, ``s3a://…``) or a glob that is no file."""
    return bool(_URI.match(path) or (_GLOB.search(path) and not Path(path).exists()))


def spark_path(path: str, what: str) -> tuple[str, bool]:
    """``(path for Spark's reader, whether it is one file)``; a local file is checked like the local
    readers check it (:func:`~jingpai.keyword_dict.corpus.check_file`)."""
    if _URI.match(path):
        return path, not _GLOB.search(path)
    local = Path(path)
    if _GLOB.search(path) and not local.exists():
        return "file://" + str(local.absolute()), False
    check_file(local, what)
    return "file://" + str(local.resolve()), True


@dataclass
class _Summary:
    """What the driver checks after reading, gathered per task and merged with ``reduce``."""

    #: (source, domain) → [documents, characters, longest, first position]
    docs: dict = field(default_factory=dict)
    #: source → non-blank lines; source → [undecodable lines, first position, its bytes]
    lines: dict = field(default_factory=dict)
    bad: dict = field(default_factory=dict)
    #: source → (position, label, text) of its first labelled row
    first: dict = field(default_factory=dict)
    #: (source, position, message) of the earliest bad record
    error: tuple | None = None

    def merge(self, other: _Summary) -> _Summary:
        for key, (n, chars, longest, pos) in other.docs.items():
            mine = self.docs.setdefault(key, [0, 0, 0, pos])
            mine[0] += n
            mine[1] += chars
            mine[2] = max(mine[2], longest)
            mine[3] = min(mine[3], pos)
        for src, n in other.lines.items():
            self.lines[src] = self.lines.get(src, 0) + n
        for src, (n, pos, sample) in other.bad.items():
            mine = self.bad.setdefault(src, [0, pos, sample])
            mine[0] += n
            if pos < mine[1]:
                mine[1:] = [pos, sample]
        for src, row in other.first.items():
            if src not in self.first or row[0] < self.first[src][0]:
                self.first[src] = row
        if other.error is not None and (self.error is None or other.error[:2] < self.error[:2]):
            self.error = other.error
        return self


def _parse(part: int, rows: Iterator, *, src: int, source: Source, spec: LabelledSpec, names, fields, encoding: str) -> Iterator[tuple]:
    """``(_DOC, source, domain, text)`` per document of one task's lines, then ``(_SUMMARY, _Summary)``."""
    summary = _Summary()
    for i, (raw,) in enumerate(rows):
        if not raw.strip():
            continue
        summary.lines[src] = summary.lines.get(src, 0) + 1
        try:
            line = bytes(raw).decode(encoding)
        except UnicodeDecodeError:
            summary.bad.setdefault(src, [0, (part, i), bytes(raw)])[0] += 1
            continue
        try:
            if source.kind == "labelled":
                first = src not in summary.first and part == 0
                domain, text = labelled_row(line, spec, names, where=_WHERE, first_row=first)
                summary.first.setdefault(src, ((part, i), domain, text))
            else:
                domain = source.domain
                text = json_document(line.strip(), fields, where=_WHERE) if is_jsonl(source.path) else line.strip()
        except CorpusReadError as exc:
            summary.error = (src, (part, i), str(exc))
            break
        stats = summary.docs.setdefault((src, domain), [0, 0, 0, (part, i)])
        stats[0] += 1
        stats[1] += len(text)
        stats[2] = max(stats[2], len(text))
        yield _DOC, src, domain, text
    yield _SUMMARY, summary


@dataclass(frozen=True)
class Corpora:
    """The parsed corpora (:meth:`documents`) and what the driver learned reading them."""

    parsed: RDD
    #: domain → (documents, characters, longest document), in the local reader's order of domains
    sizes: dict[str, tuple[int, int, int]]
    #: domain → the inputs it was read from
    origins: dict[str, list[str]]
    #: (source, domain) pairs dropped as header rows
    dropped: frozenset

    def documents(self) -> RDD:
        """``(domain, text)`` records (the background under :data:`BACKGROUND`)."""
        dropped = self.dropped
        return self.parsed.filter(lambda r: r[0] == _DOC and (r[1], r[2]) not in dropped).map(lambda r: (r[2], r[3]))


def read_corpora(session: SparkSession, sources: Sequence[Source], *, spec: LabelledSpec, text_fields: Sequence[str],
                 encoding: str = "utf-8") -> Corpora:
    """Read and check every source (one Spark job; the parsed records stay cached for the build).

    Raises:
        CorpusReadError: a bad line (file and line named), a source without documents, too many
            undecodable lines, or swapped labelled columns.
        ValueError: an unusable ``encoding`` (see :func:`~jingpai.keyword_dict.corpus.check_encoding`).
    """
    encoding = check_encoding(encoding)
    names, fields = label_names(spec), tuple(text_fields)
    raw, parsed = [], []
    for src, source in enumerate(sources):
        what = "labelled corpus" if source.kind == "labelled" else "corpus file"
        uri, _ = spark_path(source.path, what)
        lines = _lines(session, uri, f"{what} {source.path}")
        raw.append(lines)
        parse = _parser(src, source, spec, names, fields, encoding)
        parsed.append(lines.mapPartitionsWithIndex(parse))
    records = session.sparkContext.union(parsed).persist(_storage_level())
    summary = records.filter(lambda r: r[0] == _SUMMARY).map(lambda r: r[1]).reduce(lambda a, b: a.merge(b))
    _raise_errors(summary, sources, raw, encoding)
    dropped = _header_rows(summary, sources, raw, spec)
    return Corpora(records, *_sizes(summary, sources, dropped), frozenset(dropped))


def _lines(session: SparkSession, uri: str, what: str) -> RDD:
    """The bytes of each line of ``uri`` (a cast, not a decode: the encoding and bad lines are ours to handle)."""
    from pyspark.errors import PySparkException

    try:
        return session.read.text(uri).selectExpr("CAST(value AS BINARY)").rdd
    except PySparkException as exc:  # a path or glob with nothing there, an unknown file system or host
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorpusReadError(f"{what} cannot be read by Spark: {first}") from exc


def _parser(src: int, source: Source, spec: LabelledSpec, names, fields, encoding: str):
    return lambda part, rows: _parse(part, rows, src=src, source=source, spec=spec, names=names, fields=fields, encoding=encoding)


def _storage_level():
    from pyspark import StorageLevel

    return StorageLevel.MEMORY_AND_DISK


def _line_number(lines: RDD, position: tuple[int, int]) -> int:
    """The 1-based line of ``(task, line in task)``: counts the lines of the tasks before it (errors only)."""
    part, index = position
    if part == 0:
        return index + 1
    before = lines.mapPartitionsWithIndex(lambda i, it: [sum(1 for _ in it)] if i < part else [0]).sum()
    return before + index + 1


def _where(source: Source, raw: RDD, position: tuple[int, int]) -> str:
    number = _line_number(raw, position)
    return f"{source.path}:{number}" if not _GLOB.search(source.path) else f"{source.path} (line {number} of the matched files)"


def _raise_errors(summary: _Summary, sources: Sequence[Source], raw: list, encoding: str) -> None:
    if summary.error is not None:
        src, position, message = summary.error
        raise CorpusReadError(message.replace(_WHERE, _where(sources[src], raw[src], position)))
    for src, (bad, position, sample) in sorted(summary.bad.items()):
        lines, where = summary.lines.get(src, 0), _where(sources[src], raw[src], position)
        if bad > MAX_UNDECODABLE_SHARE * lines:
            # for a glob, the line counts through the matched files
            number = _line_number(raw[src], position)
            raise CorpusReadError(not_decodable(sources[src].path, encoding, number, bad, lines, sample))
        logger.warning("%s: skipped %d line(s) that are not valid %s, the first at %s", sources[src].path, bad, encoding_label(encoding), where)
    for src, source in enumerate(sources):
        if not any(key[0] == src for key in summary.docs):
            what = "labelled corpus" if source.kind == "labelled" else "corpus file"
            raise CorpusReadError(f"{what} {source.path} has no {'rows' if source.kind == 'labelled' else 'documents'}: every line is blank")


def _header_rows(summary: _Summary, sources: Sequence[Source], raw: list, spec: LabelledSpec) -> set[tuple[int, str]]:
    """``(source, label)`` of labelled files whose first row is a header (as :func:`read_labelled` decides);
    :class:`CorpusReadError` for one whose columns look swapped."""
    dropped = set()
    for src, (position, label, text) in sorted(summary.first.items()):
        counts = {domain: stats[0] for (s, domain), stats in summary.docs.items() if s == src}
        line = _line_number(raw[src], position)
        swapped = swapped_columns_error(sources[src].path, sum(counts.values()), len(counts), (line, label, text), spec)
        if swapped is not None:
            raise swapped
        if counts[label] == 1 and len(counts) > 1:
            logger.warning("%s:%s: skipped as a header row: its label %r labels no other row", sources[src].path, line, label)
            dropped.add((src, label))
    return dropped


def _sizes(summary: _Summary, sources: Sequence[Source], dropped: set) -> tuple[dict, dict]:
    """Per domain ``(documents, characters, longest)`` and origins, domains in order of first appearance."""
    sizes: dict[str, list[int]] = {}
    origins: dict[str, list[str]] = {}
    for (src, domain), (n, chars, longest, _) in sorted(summary.docs.items(), key=lambda kv: (kv[0][0], kv[1][3])):
        if (src, domain) in dropped:
            continue
        mine = sizes.setdefault(domain, [0, 0, 0])
        mine[0] += n
        mine[1] += chars
        mine[2] = max(mine[2], longest)
        origins.setdefault(domain, []).append(sources[src].path)
    return {d: tuple(v) for d, v in sizes.items()}, origins


__all__ = ["BACKGROUND", "Corpora", "Source", "read_corpora", "spark_only", "spark_path"]
