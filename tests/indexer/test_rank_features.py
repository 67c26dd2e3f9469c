"""``rank_features`` on a real engine with ``mapper-extras``: keyword weights and BERTCA entity relevance.

The node is the session fixture ``opensearch_modules`` (OpenSearch with the modules from Maven Central). The
index is built by ``index_corpus``, the entity scores are written by ``score_entities`` with the tiny BERTCA of
tests/indexer/test_entity_scores.py, and the engine is queried directly with ``rank_feature`` clauses. The plain
nodes (core modules only) keep the fallback encodings, checked next to it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from jingpai.engine.client import Engine
from jingpai.indexer.entities import MIN_FEATURE, entity_query
from jingpai.indexer.mapping import engine_encodings, read_meta
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.jobs.entity_scores import EntityScoreSettings, score_entities
from jingpai.keyword_dict import Dictionary
from jingpai.reranker.base import Reranker

# the tiny BERTCA, its corpus and dictionary are the ones of the nested-encoding test
from tests.indexer.test_entity_scores import (  # noqa: F401  (fixtures)
    DOCS,
    base_dir,
    bertca,
    bertca_dir,
    build_index,
    dictionary,
    stored_scores,
)

pytestmark = pytest.mark.engine

#: 万科 said 3, 2 and 1 times (title and content); 茅台 in one document only
WEIGHT_DOCS = [
    {"id": "w1", "title": "万科", "content": "万科万科的公告"},
    {"id": "w2", "title": "万科", "content": "茅台与万科"},
    {"id": "w3", "title": "地产", "content": "万科的周末"},
    {"id": "w4", "title": "天气", "content": "今天天气很好"},
]


@pytest.fixture
def rf_index(opensearch_modules: Engine) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    opensearch_modules.raw.indices.delete(index=f"{name}*")


def test_encodings_follow_mapper_extras(opensearch_modules: Engine, engine: Engine) -> None:
    assert engine_encodings(opensearch_modules) == ("rank_features", "rank_features")
    # the plain integ-test distributions of both engines keep the core-only fallbacks
    assert engine_encodings(engine) == ("term_frequency", "nested")


def test_keyword_weights_rank_by_the_stored_weights(
    opensearch_modules: Engine, rf_index: str, tmp_path: Path, dictionary: Dictionary
) -> None:
    engine = opensearch_modules
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in WEIGHT_DOCS), encoding="utf-8")
    report = index_corpus(engine, [corpus], IndexSettings(index=rf_index, id_field="id", quarantine_dir=tmp_path, progress=False), dictionary=dictionary)
    assert report.indexed == len(WEIGHT_DOCS)
    meta = read_meta(engine, rf_index)
    assert (meta.weight_encoding, meta.entity_encoding) == ("rank_features", "rank_features")
    physical = next(iter(engine.get_mapping(rf_index).values()))["mappings"]["properties"]["jingpai"]["properties"]
    assert physical["kw"] == {"type": "rank_features"} and physical["entity_scores"] == {"type": "rank_features"}

    sources = {h["_id"]: h["_source"] for h in engine.search(rf_index, {"size": 10})["hits"]["hits"]}
    weights = {d: s["jingpai"]["kw"]["万科"] for d, s in sources.items() if "万科" in s["jingpai"].get("kw", {})}
    assert set(weights) == {"w1", "w2", "w3"}
    assert weights["w1"] > weights["w2"] > weights["w3"] > 0  # tf 3 (title + 2), 2, 1
    by_weight = sorted(weights, key=lambda d: -weights[d])

    # saturation (the default): monotonic in the stored weight
    hits = engine.search(rf_index, {"query": {"rank_feature": {"field": "jingpai.kw.万科"}}})["hits"]["hits"]
    assert [h["_id"] for h in hits] == by_weight
    # linear: the score is the stored weight (rank_features keep ~9 bits of mantissa)
    body = {"query": {"rank_feature": {"field": "jingpai.kw.万科", "linear": {}}}}
    hits = engine.search(rf_index, body)["hits"]["hits"]
    np.testing.assert_allclose([h["_score"] for h in hits], [weights[d] for d in by_weight], rtol=1 / 256)
    # a keyword one document has
    hits = engine.search(rf_index, {"query": {"rank_feature": {"field": "jingpai.kw.茅台"}}})["hits"]["hits"]
    assert [h["_id"] for h in hits] == ["w2"]


def test_bertca_entity_scores_as_rank_features(
    opensearch_modules: Engine, rf_index: str, tmp_path: Path, dictionary: Dictionary, bertca_dir: Path, bertca: Reranker
) -> None:
    engine = opensearch_modules
    meta = build_index(engine, rf_index, tmp_path, dictionary)
    assert meta.entity_encoding == "rank_features"
    report = score_entities(engine, Reranker.load(bertca_dir, device="cpu"), EntityScoreSettings(index=rf_index, progress=False))
    assert report.updated == len(DOCS) - 1 and not report.failed

    stored = stored_scores(engine, rf_index, meta)
    sources = {h["_id"]: h["_source"] for h in engine.search(rf_index, {"size": 100})["hits"]["hits"]}
    for doc_id, scores in stored.items():
        # independent check: the separately loaded model's pairwise scores, floored as rank_features need
        expected = np.maximum(bertca.predict([(e, sources[doc_id]["content"]) for e in scores]), MIN_FEATURE)
        np.testing.assert_allclose(list(scores.values()), expected, atol=1e-4)

    vanke = {doc_id: s["万科"] for doc_id, s in stored.items() if "万科" in s}
    assert set(vanke) == {"d1", "d2", "d3"}
    ordered = sorted(vanke, key=lambda d: -vanke[d])
    values = sorted(vanke.values())
    # rank_features index ~9 bits of mantissa: the scores must differ by more than that to order
    assert all(b > a * (1 + 1 / 128) for a, b in zip(values, values[1:], strict=False)), vanke
    assert ordered == ["d1", "d2", "d3"]

    hits = engine.search(rf_index, {"query": entity_query(meta, "万科"), "size": 10})["hits"]["hits"]
    assert [h["_id"] for h in hits] == ordered
    # as a should-clause next to a text query sent straight to the engine
    body = {"query": {"bool": {"must": {"match": {"title": "万科"}}, "should": [entity_query(meta, "万科", boost=100.0)]}}}
    assert [h["_id"] for h in engine.search(rf_index, body)["hits"]["hits"]] == ordered
    assert engine.search(rf_index, {"query": entity_query(meta, "不存在")})["hits"]["hits"] == []
