"""Corpus files read by Spark into numbered lines, giving the same records :func:`~jingpai.indexer.readers.read_corpus` makes.

Anything Spark's file sources read works: local paths, ``hdfs://``, ``s3a://``, globs and directories.
The files are listed on the driver through Hadoop's ``FileSystem`` (a path that matches nothing is a
:class:`~jingpai.indexer.readers.CorpusError` before anything is written). The header row of a CSV/TSV
file is its first non-blank line, as for the local reader; the driver reads it through the same
``FileSystem``, stopping there.

The lines are raw bytes split on ``\\n`` only, as the local reader does (a line that is not UTF-8 is
quarantined with its bytes, as locally), numbered from 1 per file, read one of two ways:

- **small input** (all files together up to :data:`WHOLE_FILE_BYTES`): each file is read whole by one
  task (``binaryFiles``) and split and numbered there, then the lines are spread over every core
  (``repartition``, Spark's shuffle). One pass, and no SQL planner to warm up.
- **larger input**: Spark's text source splits files into blocks read by different tasks (``value`` cast
  to binary keeps the bytes); the hidden ``_metadata`` column says which file and block a row comes from.
  A first pass counts the lines of each block and caches the rows; the starting line of every block
  follows, and the second pass numbers the cached rows — the same two passes as Spark's own ``zipWithIndex``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from jingpai.indexer.readers import (
    DEFAULT_MAX_DEPTH, BadRecord, CorpusError, CorpusFormat, SourceRecord, decode_line, delimited_record, detect_format,
    jsonl_record, parse_header,
)
from jingpai.indexer.settings import IndexSettings

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: Spark's small-file defaults pack a corpus of a few MB into one task; these let it use every core
#: inputs up to this many bytes in all are read whole per file, in one pass (see the module docstring)
WHOLE_FILE_BYTES = 64 * 1024 * 1024
_HEAD_CHUNK = 64 * 1024
_GLOB_CHARS = set("*?[]{},\\")
SPLIT_DEFAULTS = {"spark.sql.files.openCostInBytes": str(256 * 1024), "spark.sql.files.maxPartitionBytes": str(32 * 1024 * 1024)}


@dataclass(frozen=True)
class InputFile:
    """One corpus file: its URI as Spark names it, the name the quarantine shows, its format and header.

    Attributes:
        uri: the URI Spark's ``_metadata.file_path`` gives (decoded).
        source: local files as a plain path (as the local reader names them), others as the URI.
        fmt: its format.
        header: CSV/TSV column names (``None`` for JSONL).
        header_line: the line that is the header row (not a record); 0: none in the file.
        size: the file's length in bytes.
        hadoop_path: the path as Hadoop's ``FileStatus`` names it (``binaryFiles`` keys).
    """

    uri: str
    source: str
    fmt: CorpusFormat
    header: tuple[str, ...] | None = None
    header_line: int = 0
    size: int = 0
    hadoop_path: str = ""


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
            found.append(InputFile(uri, source_name(uri), fmt, header, size=status.getLen(), hadoop_path=status.getPath().toString()))
    return found


def read_headers(spark: SparkSession, files: list[InputFile], settings: IndexSettings) -> list[InputFile]:
    """``files`` with the header row of each CSV/TSV file without ``--columns``: its first non-blank line.

    Raises:
        CorpusError: the line before which only blank lines come is not valid UTF-8, over
            ``--max-record-bytes`` or not a usable header (as for the local reader).
    """
    out = []
    for file in files:
        if file.fmt == "jsonl" or file.header is not None:
            out.append(file)
            continue
        found = _first_text_line(spark, file, settings.max_record_bytes)
        if found is None:
            out.append(file)  # an empty (or all blank) file: no header, no records
            continue
        number, text = found
        delimiter = "," if file.fmt == "csv" else "\t"
        header = parse_header(file.source, number, text, delimiter=delimiter, text_fields=settings.text_fields)
        out.append(replace(file, header=tuple(header), header_line=number))
    return out


def _first_text_line(spark: SparkSession, file: InputFile, max_record_bytes: int) -> tuple[int, str] | None:
    """``(number, text)`` of the first non-blank line of ``file``, read on the driver (``None``: none)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(file.uri)
    stream = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(path)
    try:
        number, pending, eof = 0, b"", False
        while not eof:
            chunk = bytes(stream.readNBytes(_HEAD_CHUNK))
            eof = not chunk
            pieces = (pending + chunk).split(b"\n")
            pending = b"" if eof else pieces.pop()
            if eof and pieces and not pieces[-1]:
                pieces.pop()  # the file ends with a line break: no empty last line
            for raw in pieces:
                number += 1
                text = decode_line(file.source, number, raw, max_record_bytes)
                if isinstance(text, BadRecord):
                    raise CorpusError(f"{file.source}: line {number} should be the header row but is unusable: {text.reason}")
                if text.strip():
                    return number, text
            if len(pending) > max_record_bytes:  # the next line is over the limit: read on to its end for its length
                size = len(pending)
                while True:
                    chunk = bytes(stream.readNBytes(_HEAD_CHUNK))
                    head, sep, _ = chunk.partition(b"\n")
                    size += len(head)
                    if sep or not chunk:
                        break
                raise CorpusError(
                    f"{file.source}: line {number + 1} should be the header row but is unusable: record is {size} bytes, "
                    f"over the limit of {max_record_bytes} (--max-record-bytes)"
                )
        return None
    finally:
        stream.close()


