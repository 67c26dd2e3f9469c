"""What runs in a Spark executor for ``jingpai index --spark``: records → documents, and the ``bulk`` writer.

Each partition gets one :class:`~jingpai.indexer.documents.DocumentBuilder`, made once per Python worker
(Spark reuses its workers across tasks) from the dictionary shipped once as a broadcast variable. A
partition's output is a stream of tagged rows:

- ``("doc", id, JSON source, file, line)``: a document for the connector writer;
- ``("bad", quarantine line, kind)``: a record quarantined (by the reader, the builder, or — with the
  ``bulk`` writer — by the engine), to be appended to the driver's quarantine file;
- ``("sum", records read, documents indexed)``: the ``bulk`` writer's counts of one partition;
- ``("vec", vectors embedded, vectors read back)``: a partition's vectors (``--vectors`` only).

With ``--vectors`` each task embeds its partition's documents a bulk batch at a time, exactly as the local
indexer does (:func:`~jingpai.indexer.vector_reuse.attach_vectors`, reading unchanged documents' vectors back
from the live index first): the model travels in the closure as its folder and id
(:class:`~jingpai.jobs.document_vectors.ModelEmbedder` pickles that way; the driver ships the folder with
``addFile``) and each Python worker loads it once.

The driver reads such an output with one job (:func:`tallies`: per partition, how many rows of each
tag; the caller persists the output, so that job fills the cache) and fetches the ``bad`` rows only of
the partitions that have any (:func:`bad_rows`), a bounded number of them at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from jingpai.indexer.documents import DocumentBuilder, Rejection
from jingpai.indexer.mapping import META_KEY, IndexMeta
from jingpai.indexer.quarantine import QuarantineBuffer, entry
from jingpai.indexer.readers import BadRecord, SourceRecord
from jingpai.indexer.settings import IndexSettings
from jingpai.indexer.spark_input import InputFile, records
from jingpai.indexer.vector_reuse import BatchVectors, LiveVectors, VectorCounts, attach_vectors
from jingpai.indexer.vectors import DocumentVectors, Embedder

if TYPE_CHECKING:
    from pyspark import RDD, Broadcast

#: builders of this Python worker, by run: built once, reused by every task of the run it serves
_BUILDERS: dict[str, DocumentBuilder] = {}


@dataclass
class _VectorTally:
    vectors_embedded: int = 0
    vectors_reused: int = 0


@dataclass(frozen=True)
class PartitionVectors:
    """What a task needs, besides the run's settings and the index's meta, to give its documents vectors.

    Args:
        embedder: the run's model; it must pickle (a :class:`~jingpai.jobs.document_vectors.ModelEmbedder`
            pickles as its folder and id; :func:`~jingpai.indexer.spark_index.index_corpus_spark` ships the folder).
        engine_url: the engine (each task opens its own client to read vectors back).
        reuse_from: the live physical index whose unchanged documents keep their vectors (``None``: embed all).
    """

    embedder: Embedder
    engine_url: str
    reuse_from: str | None

    @contextmanager
    def open(self, settings: IndexSettings, meta: IndexMeta) -> Iterator[BatchVectors]:
        """The task's :class:`~jingpai.indexer.vector_reuse.BatchVectors` (its engine client closed afterwards)."""
        model = DocumentVectors(self.embedder, chunking=settings.vector_chunking)
        if self.reuse_from is None or meta.vector_dims is None:
            yield BatchVectors(model)
            return
        from jingpai.engine.client import connect

        engine = connect(self.engine_url)
        try:
            yield BatchVectors(model, LiveVectors(engine, self.reuse_from, text_fields=meta.text_fields, dims=meta.vector_dims))
        finally:
            engine.close()


