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

import hashlib
import json
import logging
import time
import uuid
from collections import deque
from contextlib import closing
from itertools import chain
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenacity import before_sleep_log, retry, retry_if_exception, stop_after_attempt, wait_exponential
from tqdm import tqdm

from jingpai.engine.client import Engine
from jingpai.indexer.mapping import (
    META_KEY,
    IndexMeta,
    NotAJingpaiIndexError,
    build_mapping,
    encode_weights,
    engine_encodings,
    read_meta,
)
from jingpai.indexer.checks import REFUSAL_TYPES, alias_state, check_build, is_refusal, item_error, item_kind
from jingpai.indexer.quarantine import Quarantine
from jingpai.indexer.readers import DEFAULT_MAX_RECORD_BYTES, BadRecord, CorpusFormat, SourceRecord, read_corpus
from jingpai.indexer.versions import choose_physical_index

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary, Segmenter

logger = logging.getLogger(__name__)


class IndexingError(RuntimeError):
    """Indexing stopped (engine unreachable after all retries, or a bad setting)."""


class EngineRefusedError(IndexingError):
    """The engine refused writes to the whole index or cluster (write block, disk flood-stage
    watermark, read-only or closed index, no permission): not the documents' fault, so they are not
    quarantined. The physical index is kept and the alias untouched; re-run to resume once fixed."""