@dataclass
class CorpusLines:
    """``(file source name, line number, raw line)`` of every line of the input, blank ones too.

    Attributes:
        rdd: the numbered lines.
        cached: what :meth:`release` unpersists (the block pass's cached rows).
    """

    rdd: RDD
    cached: RDD | None = None

    def release(self) -> None:
        """Drop the cached rows (when the run is over)."""
        if self.cached is not None:
            self.cached.unpersist()


def read_lines(spark: SparkSession, files: list[InputFile], *, whole_file_bytes: int | None = None) -> CorpusLines:
    """The numbered lines of ``files``: read whole per file up to ``whole_file_bytes`` in all (``None``:
    :data:`WHOLE_FILE_BYTES`), else by blocks with a line-count pass (see the module docstring)."""
    limit = WHOLE_FILE_BYTES if whole_file_bytes is None else whole_file_bytes
    plain = all(not set(f.uri) & _GLOB_CHARS for f in files)  # binaryFiles reads its paths as globs
    if plain and sum(f.size for f in files) <= limit:
        return _whole_files(spark, files)
    return _by_blocks(spark, files)


def _whole_files(spark: SparkSession, files: list[InputFile]) -> CorpusLines:
    sc = spark.sparkContext
    sources = {f.hadoop_path: f.source for f in files}

    def lines(item: tuple[str, bytes]) -> Iterator[tuple[str, int, bytes]]:
        path, data = item
        pieces = data.split(b"\n")
        if not pieces[-1]:
            pieces.pop()  # the file ends with a line break (or is empty): no empty last line
        source = sources.get(path) or source_name(path)
        return ((source, number, raw) for number, raw in enumerate(pieces, start=1))

    whole = sc.binaryFiles(",".join(f.uri for f in files), minPartitions=sc.defaultParallelism)
    return CorpusLines(whole.flatMap(lines).repartition(sc.defaultParallelism))


def _by_blocks(spark: SparkSession, files: list[InputFile]) -> CorpusLines:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    for key, value in SPLIT_DEFAULTS.items():
        if not sc.getConf().contains(key):  # a value the user set stands
            spark.conf.set(key, value)
    frame = spark.read.option("lineSep", "\n").text([f.uri for f in files])
    rows = frame.select(
        F.col("_metadata.file_path").alias("path"), F.col("_metadata.file_block_start").alias("block"),
        F.col("value").cast("binary").alias("raw"),
    ).rdd.map(lambda row: (source_name(unquote(row.path)), row.block, bytes(row.raw)))
    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)  # read once: the numbering pass reads the cache
    starts = _block_starts(rows.mapPartitions(_block_counts).collect())
    return CorpusLines(rows.mapPartitions(lambda part: _numbered(part, starts)), cached=rows)


def _block_counts(rows: Iterator[tuple[str, int, bytes]]) -> Iterator[tuple[str, int, int]]:
    """``(file, block, lines)`` per block of one partition."""
    key: tuple[str, int] | None = None
    count = 0
    for path, block, _ in rows:
        if (path, block) != key:
            if key is not None:
                yield key[0], key[1], count
            key, count = (path, block), 0
        count += 1
    if key is not None:
        yield key[0], key[1], count


def _block_starts(counts: list[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
    """The first line number of every ``(file, block)``."""
    starts: dict[tuple[str, int], int] = {}
    for path in {c[0] for c in counts}:
        line = 1
        for _, block, count in sorted((c for c in counts if c[0] == path), key=lambda c: c[1]):
            starts[(path, block)] = line
            line += count
    return starts


def _numbered(rows: Iterator[tuple[str, int, bytes]], starts: dict[tuple[str, int], int]) -> Iterator[tuple[str, int, bytes]]:
    key: tuple[str, int] | None = None
    number = 0
    for path, block, raw in rows:
        if (path, block) != key:
            key, number = (path, block), starts[(path, block)]
        else:
            number += 1
        yield path, number, raw


def records(
    rows: Iterator[tuple[str, int, bytes]], files: dict[str, InputFile], max_record_bytes: int,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Iterator[SourceRecord | BadRecord]:
    """The records of one partition's numbered lines, as the local reader makes them."""
    for path, number, raw in rows:
        file = files[path]
        if number == file.header_line:
            continue
        text = decode_line(file.source, number, raw, max_record_bytes)
        if isinstance(text, BadRecord):
            yield text
            continue
        size = len(raw.rstrip(b"\r\n"))
        if file.fmt == "jsonl":
            record = jsonl_record(file.source, number, text, size, max_depth=max_depth)
        else:
            assert file.header is not None
            delimiter = "," if file.fmt == "csv" else "\t"
            record = delimited_record(file.source, number, text, size, header=file.header, delimiter=delimiter)
        if record is not None:
            yield record


__all__ = ["WHOLE_FILE_BYTES", "CorpusLines", "InputFile", "list_files", "read_headers", "read_lines", "records", "source_name"]
