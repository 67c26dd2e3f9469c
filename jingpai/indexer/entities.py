"""The ``jingpai.entity_scores`` field: how entity relevance is stored and queried.

Entity scores (written by :mod:`jingpai.jobs.entity_scores`) live in the index's
``jingpai.entity_scores`` field, whose shape :mod:`jingpai.indexer.mapping` chose when the index was
built:

- ``rank_features`` (engine with ``mapper-extras``): ``{"<entity>": score}`` — spaces and dots in the
  entity become ``_`` (:func:`feature_key`), values are floored at :data:`MIN_FEATURE` because the
  field stores strictly positive values only (with ~9 bits of mantissa precision);
- ``nested`` (integ-test distributions): ``[{"entity": "<entity>", "score": score}, …]``.

A plain ``_search`` sent straight to the engine ranks by that relevance with the clause
:func:`entity_query` builds (``rank_feature``, or ``nested`` + ``function_score`` / ``field_value_factor``,
core features only, no scripts).
"""

from __future__ import annotations

from jingpai.indexer.mapping import IndexMeta

#: smallest value written to a ``rank_features`` field (the engine rejects zero and negative values)
MIN_FEATURE = 1e-6



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


__all__ = ["MIN_FEATURE", "encode_entity_scores", "entity_query", "feature_key"]
