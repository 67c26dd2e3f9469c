"""Index-time entity relevance: score each document's title entities against its body, store the scores.

For every document of an index built by ``jingpai index``, the entities of its title — its stored
``jingpai.keywords`` (``entities="keywords"``) or the dictionary keywords of the title alone
(``entities="title-keywords"``) — are scored against its body with a saved jingpai model. Models with a
query-independent document side (``bertca``: :meth:`~jingpai.reranker.models.bertca.BertCAReranker.encode_documents`
+ :meth:`~jingpai.reranker.models.bertca.BertCAReranker.predict_encoded`) encode each body once and
score all its entities against that encoding; any other model goes through ``predict`` pair by pair.

The scores are written back with bulk partial ``update`` actions into the index's
``jingpai.entity_scores`` field, whose shape :mod:`jingpai.indexer.mapping` chose when the index was
built:

- ``rank_features`` (engine with ``mapper-extras``): ``{"<entity>": score}`` — spaces and dots in the
  entity become ``_`` (:func:`feature_key`), values are floored at :data:`MIN_FEATURE` because the
  field stores strictly positive values only (with ~9 bits of mantissa precision);
- ``nested`` (integ-test distributions): ``[{"entity": "<entity>", "score": score}, …]``.

A plain ``_search`` sent straight to the engine then ranks by that relevance with the clause
:func:`entity_query` builds (``rank_feature``, or ``nested`` + ``function_score`` / ``field_value_factor``,
core features only, no scripts).

Example:
    >>> engine = connect("http://127.0.0.1:9200")                                        # doctest: +SKIP
    >>> model = Reranker.load("runs/bertca")                                             # doctest: +SKIP
    >>> score_entities(engine, model, EntityScoreSettings(index="news"))                  # doctest: +SKIP
    >>> engine.search("news", {"query": entity_query(read_meta(engine, "news"), "万科")})  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np

from jingpai.engine.client import Engine
from jingpai.indexer.mapping import META_KEY, IndexMeta, read_meta
from jingpai.indexer.pipeline import batches

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary
    from jingpai.reranker.base import Reranker

logger = logging.getLogger(__name__)

EntitySource = Literal["keywords", "title-keywords"]
ENTITY_SOURCES: tuple[str, ...] = get_args(EntitySource)
#: smallest value written to a ``rank_features`` field (the engine rejects zero and negative values)
MIN_FEATURE = 1e-6


class EntityScoringError(RuntimeError):
    """Entity scoring cannot run on this index (bad field choice, missing dictionary, engine failure)."""


@dataclass(frozen=True)
class EntityScoreSettings:
    """Options of one ``jingpai index score-entities`` run.

    Args:
        index: alias or index built by ``jingpai index``.
        entities: ``keywords`` — the document's stored ``jingpai.keywords`` (best first);
            ``title-keywords`` — dictionary keywords of the title (needs the dictionary).
        title_field: field whose entities are scored (``None``: the index's first text field).
        body_field: field they are scored against (``None``: the index's second text field).
        max_entities: entities scored per document (best first).
        batch_size: documents per model batch and per bulk request.
        model_batch_size: pairs (or encodings) per forward pass.
        progress: log progress every ``batch_size`` documents at INFO level.
    """

    index: str
    entities: EntitySource = "keywords"
    title_field: str | None = None
    body_field: str | None = None
    max_entities: int = 10
    batch_size: int = 64
    model_batch_size: int = 32
    progress: bool = True

    def __post_init__(self) -> None:
        if self.entities not in ENTITY_SOURCES:
            raise ValueError(f"unknown entity source {self.entities!r}; expected one of {', '.join(ENTITY_SOURCES)}")
        for name in ("max_entities", "batch_size", "model_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


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


def feature_key(entity: str) -> str:
    """The ``rank_features`` key of ``entity`` (dots would become object paths, spaces are awkward in queries)."""
    return entity.strip().replace(" ", "_").replace(".", "_")


def encode_entity_scores(scores: dict[str, float], meta: IndexMeta) -> dict[str, float] | list[dict]:
    """Entity scores in the shape the index's ``jingpai.entity_scores`` field stores them.

    Args:
        scores: ``{entity: relevance}``.
        meta: the index's :class:`~jingpai.indexer.mapping.IndexMeta`.

    Returns:
        ``{feature_key: score ≥ MIN_FEATURE}`` for ``rank_features``; ``[{"entity", "score"}, …]`` for ``nested``.
    """
    if meta.entity_encoding == "rank_features":
        return {feature_key(e): max(float(s), MIN_FEATURE) for e, s in scores.items() if feature_key(e)}
    return [{"entity": e, "score": float(s)} for e, s in scores.items()]


def entity_query(meta: IndexMeta, entity: str, *, boost: float = 1.0) -> dict:
    """A query clause that matches documents scored for ``entity`` and scores them by that relevance.

    Use it alone or as a ``should`` clause next to the text query of a plain engine ``_search``.

    Args:
        meta: the index's :class:`~jingpai.indexer.mapping.IndexMeta` (:func:`read_meta`).
        entity: the query entity (as written by :func:`score_entities`).
        boost: weight of the clause.

    Returns:
        ``rank_features`` indices: ``{"rank_feature": {"field": "jingpai.entity_scores.<entity>"}}`` (saturation
        function, monotonic in the stored score). ``nested`` indices: a ``nested`` query whose inner
        ``function_score`` keeps the entity's row and replaces its score with ``field_value_factor`` on
        ``jingpai.entity_scores.score`` — so ``_score`` is the stored relevance × ``boost``.

    Raises:
        ValueError: ``entity`` is empty.

    Example:
        >>> meta = IndexMeta(text_fields=("title", "content"), dict_version=None,
        ...                  weight_encoding="term_frequency", entity_encoding="nested")
        >>> entity_query(meta, "万科")["nested"]["path"]
        'jingpai.entity_scores'
    """
    if not entity or not entity.strip():
        raise ValueError("entity must be a non-empty string")
    if meta.entity_encoding == "rank_features":
        return {"rank_feature": {"field": f"{meta.entity_field}.{feature_key(entity)}", "boost": boost}}
    return {
        "nested": {
            "path": meta.entity_field,
            "score_mode": "max",
            "query": {
                "function_score": {
                    "query": {"term": {f"{meta.entity_field}.entity": entity.strip()}},
                    "field_value_factor": {"field": f"{meta.entity_field}.score", "missing": 0},
                    "boost_mode": "replace",
                    "boost": boost,
                }
            },
        }
    }


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
        self.precomputed = callable(getattr(model, "encode_documents", None)) and callable(getattr(model, "predict_encoded", None))
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
    segmenter = None
    if settings.entities == "title-keywords":
        if dictionary is None:
            raise EntityScoringError("entities='title-keywords' needs the keyword dictionary (--dict DIR)")
        if meta.dict_version is not None and dictionary.version != meta.dict_version:
            logger.warning(
                "dictionary version %s differs from the one index %s was built with (%s); title keywords come from %s",
                dictionary.version, settings.index, meta.dict_version, dictionary.version,
            )
        from jingpai.keyword_dict import Segmenter

        segmenter = Segmenter(dictionary)
    scorer = EntityScorer(model, batch_size=settings.model_batch_size)
    report = EntityScoreReport(index=settings.index, precomputed=scorer.precomputed)
    entity_field = meta.entity_field.split(".", 1)[1] if meta.entity_field.startswith(f"{META_KEY}.") else meta.entity_field

    def skip(reason: str) -> None:
        report.skipped[reason] = report.skipped.get(reason, 0) + 1

    def entities_of(source: dict) -> list[str]:
        if settings.entities == "keywords":
            stored = _source_path(source, meta.keywords_field) or []
            words = [stored] if isinstance(stored, str) else list(stored)
        else:
            from jingpai.keyword_dict import extract_keywords

            title = source.get(title_field)
            if not isinstance(title, str) or not title:
                return []
            words = [w for w, _ in extract_keywords(title, dictionary, top_k=settings.max_entities, segmenter=segmenter)]
        seen = dict.fromkeys(w for w in words if isinstance(w, str) and w.strip())
        return list(seen)[: settings.max_entities]

    def actions() -> Iterator[dict]:
        hits = engine.scan(settings.index, source=[title_field, body_field, meta.keywords_field, meta.entity_field])
        for chunk in batches(hits, settings.batch_size):
            todo: list[tuple[dict, list[str], str]] = []
            for hit in chunk:
                report.documents += 1
                source = hit.get("_source") or {}
                body = source.get(body_field)
                if not isinstance(body, str) or not body.strip():
                    skip(f"no {body_field}")
                    continue
                entities = entities_of(source)
                if not entities:
                    skip("no entities")
                    continue
                todo.append((hit, entities, body))
            scores = scorer.score([(entities, body) for _, entities, body in todo])
            for (hit, entities, _), values in zip(todo, scores, strict=True):
                report.pairs += len(entities)
                encoded = encode_entity_scores(dict(zip(entities, values.tolist(), strict=True)), meta)
                previous = _source_path(hit.get("_source") or {}, meta.entity_field)
                if isinstance(previous, dict) and set(previous) - set(encoded):
                    # a partial update merges objects key by key: clear stale rank_features first
                    yield {"_op_type": "update", "_index": hit["_index"], "_id": hit["_id"],
                           "doc": {META_KEY: {entity_field: None}}}
                yield {"_op_type": "update", "_index": hit["_index"], "_id": hit["_id"],
                       "doc": {META_KEY: {entity_field: encoded}}}
            if settings.progress:
                logger.info("entity scores: %d documents read, %d pairs scored", report.documents, report.pairs)

    written: set[str] = set()
    for ok, item in engine.bulk(actions(), chunk_size=settings.batch_size):
        (op,) = item.values()
        doc_id = str(op.get("_id"))
        if ok:
            written.add(doc_id)
        else:
            err = op.get("error") or {}
            reason = f"{err.get('type', 'error')}: {err.get('reason', '')}" if isinstance(err, dict) else str(err)
            report.failed[doc_id] = reason
            logger.warning("engine rejected the entity-score update of document %s: %s", doc_id, reason)
    report.updated = len(written - set(report.failed))
    for physical in sorted(engine.get_mapping(settings.index)):
        engine.refresh(physical)
    report.seconds = time.perf_counter() - started
    return report


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
