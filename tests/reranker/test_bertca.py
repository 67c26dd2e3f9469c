"""``bertca``: separate (and joint) encodings, masked co-attention, decoders, similarities, precomputed documents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.models.bertca import BertCAConfig, BertCAReranker, co_attention

PAIRS = [
    ("东阿阿胶", "宝能旗下的前海人寿二季度再度增持东阿阿胶，目前持股比例已增至4.17%，逼近举牌线。"),
    ("万科", "今天天气很好，适合出去走走。"),
    ("花呗", "花呗怎么还款"),
]
TINY = {"context_hidden": 8, "decoder_hidden": 8, "tensor_slices": 2, "k_max": 3, "mlp_hidden": (8,), "max_length": 48}


def make(tiny_bert_dir: Path, **overrides: object) -> BertCAReranker:
    torch.manual_seed(0)
    model = registry.create("bertca", base=str(tiny_bert_dir), device="cpu", **{**TINY, **overrides})
    assert isinstance(model, BertCAReranker)
    model.net.eval()
    return model


def padded(x: torch.Tensor, mask: torch.Tensor, extra: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` with ``extra`` more padded positions, padding filled with large random values."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(x.shape[0], x.shape[1] + extra, x.shape[2], generator=g) * 100
    new_mask = torch.cat([mask, torch.zeros(mask.shape[0], extra, dtype=torch.bool)], dim=1)
    out = torch.where(new_mask.unsqueeze(-1), torch.cat([x, torch.zeros(x.shape[0], extra, x.shape[2])], 1), noise)
    return out, new_mask


def test_co_attention_ignores_padding() -> None:
    torch.manual_seed(1)
    h, hd = torch.randn(2, 4, 6), torch.randn(2, 7, 6)
    h_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    hd_mask = torch.tensor([[1] * 7, [1, 1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    h = h * h_mask.unsqueeze(-1)
    hd = hd * hd_mask.unsqueeze(-1)
    g, gd = co_attention(h, h_mask, hd, hd_mask)
    assert g.shape == (2, 4, 12) and gd.shape == (2, 7, 12)
    h2, h2_mask = padded(h, h_mask, 3, seed=1)
    hd2, hd2_mask = padded(hd, hd_mask, 5, seed=2)
    g2, gd2 = co_attention(h2, h2_mask, hd2, hd2_mask)
    torch.testing.assert_close(g2[:, :4], g)
    torch.testing.assert_close(gd2[:, :7], gd)
    assert not g2[~h2_mask].any() and not gd2[~hd2_mask].any()


def test_co_attention_matches_the_papers_matrix_form() -> None:
    torch.manual_seed(2)
    h, hd = torch.randn(1, 3, 5), torch.randn(1, 4, 5)
    ones_h, ones_d = torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 4, dtype=torch.bool)
    g, gd = co_attention(h, ones_h, hd, ones_d)
    H, Hp = h[0].T, hd[0].T  # l×N, l×M as in the paper
    L = Hp.T @ H  # M×N
    A = L.softmax(dim=0)  # each entity column over document rows
    Ap = L.T.softmax(dim=0)  # each document column over entity rows
    F = H @ Ap
    G = torch.cat([Hp, F]) @ A
    Fp = Hp @ A
    Gp = torch.cat([H, Fp]) @ Ap
    torch.testing.assert_close(g[0], G.T)
    torch.testing.assert_close(gd[0], Gp.T)


@pytest.mark.parametrize("decoder", ["dflstm", "bilstm", "mlp"])
@pytest.mark.parametrize("sim", ["cosine", "bilinear", "tensor"])
def test_match_is_padding_invariant(tiny_bert_dir: Path, decoder: str, sim: str) -> None:
    model = make(tiny_bert_dir, decoder=decoder, sim=sim)
    torch.manual_seed(3)
    h, hd = torch.randn(2, 5, 16), torch.randn(2, 9, 16)
    h_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    hd_mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3], dtype=torch.bool)
    with torch.no_grad():
        base = model.net.match(h, h_mask, hd, hd_mask)
        h2, h2_mask = padded(h * h_mask.unsqueeze(-1), h_mask, 2, seed=4)
        hd2, hd2_mask = padded(hd * hd_mask.unsqueeze(-1), hd_mask, 4, seed=5)
        moved = model.net.match(h2, h2_mask, hd2, hd2_mask)
    assert base.shape == (2, 3)
    torch.testing.assert_close(moved, base, atol=1e-5, rtol=1e-4)


def test_dflstm_reads_the_final_row_and_column(tiny_bert_dir: Path) -> None:
    """u_i depends on the whole document; v_j on the whole entity, and on nothing past the real lengths."""
    net = make(tiny_bert_dir, decoder="dflstm").net
    torch.manual_seed(6)
    g, gd = torch.randn(1, 3, 32), torch.randn(1, 5, 32)
    mask_g, mask_d = torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 5, dtype=torch.bool)
    with torch.no_grad():
        u, v = net.decoder(g, mask_g, gd, mask_d)
        first_changed, last_changed = gd.clone(), gd.clone()
        first_changed[0, 0] += 1.0
        last_changed[0, -1] += 1.0
        u_first, _ = net.decoder(g, mask_g, first_changed, mask_d)
        _, v_last = net.decoder(g, mask_g, last_changed, mask_d)
    assert u.shape == (1, 3, 8) and v.shape == (1, 5, 8)
    assert (u_first - u).abs().amax(-1).gt(1e-6).all()  # the first document position reaches every u_i
    torch.testing.assert_close(v_last[0, :4], v[0, :4])  # v_j for j < M is computed before position M
    assert not torch.allclose(v_last[0, 4], v[0, 4])


def test_precomputed_document_encodings_give_the_same_scores(tiny_bert_dir: Path) -> None:
    model = make(tiny_bert_dir)
    direct = model.predict(PAIRS, batch_size=8)
    encodings = model.encode_documents([d for _, d in PAIRS], batch_size=2)
    assert [e.shape[1] for e in encodings] == [16, 16, 16]
    assert [e.shape[0] for e in encodings] == [len(model.tokenizer(d)["input_ids"]) for _, d in PAIRS]
    np.testing.assert_allclose(model.predict_encoded([q for q, _ in PAIRS], encodings), direct, atol=1e-5)
    # a document encoding does not depend on which query it is later paired with
    again = model.encode_documents([PAIRS[0][1]])[0]
    torch.testing.assert_close(again, encodings[0], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="got 1 queries but 3 document encodings"):
        model.predict_encoded(["x"], encodings)


def test_three_levels_probabilities_and_score(tiny_bert_dir: Path) -> None:
    model = make(tiny_bert_dir, sim="cosine")
    probs = model.predict_proba(PAIRS)
    assert probs.shape == (3, 3)
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(model.predict(PAIRS), probs @ np.array([0.0, 0.5, 1.0]), atol=1e-5)
    with pytest.raises(ValueError, match=r"bertca labels must be integer levels 0..2, got values \[0.0, 5.0\]"):
        model.loss(model.featurize(PAIRS[:2]), torch.tensor([0.0, 5.0]))


@pytest.mark.parametrize("variant", [{"sim": "bilinear"}, {"sim": "tensor", "encoding": "joint"}], ids=["separate", "joint"])
def test_training_steps_reduce_the_loss(tiny_bert_dir: Path, variant: dict) -> None:
    model = make(tiny_bert_dir, decoder="bilstm", dropout=0.0, **variant)
    batch = model.featurize(PAIRS)
    labels = torch.tensor([2, 0, 1])
    opt = torch.optim.AdamW(model.net.parameters(), lr=5e-3)
    model.net.train()
    first = model.loss(batch, labels).item()
    for _ in range(20):
        opt.zero_grad()
        model.loss(batch, labels).backward()
        opt.step()
    assert model.loss(batch, labels).item() < first * 0.8


def test_save_load_identical_scores(tiny_bert_dir: Path, tmp_path: Path) -> None:
    model = make(tiny_bert_dir, decoder="dflstm", sim="tensor", mlp_hidden=(8, 4))
    before = model.predict(PAIRS)
    loaded = Reranker.load(model.save(tmp_path / "ca"), device="cpu")
    assert isinstance(loaded, BertCAReranker) and loaded.config == model.config
    np.testing.assert_array_equal(loaded.predict(PAIRS), before)


def test_bad_flags_name_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown decoder 'gru'; expected one of dflstm, bilstm, mlp"):
        BertCAConfig(decoder="gru")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown sim 'dot'; expected one of cosine, bilinear, tensor"):
        BertCAConfig(sim="dot")  # type: ignore[arg-type]


def test_a_model_saved_before_pooled_norm_loads_as_trained(tiny_bert_dir: Path, tmp_path: Path) -> None:
    import json

    model = make(tiny_bert_dir, pooled_norm="none")
    folder = model.save(tmp_path / "old")
    meta_file = folder / "jingpai_model.json"
    meta = json.loads(meta_file.read_text())
    del meta["config"]["pooled_norm"]  # as written before the option existed
    meta_file.write_text(json.dumps(meta))
    loaded = Reranker.load(folder, device="cpu")
    assert loaded.config.pooled_norm == "none"
    np.testing.assert_array_equal(loaded.predict(PAIRS), model.predict(PAIRS))
    with pytest.raises(ValueError, match="unknown pooled_norm 'layer'; expected one of batch, none"):
        BertCAConfig(pooled_norm="layer")  # type: ignore[arg-type]


def test_pooled_features_are_standardised_before_the_mlp(tiny_bert_dir: Path) -> None:
    """Large, nearly equal K-max values would saturate the tanh MLP; BatchNorm centres and scales them per feature."""
    model = make(tiny_bert_dir)
    norm = model.net.mlp[0]
    assert isinstance(norm, torch.nn.BatchNorm1d)
    model.net.train()
    x = 3.5 + 0.1 * torch.randn(16, norm.num_features)
    out = norm(x).detach()
    torch.testing.assert_close(out.mean(0), torch.zeros(norm.num_features), atol=1e-5, rtol=0)
    assert 0.9 < float(out.std(0).mean()) < 1.1
    # a training batch of one pair (a run's last) uses the running statistics instead of failing
    model.loss(model.featurize(PAIRS[:1]), torch.tensor([2])).backward()
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in make(tiny_bert_dir, pooled_norm="none").net.mlp)


def test_joint_encoding_splits_one_pass_into_the_two_sides(tiny_bert_dir: Path, tmp_path: Path) -> None:
    model = make(tiny_bert_dir, encoding="joint", query_max_length=8, max_length=16)
    batch = model.featurize(PAIRS)
    tok = model.tokenizer
    for i, (query, doc) in enumerate(PAIRS):
        ids = batch["input_ids"][i]
        side = lambda name: ids[batch[f"{name}_index"][i][batch[f"{name}_mask"][i].bool()]].tolist()  # noqa: E731
        q_ids, d_ids = side("query"), side("doc")
        # [CLS] query [SEP] | document [SEP]: each side keeps its special tokens, nothing is read twice or lost
        assert q_ids[0] == tok.cls_token_id and q_ids[-1] == tok.sep_token_id and d_ids[-1] == tok.sep_token_id
        assert q_ids + d_ids == ids[batch["attention_mask"][i].bool()].tolist()
        assert len(q_ids) + len(d_ids) <= 8 + 16
    assert len(side("query")) - 2 == len(tok(PAIRS[2][0], add_special_tokens=False)["input_ids"])
    # the document side depends on the query: BERT attends across the pair
    with torch.no_grad():
        base = model.logits(batch)
        other = model.logits(model.featurize([("完全不同的问题", d) for _, d in PAIRS]))
    assert not torch.allclose(base, other)
    # padding another pair into the batch changes nothing
    alone = model.predict(PAIRS[2:], batch_size=1)
    np.testing.assert_allclose(model.predict(PAIRS, batch_size=3)[2:], alone, atol=1e-5)
    loaded = Reranker.load(model.save(tmp_path / "joint"), device="cpu")
    np.testing.assert_array_equal(loaded.predict(PAIRS), model.predict(PAIRS))
    with pytest.raises(ValueError, match=r"reads query and document together \(encoding='joint'\), so no document encoding exists"):
        model.encode_documents([PAIRS[0][1]])
    with pytest.raises(ValueError, match="unknown encoding 'cross'; expected one of separate, joint"):
        BertCAConfig(encoding="cross")  # type: ignore[arg-type]


def test_entity_scoring_falls_back_to_pairs_for_a_joint_model(tiny_bert_dir: Path) -> None:
    from jingpai.jobs.entity_scores import EntityScorer

    joint = make(tiny_bert_dir, encoding="joint")
    scorer = EntityScorer(joint, batch_size=2)
    assert scorer.precomputed is False and EntityScorer(make(tiny_bert_dir)).precomputed is True
    [scores] = scorer.score([(["东阿阿胶", "万科"], PAIRS[0][1])])
    np.testing.assert_allclose(scores, joint.predict([("东阿阿胶", PAIRS[0][1]), ("万科", PAIRS[0][1])]), atol=1e-5)
