"""The mapping jingpai owns, and the ``_meta`` record that tells other components which field plays which role.

For each configured text field ``f`` the index holds:

- ``f`` — the raw text, engine ``standard`` analyzer (splits Han text into characters, so queries sent
  straight to the engine still match);
- ``jingpai.seg.f`` — the dictionary segmentation, whitespace-analyzed;

and once per document:

- ``jingpai.keywords`` — the document's dictionary keywords (``keyword`` type, for filters/terms/aggs);
- ``jingpai.kw`` — keyword weights (diff-idf × tf). ``rank_features`` when the engine has the
  ``mapper-extras`` module; otherwise (integ-test distributions) a whitespace text field where each keyword is
  repeated 1–:data:`TF_SCALE` times in proportion to its weight, so BM25's tf carries the weight;
- ``jingpai.entity_scores`` — room for per-entity model relevance written later by the reranker
  (``rank_features``, or ``nested`` ``{entity, score}`` without mapper-extras);
- ``jingpai.vector`` — with ``jingpai index --vectors MODEL`` only: the document's unit vector from a
  bi-encoder, HNSW-indexed (:meth:`Engine.vector_mapping <jingpai.engine.client.Engine.vector_mapping>`);
  ``_meta`` records the model's id (folder name @ hash of its config and weights), the dimension and the
  chunking, so the gateway can tell which model must embed the queries for this index;
- ``jingpai.rk`` — with ``jingpai index --rerank-keywords`` only: the keywords of the text the gateway sends the
  reranker, with that text's digest (:mod:`jingpai.indexer.rerank_keywords`), stored but not indexed.

``_meta.jingpai`` records all of this plus the dictionary and jingpai versions; :func:`read_meta`
gives it back to the gateway.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Literal

from jingpai import __version__
from jingpai.engine.client import Engine
from jingpai.engine.vectors import VectorIndex
from jingpai.errors import UserError
from jingpai.indexer.rerank_keywords import RerankKeywords

logger = logging.getLogger(__name__)

META_KEY = "jingpai"
SCHEMA_VERSION = 1
TF_SCALE = 10

WeightEncoding = Literal["rank_features", "term_frequency"]
EntityEncoding = Literal["rank_features", "nested"]


class NotAJingpaiIndexError(UserError, LookupError):
    """The index exists but was not built by ``jingpai index`` (no ``_meta.jingpai``)."""


@dataclass(frozen=True)
class IndexMeta:
    """Which field plays which role in an index built by jingpai (stored in the mapping's ``_meta``)."""

    text_fields: tuple[str, ...]
    dict_version: str | None
    weight_encoding: WeightEncoding
    entity_encoding: EntityEncoding
    id_field: str | None = None
    jingpai_version: str = __version__
    schema: int = SCHEMA_VERSION
    keywords_field: str = "jingpai.keywords"
    weights_field: str = "jingpai.kw"
    entity_field: str = "jingpai.entity_scores"
    seg_fields: dict[str, str] = field(default_factory=dict)
    #: with vectors: the field, the model's id (``<folder>@<hash>``), its folder when indexed, the
    #: dimension and how long documents were embedded (``first`` / ``mean``); all ``None`` without
    vector_field: str | None = None
    vector_model: str | None = None
    vector_model_path: str | None = None
    vector_dims: int | None = None
    vector_chunking: str | None = None
    #: how the engine indexes them (``hnsw`` / ``flat``); ``None`` without vectors, and in indices built before it was
    #: recorded (which are all HNSW)
    vector_index: VectorIndex | None = None
    #: with ``--rerank-keywords``: how each document's keywords of its rerank text were found (``None``: not stored)
    rerank_keywords: RerankKeywords | None = None

    def __post_init__(self) -> None:
        if not self.seg_fields:
            object.__setattr__(self, "seg_fields", {f: f"jingpai.seg.{f}" for f in self.text_fields})

    def to_dict(self) -> dict:
        data = asdict(self)
        data["text_fields"] = list(self.text_fields)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> IndexMeta:
        data = dict(data)
        data["text_fields"] = tuple(data["text_fields"])
        if data.get("rerank_keywords") is not None:
            data["rerank_keywords"] = RerankKeywords.from_dict(data["rerank_keywords"])
        return cls(**data)


def engine_encodings(engine: Engine) -> tuple[WeightEncoding, EntityEncoding]:
    """``rank_features`` when the engine has ``mapper-extras``; the core-only fallbacks otherwise."""
    if "mapper-extras" in engine.modules():
        return "rank_features", "rank_features"
    logger.info(
        "%s at %s has no mapper-extras module (rank_features): keyword weights use term-frequency encoding, "
        "entity scores a nested field",
        engine.kind,
        engine.url,
    )
    return "term_frequency", "nested"


VECTOR_FIELD = f"{META_KEY}.vector"


def build_mapping(meta: IndexMeta, *, vector_mapping: dict | None = None) -> dict:
    """The full ``mappings`` body for a new physical index.

    Args:
        meta: the index's roles, stored in ``_meta``.
        vector_mapping: the engine's mapping of ``meta.vector_field``
            (:meth:`~jingpai.engine.client.Engine.vector_mapping`); needed exactly when the meta has vectors.
    """
    if (meta.vector_field is None) != (vector_mapping is None):
        raise ValueError(f"vector field {meta.vector_field!r} and its mapping ({vector_mapping!r}) go together")
    seg = {f: {"type": "text", "analyzer": "whitespace"} for f in meta.text_fields}
    if meta.weight_encoding == "rank_features":
        kw: dict = {"type": "rank_features"}
    else:
        kw = {"type": "text", "analyzer": "whitespace", "index_options": "freqs", "norms": False}
    if meta.entity_encoding == "rank_features":
        entities: dict = {"type": "rank_features"}
    else:
        entities = {"type": "nested", "properties": {"entity": {"type": "keyword"}, "score": {"type": "float"}}}
    return {
        "_meta": {META_KEY: meta.to_dict()},
        "properties": {
            **{f: {"type": "text", "analyzer": "standard"} for f in meta.text_fields},
            META_KEY: {
                "properties": {
                    "seg": {"properties": seg},
                    "keywords": {"type": "keyword"},
                    "kw": kw,
                    "entity_scores": entities,
                    # read back with the hit (the gateway sends them to the reranker), never searched
                    **({"rk": {"type": "object", "enabled": False}} if meta.rerank_keywords is not None else {}),
                    **({"vector": vector_mapping} if vector_mapping is not None else {}),
                }
            },
        },
    }


def encode_weights(weights: dict[str, float], encoding: WeightEncoding) -> dict[str, float] | str:
    """Keyword weights in the shape the weights field stores them."""
    clean = {word.replace(" ", "_"): w for word, w in weights.items() if w > 0}
    if encoding == "rank_features":
        # rank_features keys may not contain dots (they would become object paths)
        return {word.replace(".", "_"): w for word, w in clean.items()}
    if not clean:
        return ""
    top = max(clean.values())
    return " ".join(" ".join([word] * max(1, round(TF_SCALE * w / top))) for word, w in clean.items())


def read_meta(engine: Engine, index: str) -> IndexMeta:
    """The :class:`IndexMeta` of an index or alias (the newest physical index if several).

    Raises:
        NotAJingpaiIndexError: the index has no ``_meta.jingpai``.
    """
    mappings = engine.get_mapping(index)
    for physical in sorted(mappings, reverse=True):
        meta = (mappings[physical].get("mappings") or {}).get("_meta", {}).get(META_KEY)
        if meta:
            return IndexMeta.from_dict(meta)
    raise NotAJingpaiIndexError(f"index {index!r} was not built by `jingpai index` (no _meta.{META_KEY} in its mapping)")


__all__ = [
    "VECTOR_FIELD",
    "IndexMeta",
    "NotAJingpaiIndexError",
    "build_mapping",
    "encode_weights",
    "engine_encodings",
    "read_meta",
]
