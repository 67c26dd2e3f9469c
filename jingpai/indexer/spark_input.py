"""Corpus files read by Spark into numbered records, the same records :func:`~jingpai.indexer.readers.read_corpus` makes.

Anything Spark's file sources read works: local paths, ``hdfs://``, ``s3a://``, globs and directories.
The files are listed on the driver through Hadoop's ``FileSystem`` (a path that matches nothing is a
:class:`~jingpai.indexer.readers.CorpusError` before anything is written), then read with Spark's text
source as raw bytes (``value`` cast to binary keeps a line that is not UTF-8 exactly, so it is
quarantined with its bytes, as on the local path), split on ``\\n`` only, as the local reader does.

Line numbers: Spark splits a file into blocks read by different tasks; the hidden ``_metadata`` column
says which file and block a row comes from. One pass counts the lines of each block (and takes the
header line of CSV/TSV files from block 0); the starting line of every block follows, and the second
pass numbers each line as it parses it — the same two passes as Spark's own ``zipWithIndex``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from jingpai.indexer.readers import (
    BadRecord, CorpusError, CorpusFormat, SourceRecord, decode_line, delimited_record, detect_format, jsonl_record,
    parse_header,
)
from jingpai.indexer.settings import IndexSettings

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: Spark's small-file defaults pack a corpus of a few MB into one task; these let it use every core
SPLIT_DEFAULTS = {"spark.sql.files.openCostInBytes": str(256 * 1024), "spark.sql.files.maxPartitionBytes": str(32 * 1024 * 1024)}


@dataclass(frozen=True)
class InputFile:
    """One corpus file: its URI as Spark names it, the name the quarantine shows, its format and header.

    Attributes:
        uri: the URI Spark's ``_metadata.file_path`` gives (decoded).
        source: local files as a plain path (as the local reader names them), others as the URI.
        fmt: its format.
        header: CSV/TSV column names (``None`` for JSONL).
        header_in_file: line 1 is the header row (it is not a record).
    """

    uri: str
    source: str
    fmt: CorpusFormat
    header: tuple[str, ...] | None = None
    header_in_file: bool = False


def source_name(uri: str) -> str:
    """``file:/x/y.jsonl`` → ``/x/y.jsonl``; other URIs unchanged."""
    parts = urlsplit(uri)
    return unquote(parts.path) if parts.scheme in ("", "file") else uri


def list_files(spark: SparkSession, paths: Iterable[str], settings: IndexSettings) -> list[InputFile]:
    """The files behind ``paths`` (globs expanded, directories listed), with their formats.

    Raises:
        CorpusError: a path matches no file, or a file's format cannot be told.
    """
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    found: list[InputFile] = []
    for given in paths:
        path = jvm.org.apache.hadoop.fs.Path(str(given))
        statuses = path.getFileSystem(conf).globStatus(path) or []
        files = []
        for status in statuses:
            if status.isDirectory():
                files.extend(s for s in path.getFileSystem(conf).listStatus(status.getPath()) if s.isFile())
            else:
                files.append(status)
        files = [s for s in files if not s.getPath().getName().startswith(("_", "."))]
        if not files:
            raise CorpusError(f"corpus file {given} does not exist (no file matches it)")
        for status in files:
            uri = unquote(status.getPath().toUri().toString())
            fmt = detect_format(PurePosixPath(status.getPath().getName()), settings.fmt)  # type: ignore[arg-type]
            if fmt == "jsonl" and settings.columns:
                raise CorpusError("--columns applies to csv/tsv corpora, not jsonl")
            header = tuple(settings.columns) if fmt != "jsonl" and settings.columns else None
            found.append(InputFile(uri, source_name(uri), fmt, header))
    return found


def read_lines(spark: SparkSession, files: list[InputFile]) -> RDD:
    """``(file source name, block start, raw line)`` of every line of ``files``, blank ones too, in file order per block."""
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    for key, value in SPLIT_DEFAULTS.items():
        if not sc.getConf().contains(key):  # a value the user set stands
            spark.conf.set(key, value)
    frame = spark.read.option("lineSep", "\n").text([f.uri for f in files])
    return frame.select(
        F.col("_metadata.file_path").alias("path"), F.col("_metadata.file_block_start").alias("block"),
        F.col("value").cast("binary").alias("raw"),
    ).rdd.map(lambda row: (source_name(unquote(row.path)), row.block, bytes(row.raw)))


def _block_counts(rows: Iterator[tuple[str, int, bytes]]) -> Iterator[tuple[str, int, int, bytes | None]]:
    """``(file, block, lines, first line when the block starts the file)`` per block of one partition."""
    key: tuple[str, int] | None = None
    count, first = 0, None
    for path, block, raw in rows:
        if (path, block) != key:
            if key is not None:
                yield key[0], key[1], count, first
            key, count, first = (path, block), 0, raw if block == 0 else None
        count += 1
    if key is not None:
        yield key[0], key[1], count, first


def number_blocks(lines: RDD, files: list[InputFile], settings: IndexSettings) -> tuple[dict[tuple[str, int], int], list[InputFile]]:
    """The first line number of every ``(file, block)``, and ``files`` with the headers read from their line 1.

    Raises:
        CorpusError: a CSV/TSV header line names none of the text fields or is unusable.
    """
    counts = lines.mapPartitions(_block_counts).collect()
    starts: dict[tuple[str, int], int] = {}
    firsts: dict[str, bytes | None] = {}
    for path in {c[0] for c in counts}:
        line = 1
        for _, block, count, first in sorted((c for c in counts if c[0] == path), key=lambda c: c[1]):
            starts[(path, block)] = line
            line += count
            if block == 0:
                firsts[path] = first
    return starts, [_with_header(f, firsts.get(f.source), settings) for f in files]


def _with_header(file: InputFile, first: bytes | None, settings: IndexSettings) -> InputFile:
    if file.fmt == "jsonl" or file.header is not None:
        return file
    if first is None:
        return file  # an empty file: no header, no records
    text = decode_line(file.source, 1, first, settings.max_record_bytes)
    if isinstance(text, BadRecord):
        raise CorpusError(f"{file.source}: line 1 should be the header row but is unusable: {text.reason}")
    delimiter = "," if file.fmt == "csv" else "\t"
    header = parse_header(file.source, 1, text, delimiter=delimiter, text_fields=settings.text_fields)
    return InputFile(file.uri, file.source, file.fmt, tuple(header), header_in_file=True)


def records(
    rows: Iterator[tuple[str, int, bytes]], files: dict[str, InputFile], starts: dict[tuple[str, int], int],
    max_record_bytes: int,
) -> Iterator[SourceRecord | BadRecord]:
    """The records of one partition's lines, numbered from ``starts``, as the local reader makes them."""
    key: tuple[str, int] | None = None
    number = 0
    for path, block, raw in rows:
        if (path, block) != key:
            key, number = (path, block), starts[(path, block)]
        else:
            number += 1
        file = files[path]
        if file.header_in_file and number == 1:
            continue
        text = decode_line(file.source, number, raw, max_record_bytes)
        if isinstance(text, BadRecord):
            yield text
            continue
        size = len(raw.rstrip(b"\r\n"))
        if file.fmt == "jsonl":
            record = jsonl_record(file.source, number, text, size)
        else:
            assert file.header is not None
            delimiter = "," if file.fmt == "csv" else "\t"
            record = delimited_record(file.source, number, text, size, header=file.header, delimiter=delimiter)
        if record is not None:
            yield record


__all__ = ["InputFile", "list_files", "number_blocks", "read_lines", "records", "source_name"]
