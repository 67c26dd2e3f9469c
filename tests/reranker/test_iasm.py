"""IASM: initial matching matrix, static/dynamic layers, padding masks, margin loss, persistence, training."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.models.iasm import IasmConfig, IasmReranker
from jingpai.reranker.wordvocab import VocabError

TEXTS = ["银行卡怎么还款", "信用卡还款的方式有哪些", "如何提升信用卡额度", "今天的天气怎么样", "what is the gdp of china", "china gdp growth"]
PAIRS = [
    ("信用卡怎么还款", "信用卡还款的方式有哪些"),
    ("今天天气", "如何提升信用卡额度，需要多久才能审批下来"),
    ("what is the gdp of china", "china gdp growth"),
    ("zzz 银行卡", "zzz qqq 银行卡"),
]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=atol)


def tiny_config(**overrides: object) -> IasmConfig:
    return replace(IasmConfig(embedding_dim=12, num_layers=3, max_query_words=10, max_doc_words=16), **overrides)


@pytest.fixture(scope="module", params=["static", "dynamic"])
def model(request: pytest.FixtureRequest) -> IasmReranker:
    torch.set_num_threads(1)
    m = IasmReranker.build(TEXTS, tiny_config(mode=request.param), device="cpu")
    m.net.eval()
    return m


def test_shapes_and_scores(model: IasmReranker) -> None:
    batch = model.featurize(PAIRS)
    assert batch["q_ids"].shape == batch["q_key"].shape == batch["q_mask"].shape
    assert batch["d_ids"].shape == batch["d_key"].shape
    with torch.no_grad():
        a0 = model.net.initial_matrix(batch)
        dist = model.net.distance(batch)
    assert a0.shape == (4, batch["q_ids"].shape[1], batch["d_ids"].shape[1])
    assert dist.shape == (4,) and (dist >= 0).all()
    scores = model.predict(PAIRS)
    np.testing.assert_allclose(scores, -dist.numpy(), rtol=1e-6)  # score = −distance


def test_initial_matrix_cosine_and_exact_match_for_words_without_vectors(model: IasmReranker) -> None:
    batch = model.featurize(PAIRS)
    q_words, d_words = model.tokenize_pairs(PAIRS)
    with torch.no_grad():
        a0 = model.net.initial_matrix(batch)
    # pair 3: "zzz" is unknown on both sides → exact match 1; "qqq" ≠ "zzz" → 0 although both are [UNK]
    assert q_words[3][0] == d_words[3][0] == "zzz" and d_words[3][1] == "qqq"
    assert a0[3, 0, 0] == 1.0 and a0[3, 0, 1] == 0.0
    # known words: cosine of the frozen vectors (identical word → 1)
    i, j = q_words[3].index("银行卡"), d_words[3].index("银行卡")
    assert a0[3, i, j] == pytest.approx(1.0, abs=1e-6)
    frozen = model.net.frozen
    qa, da = batch["q_ids"][0, 0], batch["d_ids"][0, 1]
    expected = torch.nn.functional.cosine_similarity(frozen[qa], frozen[da], dim=0)
    assert a0[0, 0, 1].item() == pytest.approx(expected.item(), abs=1e-6)
    # padding rows/columns are zero
    assert (a0[~batch["q_mask"]] == 0).all()
    assert (a0.transpose(1, 2)[~batch["d_mask"]] == 0).all()


def test_a0_uses_the_frozen_copy_not_the_trained_embeddings() -> None:
    model = IasmReranker.build(TEXTS, tiny_config(), device="cpu")
    batch = model.featurize(PAIRS[:1])
    with torch.no_grad():
        before = model.net.initial_matrix(batch)
        model.net.embedding.weight.add_(torch.randn_like(model.net.embedding.weight))
        after = model.net.initial_matrix(batch)
    assert torch.equal(before, after)
    assert not model.net.frozen.requires_grad


def test_words_without_pretrained_vectors_match_by_string_only(tmp_path: Path) -> None:
    vec_file = tmp_path / "vec.txt"
    vec_file.write_text("信用卡 1 0 0\n银行卡 1 0 0\n天气 0 1 0\n", encoding="utf-8")
    model = IasmReranker.build(TEXTS, tiny_config(embedding_dim=3), vectors=vec_file, device="cpu")
    batch = model.featurize([("信用卡 还款", "银行卡 还款 额度")])
    with torch.no_grad():
        a0 = model.net.initial_matrix(batch)[0]
    assert a0[0, 0].item() == pytest.approx(1.0)  # different words, identical vectors
    assert a0[1, 1].item() == 1.0  # 还款 has no vector: exact string match
    assert a0[1, 2].item() == 0.0 and a0[0, 1].item() == 0.0


def test_dynamic_and_static_matrices_differ_and_follow_the_paper() -> None:
    static = IasmReranker.build(TEXTS, tiny_config(mode="static"), device="cpu")
    dynamic = IasmReranker.build(TEXTS, tiny_config(mode="dynamic"), device="cpu")
    dynamic.net.load_state_dict(static.net.state_dict())
    with torch.no_grad():
        assert not np.allclose(static.predict(PAIRS), dynamic.predict(PAIRS))
        # one layer by hand: Q¹ = ReLU(A⁰ᵀ Q⁰ W_q), D¹ = ReLU(A⁰ D⁰ W_d); L=1 distances against Q⁰/D⁰
        one = IasmReranker.build(TEXTS, tiny_config(num_layers=1), device="cpu")
        batch = one.featurize(PAIRS[:1])
        net = one.net
        q0 = net.embedding(batch["q_ids"])[0]
        d0 = net.embedding(batch["d_ids"])[0]
        a0 = net.initial_matrix(batch)[0]
        q1 = torch.relu(net.w_q[0](a0.T @ q0))
        d1 = torch.relu(net.w_d[0](a0 @ d0))
        norm = torch.nn.functional.normalize
        src = (norm(q0, dim=-1) - norm(d1, dim=-1)).norm(dim=-1).mean()
        tgt = (norm(d0, dim=-1) - norm(q1, dim=-1)).norm(dim=-1).mean()
        assert net.distance(batch)[0].item() == pytest.approx((0.5 * src + 0.5 * tgt).item(), abs=1e-5)


def test_changing_padded_content_does_not_change_scores(model: IasmReranker) -> None:
    batch = model.featurize(PAIRS)
    noisy = dict(batch)
    gen = torch.Generator().manual_seed(1)
    for ids, key, mask in (("q_ids", "q_key", "q_mask"), ("d_ids", "d_key", "d_mask")):
        junk = torch.randint(2, len(model.vocab), batch[ids].shape, generator=gen)
        noisy[ids] = torch.where(batch[mask], batch[ids], junk)
        noisy[key] = torch.where(batch[mask], batch[key], junk)
    assert not torch.equal(noisy["d_ids"], batch["d_ids"])
    with torch.no_grad():
        assert_close(model.scores(noisy), model.scores(batch), atol=1e-6)
    alone = model.predict(PAIRS[:1])
    together = model.predict([PAIRS[0], ("x", "如何 提升 信用卡 额度 需要 多久 才能 审批 下来 的 呢 今天 的 天气")])
    assert together[0] == pytest.approx(alone[0], abs=1e-6)


def test_margin_loss_is_zero_once_the_positive_wins_by_the_margin() -> None:
    base = IasmReranker.build(TEXTS, tiny_config(num_negatives=0), device="cpu")
    base.net.eval()
    batch = base.featurize(PAIRS[:2])
    with torch.no_grad():
        s = base.scores(batch)
    hi, lo = (0, 1) if s[0] > s[1] else (1, 0)
    gap = (s[hi] - s[lo]).item()
    assert gap > 0
    labels = torch.zeros(2)
    labels[hi] = 1
    for margin, expected in ((gap * 0.5, 0.0), (gap * 2, gap)):
        model = IasmReranker(replace(base.config, margin=margin), vocab=base.vocab, device="cpu")
        model.net.load_state_dict(base.net.state_dict())
        model.net.eval()
        with torch.no_grad():
            loss = model.loss(batch, labels).item()
        assert loss == pytest.approx(expected, abs=1e-6)
    # the hinge is averaged over every (positive, negative) combination
    pos, neg = torch.tensor([1.0, 0.5]), torch.tensor([0.45, 0.9])
    expected = np.mean([max(0, 0.1 - p + n) for p in (1.0, 0.5) for n in (0.45, 0.9)])
    assert base.pair_loss(pos, neg).item() == pytest.approx(expected)


def test_in_batch_corrupted_negatives_pair_a_query_with_other_documents() -> None:
    model = IasmReranker.build(TEXTS, tiny_config(num_negatives=2), device="cpu")
    batch = model.featurize(PAIRS)
    corrupted = model.corrupted(batch, torch.tensor([0, 2]))
    assert corrupted["q_ids"].shape[0] == 4
    assert torch.equal(corrupted["q_ids"][0], batch["q_ids"][0]) and torch.equal(corrupted["d_ids"][0], batch["d_ids"][1])
    assert torch.equal(corrupted["d_ids"][3], batch["d_ids"][0])  # query 2 with document (2+2) % 4
    with torch.no_grad():
        assert model.loss(batch, torch.tensor([1, 1, 1, 1])).item() >= 0  # no labelled negatives: still trains


def test_save_load_gives_identical_scores(model: IasmReranker, tmp_path: Path) -> None:
    model.save(tmp_path / "iasm")
    loaded = Reranker.load(tmp_path / "iasm", device="cpu")
    assert isinstance(loaded, IasmReranker) and loaded.config == model.config
    np.testing.assert_array_equal(loaded.predict(PAIRS), model.predict(PAIRS))
    assert torch.equal(loaded.net.frozen, model.net.frozen)


def test_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match=r"IasmConfig.num_layers=2 must be odd \(1, 3, 5, …\)"):
        IasmConfig(num_layers=2)
    with pytest.raises(ValueError, match="IasmConfig.mode='fluid'; expected one of static, dynamic"):
        IasmConfig(mode="fluid")  # type: ignore[arg-type]
    with pytest.raises(VocabError, match="IasmReranker needs a word vocabulary"):
        registry.create("iasm")
    model = IasmReranker.build(TEXTS, tiny_config(), device="cpu")
    with pytest.raises(ValueError, match=r"IASM labels must be 0 \(negative\) or 1 \(positive\), got \[3\]"):
        model.loss(model.featurize(PAIRS[:2]), torch.tensor([1, 3]))


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())


def test_short_training_run_beats_chance_on_its_training_slice(shared_data: Path) -> None:
    torch.set_num_threads(1)
    with (shared_data / "zh/lcqmc/dev.tsv").open(encoding="utf-8") as fh:
        rows = [line.rstrip("\n").split("\t") for line in islice(fh, 200)]
    pairs = [(a, b) for a, b, _ in rows]
    labels = np.array([int(label) for *_, label in rows])
    model = IasmReranker.build([t for p in pairs for t in p], tiny_config(embedding_dim=32, max_query_words=12, max_doc_words=24), device="cpu")
    before = auc(model.predict(pairs), labels)
    opt = torch.optim.Adam(model.net.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    y = torch.from_numpy(labels)
    for _ in range(3):
        model.net.train()
        order = torch.randperm(len(pairs), generator=gen).tolist()
        for start in range(0, len(pairs), 20):
            idx = order[start : start + 20]
            loss = model.loss(model.featurize([pairs[i] for i in idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    after = auc(model.predict(pairs), labels)
    assert after >= 0.85 and after > before + 0.15, (before, after)
