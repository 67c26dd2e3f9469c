"""Document vectors for ``jingpai index --vectors``: one unit vector per document from a bi-encoder.

The indexer does not load models (it does not import :mod:`jingpai.reranker`): it takes an
:class:`Embedder`, which :func:`jingpai.jobs.document_vectors.load_embedder` builds from a saved ``use-bi``
folder, and :class:`DocumentVectors` turns the text fields of a batch of records into the vectors their
bulk actions carry:

- the text embedded is the record's text fields (``--text-fields`` order) joined by a newline;
- ``first`` chunking embeds that text as it is: the model reads its first window (``use-bi``: 64
  SentencePiece pieces) and cuts the rest; ``mean`` cuts the text into consecutive windows
  (:meth:`Embedder.chunks`, at most :data:`MAX_CHUNKS`), embeds each and takes the normalised mean;
- every vector is L2-normalised here whatever the model returns (Elasticsearch's ``dot_product``
  requires unit length) and rounded to 6 decimals (about 5 KB of JSON per 512-d vector instead of 10 KB;
  a change of at most 1e-6 per component, far below what int8 quantisation keeps).

A record with no text to embed (its text fields are blank) gets no vector: the document builder
quarantines it with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from jingpai.engine.vectors import VectorIndex
from jingpai.errors import UserError
from jingpai.indexer.mapping import VECTOR_FIELD, IndexMeta
from jingpai.indexer.settings import VectorChunking


#: windows a ``mean``-chunked document is cut into at most (bounds the cost of one long document:
#: 32 windows of 61 pieces cover about 3,000 Chinese characters)
MAX_CHUNKS = 32
#: decimals a vector component keeps in the bulk request's JSON
DECIMALS = 6
#: vectors shorter than this are no direction (a model that gives all zeros for a text)
MIN_NORM = 1e-6


class EmbedderOutputError(UserError, ValueError):
    """The model returned vectors of another shape than one row of ``dims`` per text."""


class Embedder(Protocol):
    """A loaded bi-encoder, as the indexer uses it.

    Attributes:
        model_id: ``<folder name>@<hash>`` of the model's config and weights (recorded in the index's ``_meta``).
        model_path: the model's folder, as given.
        dims: the dimension of its vectors.

    With ``--spark`` the embedder is pickled into the tasks; one that also has ``ship(spark_context)`` (a saved
    model's :class:`~jingpai.jobs.document_vectors.ModelEmbedder`) sends its folder to the executors first.
    """

    model_id: str
    model_path: str
    dims: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``float32 [len(texts), dims]`` sentence vectors, in input order (each text cut to the model's window)."""
        ...

    def chunks(self, text: str) -> list[str]:
        """``text`` cut into consecutive pieces that each fit the model's window (at least one)."""
        ...


def embedding_text(fields: dict, text_fields: Sequence[str]) -> str:
    """The text a record's vector is computed from: its non-empty string text fields joined by a newline."""
    return "\n".join(v for name in text_fields if isinstance(v := fields.get(name), str) and v.strip())


def with_vectors(meta: IndexMeta, embedder: Embedder, chunking: VectorChunking, index: VectorIndex = "hnsw") -> IndexMeta:
    """``meta`` recording ``embedder``'s vectors (field, model id and path, dimension, chunking, how they are indexed)."""
    return replace(
        meta, vector_field=VECTOR_FIELD, vector_model=embedder.model_id, vector_model_path=embedder.model_path,
        vector_dims=embedder.dims, vector_chunking=chunking, vector_index=index,
    )


class DocumentVectors:
    """Texts → the unit vectors their documents carry, batched through one :class:`Embedder`.

    Args:
        embedder: the loaded model.
        chunking: ``first`` or ``mean`` (see the module docstring).
        max_chunks: windows kept per document with ``mean``.
    """

    def __init__(self, embedder: Embedder, *, chunking: VectorChunking, max_chunks: int = MAX_CHUNKS) -> None:
        self.embedder = embedder
        self.chunking = chunking
        self.max_chunks = max_chunks

    def embed(self, texts: Sequence[str]) -> list[list[float] | None]:
        """One vector per text (``None``: a blank text, or a model that gave a zero vector), in input order."""
        rows = [i for i, text in enumerate(texts) if text.strip()]
        out: list[list[float] | None] = [None] * len(texts)
        if not rows:
            return out
        wanted = [texts[i] for i in rows]
        matrix = self._encode_first(wanted) if self.chunking == "first" else self._encode_mean(wanted)
        norms = np.linalg.norm(matrix, axis=1)
        unit = np.round(matrix / np.maximum(norms, MIN_NORM)[:, None], DECIMALS)
        for row, vector, norm in zip(rows, unit.tolist(), norms.tolist(), strict=True):
            out[row] = vector if norm >= MIN_NORM else None
        return out

    def _encode_first(self, texts: list[str]) -> np.ndarray:
        return self._checked(self.embedder.encode(texts), len(texts))

    def _encode_mean(self, texts: list[str]) -> np.ndarray:
        pieces = [self.embedder.chunks(text)[: self.max_chunks] or [text] for text in texts]
        flat = [chunk for chunks in pieces for chunk in chunks]
        vectors = self._checked(self.embedder.encode(flat), len(flat))
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), MIN_NORM)
        owner = np.repeat(np.arange(len(texts)), [len(chunks) for chunks in pieces])
        sums = np.zeros((len(texts), vectors.shape[1]), dtype=np.float64)
        np.add.at(sums, owner, vectors)
        return sums

    def _checked(self, vectors: np.ndarray, count: int) -> np.ndarray:
        matrix = np.asarray(vectors, dtype=np.float64)
        if matrix.shape != (count, self.embedder.dims):
            raise EmbedderOutputError(
                f"model {self.embedder.model_id} returned vectors of shape {matrix.shape} for {count} texts; "
                f"expected ({count}, {self.embedder.dims})"
            )
        return matrix


__all__ = ["DECIMALS", "MAX_CHUNKS", "DocumentVectors", "Embedder", "EmbedderOutputError", "embedding_text", "with_vectors"]
