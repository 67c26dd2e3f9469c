"""``bi``: the bi-encoder over any local BERT-family encoder — scores, embeddings, training, save/load, serving."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from jingpai.reranker import registry
from jingpai.reranker.base import ModelLoadError, Reranker
from jingpai.reranker.models.bi import BiConfig, BiEncoderReranker
from jingpai.reranker.pretrained import write_pooling
from jingpai.reranker.tiny import build_tiny_checkpoint

TEXTS = ["花呗怎么还款", "花呗如何还钱", "今天天气怎么样", "借呗可以提前还吗", "平安银行发布年报", "这只股票涨停了"]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("bi-base"), TEXTS, hidden_size=32, num_layers=2, num_heads=2)


def direct_vectors(base, texts, *, pooling):
    """The encoder run with transformers alone: ``[CLS] text [SEP]``, pooled, unit length."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModel.from_pretrained(base).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            enc = tok(text, return_tensors="pt")
            states = model(**enc).last_hidden_state[0]
            v = states[0] if pooling == "cls" else states.mean(0)
            out.append((v / v.norm()).numpy())
    return np.stack(out)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_vectors_and_scores_are_the_encoders_own(tiny_base, pooling):
    model = registry.create("bi", base=str(tiny_base), pooling=pooling)
    vectors = model.encode(TEXTS)
    assert np.allclose(vectors, direct_vectors(tiny_base, TEXTS, pooling=pooling), atol=1e-5)  # padding changes nothing
    pairs = [(TEXTS[0], t) for t in TEXTS[1:]]
    cos = vectors[1:] @ vectors[0]
    scores = model.predict(pairs)
    assert np.allclose(scores, 1 / (1 + np.exp(-(20 * cos - 14))), atol=1e-5)
    assert [r["index"] for r in model.rank(TEXTS[0], TEXTS[1:])] == list(np.argsort(-cos, kind="stable"))


def test_text_tokens_cut_from_either_side(tiny_base):
    model = registry.create("bi", base=str(tiny_base), max_length=5)
    (right, n), = model.text_tokens(["花呗怎么还款"])
    (left, _), = model.text_tokens(["花呗怎么还款"], cut="left")
    tok = model.tokenizer
    assert n == 8 and len(right) == len(left) == 5
    assert tok.convert_ids_to_tokens(right) == ["[CLS]", "花", "呗", "怎", "[SEP]"]
    assert tok.convert_ids_to_tokens(left) == ["[CLS]", "么", "还", "款", "[SEP]"]
    with pytest.raises(ValueError, match="max_length must be >= 3"):
        BiConfig(base=str(tiny_base), max_length=2)
    with pytest.raises(ValueError, match="unknown pooling 'max'; expected one of cls, mean"):
        BiConfig(base=str(tiny_base), pooling="max")


def test_training_moves_a_positive_above_the_negatives_and_save_load_keeps_scores(tiny_base, tmp_path):
    torch.manual_seed(0)
    model = registry.create("bi", base=str(tiny_base))
    pairs = [("花呗怎么还款", "花呗如何还钱"), ("花呗怎么还款", "今天天气怎么样"), ("平安银行发布年报", "这只股票涨停了")]
    labels = torch.tensor([1.0, 0.0, 0.0])
    optim = torch.optim.AdamW(model.net.parameters(), lr=1e-3)
    before = model.predict(pairs)
    model.net.train()
    for _ in range(30):
        optim.zero_grad()
        loss = model.loss(model.to_device(model.featurize(pairs)), labels)
        loss.backward()
        optim.step()
    after = model.predict(pairs)
    assert after[0] - after[1] > before[0] - before[1] and after[0] > after[1]
    model.save(tmp_path / "m")
    again = Reranker.load(tmp_path / "m")
    assert isinstance(again, BiEncoderReranker)
    assert np.allclose(again.predict(pairs), after, atol=1e-6)


def test_a_sentence_transformers_folder_loads_as_a_bi_encoder_with_its_pooling(tiny_base, tmp_path):
    import shutil

    folder = tmp_path / "st"
    shutil.copytree(tiny_base, folder)
    write_pooling(folder, pooling="mean", dim=32)
    model = Reranker.load(folder)
    assert isinstance(model, BiEncoderReranker) and model.config.pooling == "mean"
    assert np.allclose(model.encode(TEXTS[:2]), direct_vectors(tiny_base, TEXTS[:2], pooling="mean"), atol=1e-5)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(ModelLoadError, match=r"sets pooling \['pooling_mode_max_tokens'\]; jingpai pools by exactly one of"):
        Reranker.load(folder)
    from jingpai.reranker.models.cross import CrossEncoderReranker

    write_pooling(folder, pooling="cls", dim=32)
    with pytest.raises(ModelLoadError, match="holds a sentence-transformers bi-encoder \\(loaded as 'bi'\\), not 'cross'"):
        CrossEncoderReranker.load(folder)


def test_the_service_embeds_and_reranks_with_it(tiny_base):
    from jingpai.reranker.service import create_app
    from jingpai.reranker.service.settings import ServiceSettings

    model = registry.create("bi", base=str(tiny_base))
    expected = model.encode(TEXTS[:2])
    # fp32: "auto" is bf16 on a CPU with AVX512-BF16 or AMX, and this pins the fp32 vectors
    app = create_app(ServiceSettings(model_name="bi-tiny", warmup=False, dtype="fp32"), model)
    with TestClient(app) as client:
        r = client.post("/embed", json={"inputs": TEXTS[:2]})
        assert r.status_code == 200, r.text
        assert np.allclose(np.array(r.json()), expected, atol=1e-5)
        r = client.post("/rerank", json={"query": TEXTS[0], "texts": TEXTS[1:]})
        assert r.status_code == 200, r.text
        assert [h["index"] for h in r.json()] == [h["index"] for h in model.rank(TEXTS[0], TEXTS[1:])]
