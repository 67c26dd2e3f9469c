"""Corpus → dictionary-augmented documents → a versioned physical index behind an alias.

Every input record ends up either indexed or in the quarantine file ``<alias>.rejected.jsonl`` with its
reason (malformed line, missing/invalid field, over-size record or document, engine rejection of the
document). The quarantine file is appended to, never truncated. Document ids come from ``id_field`` or a
content hash, so re-running after a crash resumes into the same physical index without duplicates.

The alias moves to a new physical index only when the index passes :func:`check_build` (not empty, few
enough rejections, no lost dictionary); a refusal of the whole cluster or index (write block, disk
watermark, closed index) stops the run instead of rejecting every document. See ``docs/indexing.md``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jingpai.engine.client import Engine
from jingpai.engine.vectors import VectorIndex
from jingpai.errors import UserError
from jingpai.indexer.bulk import BulkWriter, EngineRefusedError, EngineUnreachableError, IndexingError, Origin, batches
from jingpai.indexer.checks import REFUSAL_TYPES, alias_state, check_build, is_refusal
from jingpai.indexer.documents import DocumentBuilder, Rejection
from jingpai.indexer.mapping import IndexMeta, NotAJingpaiIndexError, build_mapping, engine_encodings, read_meta
from jingpai.indexer.quarantine import Quarantine
from jingpai.indexer.readers import BadRecord, SourceRecord, read_corpus
from jingpai.indexer.report import IndexReport
from jingpai.indexer.settings import IndexSettings
from jingpai.indexer.vector_reuse import BatchVectors, LiveVectors, attach_vectors
from jingpai.indexer.vectors import DocumentVectors, Embedder, with_vectors
from jingpai.indexer.rerank_keywords import RERANK_CHARS, RerankKeywords
from jingpai.indexer.versions import choose_physical_index

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary


logger = logging.getLogger(__name__)


class BuildCheckError(IndexingError, UserError):
    """The new physical index failed :func:`check_build`; the alias was not moved to it.

    Attributes:
        report: the run's :class:`IndexReport` (counts and grouped rejection reasons).
    """

    def __init__(self, message: str, report: IndexReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class Target:
    """The physical index a run writes to, and the alias's state before the run.

    Attributes:
        physical: ``<alias>-<dict version>-<n>``.
        exists: the physical index exists already (the run resumes into it).
        live_before: the indices the alias pointed at before the run.
        live_meta: the live index's :class:`IndexMeta` (``None``: no live index, or not jingpai's).
    """

    physical: str
    exists: bool
    live_before: list[str]
    live_meta: IndexMeta | None

    @property
    def live(self) -> bool:
        """Whether the physical index is the one the alias serves already."""
        return self.exists and self.physical in self.live_before

    @classmethod
    def choose(cls, engine: Engine, settings: IndexSettings, dict_version: str | None, *, vector_model: str | None = None,
               vector_index: str | None = None, rerank_keywords: bool = False) -> Target:
        physical, exists = choose_physical_index(
            engine, settings.index, dict_version, rebuild=settings.rebuild, vector_model=vector_model, vector_index=vector_index,
            rerank_keywords=rerank_keywords,
        )
        live_before = engine.alias_targets(settings.index)
        live_meta: IndexMeta | None = None
        if live_before:
            try:
                live_meta = read_meta(engine, settings.index)
            except NotAJingpaiIndexError:
                live_meta = None
        return cls(physical, exists, live_before, live_meta)


def index_corpus(
    engine: Engine,
    paths: Sequence[str | Path],
    settings: IndexSettings,
    *,
    dictionary: Dictionary | None = None,
    embedder: Embedder | None = None,
    on_progress: Callable[[IndexReport], None] | None = None,
) -> IndexReport:
    """Index corpus files into ``settings.index``.

    Args:
        engine: target cluster (:func:`jingpai.engine.client.connect`).
        paths: corpus files.
        settings: the run's options.
        dictionary: keyword dictionary for segmentation and keywords (``None``: the segmenter's own
            dictionary, no keywords).
        embedder: the bi-encoder that gives each document its vector
            (:func:`jingpai.jobs.document_vectors.load_embedder` of ``settings.vectors``); ``None``: no vectors.
            Required when ``settings.vectors`` is set.
        on_progress: called after every bulk request with the running report.

    Returns:
        The run's :class:`IndexReport`; the alias points at the physical index when it returns.

    Raises:
        CorpusError: a corpus file is missing, of an unknown format, or its header names no text field
            (checked for every file before anything is written).
        VectorsUnsupportedError: vectors were asked for and the engine cannot index them (OpenSearch
            without its k-NN plugin); checked before anything is written.
        BuildCheckError: the new physical index failed :func:`check_build` (and ``settings.force`` is
            off): the alias was left where it was and the new index deleted, unless it already was the
            live one.
        EngineRefusedError: the engine refused writes to the index or cluster; nothing was quarantined
            for it. Fix the cluster and re-run the same command to resume.
        IndexingError: the engine stayed unreachable through all retries. Re-run the same command to
            resume: ids are deterministic and the same physical index is reused.
    """
    from jingpai.keyword_dict import Segmenter

    started = time.perf_counter()
    _check_sources(paths, settings)
    dict_version = dictionary.version if dictionary is not None else None
    meta, target, quarantine, report = open_run(engine, settings, dict_version, embedder=embedder)
    vectors = _vector_sources(engine, embedder, target, meta, settings)
    try:
        with BulkWriter(engine, target.physical, settings, quarantine=quarantine, report=report,
                        live_before=target.live_before, on_progress=on_progress) as writer:
            writer.start(lambda: _prepare_index(engine, target, meta, settings))
            # loading the segmenter and building the first batch overlap creating the index
            builder = DocumentBuilder(settings, meta, dictionary=dictionary, segmenter=Segmenter(dictionary))
            writer.write(_documents(paths, settings, builder, quarantine, report, target.physical, vectors))
    finally:
        quarantine.close()
        report.rejected = quarantine.count
        report.reasons = dict(quarantine.reasons)
        report.first_lines = {k: list(v) for k, v in quarantine.first_lines.items()}
    _finish(engine, target, report, settings, restore=writer.prepared, dict_version=dict_version, started=started,
            vector_model=meta.vector_model)
    return report


def open_run(
    engine: Engine, settings: IndexSettings, dict_version: str | None, *, embedder: Embedder | None = None,
) -> tuple[IndexMeta, Target, Quarantine, IndexReport]:
    """What every indexing run (local or ``--spark``) starts from: the index's meta, its physical target,
    the quarantine file opened under a new run id, and the report that names them."""
    if settings.vectors is not None and embedder is None:
        raise IndexingError(
            f"vectors from {settings.vectors} were asked for but no model was loaded: pass "
            "embedder=jingpai.jobs.document_vectors.load_embedder(settings.vectors)"
        )
    if settings.rerank_keywords and dict_version is None:
        raise IndexingError("--rerank-keywords stores dictionary keywords: it needs a dictionary (--dict DIR)")
    weight_enc, entity_enc = engine_encodings(engine)
    rerank_keywords = (
        RerankKeywords(fields=tuple(settings.text_fields), chars=RERANK_CHARS, top_k=settings.keywords_top_k, dict_version=dict_version)
        if settings.rerank_keywords and dict_version is not None else None
    )
    meta = IndexMeta(
        text_fields=tuple(settings.text_fields), dict_version=dict_version, weight_encoding=weight_enc,
        entity_encoding=entity_enc, id_field=settings.id_field, rerank_keywords=rerank_keywords,
    )
    if embedder is not None:
        engine.check_vectors()
        meta = with_vectors(meta, embedder, settings.vector_chunking, settings.vector_index)
    target = Target.choose(engine, settings, dict_version, vector_model=meta.vector_model, vector_index=meta.vector_index,
                           rerank_keywords=meta.rerank_keywords is not None)
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    quarantine = Quarantine(Path(settings.quarantine_dir) / f"{settings.index}.rejected.jsonl", run_id=run_id)
    report = IndexReport(alias=settings.index, physical_index=target.physical, quarantine_file=quarantine.path, run_id=run_id)
    return meta, target, quarantine, report


def _vector_sources(
    engine: Engine, embedder: Embedder | None, target: Target, meta: IndexMeta, settings: IndexSettings,
) -> BatchVectors | None:
    """The run's model with the live index whose vectors of unchanged documents it reuses (``None``: no vectors)."""
    if embedder is None:
        return None
    return BatchVectors(DocumentVectors(embedder, chunking=settings.vector_chunking),
                        LiveVectors.choose(engine, target.live_before, target.live_meta, meta, enabled=settings.reuse_vectors))


