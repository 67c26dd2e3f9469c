"""use-tita: TITA's matching on the USE-multilingual encoder — masks, levels, padding, persistence, level metrics,
training and the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.evaluate import class_balance_warning, evaluate_model
from jingpai.reranker.models.tita import TitaError
from jingpai.reranker.models.use_tita import UseTitaConfig, UseTitaReranker
from jingpai.reranker.use_backbone import BOS_ID, EOS_ID
from tests.reranker.test_tita import DOCS, PAIRS, fit_levels, stsb_three_levels

pytest.importorskip("sentencepiece")


def tiny_config(**overrides: object) -> UseTitaConfig:
    cfg = UseTitaConfig(init="random", num_topics=4, topic_vocab_size=200, topic_dim=8, topic_hidden=16, relevance_dim=16, hidden=32,
                        heads=4, dropout=0.0)
    return replace(cfg, **overrides)


@pytest.fixture(scope="module")
def model() -> UseTitaReranker:
    torch.set_num_threads(1)
    m = UseTitaReranker.build(DOCS, tiny_config(), device="cpu")
    m.net.eval()
    return m


def test_featurize_masks_mark_the_pieces_of_each_side(model: UseTitaReranker) -> None:
    batch = model.featurize(PAIRS)
    n_q = batch["q_ids"].shape[1]
    for i, (query, doc) in enumerate(PAIRS):
        pieces = model.tokenizer.encode([doc])[0]
        assert pieces[0] == BOS_ID and pieces[-1] == EOS_ID
        assert not batch["d_mask"][i, :n_q].any()  # the pair's query positions are never attended as document
        assert batch["d_ids"][i][batch["d_mask"][i, n_q:]].tolist() == pieces[1:-1]
        assert batch["q_mask"][i].sum().item() == len(model.tokenizer.encode([query])[0]) - 2
    assert batch["bow"].shape == (4, len(model.topic_vocab))
    assert registry.get("use-tita") is UseTitaReranker


def test_three_levels_the_documented_score_and_padding(model: UseTitaReranker) -> None:
    probs = model.probabilities(PAIRS)
    assert probs.shape == (4, 3)
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(model.predict(PAIRS), probs[:, 2] + 0.5 * probs[:, 1], rtol=1e-5)
    alone = model.predict(PAIRS[3:])
    together = model.predict([PAIRS[3], ("樱花樱花樱花樱花", DOCS[0] + DOCS[1])])  # longer neighbours pad PAIRS[3]
    assert together[0] == pytest.approx(alone[0], abs=1e-5)
    batch = model.featurize(PAIRS)
    noisy = dict(batch)
    gen = torch.Generator().manual_seed(1)
    for ids, real in (("q_ids", "q_real"), ("d_ids", "d_real")):
        noisy[ids] = torch.where(batch[real], batch[ids], torch.randint(5, 1000, batch[ids].shape, generator=gen))
    assert not torch.equal(noisy["d_ids"], batch["d_ids"])
    with torch.no_grad():
        np.testing.assert_allclose(model.scores(noisy).numpy(), model.scores(batch).numpy(), atol=1e-5)


def test_the_query_changes_the_document_states(model: UseTitaReranker) -> None:
    """Stage 1 reads the pair: the same document gets other states next to another query (TITA's e_D)."""
    a = model.featurize([("樱花", DOCS[0])])
    b = model.featurize([("餐馆的菜", DOCS[0])])
    with torch.no_grad():
        e_a, _, _ = model.net.encode(a)
        e_b, _, _ = model.net.encode(b)
    d_a = e_a[0][a["d_mask"][0]]
    d_b = e_b[0][b["d_mask"][0]]
    assert d_a.shape == d_b.shape and (d_a - d_b).abs().max() > 1e-4


def test_save_load_gives_identical_scores(model: UseTitaReranker, tmp_path: Path) -> None:
    out = model.save(tmp_path / "use-tita")
    assert (out / "topic_vocab" / "word_vocab.json").exists()
    assert (out / "model.pt").stat().st_size < 40_000_000  # the 262 MB piece table stays out (frozen: re-made on load)
    loaded = Reranker.load(out, device="cpu")
    assert isinstance(loaded, UseTitaReranker)
    np.testing.assert_allclose(loaded.probabilities(PAIRS), model.probabilities(PAIRS), rtol=0, atol=1e-6)


def test_errors_name_the_bad_value(model: UseTitaReranker) -> None:
    with pytest.raises(TitaError, match=r"UseTitaReranker needs a topic vocabulary: create it with UseTitaReranker.build"):
        registry.create("use-tita", init="random")
    with pytest.raises(TitaError, match="hidden divisible by heads.*got hidden=30, heads=4"):
        tiny_config(hidden=30)
    with pytest.raises(TitaError, match=r"TITA labels must be relevance levels 0, 1 or 2, got \[5\]"):
        model.loss(model.featurize(PAIRS[:2]), torch.tensor([5, 0]))


def test_training_learns_its_slice_and_level_metrics_show_every_level(shared_data: Path) -> None:
    torch.set_num_threads(1)
    pairs, levels = stsb_three_levels(shared_data, 150)
    docs = [d for _, d in pairs]
    model = UseTitaReranker.build(docs, tiny_config(topic_vocab_size=300), device="cpu")
    model.pretrain_topics(docs, epochs=3)
    fit_levels(model, pairs, levels, epochs=6, lr=2e-3)
    from jingpai.reranker.data import LabeledPair

    metrics = evaluate_model(model, [LabeledPair(q, d, float(level)) for (q, d), level in zip(pairs, levels)])
    predicted = model.probabilities(pairs).argmax(1)
    assert metrics["level_accuracy"] == pytest.approx(float((predicted == levels).mean()))
    assert metrics["majority_baseline"] == pytest.approx(np.bincount(levels).max() / len(levels))
    assert metrics["level_accuracy"] >= metrics["majority_baseline"] + 0.2, metrics
    assert [metrics[f"predicted_{k}"] for k in range(3)] == [float((predicted == k).sum()) for k in range(3)]
    assert class_balance_warning({"level_accuracy": 0.5, "level_accuracy_2": 0.0, "majority_baseline": 0.43}).startswith(
        "accuracy on level 2 is 0.000 (< 0.10): the model (nearly) never predicts it")


def test_the_cli_trains_and_selects_on_level_accuracy(shared_data: Path, tmp_path: Path) -> None:
    stsb = shared_data / "zh" / "stsb"
    out = tmp_path / "m"
    args = ["train", "--model", "use-tita", "--train", str(stsb / "train.tsv"), "--dev", str(stsb / "dev.tsv"), "--format", "stsb",
            "--label-mode", "levels3", "--limit", "64", "--topic-epochs", "1", "--max-steps", "4", "--eval-every", "2",
            "--batch-size", "16", "--metric", "level_accuracy", "--no-progress", "--out", str(out)]
    for item in ("init=random", "hidden=32", "heads=4", "num_topics=4", "topic_vocab_size=200", "topic_dim=8", "topic_hidden=16",
                 "relevance_dim=16"):
        args += ["--config", item]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "selected on level_accuracy" in result.output and "| level_accuracy_2 |" in result.output
    evaluated = CliRunner().invoke(cli, ["eval", "--model", str(out), "--data", str(stsb / "dev.tsv"), "--format", "stsb", "--label-mode",
                                         "levels3", "--limit", "64", "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    metrics = json.loads(evaluated.output)
    assert {"level_accuracy", "majority_baseline", "predicted_0", "predicted_1", "predicted_2"} <= set(metrics)
