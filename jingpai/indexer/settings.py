"""The options of one ``jingpai index`` run: light, so the CLI can generate its options from them.

Importing this module must not import the engine client (httpx), numpy or jieba: every
``jingpai index --help`` reads it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jingpai.engine.vectors import VECTOR_INDEXES, VectorIndex
from jingpai.indexer.readers import DEFAULT_MAX_DEPTH, DEFAULT_MAX_RECORD_BYTES, CorpusFormat

logger = logging.getLogger(__name__)

#: how a document longer than the model's window gets its one vector: the window's start (``first``), or
#: the mean of the vectors of consecutive windows (``mean``); docs/indexing.md has the measurement
VectorChunking = Literal["first", "mean"]
VECTOR_CHUNKINGS: tuple[VectorChunking, ...] = ("first", "mean")

MAX_DEPTH_CEILING = 500
"""The deepest ``max_depth`` allowed: records are parsed and encoded again by Python's recursive ``json``,
which gives up near 1,000 levels."""


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
        max_depth: JSONL records nested deeper than this (objects and arrays) are quarantined before
            they are parsed; the default is the engines' default ``index.mapping.depth.limit``
            (:data:`~jingpai.indexer.readers.DEFAULT_MAX_DEPTH`). At most :data:`MAX_DEPTH_CEILING`.
        max_rejected: largest share of the records read that may be quarantined (0.01: 1 %) for the
            new physical index to replace the live one.
        force: move the alias even when the new index fails :func:`check_build`.
        keywords_top_k: keywords kept per document.
        rerank_keywords: also store each document's keywords of the text the gateway reranks (its text fields
            joined, cut to :data:`~jingpai.indexer.rerank_keywords.RERANK_CHARS` characters) in ``jingpai.rk``, so
            a keyword reranker (``kwbert``, ``use-kw``) built on the same dictionary need not segment the hits
            again (needs a dictionary; costs a second segmentation of documents with several fields or longer texts).
        quarantine_dir: where ``<index>.rejected.jsonl`` is written.
        rebuild: build a new physical index even if one exists for this dictionary version.
        retries: attempts per bulk request on connection errors / 429 / 5xx (exponential backoff).
        retry_max_wait_s: cap of one backoff wait.
        progress: show a progress bar.
        concurrency: bulk requests in flight at once; the next batch is segmented meanwhile.
        fast_build: while a physical index that is not behind the alias is being built, turn its
            refresh off and its replicas to 0 (nobody searches it yet); both are restored before the
            alias swap. An index already behind the alias is never touched.
        vectors: a saved bi-encoder (``use-bi``) that embeds each document's text fields into one unit vector,
            written in the same bulk request as the text into ``jingpai.vector`` (``dense_vector`` on
            Elasticsearch, ``knn_vector`` on OpenSearch with its k-NN plugin); ``None``: no vectors.
        vector_chunking: text longer than the model's window: ``first`` embeds its first window, ``mean``
            averages the vectors of up to :data:`~jingpai.indexer.vectors.MAX_CHUNKS` consecutive windows.
        vector_index: with ``vectors``, how the engine indexes them: ``hnsw`` (a graph, approximate search) or
            ``flat`` (no graph: indexing skips the graph build, every kNN search is exact over all vectors; for up to
            about 100k documents); see :mod:`jingpai.engine.vectors`.
        reuse_vectors: with ``vectors``, read the vector of every document whose embedded text is unchanged back
            from the live index when that index was built with the same model and chunking, and embed only the
            others (:mod:`jingpai.indexer.vector_reuse`); ``False``: embed every document.
    """

    index: str
    text_fields: tuple[str, ...] = ("title", "content")
    id_field: str | None = None
    fmt: CorpusFormat | None = None
    columns: tuple[str, ...] | None = None
    batch_size: int = 500
    max_doc_bytes: int = 5_000_000
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH
    max_rejected: float = 0.01
    force: bool = False
    keywords_top_k: int = 20
    rerank_keywords: bool = False
    quarantine_dir: Path = Path(".")
    rebuild: bool = False
    retries: int = 6
    retry_max_wait_s: float = 20.0
    progress: bool = True
    concurrency: int = 2
    fast_build: bool = True
    vectors: Path | None = None
    vector_chunking: VectorChunking = "mean"
    vector_index: VectorIndex = "hnsw"
    reuse_vectors: bool = True

    def __post_init__(self) -> None:
        if not self.text_fields:
            raise ValueError("at least one text field is required (--text-fields)")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency (bulk requests in flight) must be >= 1, got {self.concurrency}")
        if self.max_record_bytes < 1:
            raise ValueError(f"max record bytes must be >= 1, got {self.max_record_bytes}")
        if not 1 <= self.max_depth <= MAX_DEPTH_CEILING:
            raise ValueError(f"max depth must be between 1 and {MAX_DEPTH_CEILING} levels, got {self.max_depth}")
        if not 0.0 <= self.max_rejected <= 1.0:
            raise ValueError(f"max rejected must be a share between 0 and 1 (0.01 = 1%), got {self.max_rejected}")
        if self.vector_chunking not in VECTOR_CHUNKINGS:
            raise ValueError(f"unknown vector chunking {self.vector_chunking!r}; expected one of {', '.join(VECTOR_CHUNKINGS)}")
        if self.vector_index not in VECTOR_INDEXES:
            raise ValueError(f"unknown vector index {self.vector_index!r}; expected one of {', '.join(VECTOR_INDEXES)}")
        if self.id_field in self.text_fields:
            logger.info("id field %r is also a text field", self.id_field)


__all__ = ["MAX_DEPTH_CEILING", "VECTOR_CHUNKINGS", "IndexSettings", "VectorChunking"]