@dataclass(frozen=True)
class PartitionJob:
    """Everything a task needs, pickled into the closure Spark ships (the dictionary rides the broadcast).

    Args:
        run_id: the run (quarantine lines name it; the builder cache is keyed by it).
        settings: the run's options.
        meta: the index's metadata (weight encoding, text fields).
        files: input files by source name.
        dictionary: the broadcast :class:`~jingpai.keyword_dict.Dictionary` (``None``: no keywords).
        vectors: the documents' vectors (``None``: none).
    """

    run_id: str
    settings: IndexSettings
    meta: IndexMeta
    files: dict[str, InputFile]
    dictionary: Broadcast | None
    vectors: PartitionVectors | None = None

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
        """The tagged ``doc`` / ``bad`` rows of one partition's lines (and its ``vec`` row with vectors)."""
        counts = _VectorTally()
        for row, _ in self.outcomes(rows, counts):
            yield row
        yield from self.vector_row(counts)

    def vector_row(self, counts: VectorCounts) -> Iterator[tuple]:
        """The partition's ``vec`` row (none without vectors)."""
        if self.vectors is not None:
            yield "vec", counts.vectors_embedded, counts.vectors_reused

    def outcomes(self, rows: Iterator[tuple[str, int, bytes]], counts: VectorCounts) -> Iterator[tuple[tuple, dict | None]]:
        """``(tagged row, the record's fields for a document)`` of one partition's lines; ``counts`` gets the vectors."""
        builder = self.builder()
        bad: list[BadRecord] = []

        def parsed() -> Iterator[SourceRecord]:
            for rec in records(rows, self.files, self.settings.max_record_bytes, self.settings.max_depth):
                if isinstance(rec, BadRecord):
                    bad.append(rec)  # yielded before the next document goes out
                else:
                    yield rec

        with self.vectors.open(self.settings, self.meta) if self.vectors is not None else nullcontext() as vectors:
            for rec, vector in attach_vectors(parsed(), vectors, settings=self.settings, doc_id=builder.doc_id_or_none, counts=counts):
                yield from self._quarantined(bad)
                try:
                    doc_id, source = builder.build_json(rec.fields, record_bytes=rec.size, vector=vector)
                except Rejection as exc:
                    yield ("bad", entry(self.run_id, rec.source, rec.line, rec.fields, str(exc)), exc.kind), None
                    continue
                yield ("doc", doc_id, source, rec.source, rec.line), rec.fields
            yield from self._quarantined(bad)

    def _quarantined(self, bad: list[BadRecord]) -> Iterator[tuple[tuple, None]]:
        for rec in bad:
            yield ("bad", entry(self.run_id, rec.source, rec.line, rec.raw, rec.reason, raw_bytes=rec.raw_bytes), rec.kind), None
        bad.clear()


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
        yield from self.job.vector_row(report)

    def _actions(self, rows: Iterator[tuple[str, int, bytes]], quarantine: QuarantineBuffer, report: Any) -> Iterator[tuple]:
        for row, fields in self.job.outcomes(rows, report):
            report.read += 1
            if row[0] == "bad":
                quarantine.add_entry(row[1], kind=row[2])
                continue
            _, doc_id, source, file, line = row
            yield (file, line, fields), {"_op_type": "index", "_index": self.physical, "_id": doc_id, "_source": source}


#: bad rows fetched to the driver in one job at most (bounds the driver's memory, not the run)
BAD_ROWS_PER_FETCH = 10_000


def _tally(index: int, rows: Iterator[tuple]) -> Iterator[dict[str, int]]:
    counts = {"partition": index, "doc": 0, "bad": 0, "read": 0, "indexed": 0, "embedded": 0, "reused": 0}
    for row in rows:
        if row[0] == "sum":
            counts["read"] += row[1]
            counts["indexed"] += row[2]
        elif row[0] == "vec":
            counts["embedded"] += row[1]
            counts["reused"] += row[2]
        else:
            counts[row[0]] += 1
    yield counts


def tallies(rows: RDD) -> list[dict[str, int]]:
    """Per partition of ``rows``: its ``doc`` and ``bad`` rows, and the sums of its ``sum`` and ``vec`` rows (one job)."""
    return rows.mapPartitionsWithIndex(_tally).collect()


def count_vectors(report: VectorCounts, counts: list[dict[str, int]]) -> None:
    """Set the run's vectors embedded and read back from the partitions' :func:`tallies`."""
    report.vectors_embedded = sum(t["embedded"] for t in counts)
    report.vectors_reused = sum(t["reused"] for t in counts)


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


__all__ = ["BAD_ROWS_PER_FETCH", "BulkPartition", "PartitionJob", "PartitionVectors", "bad_rows", "count_vectors", "origin_fields", "tallies"]
