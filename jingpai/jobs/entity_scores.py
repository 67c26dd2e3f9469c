"""Index-time entity relevance: score each document's title entities against its body, store the scores.

For every document of an index built by ``jingpai index``, the entities of its title — its stored
``jingpai.keywords`` (``entities="keywords"``) or the dictionary keywords of the title alone
(``entities="title-keywords"``) — are scored against its body with a saved jingpai model. Models with a
query-independent document side (``bertca``: :meth:`~jingpai.reranker.models.bertca.BertCAReranker.encode_documents`
+ :meth:`~jingpai.reranker.models.bertca.BertCAReranker.predict_encoded`) encode each body once and
score all its entities against that encoding; any other model goes through ``predict`` pair by pair.

The scores are written back with bulk partial ``update`` actions into the index's
``jingpai.entity_scores`` field, in the shape :mod:`jingpai.indexer.entities` describes; a plain
``_search`` then ranks by that relevance with :func:`~jingpai.indexer.entities.entity_query`.

Example:
    >>> engine = connect("http://127.0.0.1:9200")                                        # doctest: +SKIP
    >>> model = Reranker.load("runs/bertca")                                             # doctest: +SKIP
    >>> score_entities(engine, model, EntityScoreSettings(index="news"))                  # doctest: +SKIP
    >>> engine.search("news", {"query": entity_query(read_meta(engine, "news"), "万科")})  # doctest: +SKIP

:data:`MIN_FEATURE`, :func:`encode_entity_scores`, :func:`entity_query` and :func:`feature_key` are
re-exported from :mod:`jingpai.indexer.entities`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from jingpai.engine.client import Engine
from jingpai.errors import UserError
from jingpai.indexer.bulk import batches
from jingpai.indexer.entities import MIN_FEATURE, encode_entity_scores, entity_query, feature_key
from jingpai.indexer.mapping import META_KEY, IndexMeta, read_meta
from jingpai.jobs.entity_settings import ENTITY_SOURCES, EntityScoreSettings, EntitySource

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary, KeywordExtractor
    from jingpai.reranker.base import Reranker

logger = logging.getLogger(__name__)



class EntityScoringError(UserError, RuntimeError):
    """Entity scoring cannot run on this index (bad field choice, missing dictionary, engine failure)."""


@dataclass
class EntityScoreReport:
    """What one run did.

    Attributes:
        index: the alias/index scored.
        documents: documents read.
        updated: documents whose entity scores were written.
        skipped: documents without entities or without a body, by reason.
        failed: bulk updates the engine rejected, ``{doc id: reason}``.
        pairs: (entity, body) pairs scored.
        precomputed: whether the model's precomputed-document path was used.
        seconds: wall time.
    """

    index: str
    documents: int = 0
    updated: int = 0
    pairs: int = 0
    precomputed: bool = False
    seconds: float = 0.0
    skipped: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        skipped = ", ".join(f"{k} ×{v}" for k, v in sorted(self.skipped.items())) or "none"
        path = "precomputed document encodings" if self.precomputed else "pairwise predict"
        return (
            f"{self.index}: read {self.documents} / updated {self.updated} / failed {len(self.failed)} / "
            f"{self.pairs} entity pairs ({path}) / skipped: {skipped} / {self.seconds:.1f} s"
        )


def _source_path(source: dict, dotted: str) -> object:
    node: object = source
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


class EntityScorer:
    """Scores entities against document bodies with a saved jingpai model.

    Uses the model's precomputed-document path (``encode_documents`` + ``predict_encoded``) when it has one,
    so each body is encoded once however many entities it has; otherwise ``predict`` on the pairs.
    """

    def __init__(self, model: Reranker, *, batch_size: int = 32) -> None:
        self.model = model
        self.batch_size = batch_size
        self.precomputed = (callable(getattr(model, "encode_documents", None)) and callable(getattr(model, "predict_encoded", None))
                            and getattr(model, "precomputes_documents", True))
        if not self.precomputed:
            logger.info(
                "%s model has no precomputed-document path (encode_documents/predict_encoded): "
                "scoring each (entity, body) pair with predict",
                model.name,
            )

    def score(self, items: Sequence[tuple[Sequence[str], str]]) -> list[np.ndarray]:
        """``[(entities, body), …]`` → one score array per item (aligned with its entities)."""
        flat_entities = [e for entities, _ in items for e in entities]
        if not flat_entities:
            return [np.zeros(0, dtype=np.float32) for _ in items]
        if self.precomputed:
            encodings = self.model.encode_documents([body for _, body in items], batch_size=self.batch_size)  # type: ignore[attr-defined]
            flat_enc = [enc for enc, (entities, _) in zip(encodings, items, strict=True) for _ in entities]
            flat = self.model.predict_encoded(flat_entities, flat_enc, batch_size=self.batch_size)  # type: ignore[attr-defined]
        else:
            pairs = [(e, body) for entities, body in items for e in entities]
            flat = self.model.predict(pairs, batch_size=self.batch_size)
        out, start = [], 0
        for entities, _ in items:
            out.append(np.asarray(flat[start : start + len(entities)], dtype=np.float32))
            start += len(entities)
        return out


def resolve_fields(meta: IndexMeta, settings: EntityScoreSettings) -> tuple[str, str]:
    """``(title field, body field)`` for this index.

    Raises:
        EntityScoringError: a field is not one of the index's text fields, or the index has only one.
    """
    fields = meta.text_fields
    title = settings.title_field or fields[0]
    if settings.body_field:
        body = settings.body_field
    elif len(fields) >= 2:
        body = fields[1]
    else:
        raise EntityScoringError(
            f"index {settings.index!r} has one text field ({fields[0]!r}); entity scoring needs a title and a body field"
        )
    for role, name in (("title", title), ("body", body)):
        if name not in fields:
            raise EntityScoringError(
                f"{role} field {name!r} is not a text field of index {settings.index!r}; expected one of {', '.join(fields)}"
            )
    if title == body:
        raise EntityScoringError(f"title and body field are both {title!r}; pick two different text fields")
    return title, body


def score_entities(
    engine: Engine,
    model: Reranker,
    settings: EntityScoreSettings,
    *,
    dictionary: Dictionary | None = None,
) -> EntityScoreReport:
    """Score every document's title entities against its body and write the scores to the index.

    Args:
        engine: the cluster (:func:`jingpai.engine.client.connect`).
        model: a saved jingpai model (``Reranker.load``); ``bertca`` uses precomputed document encodings.
        settings: the run's options.
        dictionary: the keyword dictionary; required for ``entities="title-keywords"``.

    Returns:
        An :class:`EntityScoreReport`; the index is refreshed when it returns.

    Raises:
        NotAJingpaiIndexError: the index was not built by ``jingpai index``.
        EntityScoringError: bad field choice, or ``title-keywords`` without a dictionary.
    """
    started = time.perf_counter()
    meta = read_meta(engine, settings.index)
    title_field, body_field = resolve_fields(meta, settings)
    keywords = _title_keywords(meta, settings, dictionary)
    scorer = EntityScorer(model, batch_size=settings.model_batch_size)
    run = _ScoringRun(meta, settings, scorer, keywords=keywords, title_field=title_field, body_field=body_field)
    hits = engine.scan(settings.index, source=[title_field, body_field, meta.keywords_field, meta.entity_field])
    written: set[str] = set()
    for ok, item in engine.bulk(run.actions(hits), chunk_size=settings.batch_size):
        (op,) = item.values()
        doc_id = str(op.get("_id"))
        if ok:
            written.add(doc_id)
        else:
            err = op.get("error") or {}
            reason = f"{err.get('type', 'error')}: {err.get('reason', '')}" if isinstance(err, dict) else str(err)
            run.report.failed[doc_id] = reason
            logger.warning("engine rejected the entity-score update of document %s: %s", doc_id, reason)
    run.report.updated = len(written - set(run.report.failed))
    for physical in sorted(engine.get_mapping(settings.index)):
        engine.refresh(physical)
    run.report.seconds = time.perf_counter() - started
    return run.report


def _title_keywords(meta: IndexMeta, settings: EntityScoreSettings, dictionary: Dictionary | None) -> KeywordExtractor | None:
    """The extractor of title entities for ``entities="title-keywords"`` (``None`` for ``keywords``)."""
    if settings.entities != "title-keywords":
        return None
    if dictionary is None:
        raise EntityScoringError("entities='title-keywords' needs the keyword dictionary (--dict DIR)")
    if meta.dict_version is not None and dictionary.version != meta.dict_version:
        logger.warning(
            "dictionary version %s differs from the one index %s was built with (%s); title keywords come from %s",
            dictionary.version, settings.index, meta.dict_version, dictionary.version,
        )
    from jingpai.keyword_dict import KeywordExtractor

    return KeywordExtractor(dictionary, top_k=settings.max_entities)


class _ScoringRun:
    """One :func:`score_entities` run: which entities each document has, and the update actions."""

    def __init__(
        self, meta: IndexMeta, settings: EntityScoreSettings, scorer: EntityScorer, *, keywords: KeywordExtractor | None,
        title_field: str, body_field: str,
    ) -> None:
        self.meta = meta
        self.settings = settings
        self.scorer = scorer
        self.keywords = keywords
        self.title_field = title_field
        self.body_field = body_field
        self.report = EntityScoreReport(index=settings.index, precomputed=scorer.precomputed)
        field_name = meta.entity_field
        self.entity_key = field_name.split(".", 1)[1] if field_name.startswith(f"{META_KEY}.") else field_name

    def skip(self, reason: str) -> None:
        self.report.skipped[reason] = self.report.skipped.get(reason, 0) + 1

    def entities_of(self, source: dict) -> list[str]:
        """The document's entities, best first, at most ``max_entities``."""
        if self.keywords is None:
            stored = _source_path(source, self.meta.keywords_field) or []
            words = [stored] if isinstance(stored, str) else list(stored)
        else:
            title = source.get(self.title_field)
            if not isinstance(title, str) or not title:
                return []
            words = self.keywords.words(title)
        seen = dict.fromkeys(w for w in words if isinstance(w, str) and w.strip())
        return list(seen)[: self.settings.max_entities]

    def actions(self, hits: Iterable[dict]) -> Iterator[dict]:
        """Bulk partial ``update`` actions writing the entity scores of ``hits``, one model batch at a time."""
        for chunk in batches(hits, self.settings.batch_size):
            yield from self._batch_actions(chunk)
            if self.settings.progress:
                logger.info("entity scores: %d documents read, %d pairs scored", self.report.documents, self.report.pairs)

    def _batch_actions(self, chunk: list[dict]) -> Iterator[dict]:
        todo: list[tuple[dict, list[str], str]] = []
        for hit in chunk:
            self.report.documents += 1
            source = hit.get("_source") or {}
            body = source.get(self.body_field)
            if not isinstance(body, str) or not body.strip():
                self.skip(f"no {self.body_field}")
                continue
            entities = self.entities_of(source)
            if not entities:
                self.skip("no entities")
                continue
            todo.append((hit, entities, body))
        scores = self.scorer.score([(entities, body) for _, entities, body in todo])
        for (hit, entities, _), values in zip(todo, scores, strict=True):
            self.report.pairs += len(entities)
            encoded = encode_entity_scores(dict(zip(entities, values.tolist(), strict=True)), self.meta)
            previous = _source_path(hit.get("_source") or {}, self.meta.entity_field)
            if isinstance(previous, dict) and set(previous) - set(encoded):
                # a partial update merges objects key by key: clear stale rank_features first
                yield {"_op_type": "update", "_index": hit["_index"], "_id": hit["_id"], "doc": {META_KEY: {self.entity_key: None}}}
            yield {"_op_type": "update", "_index": hit["_index"], "_id": hit["_id"], "doc": {META_KEY: {self.entity_key: encoded}}}


__all__ = [
    "ENTITY_SOURCES",
    "MIN_FEATURE",
    "EntityScoreReport",
    "EntityScoreSettings",
    "EntityScorer",
    "EntityScoringError",
    "EntitySource",
    "encode_entity_scores",
    "entity_query",
    "feature_key",
    "resolve_fields",
    "score_entities",
]
