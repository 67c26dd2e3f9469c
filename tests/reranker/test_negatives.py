"""Negative sampling against real engines (both kinds): the α/β rule, entity replacement, random baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

from jingpai.engine.client import Engine
from jingpai.keyword_dict import Dictionary, Segmenter, extract_keywords
from jingpai.reranker.data import read_pairs
from jingpai.jobs.negatives import index_texts, retrieve, sample_negatives
from jingpai.reranker.negatives import (
    NegativeSamplingError,
    NegativeSettings,
    augmented_query,
    keyword_overlap,
    replace_entity,
)

pytestmark = pytest.mark.engine

PRODUCTS = ["花呗", "借呗", "余额宝", "信用卡", "支付宝", "网商贷"]
ACTIONS = ["还款", "分期", "逾期", "额度", "账单", "利息", "提前还款", "开通"]


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    scores = {w: {"product": 3.0 - i * 0.1} for i, w in enumerate(PRODUCTS)}
    scores.update({w: {"action": 2.0 - i * 0.1} for i, w in enumerate(ACTIONS)})
    return Dictionary.from_scores(scores)


@pytest.fixture(scope="module")
def questions(shared_data: Path) -> list[str]:
    pairs = read_pairs(shared_data / "zh/afqmc/train.tsv", limit=300)
    return list(dict.fromkeys([p.query for p in pairs] + [p.document for p in pairs]))


_SEGMENTERS: dict[str, Segmenter] = {}


def keywords(text: str, dictionary: Dictionary) -> list[str]:
    if dictionary.version not in _SEGMENTERS:
        _SEGMENTERS[dictionary.version] = Segmenter(dictionary)
    segmenter = _SEGMENTERS[dictionary.version]
    return [w for w, _ in extract_keywords(text, dictionary, top_k=10, segmenter=segmenter)]


def test_overlap_and_augmented_query() -> None:
    assert keyword_overlap(["花呗", "还款"], ["花呗", "分期"]) == pytest.approx(1 / 3)
    assert keyword_overlap([], []) == 0.0
    assert augmented_query("花呗怎么还款", ["花呗", "还款"]) == "花呗怎么还款 花呗 还款"
    assert augmented_query("你好", []) == "你好"


def test_keyword_negatives_follow_the_alpha_beta_rule(engine: Engine, index_name: str, questions: list[str], dictionary: Dictionary) -> None:
    assert index_texts(engine, index_name, questions) == len(questions)
    queries = questions[:25]
    positives = {queries[0]: {questions[40]}}
    settings = NegativeSettings(alpha=0.6, beta=0.2, candidates=15, per_query=3, replace_ratio=0.0)
    result = sample_negatives(queries, engine=engine, index=index_name, dictionary=dictionary, settings=settings, positives=positives)
    retrieved = [r for r in result.records if r.source == "retrieved"]
    assert len(retrieved) >= 10 and result.stats["retrieved"] == len(retrieved)
    assert result.stats["self_score_fallbacks"] == 0  # every query is indexed, so Sim(q, q) is its own score
    for r in retrieved:
        assert r.document != r.query and r.document in questions
        assert r.sim_ratio is not None and r.sim_ratio < 0.6
        assert r.overlap == pytest.approx(keyword_overlap(keywords(r.query, dictionary), keywords(r.document, dictionary)))
        assert r.overlap > 0.2
    # the ratio is the engine score over the query's own score, under the keyword-augmented query
    r = retrieved[0]
    hits = dict(retrieve(engine, index_name, augmented_query(r.query, keywords(r.query, dictionary)), field_name="text", size=16))
    assert r.sim_ratio == pytest.approx(hits[r.document] / hits[r.query])
    assert questions[40] not in {x.document for x in result.records if x.query == queries[0]}
    assert all(p.label == 0.0 for p in result.pairs) and len(result.pairs) == len(result.records)
    # opening the thresholds keeps more, closing them keeps none
    wide = sample_negatives(queries, engine=engine, index=index_name, dictionary=dictionary,
                            settings=NegativeSettings(alpha=1.01, beta=-1.0, candidates=15, per_query=3, replace_ratio=0.0))
    closed = sample_negatives(queries, engine=engine, index=index_name, dictionary=dictionary,
                              settings=NegativeSettings(alpha=0.0, candidates=15, replace_ratio=0.0))
    assert wide.stats["retrieved"] == 3 * len(set(queries)) > len(retrieved)
    assert closed.pairs == []


def test_entity_replacement_swaps_within_a_domain(engine: Engine, index_name: str, questions: list[str], dictionary: Dictionary) -> None:
    index_texts(engine, index_name, questions[:100])
    settings = NegativeSettings(replace_ratio=1.0, alpha=0.0, candidates=5)
    result = sample_negatives(questions[:20], engine=engine, index=index_name, dictionary=dictionary, settings=settings)
    replaced = [r for r in result.records if r.source == "replaced"]
    assert len(replaced) >= 10
    for r in replaced:
        assert r.swapped is not None
        old, new = r.swapped
        assert old in keywords(r.query, dictionary) and new not in r.query
        assert dictionary.domains(old).keys() == dictionary.domains(new).keys()
        assert r.query.replace(old, new, 1) == r.document


def test_replace_entity_directly(dictionary: Dictionary) -> None:
    import random

    new, old, word = replace_entity("花呗怎么还款", ["花呗"], dictionary, random.Random(0))  # type: ignore[misc]
    assert old == "花呗" and word in PRODUCTS and word != "花呗" and new == f"{word}怎么还款"
    assert replace_entity("你好", [], dictionary, random.Random(0)) is None


def test_random_negatives(questions: list[str]) -> None:
    queries = questions[:10]
    result = sample_negatives(queries, settings=NegativeSettings(strategy="random", per_query=2, seed=3), pool=questions,
                              positives={queries[0]: set(questions[1:200])})
    assert result.stats == {"queries": 10, "random": 20}
    assert all(r.document != r.query and r.document in questions for r in result.records)
    assert not {r.document for r in result.records if r.query == queries[0]} & set(questions[1:200])
    again = sample_negatives(queries, settings=NegativeSettings(strategy="random", per_query=2, seed=3), pool=questions,
                             positives={queries[0]: set(questions[1:200])})
    assert again.pairs == result.pairs


def test_settings_errors() -> None:
    with pytest.raises(NegativeSamplingError, match="unknown negative strategy 'hard'; expected one of keyword, random"):
        NegativeSettings(strategy="hard")  # type: ignore[arg-type]
    with pytest.raises(NegativeSamplingError, match="the random strategy needs a candidate pool"):
        sample_negatives(["q"], settings=NegativeSettings(strategy="random"))
    with pytest.raises(NegativeSamplingError, match="the keyword strategy needs engine, index, dictionary"):
        sample_negatives(["q"], settings=NegativeSettings())


def test_entity_negatives_swap_a_keyword_of_the_matching_side(dictionary: Dictionary) -> None:
    from jingpai.reranker.data import LabeledPair
    from jingpai.reranker.negatives import NegativeSamplingError, entity_negatives

    pairs = [LabeledPair("花呗怎么还款", "花呗还款方式", 1.0), LabeledPair("借呗逾期", "借呗逾期了怎么办", 1.0),
             LabeledPair("你好", "天气", 0.0)]
    made = entity_negatives(pairs, dictionary, ratio=1.0, seed=0)
    assert len(made) == 2 and all(p.label == 0.0 for p in made)
    for neg, pos in zip(made, pairs, strict=False):
        assert neg.query == pos.query and neg.document != pos.document and len(neg.document) >= len(pos.document) - 2
    assert entity_negatives(pairs, dictionary, ratio=0.0) == []
    with pytest.raises(NegativeSamplingError, match="entity-negative ratio must be in \\[0, 1\\], got 2"):
        entity_negatives(pairs, dictionary, ratio=2)
