"""Request-level scoring shared by every API shape (:class:`RerankService`).

It applies the per-request limits, cuts or chunks long documents to ``max_length`` tokens, feeds the
pairs to the :class:`~jingpai.reranker.service.batching.BatchingEngine` and scales scores to [0, 1].
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from jingpai.reranker.base import Pair, Reranker
from jingpai.reranker.identity import model_id
from jingpai.reranker.service.batching import BatchingEngine
from jingpai.reranker.service.embedding import TextEmbedder
from jingpai.reranker.service.errors import InvalidInputError, PayloadTooLargeError
from jingpai.reranker.service.measuring import TextMeasure, longest_first
from jingpai.reranker.service.metrics import ServiceMetrics
from jingpai.reranker.service.model_copy import serving_model
from jingpai.reranker.service.settings import LIMIT_SOURCE, ServiceSettings

if TYPE_CHECKING:
    from jingpai.reranker.service.schemas import GivenKeywords

logger = logging.getLogger(__name__)

#: which end of a document over the token budget is cut: ``right`` keeps its start, ``left`` its end
CutSide = Literal["right", "left"]

#: Cohere's billing rule (``meta.billed_units.search_units``): one search unit is one query with up to
#: 100 documents; a document longer than 500 tokens together with the query counts once per 500 tokens
SEARCH_UNIT_DOCS = 100
SEARCH_UNIT_TOKENS = 500


class RerankService:
    """Request-level logic shared by every API shape: limits, truncation/chunking, score scaling.

    Args:
        model: a loaded reranker, already on its device; the service works on a copy of it.
        settings: service settings.
        metrics: the app's metrics.
        copy_model: ``False``: change ``model`` itself instead of a copy (the caller hands it over).

    Raises:
        ServiceSettingsError: settings this model or device cannot honour (see :func:`serving_model`).

    Example:
        >>> service = RerankService(model, ServiceSettings(), ServiceMetrics())           # doctest: +SKIP
        >>> await service.score("中国GDP", ["影响中国GDP的因素", "天气"], field="texts")   # doctest: +SKIP
        array([ 0.41, -1.2], dtype=float32)
    """

    def __init__(self, model: Reranker, settings: ServiceSettings, metrics: ServiceMetrics, *, copy_model: bool = True) -> None:
        # the service changes its model (config, eval mode, dtype): its own copy, unless handed over
        self.model, self.dtype = serving_model(model, settings, copy=copy_model)
        self.settings = settings
        self.metrics = metrics
        self.max_length = int(settings.max_length or self.model.config.max_length)
        self.measure = TextMeasure(self.model)
        self.engine = BatchingEngine(self.model, settings, metrics, dtype=self.dtype)
        # token counting/chunking runs off the event loop on one thread of its own (TextMeasure is not
        # thread-safe), in parallel with the model's worker thread
        self._prep = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jingpai-rerank-prep")
        #: the embedding routes' side of the service: same model, engine, limits and preparation thread
        self.embedder = TextEmbedder(self.model, settings, self.engine, self._prep, max_length=self.max_length)
        #: the loaded folder's identity (what ``jingpai index --vectors`` records), hashed once at start-up and only for a
        #: model that embeds (a cross-encoder's vectors are never searched); ``None``: not loaded from a folder, or no vectors
        self._foreign_versions: set[str] = set()  # dictionary versions whose keywords were refused (logged once each)
        self.model_identity = (model_id(Path(settings.model_dir))
                               if settings.model_dir and Path(settings.model_dir).is_dir() and self.embedder.dim else None)

    @property
    def model_name(self) -> str:
        """The served name (``settings.model_name``, else the architecture)."""
        return self.settings.model_name or self.model.name

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """Scores in [0, 1]: sigmoid of a one-logit head; probability-like scores pass through."""
        if self.model.num_labels == 1:
            return (1.0 / (1.0 + np.exp(-raw.astype(np.float64)))).astype(np.float32)
        return raw

    def check(self, query: str, documents: Sequence[str], *, query_field: str, docs_field: str) -> None:
        """Apply the per-request limits.

        Raises:
            PayloadTooLargeError: more than ``max_docs`` documents.
            InvalidInputError: empty document list, or a query over ``max_query_chars``.
        """
        s = self.settings
        if len(documents) > s.max_docs:
            raise PayloadTooLargeError(
                f"{docs_field} holds {len(documents)} documents; the limit is max_docs={s.max_docs} ({LIMIT_SOURCE['max_docs']})"
            )
        if not documents:
            raise InvalidInputError(f"{docs_field} must hold at least one document")
        if len(query) > s.max_query_chars:
            raise InvalidInputError(
                f"{query_field} is {len(query)} characters long; the limit is max_query_chars={s.max_query_chars} "
                f"({LIMIT_SOURCE['max_query_chars']})"
            )

    def _too_long(self, docs_field: str, i: int, size: str) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"{docs_field}[{i}] is {size} tokens together with the query; the limit is max_length={self.max_length} "
            f"({LIMIT_SOURCE['max_length']}); send truncate=true to cut it"
        )

    def _prepare(
        self, query: str, documents: Sequence[str], *, truncate: bool, chunks: int, doc_tokens: int | None, docs_field: str,
        cut: CutSide = "right",
    ) -> tuple[list[Pair], list[int], list[int], list[Any] | None]:
        """Pairs to score, their padded lengths, the document each pair belongs to, and each pair's
        encoding where its token ids are already known (``None``: the model tokenizes the text)."""
        m = self.measure
        budget = self.max_length - m.pair_overhead
        caps = functools.partial(self._caps, chunks=chunks, doc_tokens=doc_tokens, truncate=truncate)
        if chunks == 1 and cut == "right":
            # the query (whole: it is at most max_query_chars long) and the documents in one read; a query has at most
            # as many tokens as characters, which bounds the documents' cap
            q_cut, truncated = m.cut_request(query, documents, doc_cap=lambda q: caps(q)[2], most=max(caps(0)[2], caps(len(query))[2]))
        else:
            (q_cut,), truncated = m.cut_encodings([query], cap=1 << 30), None
        q_tokens, _end, q_more, q_enc = q_cut
        q_len = q_tokens + q_more
        if cut == "left" and chunks == 1:
            return (*self._prepare_left(query, q_len, documents, truncate=truncate, docs_field=docs_field), None)
        room, stride, doc_cap = caps(q_len)
        pairs: list[Pair] = []
        lengths: list[int] = []
        owner: list[int] = []
        # a document's measured token ids become the pair's input where the model reads them (not chunks:
        # their windows are new texts)
        encodings: list[Any] | None = [] if m.joins and chunks == 1 and q_enc is not None else None
        # chunking needs every token's span (of the document's end for cut=left); plain truncation only needs
        # where the kept tokens end
        if chunks > 1:
            measured: list = (m.tail_spans if cut == "left" else m.spans)(documents, cap=doc_cap)
        else:
            measured = [(None, *kept) for kept in (truncated if truncated is not None else m.cut_encodings(documents, cap=doc_cap))]
        for i, (doc, measure) in enumerate(zip(documents, measured, strict=True)):
            if chunks > 1:
                spans, more = measure
                n_tokens, end = len(spans), (spans[-1][1] if spans else 0)
            else:
                spans, n_tokens, end, more, d_enc = measure
                if encodings is not None:
                    encodings.append(None if d_enc is None else m.join((q_tokens, q_enc), (n_tokens, d_enc)))
            d_len = n_tokens + more
            if more:
                # the model would cut the tail anyway (the first max_length tokens decide the truncated pair): cut here to
                # spare tokenizing it again, unless the model reads the whole text (a keyword model's top k)
                doc = doc[:end] if doc_tokens is not None or not self.model.reads_whole_text else doc
                if doc_tokens is not None and n_tokens == doc_tokens:
                    d_len = doc_tokens
            if not truncate and q_len + d_len > budget:
                size = f"more than {self.max_length}" if more and doc_tokens is None else str(q_len + d_len + m.pair_overhead)
                raise self._too_long(docs_field, i, size)
            if chunks > 1 and d_len > room:
                for part in m.windows(doc, spans, size=room, stride=stride, limit=chunks):
                    pairs.append((query, part))
                    lengths.append(min(q_len + room, budget) + m.pair_overhead)
                    owner.append(i)
                continue
            pairs.append((query, doc))
            lengths.append(min(q_len + d_len, budget) + m.pair_overhead)
            owner.append(i)
        return pairs, lengths, owner, encodings

    def _caps(self, q_len: int, *, chunks: int, doc_tokens: int | None, truncate: bool) -> tuple[int, int, int]:
        """``(room, stride, doc_cap)`` next to a query of ``q_len`` tokens: room for a document (longest-first truncation
        never cuts the query below half the budget, so neither does chunking), the chunks' stride, the tokens to measure."""
        budget = self.max_length - self.measure.pair_overhead
        room = max(budget - min(q_len, budget // 2), 1)
        stride = max(room - room // 8, 1)
        return room, stride, self._doc_cap(q_len, chunks=chunks, doc_tokens=doc_tokens, room=room, stride=stride, truncate=truncate)

    def _doc_cap(self, q_len: int, *, chunks: int, doc_tokens: int | None, room: int, stride: int, truncate: bool = True) -> int:
        """Tokens of a document worth measuring: what the pair, or its ``chunks`` windows, can hold."""
        # a cut document must stay longer than the query whenever the whole one was: longest-first truncation
        # gives the odd token to the longer side, so otherwise the pair would differ from the uncut one
        # (past ``room`` tokens, or the query's length, a document's length changes nothing longest-first keeps of
        # either side; a refused one is measured to max_length, for the error's exact size): only where the measure is
        # the model's own pair cut (joined token ids); other models read each text to their own length
        tight = truncate and self.measure.joins
        doc_cap = max(room if tight else self.max_length, q_len + 1) if doc_tokens is None else min(doc_tokens, self.max_length)
        if chunks > 1:
            doc_cap = max(doc_cap, room + stride * (chunks - 1))
        return doc_cap if doc_tokens is None else min(doc_cap, doc_tokens)

    def _prepare_left(
        self, query: str, q_len: int, documents: Sequence[str], *, truncate: bool, docs_field: str
    ) -> tuple[list[Pair], list[int], list[int]]:
        """:meth:`_prepare` for ``cut=left`` without chunks: a document over the budget keeps its last tokens.

        Both sides are cut here to what longest-first truncation keeps (the query, if cut, keeps its start),
        so the model's own truncation (which cuts the right end) has nothing left to cut.
        """
        m = self.measure
        budget = self.max_length - m.pair_overhead
        # past this many tokens a document's length no longer changes what longest-first keeps of either side
        measured = m.tail_spans(documents, cap=max(self.max_length, q_len + 1))
        pairs: list[Pair] = []
        keeps: list[int] = []
        q_spans: list[tuple[int, int]] | None = None
        for i, (doc, (spans, more)) in enumerate(zip(documents, measured, strict=True)):
            d_len = len(spans) + more
            if not truncate and q_len + d_len > budget:
                raise self._too_long(docs_field, i, f"more than {self.max_length}" if more else str(q_len + d_len + m.pair_overhead))
            q_keep, d_keep = longest_first(q_len, d_len, budget)
            q = query
            if q_keep < q_len:
                q_spans = q_spans if q_spans is not None else m.spans([query], cap=q_len)[0][0]
                q = query[: q_spans[q_keep - 1][1]] if q_keep else ""
            if d_keep < d_len:
                doc = doc[spans[len(spans) - d_keep][0] :] if d_keep else ""
            pairs.append((q, doc))
            keeps.append(d_keep)
        self._settle_left_cuts(pairs, keeps)
        return pairs, [min(q_len + k, budget) + m.pair_overhead for k in keeps], list(range(len(documents)))

    def _settle_left_cuts(self, pairs: list[Pair], keeps: list[int]) -> None:
        """Re-cut documents whose cut tokenizes into more than their kept tokens (a cut inside a word can
        split it differently), so that the model's right-side truncation never cuts their end."""
        for _ in range(3):
            over = [i for i, n in enumerate(self.measure.lengths([d for _, d in pairs], cap=max(keeps, default=0))) if n > keeps[i]]
            if not over:
                return
            for i, (spans, _more) in zip(over, self.measure.tail_spans([pairs[i][1] for i in over], cap=max(keeps[i] for i in over))):
                q, doc = pairs[i]
                tail = spans[-keeps[i] :] if keeps[i] else []
                pairs[i] = (q, doc[tail[0][0] :] if tail else "")

    async def score(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = True,
        max_chunks: int | None = None,
        doc_tokens: int | None = None,
        query_field: str = "query",
        docs_field: str = "documents",
        cut: CutSide = "right",
        keywords: GivenKeywords | None = None,
    ) -> np.ndarray:
        """Raw scores of ``documents`` against ``query``, in input order.

        Args:
            query, documents: the request.
            truncate: ``False`` rejects pairs longer than ``max_length`` (413) instead of cutting them.
            max_chunks: chunks per long document (``None``: the service's ``long_docs`` setting; capped by
                ``max_chunks_per_doc``).
            doc_tokens: cut each document to this many tokens first (Cohere v2 ``max_tokens_per_doc``).
            query_field, docs_field: field names used in error messages.
            cut: which end of a document over the budget is cut (TEI's ``truncation_direction``); with
                chunks, ``left`` scores the chunks of the document's end.
            keywords: the documents' dictionary keywords where known (a keyword model takes them, see
                :meth:`~jingpai.reranker.base.Reranker.give_keywords`).
        """
        self.check(query, documents, query_field=query_field, docs_field=docs_field)
        if keywords is not None:
            self._give_keywords(documents, keywords)
        if max_chunks is None:
            max_chunks = self.settings.max_chunks_per_doc if self.settings.long_docs == "max-chunks" else 1
        max_chunks = max(1, min(max_chunks, self.settings.max_chunks_per_doc))
        # tokenizing a large request takes a while: keep it off the event loop
        prepare = functools.partial(
            self._prepare, query, documents, truncate=truncate, chunks=max_chunks, doc_tokens=doc_tokens, docs_field=docs_field, cut=cut
        )
        pairs, lengths, owner, encodings = await asyncio.get_running_loop().run_in_executor(self._prep, prepare)
        raw = await self.engine.score(pairs, lengths, encodings=encodings)
        if len(pairs) == len(documents):
            return raw
        best = np.full(len(documents), -np.inf, dtype=np.float32)
        np.maximum.at(best, np.asarray(owner), raw)
        return best

    def _give_keywords(self, documents: Sequence[str], keywords: GivenKeywords) -> None:
        """Hand the request's known keywords to the model; a dictionary other than the model's is logged (once per
        version): its keywords are not the model's, so the model finds its own, as without them."""
        taken = self.model.give_keywords(documents, keywords.words, version=keywords.dictionary_version, top_k=keywords.top_k)
        self.metrics.given_keywords(taken=taken, sent=sum(w is not None for w in keywords.words))
        own = self.model.keyword_dict_version
        if not taken and own is not None and keywords.dictionary_version != own and keywords.dictionary_version not in self._foreign_versions:
            self._foreign_versions.add(keywords.dictionary_version)
            logger.warning(
                "keywords sent with the texts were ranked with dictionary %s, not the model's %s: the model finds its own "
                "(reindex with the model's dictionary and --rerank-keywords to spare that work)", keywords.dictionary_version, own,
            )

    async def search_units(self, query: str, documents: Sequence[str], *, doc_tokens: int | None = None) -> int:
        """Cohere's ``billed_units.search_units`` of a request (:data:`SEARCH_UNIT_DOCS`, :data:`SEARCH_UNIT_TOKENS`).

        Documents are counted in this model's tokens, cut to ``doc_tokens`` first where given.
        """

        def count() -> int:
            q_len = self.measure.lengths([query])[0]
            # the tokenizer takes a C long: a larger max_tokens_per_doc (valid JSON) counts every token, as no cap does
            d_lens = self.measure.lengths(documents, cap=min(doc_tokens, 1 << 30) if doc_tokens is not None else 1 << 30)
            docs = sum(max(1, math.ceil((q_len + min(d, doc_tokens or d)) / SEARCH_UNIT_TOKENS)) for d in d_lens)
            return max(1, math.ceil(docs / SEARCH_UNIT_DOCS))

        return await asyncio.get_running_loop().run_in_executor(self._prep, count)

    async def start(self) -> None:
        """Warm the model up (unless ``settings.warmup`` is off)."""
        if self.settings.warmup:
            await self.engine.warmup()

    async def close(self) -> None:
        """Stop the batching engine and the preparation thread."""
        await self.engine.close()
        self._prep.shutdown(wait=False, cancel_futures=True)


__all__ = ["SEARCH_UNIT_DOCS", "SEARCH_UNIT_TOKENS", "CutSide", "RerankService"]
