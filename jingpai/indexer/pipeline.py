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
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

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

    def __post_init__(self) -> None:
        if not self.text_fields:
            raise ValueError("at least one text field is required (--text-fields)")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")
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
            all_tokens = [t for toks in tokens.values() for t in toks]
            weights = dict(keywords_from_tokens(all_tokens, self.dictionary, top_k=self.settings.keywords_top_k))
            extra["keywords"] = list(weights)
            encoded = encode_weights(weights, self.meta.weight_encoding)
            if encoded:
                extra["kw"] = encoded
        else:
            extra["keywords"] = []
        document = {**fields, META_KEY: extra}
        size = len(json.dumps(document, ensure_ascii=False).encode("utf-8"))
        if size > self.settings.max_doc_bytes:
            raise Rejection(f"document is {size} bytes, over the limit of {self.settings.max_doc_bytes} (--max-doc-bytes)")
        return doc_id, document


class Quarantine:
    """``<index>.rejected.jsonl``: one line per rejected record with the original record and the reason."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("w", encoding="utf-8")
        self.count = 0
        self.reasons: dict[str, int] = {}

    def add(self, source: str, line: int, record: dict | str, reason: str) -> None:
        self._fh.write(json.dumps({"source": source, "line": line, "reason": reason, "record": record}, ensure_ascii=False) + "\n")
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
    if not exists:
        engine.create_index(physical, mappings=build_mapping(meta))
        logger.info("created physical index %s", physical)
    else:
        logger.info("resuming into existing physical index %s", physical)
    builder = DocumentBuilder(settings, meta, dictionary=dictionary, segmenter=Segmenter(dictionary))
    quarantine = Quarantine(Path(settings.quarantine_dir) / f"{settings.index}.rejected.jsonl")
    report = IndexReport(alias=settings.index, physical_index=physical, quarantine_file=quarantine.path)
    pending: deque[tuple[str, int, dict]] = deque()

    def actions() -> Iterator[dict]:
        for path in paths:
            for rec in read_corpus(path, fmt=settings.fmt, columns=settings.columns):
                report.read += 1
                if isinstance(rec, BadRecord):
                    quarantine.add(rec.source, rec.line, rec.raw, rec.reason)
                    continue
                assert isinstance(rec, SourceRecord)
                try:
                    doc_id, document = builder.build(rec.fields)
                except Rejection as exc:
                    quarantine.add(rec.source, rec.line, rec.fields, str(exc))
                    continue
                pending.append((rec.source, rec.line, rec.fields))
                yield {"_op_type": "index", "_index": physical, "_id": doc_id, "_source": document}

    send = retry(
        retry=retry_if_exception(engine.is_transient),
        stop=stop_after_attempt(max(1, settings.retries)),
        wait=wait_exponential(multiplier=0.5, max=settings.retry_max_wait_s),
        before_sleep=before_sleep_log(logger, logging.WARNING),
        reraise=True,
    )(lambda chunk: list(engine.bulk(chunk, chunk_size=len(chunk))))

    bar = tqdm(total=None, unit="doc", disable=not settings.progress, desc=f"indexing {settings.index}")

    def settle(future: Future, size: int) -> None:
        try:
            results = future.result()
        except Exception as exc:
            if engine.is_transient(exc):
                raise IndexingError(
                    f"engine at {engine.url} unreachable after {settings.retries} attempts ({exc}); "
                    f"{report.indexed} documents are in {physical} — re-run the same command to resume"
                ) from exc
            raise
        for ok, item in results:
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

    # One bulk request in flight while the next batch is segmented: the engine indexes while Python
    # works. Each batch is settled before the next is sent, so at most one batch is unacknowledged.
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="jingpai-bulk") as sender:
            inflight: tuple[Future, int] | None = None
            for chunk in batches(actions(), settings.batch_size):
                if inflight is not None:
                    settle(*inflight)
                inflight = (sender.submit(send, chunk), len(chunk))
            if inflight is not None:
                settle(*inflight)
    finally:
        bar.close()
        quarantine.close()
        report.rejected = quarantine.count
        report.reasons = dict(quarantine.reasons)
    engine.refresh(physical)
    if engine.alias_targets(settings.index) != [physical]:
        engine.swap_alias(settings.index, physical)
        report.alias_swapped = True
        logger.info("alias %s now points at %s", settings.index, physical)
    report.seconds = time.perf_counter() - started
    return report


__all__ = ["DocumentBuilder", "IndexReport", "IndexSettings", "IndexingError", "Quarantine", "batches", "index_corpus"]
