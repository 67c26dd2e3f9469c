"""Dense vectors in Elasticsearch and OpenSearch: the field mapping, the index settings and the kNN query.

The engines differ here more than anywhere else jingpai touches, so the differences live in this one module
(:class:`~jingpai.engine.client.Engine` calls it; nobody else branches on the engine kind):

============== ================================================= =====================================================
\\               Elasticsearch 8                                   OpenSearch 2 (k-NN plugin)
============== ================================================= =====================================================
field          ``dense_vector``, ``index: true``,                ``knn_vector``, method ``hnsw`` on the ``lucene``
               ``similarity: dot_product``,                      engine, ``space_type: cosinesimil``, encoder ``sq``
               ``index_options.type: int8_hnsw``                 (Lucene's int8 scalar quantisation)
index setting  none                                              ``index.knn: true``
query          top-level ``knn`` (``k``, ``num_candidates``)     ``query.knn.<field>`` (``k``, ``ef_search``)
score          ``(1 + cos) / 2``                                 ``(1 + cos) / 2`` (Lucene's cosine)
``flat``       ``index_options.type: int8_flat``, same query     ``knn_vector`` without a method, no ``index.knn``;
               (exact: every vector compared)                    ``script_score`` with the plugin's
                                                                 ``cosineSimilarity``, ``(1 + cos) / 2``
============== ================================================= =====================================================

Why these choices:

- Both fields are HNSW graphs over int8-quantised vectors: a quarter of float32's memory for what the graph
  search reads, which is what bounds a node's vector capacity.
- Elasticsearch's ``dot_product`` requires unit-length vectors, which jingpai always writes (it normalises
  each vector); it skips the per-comparison normalisation ``cosine`` implies.
- OpenSearch's ``lucene`` engine is the one that runs on the k-NN plugin from Maven Central: that zip has no
  native libraries, and a ``faiss`` field kills the node at its first write (``UnsatisfiedLinkError: no
  opensearchknn_faiss_avx2 in java.library.path``; see docs/engines.md). ``cosinesimil`` gives the same score
  scale as Elasticsearch, so a fusion weight tuned on one engine holds on the other.
- ``flat`` (``jingpai index --vector-index flat``) builds no graph: indexing skips the HNSW build, which on a small
  machine costs the engine several times the text-only work, and every kNN search compares the query with every
  vector (exact, no recall lost). For the question and FAQ collections jingpai serves (thousands to ~100k
  documents) that search stays in milliseconds; past that, HNSW.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from jingpai.errors import UnavailableError, UserError

EngineKind = Literal["opensearch", "elasticsearch"]
#: how a vector field is indexed: an HNSW graph (approximate search) or none (``flat``: exact search)
VectorIndex = Literal["hnsw", "flat"]
VECTOR_INDEXES: tuple[VectorIndex, ...] = ("hnsw", "flat")

#: the name the OpenSearch node lists its k-NN plugin under (``GET _nodes/_local/plugins``)
KNN_PLUGIN = "opensearch-knn"
#: HNSW graph parameters (both engines' defaults, stated so both engines build the same graph)
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 100
#: the most dimensions both engines index (Elasticsearch 8: 4096; OpenSearch's lucene engine: 16000)
MAX_DIMS = 4096


class VectorsUnsupportedError(UnavailableError, RuntimeError):
    """The engine cannot index dense vectors (OpenSearch without its k-NN plugin); the message names the fix."""


class VectorSettingError(UserError, ValueError):
    """A vector dimension, ``k`` or ``num_candidates`` out of range; the message names the value and the range."""


def check_dims(dims: int) -> None:
    """Raise :class:`VectorSettingError` unless ``dims`` is in ``1..MAX_DIMS``."""
    if not 1 <= dims <= MAX_DIMS:
        raise VectorSettingError(f"vector dimension {dims} is outside 1..{MAX_DIMS} (what both engines index)")


def missing_support(kind: EngineKind, plugins: set[str]) -> str | None:
    """Why an engine of ``kind`` with ``plugins`` installed cannot index vectors (``None``: it can)."""
    if kind == "opensearch" and KNN_PLUGIN not in plugins:
        return (
            f"this OpenSearch has no k-NN plugin ({KNN_PLUGIN}), which knn_vector fields need; start a node with it "
            f"(`jingpai engine up --kind opensearch --plugins knn`) or install org.opensearch.plugin:{KNN_PLUGIN} "
            f"at the cluster's exact version"
        )
    return None


def check_index(index: str) -> None:
    """Raise :class:`VectorSettingError` unless ``index`` is one of :data:`VECTOR_INDEXES`."""
    if index not in VECTOR_INDEXES:
        raise VectorSettingError(f"unknown vector index {index!r}; expected one of {', '.join(VECTOR_INDEXES)}")


def field_mapping(kind: EngineKind, dims: int, *, index: VectorIndex = "hnsw") -> dict[str, Any]:
    """The mapping of a vector field of ``dims`` dimensions holding unit-length vectors, indexed as ``index``."""
    check_dims(dims)
    check_index(index)
    if kind == "elasticsearch":
        options = {"type": "int8_flat"} if index == "flat" else {"type": "int8_hnsw", "m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION}
        return {"type": "dense_vector", "dims": dims, "index": True, "similarity": "dot_product", "index_options": options}
    if index == "flat":
        # no method: OpenSearch then builds no graph, and refuses one anyway in an index without index.knn
        return {"type": "knn_vector", "dimension": dims}
    return {
        "type": "knn_vector",
        "dimension": dims,
        "method": {
            "name": "hnsw",
            "engine": "lucene",
            "space_type": "cosinesimil",
            "parameters": {"encoder": {"name": "sq"}, "m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION},
        },
    }


def index_settings(kind: EngineKind, *, index: VectorIndex = "hnsw") -> dict[str, Any]:
    """Index settings a physical index with a vector field indexed as ``index`` needs at creation."""
    check_index(index)
    return {"index.knn": True} if kind == "opensearch" and index == "hnsw" else {}


def unit(vector: list[float]) -> list[float]:
    """``vector`` scaled to unit length; :class:`VectorSettingError` for an empty or all-zero vector."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if not vector or norm == 0.0 or not math.isfinite(norm):
        raise VectorSettingError(f"a kNN query vector needs a direction; got {len(vector)} components of norm {norm}")
    return [x / norm for x in vector]


