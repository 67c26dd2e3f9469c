"""Corpus → dictionary-augmented documents → a versioned physical index behind an alias.

Every input record ends up either indexed or in the quarantine file ``<alias>.rejected.jsonl`` with its
reason (malformed line, missing/invalid field, over-size document, engine rejection of the bulk item).
Document ids come from ``id_field`` or a content hash, so re-running after a crash resumes into the same
physical index without duplicates.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import deque
from itertools import chain
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenacity import before_sleep_log, retry, retry_if_exception, stop_after_attempt, wait_exponential
from tqdm import tqdm

from jingpai.engine.client import Engine
from jingpai.indexer.mapping import META_KEY, IndexMeta, build_mapping, encode_weights, engine_encodings
from jingpai.indexer.readers import BadRecord, CorpusFormat, SourceRecord, read_corpus
from jingpai.indexer.versions import choose_physical_index

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary, Segmenter

logger = logging.getLogger(__name__)


class IndexingError(RuntimeError):
    """Indexing stopped (engine unreachable after all retries, or a bad setting)."""


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
        max_doc_bytes: documents larger than this (as JSON) are quarantined.
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

    @property
    def docs_per_s(self) -> float:
        return self.indexed / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (
            f"read {self.read} / indexed {self.indexed} / rejected {self.rejected} / "
            f"{self.seconds:.1f} s / {self.docs_per_s:.0f} docs/s → {self.physical_index} (alias {self.alias})"
        )


class Rejection(ValueError):
    """A record that cannot become a document; the message is the quarantine reason."""


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

    def build_json(self, fields: dict) -> tuple[str, str]:
        """``(id, document as JSON)`` or :class:`Rejection`: :meth:`build` serialised once, the form the
        size limit is checked on and the bulk request carries (the clients pass JSON strings through)."""
        doc_id, _, source = self._build(fields)
        return doc_id, source

    def _build(self, fields: dict) -> tuple[str, dict, str]:
        try:
            return self._augment(fields)
        except UnicodeEncodeError as exc:
            # JSON escapes can smuggle in lone surrogates ("\ud800"), which neither the segmenter nor
            # the engines accept as text
            raise _bad_unicode(fields) from exc

    def _augment(self, fields: dict) -> tuple[str, dict, str]:
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
            raise Rejection(f"document is {size} bytes, over the limit of {self.settings.max_doc_bytes} (--max-doc-bytes)")
        return doc_id, document, source


def _bad_unicode(fields: dict) -> Rejection:
    for name, value in fields.items():
        text = json.dumps(value, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return Rejection(f"field {name!r} is not valid Unicode text: lone surrogate {text[exc.start:exc.end]!r}")
    return Rejection("document is not valid Unicode text: lone surrogate")


class Quarantine:
    """``<index>.rejected.jsonl``: one line per rejected record with the original record and the reason."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("w", encoding="utf-8")
        self.count = 0
        self.reasons: dict[str, int] = {}

    def add(self, source: str, line: int, record: dict | str, reason: str) -> None:
        entry = {"source": source, "line": line, "reason": reason, "record": record}
        text = json.dumps(entry, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(entry)  # lone surrogates stay \u escapes: the record is kept exactly
        self._fh.write(text + "\n")
        self.count += 1
        kind = reason.split(":")[0]
        self.reasons[kind] = self.reasons.get(kind, 0) + 1

    def close(self) -> None:
        self._fh.close()


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


def _item_error(item: dict) -> str:
    (op,) = item.values()
    err = op.get("error") or {}
    if isinstance(err, dict):
        return f"engine rejected the document: {err.get('type', 'error')}: {err.get('reason', '')}".rstrip(": ")
    return f"engine rejected the document: {err}"


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
        IndexingError: the engine stayed unreachable through all retries. Re-run the same command to
            resume: ids are deterministic and the same physical index is reused.
    """
    from jingpai.keyword_dict import Segmenter

    started = time.perf_counter()
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
    live = exists and physical in engine.alias_targets(settings.index)

    def prepare_index() -> dict[str, str | None] | None:
        if not exists:
            engine.create_index(physical, mappings=build_mapping(meta))
            logger.info("created physical index %s", physical)
        else:
            logger.info("resuming into existing physical index %s", physical)
        if settings.fast_build and not live:
            return begin_build(engine, physical, fresh=not exists)
        return None

    quarantine = Quarantine(Path(settings.quarantine_dir) / f"{settings.index}.rejected.jsonl")
    report = IndexReport(alias=settings.index, physical_index=physical, quarantine_file=quarantine.path)
    pending: deque[tuple[str, int, dict]] = deque()
    builder: DocumentBuilder | None = None

    def actions() -> Iterator[dict]:
        assert builder is not None
        for path in paths:
            for rec in read_corpus(path, fmt=settings.fmt, columns=settings.columns):
                report.read += 1
                if isinstance(rec, BadRecord):
                    quarantine.add(rec.source, rec.line, rec.raw, rec.reason)
                    continue
                assert isinstance(rec, SourceRecord)
                try:
                    doc_id, source = builder.build_json(rec.fields)
                except Rejection as exc:
                    quarantine.add(rec.source, rec.line, rec.fields, str(exc))
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

    def outcome(future: Future) -> Any:
        """The future's result; an engine that stays unreachable becomes :class:`IndexingError`."""
        try:
            return future.result()
        except Exception as exc:
            if engine.is_transient(exc):
                raise unreachable(exc) from exc
            raise

    def settle(future: Future, size: int) -> None:
        for ok, item in outcome(future):
            source, line, fields = pending.popleft()
            if ok:
                report.indexed += 1
            else:
                quarantine.add(source, line, fields, _item_error(item))
        report.rejected = quarantine.count
        bar.update(size)
        bar.set_postfix(rejected=report.rejected)
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
    if restore is not None:
        engine.put_index_settings(physical, restore)
        logger.info("restored %s settings after the build: %s", physical, restore)
    engine.refresh(physical)
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


__all__ = ["BUILD_SETTINGS", "DocumentBuilder", "IndexReport", "IndexSettings", "IndexingError", "Quarantine", "batches", "begin_build", "index_corpus"]
