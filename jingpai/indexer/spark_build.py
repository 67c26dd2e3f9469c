"""What runs in a Spark executor for ``jingpai index --spark``: records → documents, and the ``bulk`` writer.

Each partition gets one :class:`~jingpai.indexer.documents.DocumentBuilder`, made once per Python worker
(Spark reuses its workers across tasks) from the dictionary shipped once as a broadcast variable. A
partition's output is a stream of tagged rows:

- ``("doc", id, JSON source, file, line)``: a document for the connector writer;
- ``("bad", quarantine line, kind)``: a record quarantined (by the reader, the builder, or — with the
  ``bulk`` writer — by the engine), to be appended to the driver's quarantine file;
- ``("sum", records read, documents indexed)``: the ``bulk`` writer's counts of one partition.

The driver reads such an output with one job (:func:`tallies`: per partition, how many rows of each
tag; the caller persists the output, so that job fills the cache) and fetches the ``bad`` rows only of
the partitions that have any (:func:`bad_rows`), a bounded number of them at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from jingpai.indexer.documents import DocumentBuilder, Rejection
from jingpai.indexer.mapping import META_KEY, IndexMeta
from jingpai.indexer.quarantine import QuarantineBuffer, entry
from jingpai.indexer.readers import BadRecord
from jingpai.indexer.settings import IndexSettings
from jingpai.indexer.spark_input import InputFile, records

if TYPE_CHECKING:
    from pyspark import RDD, Broadcast

#: builders of this Python worker, by run: built once, reused by every task of the run it serves
_BUILDERS: dict[str, DocumentBuilder] = {}


@dataclass(frozen=True)
class PartitionJob:
    """Everything a task needs, pickled into the closure Spark ships (the dictionary rides the broadcast).

    Args:
        run_id: the run (quarantine lines name it; the builder cache is keyed by it).
        settings: the run's options.
        meta: the index's metadata (weight encoding, text fields).
        files: input files by source name.
        dictionary: the broadcast :class:`~jingpai.keyword_dict.Dictionary` (``None``: no keywords).
    """

    run_id: str
    settings: IndexSettings
    meta: IndexMeta
    files: dict[str, InputFile]
    dictionary: Broadcast | None

    def builder(self) -> DocumentBuilder:
        cached = _BUILDERS.get(self.run_id)
        if cached is None:
            from jingpai.keyword_dict import Segmenter

            _BUILDERS.clear()  # a worker serves one run at a time; an older run's builder is garbage
            dictionary = self.dictionary.value if self.dictionary is not None else None
            cached = _BUILDERS[self.run_id] = DocumentBuilder(
                self.settings, self.meta, dictionary=dictionary, segmenter=Segmenter(dictionary)
            )
        return cached

    def build(self, rows: Iterator[tuple[str, int, bytes]]) -> Iterator[tuple]:
        """The tagged ``doc`` / ``bad`` rows of one partition's lines."""
        for row, _ in self.outcomes(rows):
            yield row

    def outcomes(self, rows: Iterator[tuple[str, int, bytes]]) -> Iterator[tuple[tuple, dict | None]]:
        """``(tagged row, the record's fields for a document)`` of one partition's lines."""
        builder = self.builder()
        for rec in records(rows, self.files, self.settings.max_record_bytes, self.settings.max_depth):
            if isinstance(rec, BadRecord):
                item = entry(self.run_id, rec.source, rec.line, rec.raw, rec.reason, raw_bytes=rec.raw_bytes)
                yield ("bad", item, rec.kind), None
                continue
            try:
                doc_id, source = builder.build_json(rec.fields, record_bytes=rec.size)
            except Rejection as exc:
                yield ("bad", entry(self.run_id, rec.source, rec.line, rec.fields, str(exc)), exc.kind), None
                continue
            yield ("doc", doc_id, source, rec.source, rec.line), rec.fields


@dataclass(frozen=True)
class BulkPartition:
    """The ``bulk`` writer: one partition's documents sent with jingpai's :class:`~jingpai.indexer.bulk.BulkWriter`.

    Args:
        job: what builds the documents.
        engine_url: the engine (each task opens its own client).
        physical: the physical index written to.
        live_before: the alias's indices before the run (for a refusal's message).
    """

    job: PartitionJob
    engine_url: str
    physical: str
    live_before: tuple[str, ...]

    def __call__(self, rows: Iterator[tuple[str, int, bytes]]) -> Iterator[tuple]:
        from jingpai.engine.client import connect
        from jingpai.indexer.bulk import BulkWriter
        from jingpai.indexer.report import IndexReport

        settings = replace(self.job.settings, progress=False)
        quarantine = QuarantineBuffer(run_id=self.job.run_id)
        report = IndexReport(alias=settings.index, physical_index=self.physical)
        engine = connect(self.engine_url)
        try:
            with BulkWriter(engine, self.physical, settings, quarantine=quarantine, report=report,
                            live_before=list(self.live_before)) as writer:
                writer.write(self._actions(rows, quarantine, report))
        finally:
            engine.close()
        for item, kind in quarantine.entries:
            yield "bad", item, kind
        yield "sum", report.read, report.indexed

    def _actions(self, rows: Iterator[tuple[str, int, bytes]], quarantine: QuarantineBuffer, report: Any) -> Iterator[tuple]:
        for row, fields in self.job.outcomes(rows):
            report.read += 1
            if row[0] == "bad":
                quarantine.add_entry(row[1], kind=row[2])
                continue
            _, doc_id, source, file, line = row
            yield (file, line, fields), {"_op_type": "index", "_index": self.physical, "_id": doc_id, "_source": source}


#: bad rows fetched to the driver in one job at most (bounds the driver's memory, not the run)
BAD_ROWS_PER_FETCH = 10_000


def _tally(index: int, rows: Iterator[tuple]) -> Iterator[dict[str, int]]:
    counts = {"partition": index, "doc": 0, "bad": 0, "read": 0, "indexed": 0}
    for row in rows:
        if row[0] == "sum":
            counts["read"] += row[1]
            counts["indexed"] += row[2]
        else:
            counts[row[0]] += 1
    yield counts


def tallies(rows: RDD) -> list[dict[str, int]]:
    """Per partition of ``rows``: its ``doc`` and ``bad`` rows, and the sums of its ``sum`` rows (one job)."""
    return rows.mapPartitionsWithIndex(_tally).collect()


def _bad(rows: Iterator[tuple]) -> list[tuple]:
    return [row for row in rows if row[0] == "bad"]


def bad_rows(rows: RDD, counts: list[dict[str, int]]) -> Iterator[tuple]:
    """The ``bad`` rows of ``rows``, fetched from the partitions whose ``counts`` have any (no job when none has)."""
    group: list[int] = []
    size = 0
    for tally in counts:
        if tally["bad"]:
            group.append(tally["partition"])
            size += tally["bad"]
        if group and (size >= BAD_ROWS_PER_FETCH or tally is counts[-1]):
            yield from rows.context.runJob(rows, _bad, group)
            group, size = [], 0


def origin_fields(source: str) -> dict:
    """The record's own fields of a built document: what the quarantine keeps when the engine rejects it."""
    document = json.loads(source)
    document.pop(META_KEY, None)
    return document


__all__ = ["BAD_ROWS_PER_FETCH", "BulkPartition", "PartitionJob", "bad_rows", "origin_fields", "tallies"]
