"""Request-level embedding shared by ``/embed`` and ``/v1/embeddings`` (:class:`TextEmbedder`), and what
a model must offer to be embedded with (:class:`EmbeddingModel`).

An embedding request goes through the same :class:`~jingpai.reranker.service.batching.BatchingEngine`
as the reranking routes, under the same limits: at most ``max_docs`` texts, each at most ``max_length``
tokens (cut, or refused with 413 when the request says not to truncate), batched within
``max_batch_tokens``, answered 429 after ``queue_timeout_ms`` in the queue, counted in ``/metrics``.

Example:
    >>> vectors, tokens = await service.embedder.embed(["中国GDP", "天气"], field="inputs")   # doctest: +SKIP
    >>> vectors.shape, tokens                                                                # doctest: +SKIP
    ((2, 512), 9)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import torch

from jingpai.reranker.base import Reranker
from jingpai.reranker.service.batching import BatchingEngine
from jingpai.reranker.service.errors import CannotEmbedError, InvalidInputError, PayloadTooLargeError, TokenizerError
from jingpai.reranker.service.settings import LIMIT_SOURCE, ServiceSettings

#: an example of a model that embeds, for the message that refuses one that cannot
EMBEDDING_EXAMPLE = "use-bi"


@runtime_checkable
class EmbeddingModel(Protocol):
    """A model that turns one text into one vector (a bi-encoder such as ``use-bi``), as the service needs it.

    The service cuts and counts tokens itself (:meth:`text_tokens`), so that a text over the limit can be
    refused or cut from either end and ``usage`` counts what was embedded; the batching engine then runs
    :meth:`featurize_tokens` and :meth:`embeddings` on its worker thread. :meth:`encode` is the same
    computation for a caller with texts in hand (the vectors the service answers).

    ``isinstance(model, EmbeddingModel)`` is the capability check (it looks for the methods).
    """

    name: str

    @property
    def embedding_dim(self) -> int:
        """Dimensions of one vector."""
        ...

    def text_tokens(
        self, texts: Sequence[str], *, max_length: int | None = None, cut: Literal["right", "left"] = "right",
    ) -> list[tuple[list[int], int]]:
        """Per text: its token ids as the model reads them (special tokens included, cut to ``max_length``
        from the ``cut`` side) and its token count before the cut."""
        ...

    def featurize_tokens(self, ids: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        """Input tensors of texts given as :meth:`text_tokens` ids (on the CPU)."""
        ...

    def embeddings(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One vector per text of a featurized batch already on the device, ``[B, embedding_dim]``."""
        ...

    def encode(self, texts: Sequence[str], *, batch_size: int = 32, normalize: bool = True) -> np.ndarray:
        """``float32 [len(texts), embedding_dim]`` vectors in input order (unit length with ``normalize``)."""
        ...


class TextEmbedder:
    """Embedding requests of one service: limits, token cuts, the engine, normalisation and ``dimensions``.

    Args:
        model: the service's model (its own copy); one that cannot embed answers every request with
            :class:`CannotEmbedError`.
        settings: service settings (``max_docs``).
        engine: the service's batching engine (the reranking routes' own).
        prep: the service's preparation thread (tokenizing a large request stays off the event loop).
        max_length: tokens per text (the service's ``max_length``).
    """

    def __init__(
        self, model: Reranker, settings: ServiceSettings, engine: BatchingEngine, prep: concurrent.futures.Executor, *, max_length: int,
    ) -> None:
        self.model = model
        self.settings = settings
        self.engine = engine
        self.max_length = max_length
        self._prep = prep

    @property
    def dim(self) -> int | None:
        """Dimensions of the vectors served (``None``: the model cannot embed)."""
        return self.model.embedding_dim if isinstance(self.model, EmbeddingModel) else None

    def check(self, texts: Sequence[str], *, field: str, dimensions: int | None = None) -> EmbeddingModel:
        """Apply the per-request limits; returns the model as an :class:`EmbeddingModel`.

        Raises:
            CannotEmbedError: the served model cannot embed.
            PayloadTooLargeError: more than ``max_docs`` texts.
            InvalidInputError: no text, or ``dimensions`` outside 1..the model's.
        """
        model = self.model
        if not isinstance(model, EmbeddingModel):
            raise CannotEmbedError(
                f"model {model.name!r} cannot embed: it scores (query, document) pairs and has no vector of one text; "
                f"serve a bi-encoder such as {EMBEDDING_EXAMPLE} to use /embed and /v1/embeddings"
            )
        s = self.settings
        if len(texts) > s.max_docs:
            raise PayloadTooLargeError(
                f"{field} holds {len(texts)} texts; the limit is max_docs={s.max_docs} ({LIMIT_SOURCE['max_docs']})", param=field,
            )
        if not texts:
            raise InvalidInputError(f"{field} must hold at least one text", param=field)
        if dimensions is not None and not 1 <= dimensions <= model.embedding_dim:
            raise InvalidInputError(
                f"dimensions={dimensions} is outside 1..{model.embedding_dim}: model {model.name!r} gives "
                f"{model.embedding_dim}-dimensional vectors", param="dimensions",
            )
        return model

    async def embed(
        self, texts: Sequence[str], *, field: str, truncate: bool = True, cut: Literal["right", "left"] = "right",
        normalize: bool = True, dimensions: int | None = None,
    ) -> tuple[np.ndarray, int]:
        """Vectors of ``texts`` (``float32 [N, dim]``, input order) and the tokens embedded (OpenAI's ``usage``).

        Args:
            texts: the request's texts.
            field: the request field holding them, named in error messages.
            truncate: ``False`` refuses a text over ``max_length`` tokens (413) instead of cutting it.
            cut: which end of a text over ``max_length`` is cut: ``right`` keeps its start, ``left`` its end.
            normalize: scale each vector to unit length (after ``dimensions`` cut it).
            dimensions: keep each vector's first ``dimensions`` components (Matryoshka-style shortening).

        Raises:
            CannotEmbedError, PayloadTooLargeError, InvalidInputError: see :meth:`check`; a text over
                ``max_length`` with ``truncate=False`` is a PayloadTooLargeError.
            TokenizerError: the model's tokenizer cannot read a text.
            QueueTimeoutError, ScoringError, ServiceClosedError: from the batching engine.
        """
        model = self.check(texts, field=field, dimensions=dimensions)
        cap = self.max_length
        try:
            tokens = await asyncio.get_running_loop().run_in_executor(self._prep, lambda: model.text_tokens(texts, max_length=cap, cut=cut))
        except Exception as exc:  # e.g. a lone surrogate no UTF-8 tokenizer can encode: the request's fault
            raise TokenizerError(f"the model could not read this request's input: {type(exc).__name__}: {exc}", param=field) from exc
        if not truncate:
            for i, (_, n) in enumerate(tokens):
                if n > cap:
                    raise PayloadTooLargeError(
                        f"{field}[{i}] is {n} tokens long; the limit is max_length={cap} ({LIMIT_SOURCE['max_length']}); "
                        "send truncate=true to cut it", param=field,
                    )
        ids = [t for t, _ in tokens]
        lengths = [len(t) for t in ids]
        vectors = await self.engine.embed(ids, lengths)
        if dimensions is not None:
            vectors = np.ascontiguousarray(vectors[:, :dimensions])
        if normalize:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors, sum(lengths)


__all__ = ["EMBEDDING_EXAMPLE", "EmbeddingModel", "TextEmbedder"]