def _check_sources(paths: Sequence[str | Path], settings: IndexSettings) -> None:
    """Raise :class:`CorpusError` for a missing file or an unusable header before any index is created,
    not midway through the run."""
    for path in paths:
        with closing(_records(path, settings)) as first:
            next(first, None)


def _records(path: str | Path, settings: IndexSettings) -> Iterator[SourceRecord | BadRecord]:
    return read_corpus(
        path, fmt=settings.fmt, columns=settings.columns, text_fields=settings.text_fields,
        max_record_bytes=settings.max_record_bytes, max_depth=settings.max_depth,
    )


def _prepare_index(engine: Engine, target: Target, meta: IndexMeta, settings: IndexSettings) -> dict[str, str | None] | None:
    """Create the physical index unless it exists; apply :data:`BUILD_SETTINGS` to one that is not live.
    Returns the settings to restore after the build (``None``: nothing to restore)."""
    if not target.exists:
        index: VectorIndex = meta.vector_index or "hnsw"
        vector_mapping = engine.vector_mapping(meta.vector_dims, index=index) if meta.vector_dims is not None else None
        engine.create_index(
            target.physical, mappings=build_mapping(meta, vector_mapping=vector_mapping),
            settings=engine.vector_index_settings(index=index) if vector_mapping is not None else None,
        )
        logger.info("created physical index %s", target.physical)
    else:
        logger.info("resuming into existing physical index %s", target.physical)
    if settings.fast_build and not target.live:
        return begin_build(engine, target.physical, fresh=not target.exists)
    return None


