"""HCAN: shapes, padding masks, IDF-weighted relevance matching, co-attention transpose, persistence, training."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.masking import masked_softmax
from jingpai.reranker.models.hcan import HcanConfig, HcanReranker, phrase_windows, relevance_matching
from jingpai.reranker.wordvocab import VocabError

TEXTS = [
    "银行卡怎么还款",
    "信用卡还款的方式有哪些",
    "如何提升信用卡额度",
    "今天的天气怎么样",
    "what is the gdp of china",
    "china gdp growth in 2019",
    "how do i repay my credit card",
]
PAIRS = [
    ("信用卡怎么还款", "信用卡还款的方式有哪些"),
    ("今天天气", "如何提升信用卡额度，需要多久才能审批下来"),
    ("what is the gdp of china", "china gdp growth"),
    ("how to repay", ""),
]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, atol: float = 1e-5) -> None:
    # numpy's check: torch.testing's first use costs ~10 s of lazy imports
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=atol)


def tiny_config(**overrides: object) -> HcanConfig:
    base = HcanConfig(embedding_dim=12, filters=10, hidden=6, mlp_hidden=12, num_layers=2, max_query_words=8, max_doc_words=16, dropout=0.0)
    return replace(base, **overrides)


@pytest.fixture(scope="module", params=["deep", "wide", "bilstm"])
def model(request: pytest.FixtureRequest) -> HcanReranker:
    torch.set_num_threads(1)
    m = HcanReranker.build(TEXTS, tiny_config(encoder=request.param), device="cpu")
    m.net.eval()
    return m


def test_featurize_and_output_shapes(model: HcanReranker) -> None:
    batch = model.featurize(PAIRS)
    layers = model.config.num_layers + 1
    assert batch["q_ids"].shape == (4, 8)  # queries are padded to exactly max_query_words
    assert batch["d_ids"].shape[0] == 4 and batch["d_ids"].shape[1] <= 16
    assert batch["q_idf"].shape == (4, layers, 8)
    assert not batch["d_mask"][3].any()  # the empty document has no real position
    with torch.no_grad():
        feats = model.net.features(batch)
        logits = model.logits(batch)
    assert feats.shape == (4, layers * (2 * 8 + 2 * 6))
    assert logits.shape == (4, 2)
    scores = model.predict(PAIRS)
    assert scores.shape == (4,) and np.isfinite(scores).all() and ((scores >= 0) & (scores <= 1)).all()


def test_changing_padded_content_does_not_change_scores(model: HcanReranker) -> None:
    batch = model.featurize(PAIRS)
    noisy = dict(batch)
    gen = torch.Generator().manual_seed(1)
    for ids, mask in (("q_ids", "q_mask"), ("d_ids", "d_mask")):
        junk = torch.randint(2, len(model.vocab), batch[ids].shape, generator=gen)
        noisy[ids] = torch.where(batch[mask], batch[ids], junk)
    assert not torch.equal(noisy["d_ids"], batch["d_ids"])
    with torch.no_grad():
        assert_close(model.scores(noisy), model.scores(batch), atol=1e-6)


def test_score_does_not_depend_on_batch_padding(model: HcanReranker) -> None:
    # alone, the first pair has no document padding; next to a long document it has plenty
    alone = model.predict(PAIRS[:1])
    together = model.predict([PAIRS[0], ("x", "如何 提升 信用卡 额度 需要 多久 才能 审批 下来 的 呢 今天 的 天气")])
    assert together[0] == pytest.approx(alone[0], abs=1e-6)


def test_idf_weights_follow_the_training_corpus(model: HcanReranker) -> None:
    weights = model.query_weights(["信用卡", "怎么", "还款"])
    windows = phrase_windows(model.config)
    assert windows[0] == 1
    assert weights[0, 0] == pytest.approx(model.vocab.idf("信用卡"))
    assert weights[0, 3:].tolist() == [0.0] * 5  # padding positions weigh nothing
    if windows[1] == 2:  # deep / wide: the first CNN layer sees bigrams
        assert weights[1, 0] == pytest.approx(model.vocab.bigram_idf("信用卡", "怎么"))
        assert weights[1, 2] == pytest.approx(model.vocab.idf("还款"))  # last word: its window is cut by the end
    assert model.vocab.idf("天气") > model.vocab.idf("信用卡")  # df 1 vs 2


def test_idf_weighting_enters_the_relevance_signal(model: HcanReranker) -> None:
    batch = model.featurize(PAIRS[:2])
    with torch.no_grad():
        q_layers = model.net.encode(batch["q_ids"], batch["q_mask"])
        d_layers = model.net.encode(batch["d_ids"], batch["d_mask"])
        w = batch["q_idf"][:, 0]
        rm = relevance_matching(q_layers[0], batch["q_mask"], d_layers[0], batch["d_mask"], w)
        doubled = relevance_matching(q_layers[0], batch["q_mask"], d_layers[0], batch["d_mask"], 2 * w)
    assert_close(doubled, 2 * rm)
    assert rm.abs().sum() > 0
    # query word 0 made maximally common in the corpus: its weight, and the relevance features, drop
    word = model.tokenizer.cut(PAIRS[0][0])[0]
    idx = model.vocab.index[word]
    saved = model.vocab.df[idx]
    try:
        model.vocab.df[idx] = model.vocab.num_docs
        common = model.featurize(PAIRS[:2])
    finally:
        model.vocab.df[idx] = saved
    assert common["q_idf"][0, 0, 0] < batch["q_idf"][0, 0, 0]
    with torch.no_grad():
        rm_common = relevance_matching(q_layers[0], batch["q_mask"], d_layers[0], batch["d_mask"], common["q_idf"][:, 0])
    assert not torch.allclose(rm_common, rm)


def test_relevance_only_model_score_moves_with_idf() -> None:
    model = HcanReranker.build(TEXTS, tiny_config(use_semantic=False), device="cpu")
    model.net.eval()
    batch = model.featurize(PAIRS[:1])
    flat = dict(batch, q_idf=torch.ones_like(batch["q_idf"]) * batch["q_mask"][:, None, :])
    with torch.no_grad():
        assert model.scores(flat).item() != pytest.approx(model.scores(batch).item(), abs=1e-6)


def test_coattention_attends_over_the_query_axis_with_transpose(model: HcanReranker) -> None:
    batch = model.featurize(PAIRS[:2])
    coatt = model.net.coattention[1]
    with torch.no_grad():
        uq = model.net.encode(batch["q_ids"], batch["q_mask"])[1]
        uc = model.net.encode(batch["d_ids"], batch["d_mask"])[1]
        logits = coatt.attention(uq, uc)
        att = masked_softmax(logits, batch["q_mask"][:, :, None], dim=1)
    n, m = uq.shape[1], uc.shape[1]
    assert logits.shape == (2, n, m) and n != m
    # each document position j gets a distribution over the real query words only
    real = batch["q_mask"]
    assert_close(att.sum(1), torch.ones(2, m))
    assert (att[~real] == 0).all()
    # Ũ_q[j] = Σ_i A_ij U_q[i]  (Aᵀ U_q, not A U_q)
    uq_tilde = att.transpose(1, 2) @ uq
    j = 1
    manual = sum(att[0, i, j] * uq[0, i] for i in range(n))
    assert_close(uq_tilde[0, j], manual)


def test_save_load_gives_identical_scores(model: HcanReranker, tmp_path: Path) -> None:
    model.save(tmp_path / "hcan")
    assert (tmp_path / "hcan" / "word_vocab.json").exists()
    loaded = Reranker.load(tmp_path / "hcan", device="cpu")
    assert isinstance(loaded, HcanReranker) and loaded.config == model.config
    np.testing.assert_array_equal(loaded.predict(PAIRS), model.predict(PAIRS))


def test_english_text_works() -> None:
    english = ["what is the gdp of china", "the gdp of china grew fast", "cats sleep a lot", "how tall is everest"]
    model = HcanReranker.build(english, tiny_config(encoder="wide"), device="cpu")
    assert model.tokenizer.cut("What is the GDP of China?") == ["what", "is", "the", "gdp", "of", "china"]
    ranked = model.rank("gdp of china", english)
    assert sorted(r["index"] for r in ranked) == [0, 1, 2, 3]


def test_unknown_words_match_only_themselves_with_oov_buckets(tmp_path: Path) -> None:
    english = ["what is the gdp of china", "the gdp of china grew fast", "cats sleep a lot"]
    plain = HcanReranker.build(english, tiny_config(), device="cpu")
    hashed = HcanReranker.build(english, tiny_config(oov_buckets=50), device="cpu")
    words = ["gdp", "kilimanjaro", "everest", "kilimanjaro"]
    # without buckets every unknown word is [UNK]: two different mountains look identical to the model
    assert plain.word_ids(words)[1] == plain.word_ids(words)[2] == 1
    ids = hashed.word_ids(words)
    assert ids[0] == plain.word_ids(words)[0]  # known words keep their vocabulary row
    assert ids[1] == ids[3] != ids[2] and all(len(hashed.vocab) <= i < len(hashed.vocab) + 50 for i in ids[1:])
    assert hashed.net.embedding.weight.shape[0] == len(hashed.vocab) + 50
    pairs = [("how tall is kilimanjaro", "kilimanjaro is 5895 metres tall"), ("how tall is kilimanjaro", "everest is tall")]
    batch = hashed.featurize(pairs)
    assert batch["q_ids"].max() >= len(hashed.vocab) and int(batch["d_ids"][0][0]) != int(batch["d_ids"][1][0])
    loaded = Reranker.load(hashed.save(tmp_path / "oov"), device="cpu")
    np.testing.assert_array_equal(loaded.predict(pairs), hashed.predict(pairs))
    with pytest.raises(ValueError, match="HcanConfig.oov_buckets=-1; expected 0 \\(off\\) or a positive bucket count"):
        HcanConfig(oov_buckets=-1)


def test_cosine_relevance_matching_lets_an_exact_match_dominate_the_softmax() -> None:
    generator = torch.Generator().manual_seed(0)
    word = torch.randn(1, 1, 100, generator=generator)
    word = 0.9 * word / word.norm()  # USE vectors' typical norm
    others = torch.randn(1, 39, 100, generator=generator) * 0.1  # 39 other answer words, each norm ≈ 1
    uc = torch.cat([word, others], dim=1)
    q_mask, c_mask, idf = torch.ones(1, 1, dtype=torch.bool), torch.ones(1, 40, dtype=torch.bool), torch.ones(1, 1)
    dot_max = relevance_matching(word, q_mask, uc, c_mask, idf)[0, 0]
    cos_max = relevance_matching(word, q_mask, uc, c_mask, idf, scale=torch.tensor(10.0))[0, 0]
    # the paper's premise ("an exact match will dominate"): true only once similarities are scaled cosines
    assert dot_max < 0.2 < 0.9 < cos_max
    no_match = relevance_matching(word, q_mask, others, c_mask[:, :39], idf, scale=torch.tensor(10.0))[0, 0]
    assert no_match < 0.3  # without the word in the answer no position stands out


def test_cosine_relevance_scale_is_learned_saved_and_padding_safe(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="jingpai.reranker.models.hcan"):
        model = HcanReranker.build(TEXTS, tiny_config(rm_similarity="cosine", rm_scale=5.0), device="cpu")
    assert "rm_similarity=cosine with oov_buckets=0" in caplog.text  # unknown words would all match each other
    assert model.net.rm_log_scale.exp().item() == pytest.approx(5.0)
    assert HcanReranker.build(TEXTS, tiny_config(), device="cpu").net.rm_log_scale is None  # dot: the paper's, no parameter
    batch = model.featurize(PAIRS)  # includes an empty document: all-padding rows must not turn into NaN
    loss = model.loss(batch, torch.tensor([1, 0, 1, 0]))
    loss.backward()
    assert torch.isfinite(loss) and model.net.rm_log_scale.grad is not None and model.net.rm_log_scale.grad.abs() > 0
    model.net.eval()
    loaded = Reranker.load(model.save(tmp_path / "cos"), device="cpu")
    np.testing.assert_allclose(loaded.predict(PAIRS), model.predict(PAIRS), rtol=1e-6)
    with pytest.raises(ValueError, match="HcanConfig.rm_similarity='l2'; expected one of dot, cosine"):
        HcanConfig(rm_similarity="l2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="HcanConfig.rm_scale=0.0; expected a positive start value for the cosine scale"):
        HcanConfig(rm_similarity="cosine", rm_scale=0.0)


def test_rm_sum_adds_each_layers_query_summed_relevance_features() -> None:
    model = HcanReranker.build(TEXTS, tiny_config(use_semantic=False, rm_sum=True), device="cpu")
    batch = model.featurize(PAIRS[:2])
    n = model.config.max_query_words
    with torch.no_grad():
        features = model.net.features(batch)
        q_layers = model.net.encode(batch["q_ids"], batch["q_mask"])
        d_layers = model.net.encode(batch["d_ids"], batch["d_mask"])
    assert features.shape[1] == len(q_layers) * (2 * n + 2) == model.net.mlp[1].in_features
    first = relevance_matching(q_layers[0], batch["q_mask"], d_layers[0], batch["d_mask"], batch["q_idf"][:, 0])
    assert_close(features[:, : 2 * n], first)
    # the IDF-weighted overlap itself: summed max-pooled (then mean-pooled) matches over the query's words
    assert_close(features[:, 2 * n], first[:, :n].sum(-1))
    assert_close(features[:, 2 * n + 1], first[:, n:].sum(-1))


def test_listwise_weight_adds_the_in_window_loss_of_each_query() -> None:
    """The pairs sharing a query's words are one window: the loss grows by w × the in-window loss of the margins."""
    from jingpai.reranker.losses import in_window_loss

    plain = HcanReranker.build(TEXTS, tiny_config(), device="cpu")
    listwise = HcanReranker.build(TEXTS, tiny_config(listwise_weight=0.5), device="cpu")
    listwise.net.load_state_dict(plain.net.state_dict())
    plain.net.eval()
    listwise.net.eval()
    pairs = [("信用卡怎么还款", d) for d in ("信用卡还款的方式有哪些", "今天的天气怎么样", "如何提升信用卡额度")] + [PAIRS[2], ("what is the gdp of china", "how do i repay")]
    batch, labels = listwise.featurize(pairs), torch.tensor([1, 0, 0, 1, 0])
    with torch.no_grad():
        logits = plain.logits(batch)
        window = in_window_loss(logits[:, 1] - logits[:, 0], labels.float(), torch.tensor([0, 0, 0, 1, 1]))
        assert window > 0
        assert_close(listwise.loss(batch, labels), plain.loss(batch, labels) + 0.5 * window)
    with pytest.raises(ValueError, match="HcanConfig.listwise_weight=-1; expected 0 \\(off\\) or a positive weight"):
        HcanConfig(listwise_weight=-1)


