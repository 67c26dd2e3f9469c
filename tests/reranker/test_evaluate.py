"""Evaluation: hand-checked accuracy/MAP/MRR/P@k, qid grouping, TREC run files, model evaluation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from jingpai.reranker import registry
from jingpai.reranker.data import LabeledPair, read_pairs
from jingpai.reranker.evaluate import EvaluationError, evaluate_model, evaluate_run, evaluate_scores, to_markdown

# q1: relevant d1, d3 among 4; q2: relevant b among 2; q3: no relevant candidate (skipped)
PAIRS = [
    LabeledPair("q one", "d1", 1, "q1", "d1"),
    LabeledPair("q one", "d2", 0, "q1", "d2"),
    LabeledPair("q one", "d3", 1, "q1", "d3"),
    LabeledPair("q one", "d4", 0, "q1", "d4"),
    LabeledPair("q two", "a", 0, "q2", "a"),
    LabeledPair("q two", "b", 1, "q2", "b"),
    LabeledPair("q three", "x", 0, "q3", "x"),
]
SCORES = np.array([0.9, 0.8, 0.3, 0.1, 0.7, 0.6, 0.2])


def test_metrics_by_hand() -> None:
    m = evaluate_scores(PAIRS, SCORES, threshold=0.5)
    # predicted positive: d1 d2 a b → correct: d1(+) d2(-wrong) d3(+ missed) d4(ok) a(wrong) b(ok) x(ok)
    assert m["accuracy"] == pytest.approx(4 / 7)
    assert m["accuracy_pos"] == pytest.approx(2 / 3)
    assert m["accuracy_neg"] == pytest.approx(2 / 4)
    # q1 ranking d1 d2 d3 d4: AP = (1/1 + 2/3)/2; q2 ranking a b: AP = 1/2
    assert m["MAP"] == pytest.approx(((1 + 2 / 3) / 2 + 0.5) / 2)
    assert m["MRR"] == pytest.approx((1 + 0.5) / 2)
    assert m["P@1"] == pytest.approx((1 + 0) / 2)
    assert m["P@3"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    idcg1, dcg1 = 1 + 1 / math.log2(3), 1 + 1 / math.log2(4)
    assert m["nDCG@10"] == pytest.approx((dcg1 / idcg1 + (1 / math.log2(3)) / 1) / 2)
    assert (m["pairs"], m["queries"], m["skipped_queries"]) == (7, 2, 1)


def test_groups_by_query_text_without_ids() -> None:
    bare = [LabeledPair(p.query, p.document, p.label) for p in PAIRS]
    with_ids = evaluate_scores(PAIRS, SCORES)
    without = evaluate_scores(bare, SCORES)
    for name in ("MAP", "MRR", "P@1", "P@3", "nDCG@10", "queries"):
        assert without[name] == pytest.approx(with_ids[name])


def test_graded_labels_and_relevant_min() -> None:
    graded = [LabeledPair("q", "a", 2, "q"), LabeledPair("q", "b", 1, "q"), LabeledPair("q", "c", 0, "q")]
    strict = evaluate_scores(graded, [0.1, 0.9, 0.5], relevant_min=2)
    assert strict["MRR"] == pytest.approx(1 / 3)  # only 'a' is relevant and it ranks third
    lenient = evaluate_scores(graded, [0.1, 0.9, 0.5], relevant_min=1)
    assert lenient["MRR"] == pytest.approx(1.0)
    ideal = 2 / 1 + 1 / math.log2(3)
    assert lenient["nDCG@10"] == pytest.approx((1 / 1 + 2 / math.log2(4)) / ideal)


def test_trec_run_files_give_the_same_ranking_metrics(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.txt"
    run = tmp_path / "run.txt"
    qrels.write_text("".join(f"{p.qid} 0 {p.docid} {int(p.label)}\n" for p in PAIRS))
    run.write_text("".join(f"{p.qid} Q0 {p.docid} {r} {s} test\n" for r, (p, s) in enumerate(zip(PAIRS, SCORES, strict=True))))
    from_pairs = evaluate_scores(PAIRS, SCORES)
    from_files = evaluate_run(qrels, run)
    for name in ("MAP", "MRR", "P@1", "P@3", "P@5", "P@10", "nDCG@10", "queries", "skipped_queries"):
        assert from_files[name] == pytest.approx(from_pairs[name]), name
    with pytest.raises(EvaluationError, match=f"TREC run file {tmp_path / 'none'} does not exist"):
        evaluate_run(qrels, tmp_path / "none")


def test_errors_name_the_mismatch() -> None:
    with pytest.raises(EvaluationError, match="got 2 scores for 7 pairs; expected one per pair"):
        evaluate_scores(PAIRS, [0.1, 0.2])
    with pytest.raises(EvaluationError, match="nothing to evaluate: the data has no pairs"):
        evaluate_scores([], [])


def test_markdown_table() -> None:
    table = to_markdown({"MAP": 0.5, "pairs": 7.0}, title="demo")
    assert table == "### demo\n\n| metric | value |\n|---|---|\n| MAP | 0.5000 |\n| pairs | 7 |\n"


def test_evaluate_model_on_real_trecqa_slice(tiny_bert_dir: Path, shared_data: Path) -> None:
    pairs = read_pairs(shared_data / "en/trecqa/raw-test", limit=60)
    model = registry.create("cross", base=str(tiny_bert_dir), max_length=64, device="cpu")
    metrics = evaluate_model(model, pairs, batch_size=32)
    scores = model.predict([(p.query, p.document) for p in pairs])
    assert metrics == evaluate_scores(pairs, scores, threshold=0.0)
    assert 0 < metrics["queries"] <= len({p.qid for p in pairs})
    assert 0.0 <= metrics["MAP"] <= 1.0


def test_auc_f1_and_a_collapsed_model_warning() -> None:
    from jingpai.reranker.evaluate import class_balance_warning, roc_auc

    pairs = [LabeledPair(f"q{i}", "d", float(label)) for i, label in enumerate([1, 1, 0, 0, 1, 0])]
    m = evaluate_scores(pairs, [0.9, 0.8, 0.7, 0.1, 0.3, 0.2])
    assert m["AUC"] == pytest.approx(8 / 9)  # 8 of the 9 positive-negative pairs are ordered right
    assert m["F1"] == pytest.approx(2 * 2 / (3 + 3))  # predicted {0.9, 0.8, 0.7}: 2 true positives
    assert class_balance_warning(m) is None
    collapsed = evaluate_scores(pairs, [0.9] * 6)  # calls every pair a match
    assert collapsed["accuracy_neg"] == 0.0 and collapsed["AUC"] == 0.5
    assert "negative class is 0.000" in class_balance_warning(collapsed)
    assert math.isnan(roc_auc(np.array([0.1, 0.2]), np.array([True, True])))