def _documents(
    paths: Sequence[str | Path], settings: IndexSettings, builder: DocumentBuilder, quarantine: Quarantine,
    report: IndexReport, physical: str, vectors: BatchVectors | None = None,
) -> Iterator[tuple[Origin, dict]]:
    """``(origin, bulk action)`` of every record that makes a document; the others are quarantined."""
    for path in paths:
        records = _good_records(path, settings, quarantine, report)
        for rec, vector in attach_vectors(records, vectors, settings=settings, doc_id=builder.doc_id_or_none, counts=report):
            try:
                doc_id, source = builder.build_json(rec.fields, record_bytes=rec.size, vector=vector)
            except Rejection as exc:
                quarantine.add(rec.source, rec.line, rec.fields, str(exc), kind=exc.kind)
                continue
            # ``_source`` is already JSON: both clients' bulk helpers send strings as they are
            yield (rec.source, rec.line, rec.fields), {"_op_type": "index", "_index": physical, "_id": doc_id, "_source": source}


def _good_records(path: str | Path, settings: IndexSettings, quarantine: Quarantine, report: IndexReport) -> Iterator[SourceRecord]:
    """The records of ``path`` that parsed; the others are quarantined. Every record read is counted."""
    for rec in _records(path, settings):
        report.read += 1
        if isinstance(rec, BadRecord):
            quarantine.add(rec.source, rec.line, rec.raw, rec.reason, kind=rec.kind, raw_bytes=rec.raw_bytes)
            continue
        yield rec


def _finish(
    engine: Engine, target: Target, report: IndexReport, settings: IndexSettings, *,
    restore: dict[str, str | None] | None, dict_version: str | None, started: float, vector_model: str | None = None,
) -> None:
    """Check the new index; move the alias to it (or delete it and raise :class:`BuildCheckError`)."""
    physical = target.physical
    engine.refresh(physical)
    failure = check_build(engine, physical, report, settings, live_meta=target.live_meta, dict_version=dict_version,
                          vector_model=vector_model)
    report.seconds = time.perf_counter() - started
    if failure is not None and not settings.force:
        report.check_failure = failure
        if target.live:
            what = f"the documents were written into {physical}, which the alias {settings.index} already served"
        else:
            engine.delete_index(physical)
            what = f"{alias_state(settings.index, target.live_before)}; the new index {physical} was deleted"
        raise BuildCheckError(
            f"{physical} did not replace the live index: {failure}. {what[0].upper()}{what[1:]}. "
            f"Fix the input (see {report.quarantine_file}) and re-run, or pass --force to swap anyway",
            report,
        )
    if failure is not None:
        report.check_failure = failure
        logger.warning("--force: %s replaces the live index although %s", physical, failure)
    if restore is not None:
        engine.put_index_settings(physical, restore)
        logger.info("restored %s settings after the build: %s", physical, restore)
    if engine.alias_targets(settings.index) != [physical]:
        engine.swap_alias(settings.index, physical)
        report.alias_swapped = True
        logger.info("alias %s now points at %s", settings.index, physical)
    report.seconds = time.perf_counter() - started


BUILD_SETTINGS: dict[str, str] = {"index.refresh_interval": "-1", "index.number_of_replicas": "0"}
"""Index settings while a physical index not yet behind the alias is built (nobody searches it yet)."""


def begin_build(engine: Engine, physical: str, *, fresh: bool) -> dict[str, str | None]:
    """Apply :data:`BUILD_SETTINGS` to ``physical``; return the settings that restore it afterwards.

    Args:
        engine: the cluster.
        physical: a physical index that is not behind its alias.
        fresh: the index was created by this run (its current settings are the ones to restore).

    Returns:
        ``{setting: value}`` to put back once the build is complete (``None``: the engine default).
    """
    current = engine.get_index_settings(physical)
    restore: dict[str, str | None] = {}
    for key, value in BUILD_SETTINGS.items():
        before = current.get(key)
        if not fresh and before == value:
            # an interrupted build left its build settings behind; the values before it are unknown
            logger.warning("%s has %s=%s from an interrupted build; restoring the engine default afterwards", physical, key, value)
            before = None
        restore[key] = before
    engine.put_index_settings(physical, dict(BUILD_SETTINGS))
    return restore


__all__ = [
    "BUILD_SETTINGS",
    "REFUSAL_TYPES",
    "BuildCheckError",
    "DocumentBuilder",
    "EngineRefusedError",
    "EngineUnreachableError",
    "IndexReport",
    "IndexSettings",
    "IndexingError",
    "Quarantine",
    "Rejection",
    "Target",
    "batches",
    "begin_build",
    "check_build",
    "index_corpus",
    "is_refusal",
]