def test_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match="HcanConfig.encoder='cnn'; expected one of deep, wide, bilstm"):
        HcanConfig(encoder="cnn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="filters=9 must be even for the bilstm encoder"):
        HcanConfig(encoder="bilstm", filters=9)
    with pytest.raises(VocabError, match=r"HcanReranker needs a word vocabulary: create it with HcanReranker.build\(training_texts, config\)"):
        registry.create("hcan")
    model = HcanReranker.build(TEXTS, tiny_config(), device="cpu")
    with pytest.raises(ValueError, match=r"HCAN labels must be 0 or 1, got \[2\]"):
        model.loss(model.featurize(PAIRS[:2]), torch.tensor([1, 2]))


def lcqmc_slice(shared_data: Path, limit: int = 200) -> tuple[list[tuple[str, str]], np.ndarray]:
    with (shared_data / "zh/lcqmc/dev.tsv").open(encoding="utf-8") as fh:
        rows = [line.rstrip("\n").split("\t") for line in islice(fh, limit)]
    return [(a, b) for a, b, _ in rows], np.array([int(label) for *_, label in rows])


def test_short_training_run_beats_chance_on_its_training_slice(shared_data: Path) -> None:
    torch.set_num_threads(1)
    pairs, labels = lcqmc_slice(shared_data)
    model = HcanReranker.build(
        [t for p in pairs for t in p],
        HcanConfig(encoder="deep", embedding_dim=32, filters=32, hidden=16, mlp_hidden=32, num_layers=2, max_query_words=12, max_doc_words=24, dropout=0.0),
        device="cpu",
    )
    majority = max(labels.mean(), 1 - labels.mean())
    before = ((model.predict(pairs) > 0.5) == labels).mean()
    opt = torch.optim.Adam(model.net.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    y = torch.from_numpy(labels)
    for _ in range(6):
        model.net.train()
        order = torch.randperm(len(pairs), generator=gen).tolist()
        for start in range(0, len(pairs), 20):
            idx = order[start : start + 20]
            loss = model.loss(model.featurize([pairs[i] for i in idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    after = ((model.predict(pairs) > 0.5) == labels).mean()
    assert after >= majority + 0.25, (before, after, majority)
    assert after > before
