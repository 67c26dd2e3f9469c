"""Vectors of unchanged documents, read back from the live index instead of embedded again.

Every ``jingpai index`` run builds a new physical index version (a dictionary update, ``--rebuild``) or resumes one,
and rebuilds every document in it. A document's vector, unlike its keywords, depends only on its text fields and on
the model — on two CPU cores embedding is most of the run's time (docs/indexing.md, "Indexing throughput"). So when
the alias's live index was built with the same model (:attr:`IndexMeta.vector_model`: folder name and hash of the
model's config and weights) and the same chunking, each bulk batch first asks the live index for its documents
(one ``_mget`` by id) and keeps the stored vector of every document whose embedded text is unchanged; only new and
changed documents go through the model. The text is compared, never assumed: a document whose id stayed while its
text changed is embedded again. ``--no-reuse-vectors`` embeds everything.

Reuse is an optimisation: a failed ``_mget`` embeds that batch and logs why.

Example:
    >>> LiveVectors.choose(engine, target.live_before, target.live_meta, meta, enabled=True)   # doctest: +SKIP
    >>> vectors, reused = BatchVectors(document_vectors, reuse)(texts, ids)                   # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from jingpai.engine.client import DocumentReadError, Engine
from jingpai.indexer.bulk import batches
from jingpai.indexer.mapping import META_KEY, VECTOR_FIELD, IndexMeta
from jingpai.indexer.readers import SourceRecord
from jingpai.indexer.settings import IndexSettings
from jingpai.indexer.vectors import DocumentVectors, embedding_text

logger = logging.getLogger(__name__)


class LiveVectors:
    """Reads the vectors of unchanged documents back from one live physical index.

    Args:
        engine: the cluster.
        index: the live physical index (built with the run's model and chunking).
        text_fields: the fields the vectors were embedded from (in order).
        dims: the model's dimension; a stored vector of another length is not reused.
    """

    def __init__(self, engine: Engine, index: str, *, text_fields: Sequence[str], dims: int) -> None:
        self.engine = engine
        self.index = index
        self.text_fields = tuple(text_fields)
        self.dims = dims

    @classmethod
    def choose(
        cls, engine: Engine, live_before: Sequence[str], live_meta: IndexMeta | None, meta: IndexMeta, *, enabled: bool,
    ) -> LiveVectors | None:
        """The live index to reuse vectors from, or ``None`` (the reason logged) when it holds none this run can use."""
        if meta.vector_model is None or meta.vector_dims is None:
            return None
        if not enabled:
            logger.info("--no-reuse-vectors: every document is embedded by %s", meta.vector_model)
            return None
        if live_meta is None or len(live_before) != 1:
            logger.info("no single live jingpai index behind the alias (%s): every document is embedded", ", ".join(live_before) or "none")
            return None
        reason = _mismatch(live_meta, meta)
        if reason is not None:
            logger.info("vectors of %s are not reused: %s; every document is embedded", live_before[0], reason)
            return None
        logger.info("vectors of unchanged documents are read back from the live index %s (model %s)", live_before[0], meta.vector_model)
        return cls(engine, live_before[0], text_fields=meta.text_fields, dims=meta.vector_dims)

    def lookup(self, ids: Sequence[str | None], texts: Sequence[str]) -> list[list[float] | None]:
        """The stored vector of each document whose id the live index holds with the same embedded text (else ``None``),
        in input order. ``ids[i]`` is ``None`` for a record without a valid id."""
        out: list[list[float] | None] = [None] * len(texts)
        wanted = [i for i, doc_id in enumerate(ids) if doc_id is not None and texts[i].strip()]
        if not wanted:
            return out
        try:
            sources = self.engine.get_sources(self.index, [str(ids[i]) for i in wanted], fields=[*self.text_fields, VECTOR_FIELD])
        except Exception as exc:
            if not isinstance(exc, DocumentReadError) and not (self.engine.is_transient(exc) or self.engine.is_api_error(exc)):
                raise
            logger.warning("reading %d vectors back from %s failed (%s: %s): the batch is embedded instead",
                           len(wanted), self.index, type(exc).__name__, str(exc)[:200])
            return out
        for i in wanted:
            source = sources.get(str(ids[i]))
            if source is None or embedding_text(source, self.text_fields) != texts[i]:
                continue
            vector = (source.get(META_KEY) or {}).get("vector")
            if isinstance(vector, list) and len(vector) == self.dims:
                out[i] = vector
        return out


@dataclass(frozen=True)
class BatchVectors:
    """A bulk batch's vectors: read back from the live index where ``reuse`` holds them, the model's for the rest.

    Attributes:
        model: the run's model (see :meth:`DocumentVectors.embed`).
        reuse: the live index to read unchanged documents' vectors from (``None``: embed everything).
    """

    model: DocumentVectors
    reuse: LiveVectors | None = None

    def __call__(self, texts: Sequence[str], ids: Sequence[str | None] | None) -> tuple[list[list[float] | None], int]:
        """``(one vector per text, how many were read back)``; ``ids`` (``None`` without ``reuse``) name the documents."""
        found = self.reuse.lookup(ids, texts) if self.reuse is not None and ids is not None else [None] * len(texts)
        missing = [i for i, vector in enumerate(found) if vector is None]
        if missing:
            for i, vector in zip(missing, self.model.embed([texts[i] for i in missing]), strict=True):
                found[i] = vector
        return found, len(texts) - len(missing)


class VectorCounts(Protocol):
    """Where :func:`attach_vectors` counts the vectors (an :class:`~jingpai.indexer.report.IndexReport`)."""

    vectors_embedded: int
    vectors_reused: int


def attach_vectors(
    records: Iterator[SourceRecord], vectors: BatchVectors | None, *, settings: IndexSettings,
    doc_id: Callable[[dict], str | None], counts: VectorCounts,
) -> Iterator[tuple[SourceRecord, list[float] | None]]:
    """Each record with its vector (``None`` without vectors), a bulk batch (``settings.batch_size``) at a time.

    The model embeds the next batch on its own thread while this one's documents are built (segmentation, keywords)
    and the bulk requests of the previous ones are in flight: torch leaves the GIL while it computes, so the
    encoder and the segmenter overlap instead of taking turns. Order and errors are the batch's own. The local
    indexer and each ``--spark`` task run the same code.

    Args:
        records: the records that parsed.
        vectors: the run's model and live index (``None``: no vectors, records pass through).
        settings: batch size and text fields.
        doc_id: a record's document id (``None``: it has none; its document is quarantined when built).
        counts: gets the vectors embedded and read back added to it.
    """
    if vectors is None:
        yield from ((rec, None) for rec in records)
        return

    def batch_vectors(texts: list[str], ids: list[str | None] | None) -> list[list[float] | None]:
        found, reused = vectors(texts, ids)
        counts.vectors_reused += reused
        counts.vectors_embedded += sum(v is not None for v in found) - reused
        return found

    with ThreadPoolExecutor(1, thread_name_prefix="jingpai-embed") as pool:
        pending: tuple[list[SourceRecord], Future[list[list[float] | None]]] | None = None
        for group in batches(records, settings.batch_size):
            texts = [embedding_text(rec.fields, settings.text_fields) for rec in group]
            # ids only to look documents up in the live index: without reuse, build_json alone computes them
            ids = [doc_id(rec.fields) for rec in group] if vectors.reuse is not None else None
            submitted = (group, pool.submit(batch_vectors, texts, ids))
            if pending is not None:
                yield from zip(pending[0], pending[1].result(), strict=True)
            pending = submitted
        if pending is not None:
            yield from zip(pending[0], pending[1].result(), strict=True)


def _mismatch(live: IndexMeta, meta: IndexMeta) -> str | None:
    if live.vector_model != meta.vector_model:
        return f"they come from model {live.vector_model or '(none)'}, this run's is {meta.vector_model}"
    if live.vector_chunking != meta.vector_chunking:
        return f"they were chunked {live.vector_chunking!r}, this run chunks {meta.vector_chunking!r}"
    if tuple(live.text_fields) != tuple(meta.text_fields):
        return f"they embed the fields {', '.join(live.text_fields)}, this run embeds {', '.join(meta.text_fields)}"
    return None


__all__ = ["BatchVectors", "LiveVectors", "VectorCounts", "attach_vectors"]