def knn_body(
    kind: EngineKind, vector: list[float], *, field: str, k: int, num_candidates: int, filter: dict | None = None,
    index: VectorIndex = "hnsw",
) -> dict[str, Any]:
    """The search body of a kNN search for the ``k`` nearest documents to ``vector`` in ``field``.

    ``vector`` is scaled to unit length first: Elasticsearch's ``dot_product`` refuses any other query vector,
    and the score is the cosine on both engines anyway.

    ``num_candidates`` is the HNSW search breadth per shard (Elasticsearch's ``num_candidates``, OpenSearch's
    ``ef_search``); ``filter`` is a query both engines apply during the graph search (not after it), so a
    filtered search still returns ``k`` hits when ``k`` documents match. The vector field is left out of
    ``_source``: a hit carries the document, not its 512 floats.

    ``index`` is how the field was indexed: on a ``flat`` field Elasticsearch runs the same ``knn`` exactly, while
    OpenSearch has no graph to search and scores every (filtered) document with a ``script_score`` instead.
    """
    if k < 1 or num_candidates < k:
        raise VectorSettingError(f"a kNN search needs 1 <= k <= num_candidates; got k={k}, num_candidates={num_candidates}")
    check_index(index)
    vector = unit(vector)
    source = {"excludes": [field]}
    if kind == "opensearch" and index == "flat":
        # the k-NN plugin's painless cosineSimilarity gives the cosine; (1 + cos) / 2 is the scale of the HNSW field
        script = {"source": "(1.0 + cosineSimilarity(params.query_value, doc[params.field])) / 2",
                  "params": {"field": field, "query_value": vector}}
        return {"query": {"script_score": {"query": filter or {"match_all": {}}, "script": script}}, "size": k, "_source": source}
    if kind == "elasticsearch":
        knn: dict[str, Any] = {"field": field, "query_vector": vector, "k": k, "num_candidates": num_candidates}
        if filter is not None:
            knn["filter"] = filter
        return {"knn": knn, "size": k, "_source": source}
    clause: dict[str, Any] = {"vector": vector, "k": k, "method_parameters": {"ef_search": num_candidates}}
    if filter is not None:
        clause["filter"] = filter
    return {"query": {"knn": {field: clause}}, "size": k, "_source": source}


__all__ = [
    "KNN_PLUGIN",
    "MAX_DIMS",
    "VECTOR_INDEXES",
    "VectorIndex",
    "VectorSettingError",
    "VectorsUnsupportedError",
    "check_dims",
    "check_index",
    "field_mapping",
    "index_settings",
    "knn_body",
    "missing_support",
    "unit",
]