class BuildCheckError(IndexingError):
    """The new physical index failed :func:`check_build`; the alias was not moved to it.

    Attributes:
        report: the run's :class:`IndexReport` (counts and grouped rejection reasons).
    """

    def __init__(self, message: str, report: IndexReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class IndexSettings:
    """Options of one ``jingpai index`` run.

    Args:
        index: the alias clients query; physical indices are ``<index>-<dict version>-<n>``.
        text_fields: fields that get raw, segmented and keyword treatment.
        id_field: field holding the document id (``None``: SHA-1 of the record's canonical JSON).
        fmt: corpus format (``None``: from each file's suffix).
        columns: CSV/TSV column names for files without a header row.
        batch_size: documents per bulk request.
        max_doc_bytes: documents larger than this (as JSON, with jingpai's fields) are quarantined.
        max_record_bytes: input lines longer than this are quarantined before they are parsed,
            segmented or augmented (which takes tens of times their size in memory).
        max_rejected: largest share of the records read that may be quarantined (0.01: 1 %) for the
            new physical index to replace the live one.
        force: move the alias even when the new index fails :func:`check_build`.
        keywords_top_k: keywords kept per document.
        quarantine_dir: where ``<index>.rejected.jsonl`` is written.
        rebuild: build a new physical index even if one exists for this dictionary version.
        retries: attempts per bulk request on connection errors / 429 / 5xx (exponential backoff).
        retry_max_wait_s: cap of one backoff wait.
        progress: show a progress bar.
        concurrency: bulk requests in flight at once; the next batch is segmented meanwhile.
        fast_build: while a physical index that is not behind the alias is being built, turn its
            refresh off and its replicas to 0 (nobody searches it yet); both are restored before the
            alias swap. An index already behind the alias is never touched.
    """

    index: str
    text_fields: tuple[str, ...] = ("title", "content")
    id_field: str | None = None
    fmt: CorpusFormat | None = None
    columns: tuple[str, ...] | None = None
    batch_size: int = 500
    max_doc_bytes: int = 5_000_000
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_rejected: float = 0.01
    force: bool = False
    keywords_top_k: int = 20
    quarantine_dir: Path = Path(".")
    rebuild: bool = False
    retries: int = 6
    retry_max_wait_s: float = 20.0
    progress: bool = True
    concurrency: int = 2
    fast_build: bool = True

    def __post_init__(self) -> None:
        if not self.text_fields:
            raise ValueError("at least one text field is required (--text-fields)")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency (bulk requests in flight) must be >= 1, got {self.concurrency}")
        if self.max_record_bytes < 1:
            raise ValueError(f"max record bytes must be >= 1, got {self.max_record_bytes}")
        if not 0.0 <= self.max_rejected <= 1.0:
            raise ValueError(f"max rejected must be a share between 0 and 1 (0.01 = 1%), got {self.max_rejected}")
        if self.id_field in self.text_fields:
            logger.info("id field %r is also a text field", self.id_field)


@dataclass
class IndexReport:
    """What one run did."""

    alias: str
    physical_index: str
    read: int = 0
    indexed: int = 0
    rejected: int = 0
    seconds: float = 0.0
    quarantine_file: Path | None = None
    alias_swapped: bool = False
    reasons: dict[str, int] = field(default_factory=dict)
    first_lines: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    run_id: str = ""
    check_failure: str | None = None

    @property
    def docs_per_s(self) -> float:
        return self.indexed / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (
            f"read {self.read} / indexed {self.indexed} / rejected {self.rejected} / "
            f"{self.seconds:.1f} s / {self.docs_per_s:.0f} docs/s → {self.physical_index} (alias {self.alias})"
        )

    def rejections(self, *, examples: int = 5) -> str:
        """The rejections grouped by reason, one line each with its count and first line numbers
        (empty when nothing was rejected)."""
        if not self.rejected:
            return ""
        sources = {src for lines in self.first_lines.values() for src, _ in lines}
        rows = [f"{self.rejected} rejected records appended to {self.quarantine_file} (run {self.run_id}):"]
        for kind, count in sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            where = [
                f"{Path(src).name}:{line}" if len(sources) > 1 else str(line)
                for src, line in self.first_lines.get(kind, [])[:examples]
            ]
            more = ", …" if count > len(where) else ""
            rows.append(f"  {count:>7} × {kind} (line {', '.join(where)}{more})")
        return "\n".join(rows)


class Rejection(ValueError):
    """A record that cannot become a document; the message is the quarantine reason.

    Args:
        reason: the quarantine reason.
        kind: the reason without its specifics, for grouping (default: the text before the first ``:``).
    """

    def __init__(self, reason: str, *, kind: str | None = None) -> None:
        super().__init__(reason)
        self.kind = kind or reason.split(":")[0]


class DocumentBuilder:
    """Turns source records into engine documents with the fields :mod:`jingpai.indexer.mapping` owns."""

    def __init__(
        self,
        settings: IndexSettings,
        meta: IndexMeta,
        *,
        dictionary: Dictionary | None = None,
        segmenter: Segmenter,
    ) -> None:
        self.settings = settings
        self.meta = meta
        self.dictionary = dictionary
        self.segmenter = segmenter

    def doc_id(self, fields: dict) -> str:
        id_field = self.settings.id_field
        if id_field is None:
            canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
            return hashlib.sha1(canonical.encode("utf-8")).hexdigest()
        value = fields.get(id_field)
        if value is None or value == "":
            raise Rejection(f"missing id field {id_field!r}")
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise Rejection(f"id field {id_field!r} must be a string or integer, got {type(value).__name__}")
        return str(value)

    def build(self, fields: dict) -> tuple[str, dict]:
        """``(id, document)`` or :class:`Rejection`."""
        doc_id, document, _ = self._build(fields)
        return doc_id, document

    def build_json(self, fields: dict, *, record_bytes: int | None = None) -> tuple[str, str]:
        """``(id, document as JSON)`` or :class:`Rejection`: :meth:`build` serialised once, the form the
        size limit is checked on and the bulk request carries (the clients pass JSON strings through).
        ``record_bytes``: the record's size in its file, quoted when the document is over the limit."""
        doc_id, _, source = self._build(fields, record_bytes)
        return doc_id, source

    def _build(self, fields: dict, record_bytes: int | None = None) -> tuple[str, dict, str]:
        try:
            return self._augment(fields, record_bytes)
        except UnicodeEncodeError as exc:
            # JSON escapes can smuggle in lone surrogates ("\ud800"), which neither the segmenter nor
            # the engines accept as text
            raise _bad_unicode(fields) from exc

    def _augment(self, fields: dict, record_bytes: int | None) -> tuple[str, dict, str]:
        if META_KEY in fields:
            raise Rejection(f"field {META_KEY!r} is reserved for jingpai's own fields")
        texts: dict[str, str] = {}
        for name in self.settings.text_fields:
            value = fields.get(name)
            if value is None or value == "":
                continue
            if not isinstance(value, str):
                raise Rejection(f"text field {name!r} must be a string, got {type(value).__name__}")
            texts[name] = value
        if not texts:
            raise Rejection(f"missing text field: none of {', '.join(self.settings.text_fields)} is present and non-empty")
        doc_id = self.doc_id(fields)
        tokens = {name: self.segmenter.cut(text) for name, text in texts.items()}
        extra: dict = {"seg": {name: " ".join(toks) for name, toks in tokens.items()}}
        if self.dictionary is not None:
            from jingpai.keyword_dict import keywords_from_tokens

            # the segmentation just made is reused: cutting the text again would double the CPU cost
            all_tokens = chain.from_iterable(tokens.values())
            weights = dict(keywords_from_tokens(all_tokens, self.dictionary, top_k=self.settings.keywords_top_k))
            extra["keywords"] = list(weights)
            encoded = encode_weights(weights, self.meta.weight_encoding)
            if encoded:
                extra["kw"] = encoded
        else:
            extra["keywords"] = []
        document = {**fields, META_KEY: extra}
        source = json.dumps(document, ensure_ascii=False)
        size = len(source.encode("utf-8"))
        if size > self.settings.max_doc_bytes:
            record = record_bytes if record_bytes is not None else len(json.dumps(fields, ensure_ascii=False).encode("utf-8"))
            raise Rejection(
                f"document is {size} bytes with jingpai's fields (the record alone is {record} bytes), over the limit of "
                f"{self.settings.max_doc_bytes} (--max-doc-bytes)",
                kind="document over --max-doc-bytes",
            )
        return doc_id, document, source


def _bad_unicode(fields: dict) -> Rejection:
    for name, value in fields.items():
        text = json.dumps(value, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return Rejection(f"field {name!r} is not valid Unicode text: lone surrogate {text[exc.start:exc.end]!r}")
    return Rejection("document is not valid Unicode text: lone surrogate")


def batches(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of ``size`` items (the last may be shorter)."""
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def index_corpus(
    engine: Engine,
    paths: Sequence[str | Path],
    settings: IndexSettings,
    *,
    dictionary: Dictionary | None = None,
    on_progress: Callable[[IndexReport], None] | None = None,
) -> IndexReport:
    """Index corpus files into ``settings.index``.

    Args:
        engine: target cluster (:func:`jingpai.engine.client.connect`).
        paths: corpus files.
        settings: the run's options.
        dictionary: keyword dictionary for segmentation and keywords (``None``: the segmenter's own
            dictionary, no keywords).
        on_progress: called after every bulk request with the running report.

    Returns:
        The run's :class:`IndexReport`; the alias points at the physical index when it returns.

    Raises:
        CorpusError: a corpus file is missing, of an unknown format, or its header names no text field
            (checked for every file before anything is written).
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

    def records(path: str | Path) -> Iterator[SourceRecord | BadRecord]:
        return read_corpus(
            path, fmt=settings.fmt, columns=settings.columns, text_fields=settings.text_fields,
            max_record_bytes=settings.max_record_bytes,
        )

    for path in paths:
        # a missing file or an unusable header fails the run before any index is created, not midway
        with closing(records(path)) as first:
            next(first, None)

    dict_version = dictionary.version if dictionary is not None else None
    weight_enc, entity_enc = engine_encodings(engine)
    meta = IndexMeta(
        text_fields=tuple(settings.text_fields),
        dict_version=dict_version,
        weight_encoding=weight_enc,
        entity_encoding=entity_enc,
        id_field=settings.id_field,
    )
    physical, exists = choose_physical_index(engine, settings.index, dict_version, rebuild=settings.rebuild)
    live_before = engine.alias_targets(settings.index)
    live = exists and physical in live_before
    live_meta: IndexMeta | None = None
    if live_before:
        try:
            live_meta = read_meta(engine, settings.index)
        except NotAJingpaiIndexError:
            live_meta = None

    def prepare_index() -> dict[str, str | None] | None:
        if not exists:
            engine.create_index(physical, mappings=build_mapping(meta))
            logger.info("created physical index %s", physical)
        else:
            logger.info("resuming into existing physical index %s", physical)
        if settings.fast_build and not live:
            return begin_build(engine, physical, fresh=not exists)
        return None

    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    quarantine = Quarantine(Path(settings.quarantine_dir) / f"{settings.index}.rejected.jsonl", run_id=run_id)
    report = IndexReport(alias=settings.index, physical_index=physical, quarantine_file=quarantine.path, run_id=run_id)
    pending: deque[tuple[str, int, dict]] = deque()
    builder: DocumentBuilder | None = None

    def actions() -> Iterator[dict]:
        assert builder is not None
        for path in paths:
            for rec in records(path):
                report.read += 1
                if isinstance(rec, BadRecord):
                    quarantine.add(rec.source, rec.line, rec.raw, rec.reason, kind=rec.kind, raw_bytes=rec.raw_bytes)
                    continue
                assert isinstance(rec, SourceRecord)
                try:
                    doc_id, source = builder.build_json(rec.fields, record_bytes=rec.size)
                except Rejection as exc:
                    quarantine.add(rec.source, rec.line, rec.fields, str(exc), kind=exc.kind)
                    continue
                pending.append((rec.source, rec.line, rec.fields))
                # ``_source`` is already JSON: both clients' bulk helpers send strings as they are
                yield {"_op_type": "index", "_index": physical, "_id": doc_id, "_source": source}

    send = retry(
        retry=retry_if_exception(engine.is_transient),
        stop=stop_after_attempt(max(1, settings.retries)),
        wait=wait_exponential(multiplier=0.5, max=settings.retry_max_wait_s),
        before_sleep=before_sleep_log(logger, logging.WARNING),
        reraise=True,
    )(lambda chunk: list(engine.bulk(chunk, chunk_size=len(chunk))))

    bar = tqdm(total=None, unit="doc", disable=not settings.progress, desc=f"indexing {settings.index}")

    def unreachable(exc: BaseException) -> IndexingError:
        return IndexingError(
            f"engine at {engine.url} unreachable after {settings.retries} attempts ({exc}); "
            f"{report.indexed} documents are in {physical} — re-run the same command to resume"
        )

    def refused(error: str) -> EngineRefusedError:
        return EngineRefusedError(
            f"the engine refused to write to {physical}: {error.rstrip('; .')}. This is the index's or the cluster's state "
            f"(write block, disk watermark, read-only or closed index, permissions), not the documents', so none "
            f"were quarantined for it; {report.indexed} documents are in {physical} and "
            f"{alias_state(settings.index, live_before)}. Fix the cluster (e.g. remove the block, free "
            f"disk, open the index) and re-run the same command to resume"
        )

    def outcome(future: Future) -> Any:
        """The future's result; an engine that stays unreachable becomes :class:`IndexingError`, an
        error answer :class:`EngineRefusedError`."""
        try:
            return future.result()
        except Exception as exc:
            if engine.is_transient(exc):
                raise unreachable(exc) from exc
            if engine.is_api_error(exc):
                raise refused(str(exc)) from exc
            raise

    def settle(future: Future, size: int) -> None:
        refusal: str | None = None
        for ok, item in outcome(future):
            source, line, fields = pending.popleft()
            if ok:
                report.indexed += 1
            elif is_refusal(item):
                refusal = refusal or item_error(item).removeprefix("engine rejected the document: ")
            else:
                quarantine.add(source, line, fields, item_error(item), kind=item_kind(item))
        quarantine.flush()
        report.rejected = quarantine.count
        bar.update(size)
        bar.set_postfix(rejected=report.rejected)
        if refusal is not None:
            raise refused(refusal)
        if on_progress is not None:
            on_progress(report)

    # Up to ``concurrency`` bulk requests in flight while the next batch is segmented, so the engine
    # indexes (on as many write threads) while Python works. Batches are settled in the order they were
    # sent, which keeps ``pending`` aligned with the per-item results. The first batch travels alone:
    # fields the mapping leaves dynamic get their type from the first records of the corpus, as with
    # sequential requests, rather than from whichever of two concurrent batches lands first.
    restore: dict[str, str | None] | None = None
    try:
        with ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="jingpai-bulk") as sender:
            # creating the index (the engine waits for its shard) overlaps loading the segmenter and
            # segmenting the first batch
            setup: Future | None = sender.submit(prepare_index)
            builder = DocumentBuilder(settings, meta, dictionary=dictionary, segmenter=Segmenter(dictionary))
            inflight: deque[tuple[Future, int]] = deque()

            def ready() -> None:
                nonlocal setup, restore
                if setup is not None:
                    try:
                        restore = outcome(setup)
                    finally:
                        setup = None

            limit = 1
            for chunk in batches(actions(), settings.batch_size):
                ready()
                while len(inflight) >= limit:
                    settle(*inflight.popleft())
                    limit = settings.concurrency
                inflight.append((sender.submit(send, chunk), len(chunk)))
            ready()
            while inflight:
                settle(*inflight.popleft())
    finally:
        bar.close()
        quarantine.close()
        report.rejected = quarantine.count
        report.reasons = dict(quarantine.reasons)
        report.first_lines = {k: list(v) for k, v in quarantine.first_lines.items()}
    engine.refresh(physical)
    failure = check_build(engine, physical, report, settings, live_meta=live_meta, dict_version=dict_version)
    report.seconds = time.perf_counter() - started
    if failure is not None and not settings.force:
        report.check_failure = failure
        if live:
            what = f"the documents were written into {physical}, which the alias {settings.index} already served"
        else:
            engine.delete_index(physical)
            what = f"{alias_state(settings.index, live_before)}; the new index {physical} was deleted"
        raise BuildCheckError(
            f"{physical} did not replace the live index: {failure}. {what[0].upper()}{what[1:]}. "
            f"Fix the input (see {quarantine.path}) and re-run, or pass --force to swap anyway",
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
    return report


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
    "IndexReport",
    "IndexSettings",
    "IndexingError",
    "Quarantine",
    "Rejection",
    "batches",
    "begin_build",
    "check_build",
    "index_corpus",
    "is_refusal",
]
