"""Mention markers (``cross --config mark_mentions=^``): the model reads ``^name^`` in training, predict and serving alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from jingpai.reranker import registry
from jingpai.reranker.base import ModelLoadError, Reranker
from jingpai.reranker.mentions import MentionMarkerError, mark_mentions, mention_of
from jingpai.reranker.service import ServiceSettings, create_app

QUERY = "中国长城（中国长城科技集团股份有限公司）"
DOCS = ["中国长城发布年报，净利润增长", "游客登上中国长城八达岭段", "长城汽车与中国长城无关，中国长城另有公告", "今天天气怎么样"]


@pytest.fixture(scope="module")
def marking_dir(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = registry.create("cross", base=str(tiny_bert_dir), max_length=48, mark_mentions="^", device="cpu")
    return model.save(tmp_path_factory.mktemp("marking") / "m")


def test_the_mention_is_the_query_before_its_parenthesis() -> None:
    assert mention_of(QUERY) == "中国长城"
    assert mention_of("ABC (ABC Holdings)") == "ABC"
    assert mark_mentions(QUERY, DOCS[2], "^") == "长城汽车与^中国长城^无关，^中国长城^另有公告"
    assert mark_mentions("^x（y）", "^x here", "^") == "^x here"  # a mention holding the marker is left alone


def test_the_model_reads_marked_documents_everywhere(marking_dir: Path, tiny_bert_dir: Path) -> None:
    model = Reranker.load(marking_dir, device="cpu")
    assert model.config.mark_mentions == "^" and not model.reads_pair_encodings
    marked = [(QUERY, mark_mentions(QUERY, d, "^")) for d in DOCS]
    # the same weights without marking, fed the marked texts, are the marking model
    plain = Reranker.load(marking_dir, device="cpu", overrides={"mark_mentions": None})
    batch, by_hand = model.featurize([(QUERY, d) for d in DOCS]), plain.featurize(marked)
    assert torch.equal(batch["input_ids"], by_hand["input_ids"])
    assert not torch.equal(batch["input_ids"], plain.featurize([(QUERY, d) for d in DOCS])["input_ids"])
    np.testing.assert_array_equal(model.predict([(QUERY, d) for d in DOCS]), plain.predict(marked))


def test_the_service_scores_marked_documents_as_predict_does(marking_dir: Path) -> None:
    model = Reranker.load(marking_dir, device="cpu")
    with TestClient(create_app(ServiceSettings(model_name="m", dtype="fp32"), model)) as client:
        assert client.get("/info").json()["token_ids_once"] is False  # marked texts are not the measured ones
        got = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "raw_scores": True})
    assert got.status_code == 200, got.text
    direct = model.predict([(QUERY, d) for d in DOCS])
    assert {r["index"]: r["score"] for r in got.json()} == pytest.approx(dict(enumerate(direct.tolist())), abs=1e-5)


def test_a_bad_marker_is_refused_naming_it(tiny_bert_dir: Path, marking_dir: Path) -> None:
    with pytest.raises(MentionMarkerError, match="mention marker must be one non-space character, got '<>'"):
        registry.create("cross", base=str(tiny_bert_dir), mark_mentions="<>", device="cpu")
    with pytest.raises((ModelLoadError, MentionMarkerError), match="got ' '"):
        Reranker.load(marking_dir, device="cpu", overrides={"mark_mentions": " "})
