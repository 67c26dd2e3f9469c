"""``kwbert``: the keyword-attentive layer's mask and attention, pooling, head, save/load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.keyword_dict import Dictionary
from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.models.kwbert import SIDE_A, SIDE_B, KeywordBertReranker

QUERY = "哪些因素会影响中国的GDP"
DOC = "影响美国GDP的因素"
NO_KEYWORDS = "今天天气怎么样"


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    return Dictionary.from_scores({"中国": {"politics": 1.2}, "美国": {"politics": 1.0}, "GDP": {"finance": 3.0}})


@pytest.fixture(scope="module")
def model(tiny_bert_dir: Path, dictionary: Dictionary, tmp_path_factory: pytest.TempPathFactory) -> KeywordBertReranker:
    folder = dictionary.save(tmp_path_factory.mktemp("dict"))
    torch.manual_seed(0)
    m = registry.create("kwbert", base=str(tiny_bert_dir), dictionary=str(folder), max_length=64, device="cpu")
    assert isinstance(m, KeywordBertReranker)
    return m


def tokens(model: KeywordBertReranker, batch: dict[str, torch.Tensor], row: int, mask: torch.Tensor) -> list[str]:
    return model.tokenizer.convert_ids_to_tokens(batch["input_ids"][row][mask].tolist())


def test_keyword_tokens_come_from_the_dictionary(model: KeywordBertReranker) -> None:
    batch = model.featurize([(QUERY, DOC)])
    side, kw = batch["side"][0], batch["keyword"][0]
    assert tokens(model, batch, 0, (side == SIDE_A) & kw) == ["中", "国", "g", "##d", "##p"]
    assert tokens(model, batch, 0, (side == SIDE_B) & kw) == ["美", "国", "g", "##d", "##p"]
    assert tokens(model, batch, 0, side == SIDE_A) == model.tokenizer.tokenize(QUERY)


def test_a_token_attends_only_to_keyword_tokens_of_b_and_itself(model: KeywordBertReranker) -> None:
    batch, probs = model.attention([(QUERY, DOC), ("花呗", "借呗")])
    side, kw, real = batch["side"][0], batch["keyword"][0], batch["attention_mask"][0].bool()
    b_keywords = set(torch.nonzero((side == SIDE_B) & kw).flatten().tolist())
    a_keywords = set(torch.nonzero((side == SIDE_A) & kw).flatten().tolist())
    for i in torch.nonzero(side == SIDE_A).flatten().tolist():
        for head in range(probs.shape[1]):
            attended = set(torch.nonzero(probs[0, head, i] > 0).flatten().tolist())
            assert attended == b_keywords | {i}, f"A token {i} head {head}"
            torch.testing.assert_close(probs[0, head, i].sum(), torch.tensor(1.0))
    for i in torch.nonzero(side == SIDE_B).flatten().tolist():
        attended = set(torch.nonzero(probs[0, 0, i] > 0).flatten().tolist())
        assert attended == a_keywords | {i}, f"B token {i}"
    # [CLS] sees every real token and nothing else
    assert set(torch.nonzero(probs[0, 0, 0] > 0).flatten().tolist()) == set(torch.nonzero(real).flatten().tolist())


def test_side_without_keywords_falls_back_to_all_its_tokens(model: KeywordBertReranker) -> None:
    batch, probs = model.attention([(QUERY, NO_KEYWORDS)])
    side, kw = batch["side"][0], batch["keyword"][0]
    assert not ((side == SIDE_B) & kw).any()
    all_b = set(torch.nonzero(side == SIDE_B).flatten().tolist())
    a_keywords = set(torch.nonzero((side == SIDE_A) & kw).flatten().tolist())
    first_a = int(torch.nonzero(side == SIDE_A)[0])
    assert set(torch.nonzero(probs[0, 0, first_a] > 0).flatten().tolist()) == all_b | {first_a}
    first_b = int(torch.nonzero(side == SIDE_B)[0])
    assert set(torch.nonzero(probs[0, 0, first_b] > 0).flatten().tolist()) == a_keywords | {first_b}


def test_keyword_layer_is_a_parallel_copy_of_the_last_layer(model: KeywordBertReranker) -> None:
    net = model.net
    fresh = registry.create("kwbert", base=model.config.base, device="cpu").net
    last = dict(fresh.backbone.encoder.layer[-1].named_parameters())
    for name, param in fresh.keyword_layer.named_parameters():
        torch.testing.assert_close(param, last[name.replace("self_attn", "attention.self").replace("attn_output", "attention.output")])
    # with an all-tokens mask, the keyword layer on the last layer's input reproduces the last layer
    batch = model.featurize([(QUERY, DOC), ("花呗", "借呗")])
    net.eval()
    with torch.no_grad():
        out = net.backbone(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           token_type_ids=batch["token_type_ids"], output_hidden_states=True)
        real = batch["attention_mask"].bool()
        allowed = real.unsqueeze(1) & real.unsqueeze(2) | torch.eye(real.shape[1], dtype=torch.bool)
        kw_out, _ = net.keyword_layer(out.hidden_states[-2], allowed)
    torch.testing.assert_close(kw_out[real], out.last_hidden_state[real], atol=1e-5, rtol=1e-4)


def test_head_is_two_classes_over_cls_views_and_kdiff(model: KeywordBertReranker) -> None:
    hidden = model.net.backbone.config.hidden_size
    assert model.net.classifier.in_features == 5 * hidden and model.net.classifier.out_features == 2
    scores = model.predict([(QUERY, DOC), (QUERY, NO_KEYWORDS)])
    assert ((scores > 0) & (scores < 1)).all()
    batch = model.featurize([(QUERY, DOC)])
    model.net.eval()
    with torch.no_grad():
        torch.testing.assert_close(model.scores(batch), model.net(**batch).softmax(-1)[:, 1])


def test_loss_trains_towards_labels(model: KeywordBertReranker) -> None:
    pairs = [(QUERY, DOC), ("花呗怎么还款", "花呗如何还款")]
    labels = torch.tensor([0, 1])
    batch = model.featurize(pairs)
    opt = torch.optim.AdamW(model.net.parameters(), lr=1e-2)
    model.net.train()
    first = model.loss(batch, labels).item()
    for _ in range(15):
        opt.zero_grad()
        model.loss(batch, labels).backward()
        opt.step()
    assert model.loss(batch, labels).item() < first
    scores = model.predict(pairs)
    assert scores[1] > scores[0]


def test_save_load_identical_scores_and_dictionary(model: KeywordBertReranker, dictionary: Dictionary, tmp_path: Path) -> None:
    pairs = [(QUERY, DOC), (QUERY, NO_KEYWORDS), ("花呗", "借呗")]
    before = model.predict(pairs)
    saved = model.save(tmp_path / "kw")
    assert json.loads((saved / "jingpai_model.json").read_text())["keyword_dict_version"] == dictionary.version
    loaded = Reranker.load(saved, device="cpu")
    assert isinstance(loaded, KeywordBertReranker)
    assert loaded.keyword_dict_version == dictionary.version and loaded.dictionary is not None
    assert loaded.keywords(QUERY) == ["GDP", "中国"]
    np.testing.assert_array_equal(loaded.predict(pairs), before)


def test_an_in_process_service_serves_its_own_copy_with_the_same_scores(model: KeywordBertReranker) -> None:
    # The demo and the report serve a copy of the model (create_app's default); the copy shares the dictionary's
    # segmenter, whose rjieba object cannot be copied (this raised TypeError: cannot pickle 'builtins.Jieba').
    from fastapi.testclient import TestClient

    from jingpai.reranker.service import ServiceSettings, create_app

    docs = [DOC, NO_KEYWORDS, "今天天气怎么样，" * 12 + "美国和中国的GDP"]  # the last one's keywords only in its tail, past the cut
    model.predict([(QUERY, d) for d in docs])  # the segmenter is built before the copy
    with TestClient(create_app(ServiceSettings(model_name="tiny-kw", dtype="fp32"), model)) as client:
        r = client.post("/rerank", json={"query": QUERY, "texts": docs, "raw_scores": True})
    assert r.status_code == 200, r.text
    served = [rec["score"] for rec in sorted(r.json(), key=lambda rec: rec["index"])]
    np.testing.assert_allclose(served, model.predict([(QUERY, d) for d in docs]), atol=1e-5)
