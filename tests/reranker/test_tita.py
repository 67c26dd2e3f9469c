"""TITA: two-stage interaction masks, GSM topic model, topic memory, 3 levels, persistence, training."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.reranker import registry
from jingpai.reranker.base import MODEL_FILE, Reranker
from jingpai.reranker.models.tita import STOPWORDS, TitaConfig, TitaError, TitaReranker

DOCS = [
    "玉渊潭公园是赏樱花的最佳去处。公园里的樱花有各种颜色和品种。",
    "这家餐馆的菜都很好吃，顺便说一下，这家餐厅附近有樱花展。",
    "这家花店开了有几个月了。我买了一些花来装饰我的房子。",
    "一个男人在吹一支大笛子。",
]
PAIRS = [("樱花", d) for d in DOCS]


def tiny_config(base: Path, **overrides: object) -> TitaConfig:
    cfg = TitaConfig(
        base=str(base), num_topics=4, topic_vocab_size=200, topic_dim=8, topic_hidden=16, relevance_dim=16,
        max_length=96, dropout=0.0,
    )  # fmt: skip
    return replace(cfg, **overrides)


@pytest.fixture(scope="module")
def model(tiny_bert_dir: Path) -> TitaReranker:
    torch.set_num_threads(1)
    m = TitaReranker.build(DOCS, tiny_config(tiny_bert_dir), device="cpu")
    m.net.eval()
    return m


def test_featurize_masks_mark_document_and_query_tokens(model: TitaReranker) -> None:
    batch = model.featurize(PAIRS)
    tok = model.tokenizer
    for i, (query, doc) in enumerate(PAIRS):
        n_doc = len(tok.tokenize(doc))
        assert batch["d_mask"][i].sum().item() == n_doc  # [CLS] Q [SEP] and the final [SEP] excluded
        ids = batch["input_ids"][i][batch["d_mask"][i]].tolist()
        assert ids == tok.convert_tokens_to_ids(tok.tokenize(doc))
        assert batch["q_mask"][i].sum().item() == len(tok.tokenize(query))
    assert batch["bow"].shape == (4, len(model.topic_vocab))


def test_three_levels_and_the_documented_score(model: TitaReranker) -> None:
    batch = model.featurize(PAIRS)
    with torch.no_grad():
        logits = model.logits(batch)
    assert logits.shape == (4, 3)
    probs = model.probabilities(PAIRS)
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(model.predict(PAIRS), probs[:, 2] + 0.5 * probs[:, 1], rtol=1e-5)


def test_changing_padded_content_does_not_change_scores(model: TitaReranker) -> None:
    batch = model.featurize(PAIRS)
    noisy = dict(batch)
    gen = torch.Generator().manual_seed(1)
    for ids, mask in (("input_ids", "attention_mask"), ("q_input_ids", "q_attention_mask")):
        junk = torch.randint(5, model.tokenizer.vocab_size, batch[ids].shape, generator=gen)
        noisy[ids] = torch.where(batch[mask].bool(), batch[ids], junk)
    assert not torch.equal(noisy["input_ids"], batch["input_ids"])
    with torch.no_grad():
        np.testing.assert_allclose(model.scores(noisy).numpy(), model.scores(batch).numpy(), atol=1e-5)
    alone = model.predict(PAIRS[3:])
    together = model.predict([PAIRS[3], ("樱花樱花樱花樱花", DOCS[0] + DOCS[1])])
    assert together[0] == pytest.approx(alone[0], abs=1e-5)


def test_topic_model_distributions_and_pretraining(model: TitaReranker, tiny_bert_dir: Path) -> None:
    beta = model.net.gsm.beta()
    assert beta.shape == (4, len(model.topic_vocab))
    np.testing.assert_allclose(beta.sum(-1).detach().numpy(), 1.0, rtol=1e-5)
    assert not STOPWORDS & set(model.topic_vocab.words)
    assert "樱花" in model.topic_vocab
    bow = model.bag_of_words(["樱花 樱花 公园 的"])
    assert bow[0, model.topic_vocab.index["樱花"]] == 2 and bow.sum() == 3  # 的 is a stop word
    fresh = TitaReranker.build(DOCS, tiny_config(tiny_bert_dir), device="cpu")
    history = fresh.pretrain_topics(DOCS * 4, epochs=6, batch_size=4)
    assert len(history) == 6 and history[-1] < history[0]


def test_topic_memory_enters_the_score_and_matcher_sees_beta_detached(model: TitaReranker, tiny_bert_dir: Path) -> None:
    assert len(model.net.hop_out) == model.config.memory_hops == 2
    other = TitaReranker.build(DOCS, tiny_config(tiny_bert_dir), device="cpu")
    other.net.load_state_dict(model.net.state_dict())
    other.net.eval()
    with torch.no_grad():
        other.net.gsm.topic_vectors.mul_(-30.0)  # different topics → different memory keys β V
        u = torch.randn(2, model.net.bert.config.hidden_size, generator=torch.Generator().manual_seed(0))
        assert (other.net.memory(u) - model.net.memory(u)).abs().max() > 1e-2
    assert np.abs(other.predict(PAIRS) - model.predict(PAIRS)).max() > 1e-5
    # classification loss alone leaves the topic model untouched; the topic loss alone trains only it
    ce_only = TitaReranker(replace(other.config, topic_loss_weight=0.0), topic_vocab=other.topic_vocab, device="cpu")
    ce_only.net.load_state_dict(other.net.state_dict())
    batch = ce_only.featurize(PAIRS)
    ce_only.loss(batch, torch.tensor([2, 1, 0, 0])).backward()
    assert all(p.grad is None for p in ce_only.net.gsm.parameters())
    assert ce_only.net.v.grad is not None and ce_only.net.memory_in.grad.abs().sum() > 0
    ce_only.net.zero_grad()
    ce_only.topic_loss(batch["bow"]).backward()
    assert ce_only.net.gsm.topic_vectors.grad.abs().sum() > 0 and ce_only.net.v.grad is None


def test_save_load_gives_identical_scores_without_the_base_checkpoint(model: TitaReranker, tmp_path: Path) -> None:
    out = model.save(tmp_path / "tita")
    assert (out / "encoder" / "config.json").exists() and (out / "topic_vocab" / "word_vocab.json").exists()
    meta = json.loads((out / MODEL_FILE).read_text())
    meta["config"]["base"] = str(tmp_path / "gone")  # the saved model must not need the original checkpoint
    (out / MODEL_FILE).write_text(json.dumps(meta))
    loaded = Reranker.load(out, device="cpu")
    assert isinstance(loaded, TitaReranker)
    np.testing.assert_allclose(loaded.predict(PAIRS), model.predict(PAIRS), rtol=0, atol=1e-6)
    np.testing.assert_allclose(loaded.probabilities(PAIRS), model.probabilities(PAIRS), rtol=0, atol=1e-6)


def test_errors_name_the_bad_value(model: TitaReranker, tiny_bert_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(TitaError, match="TitaConfig.base='' must be a local HF checkpoint directory"):
        TitaReranker.build(DOCS, TitaConfig())
    with pytest.raises(TitaError, match=r"TitaReranker needs a topic vocabulary: create it with TitaReranker.build\(documents, config\)"):
        registry.create("tita", base=str(tiny_bert_dir))
    with pytest.raises(TitaError, match=r"TITA labels must be relevance levels 0, 1 or 2, got \[3\]"):
        model.loss(model.featurize(PAIRS[:2]), torch.tensor([2, 3]))
    with pytest.raises(TitaError, match="cannot build TITA's topic vocabulary: no word occurs"):
        TitaReranker.build(["的 了", "，。"], tiny_config(tiny_bert_dir))


def stsb_three_levels(shared_data: Path, limit: int) -> tuple[list[tuple[str, str]], np.ndarray]:
    """STS-B pairs bucketed into 3 levels: 0-1 irrelevant, 2-3 partial, 4-5 relevant."""
    with (shared_data / "zh/stsb/train.tsv").open(encoding="utf-8") as fh:
        rows = [line.rstrip("\n").split("\t") for line in islice(fh, limit)]
    levels = np.array([min(int(float(score)) // 2, 2) for *_, score in rows])
    return [(a, b) for a, b, _ in rows], levels


def fit_levels(model: TitaReranker, pairs: list[tuple[str, str]], levels: np.ndarray, *, epochs: int, lr: float) -> None:
    """A plain Adam loop of ``model.loss`` over ``pairs`` (batches of 16, seeded order): a short training run."""
    opt = torch.optim.Adam(model.net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    y = torch.from_numpy(levels)
    for _ in range(epochs):
        model.net.train()
        order = torch.randperm(len(pairs), generator=gen).tolist()
        for start in range(0, len(pairs), 16):
            idx = order[start : start + 16]
            loss = model.loss(model.featurize([pairs[i] for i in idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()


def test_short_training_run_beats_chance_on_its_training_slice(shared_data: Path, tiny_bert_dir: Path) -> None:
    torch.set_num_threads(1)
    pairs, levels = stsb_three_levels(shared_data, 150)
    assert set(levels.tolist()) == {0, 1, 2}
    docs = [d for _, d in pairs]
    model = TitaReranker.build(docs, tiny_config(tiny_bert_dir, topic_vocab_size=300), device="cpu")
    model.pretrain_topics(docs, epochs=3)
    majority = np.bincount(levels).max() / len(levels)
    fit_levels(model, pairs, levels, epochs=5, lr=1e-3)
    accuracy = (model.probabilities(pairs).argmax(1) == levels).mean()
    assert accuracy >= majority + 0.2, (accuracy, majority)
