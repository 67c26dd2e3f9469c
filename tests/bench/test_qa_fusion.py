"""Section 3's lexical rows (no engine, no model): BM25 over a question's candidates and the per-question
fusion that the gateway applies, and the table rows built from them on TrecQA raw-test."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bench import eval_common, qa_fusion
from bench.__main__ import bench
from bench.qa_fusion import bm25_scores, fuse_by_query, weight_curve
from jingpai.reranker.data import LabeledPair


def test_doctests() -> None:
    result = doctest.testmod(qa_fusion)
    assert result.attempted >= 3 and result.failed == 0


def _pairs() -> list[LabeledPair]:
    texts = {"1": ["the capital of france is paris .", "france is in europe .", "paris hilton sings ."],
             "2": ["rivers flow into the sea .", "the nile is the longest river in africa ."]}
    questions = {"1": "what is the capital of france ?", "2": "which is the longest river ?"}
    return [LabeledPair(questions[q], d, float(i == (0 if q == "1" else 1)), qid=q, docid=f"{q}-{i}")
            for q, docs in texts.items() for i, d in enumerate(docs)]


def test_bm25_ranks_the_rarer_shared_words_first_and_ignores_punctuation() -> None:
    pairs = _pairs()
    scores = bm25_scores(pairs)
    assert scores[0] > scores[1] > 0 and scores[4] > scores[3]
    assert scores[2] == 0.0  # shares only "?"-free words with nothing: "paris" is not in the question
    # the index holds the split's distinct answers: a second copy of a question's pairs does not change a score
    assert bm25_scores(pairs + pairs[:3])[:5] == pytest.approx(scores)


def test_fusion_is_per_question_and_its_ends_are_each_signal_alone() -> None:
    pairs = _pairs()
    engine = np.array([3.0, 2.0, 0.0, 0.0, 5.0])
    model = np.array([0.1, 0.9, 0.5, 0.9, 0.2])
    assert fuse_by_query(pairs, engine, model, weight=1.0).tolist() == [1.0, 2 / 3, 0.0, 0.0, 1.0]
    assert fuse_by_query(pairs, engine, model, weight=0.0).tolist() == pytest.approx([0.0, 1.0, 0.5, 1.0, 0.0])
    curve = weight_curve(pairs, engine, model)
    assert sorted(curve) == list(eval_common.TUNE_WEIGHTS)
    assert curve[0.9] == 1.0 and curve[0.0] == pytest.approx((1 / 3 + 1 / 2) / 2)  # the model alone: relevant 3rd of 3, 2nd of 2


def test_bm25_row_on_trecqa_raw_test(shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eval_common, "DATA_DIR", shared_data)
    results = tmp_path / "results"
    args = ["report", "--sections", "qa", "--only", "qa.trecqa.bm25", "--only", "qa.wikiqa.bm25", "--results-dir", str(results),
            "--models-dir", str(tmp_path / "m"), "--work-dir", str(tmp_path / "w"), "--no-plots", "--device", "cpu", "--out", str(tmp_path / "R.md")]
    result = CliRunner().invoke(bench, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    trec = json.loads((results / "qa-trecqa.json").read_text(encoding="utf-8"))
    (row,) = trec["rows"]
    assert row["cells"]["model"].startswith("BM25 over the candidates") and row["command"].endswith("--only qa.trecqa.bm25")
    assert 0.70 < row["cells"]["MAP"] < 0.80  # lexical overlap is strong on TrecQA: far above a random order's ≈ 0.3
    wiki = json.loads((results / "qa-wikiqa.json").read_text(encoding="utf-8"))
    assert any(n.startswith("No `+ BM25` rows: WikiQA's recipes have no selection split") for n in wiki["notes"])
