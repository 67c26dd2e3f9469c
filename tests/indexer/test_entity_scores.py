"""Index-time entity scores: a real tiny BERTCA scores title entities against bodies, the engine ranks by them.

Everything is real: documents indexed by ``index_corpus`` into both engines, a tiny local BERT checkpoint
trained briefly as a ``bertca`` model, bulk partial updates, and plain ``_search`` requests sent straight to
the engine with :func:`entity_query`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from jingpai.engine.client import Engine
from jingpai.commands.index import index as index_cli
from jingpai.jobs.entity_scores import (
    MIN_FEATURE,
    EntityScoreSettings,
    EntityScoringError,
    encode_entity_scores,
    entity_query,
    score_entities,
)
from jingpai.indexer.mapping import IndexMeta, read_meta
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.keyword_dict import Dictionary, extract_keywords
from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.data import LabeledPair
from jingpai.reranker.models.bertca import BertCAReranker
from jingpai.reranker.tiny import build_tiny_checkpoint
from jingpai.reranker.train import TrainSettings, train

BODY_VANKE = "万科的股权之争持续发酵，宝能系再度增持万科股份，万科管理层发布公告回应。"
BODY_MAOTAI = "茅台股价创出新高，白酒板块领涨大盘，茅台市值突破两万亿元。"
BODY_WEATHER = "今天天气很好，阳光明媚，适合出去走走。"
BODY_HUABEI = "花呗怎么还款，花呗逾期会不会影响个人征信。"
BODY_EJIAO = "前海人寿二季度再度增持东阿阿胶，持股比例已增至百分之四。"

DOCS = [
    {"id": "d1", "title": "万科股权之争", "content": BODY_VANKE},
    {"id": "d2", "title": "万科与茅台", "content": BODY_MAOTAI},
    {"id": "d3", "title": "万科周末", "content": BODY_WEATHER},
    {"id": "d4", "title": "花呗还款", "content": BODY_HUABEI},
    {"id": "d5", "title": "东阿阿胶增持", "content": BODY_EJIAO},
    {"id": "d6", "title": "无正文", "content": ""},
]
WORDS = {"万科": 3.0, "茅台": 2.5, "花呗": 2.0, "东阿阿胶": 2.8, "股权": 1.0, "增持": 1.2}
TRAIN = [
    ("万科", BODY_VANKE, 2), ("万科", BODY_WEATHER, 0), ("万科", BODY_MAOTAI, 1),
    ("茅台", BODY_MAOTAI, 2), ("茅台", BODY_WEATHER, 0),
    ("花呗", BODY_HUABEI, 2), ("花呗", BODY_VANKE, 0),
    ("东阿阿胶", BODY_EJIAO, 2), ("东阿阿胶", BODY_HUABEI, 0),
    ("增持", BODY_EJIAO, 2), ("股权", BODY_WEATHER, 0),
]
TINY = {"context_hidden": 8, "decoder": "mlp", "decoder_hidden": 8, "sim": "bilinear", "k_max": 3,
        "mlp_hidden": (16,), "dropout": 0.0, "max_length": 48, "query_max_length": 8}


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    return Dictionary.from_scores({w: {"finance": s} for w, s in WORDS.items()})


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts = [d["title"] + d["content"] for d in DOCS] + list(WORDS)
    return build_tiny_checkpoint(tmp_path_factory.mktemp("ent-bert"), texts, hidden_size=32, num_layers=1, max_position=64)


@pytest.fixture(scope="module")
def bertca_dir(base_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERTCA trained briefly on a few (entity, body, level) pairs, saved to disk."""
    torch.manual_seed(0)
    model = registry.create("bertca", base=str(base_dir), device="cpu", **TINY)
    pairs = [LabeledPair(q, d, float(label)) for q, d, label in TRAIN]
    settings = TrainSettings(epochs=60, batch_size=len(pairs), lr=1e-2, warmup_ratio=0.0, patience=None, progress=False)
    out = tmp_path_factory.mktemp("ent-bertca")
    train(model, pairs, None, settings, out_dir=out)
    return out


@pytest.fixture(scope="module")
def bertca(bertca_dir: Path) -> Reranker:
    """The saved model loaded separately, to compute expected scores independently of the command."""
    model = Reranker.load(bertca_dir, device="cpu")
    assert isinstance(model, BertCAReranker)
    return model


def build_index(engine: Engine, name: str, tmp_path: Path, dictionary: Dictionary) -> IndexMeta:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8")
    settings = IndexSettings(index=name, id_field="id", quarantine_dir=tmp_path, progress=False)
    report = index_corpus(engine, [corpus], settings, dictionary=dictionary)
    assert report.indexed == len(DOCS)
    return read_meta(engine, name)


def stored_scores(engine: Engine, name: str, meta: IndexMeta) -> dict[str, dict[str, float]]:
    """``{doc id: {entity: score}}`` as the engine stores them."""
    hits = engine.search(name, {"size": 100, "query": {"match_all": {}}})["hits"]["hits"]
    out: dict[str, dict[str, float]] = {}
    for hit in hits:
        value = hit["_source"].get("jingpai", {}).get("entity_scores")
        if value is None:
            continue
        out[hit["_id"]] = dict(value) if isinstance(value, dict) else {row["entity"]: row["score"] for row in value}
    return out


def test_bertca_scores_are_written_and_the_engine_ranks_by_them(
    engine: Engine, index_name: str, tmp_path: Path, dictionary: Dictionary, bertca_dir: Path, bertca: Reranker
) -> None:
    meta = build_index(engine, index_name, tmp_path, dictionary)
    # integ-test distributions have no mapper-extras: the nested encoding is what both engines use here
    assert meta.entity_encoding == "nested"

    model = Reranker.load(bertca_dir, device="cpu")
    report = score_entities(engine, model, EntityScoreSettings(index=index_name, batch_size=2, progress=False))
    assert report.precomputed is True
    assert report.documents == len(DOCS) and report.updated == len(DOCS) - 1
    assert report.skipped == {"no content": 1} and not report.failed

    stored = stored_scores(engine, index_name, meta)
    assert set(stored) == {"d1", "d2", "d3", "d4", "d5"}
    sources = {h["_id"]: h["_source"] for h in engine.search(index_name, {"size": 100})["hits"]["hits"]}
    for doc_id, scores in stored.items():
        assert list(scores) == sources[doc_id]["jingpai"]["keywords"][:10]
        # independent check: the full pairwise forward pass of the separately loaded model
        expected = bertca.predict([(e, sources[doc_id]["content"]) for e in scores])
        np.testing.assert_allclose(list(scores.values()), expected, atol=1e-4)

    # 万科 is a title entity of d1, d2, d3 with bodies of decreasing relevance (trained so)
    vanke = {doc_id: s["万科"] for doc_id, s in stored.items() if "万科" in s}
    assert set(vanke) == {"d1", "d2", "d3"}
    expected_order = sorted(vanke, key=lambda d: -float(bertca.predict([("万科", sources[d]["content"])])[0]))
    gaps = np.diff(sorted(vanke.values()))
    assert gaps.min() > 1e-3, f"scores too close to order meaningfully: {vanke}"
    assert vanke["d1"] > vanke["d2"] > vanke["d3"]

    resp = engine.search(index_name, {"query": entity_query(meta, "万科"), "size": 10})
    hits = resp["hits"]["hits"]
    assert [h["_id"] for h in hits] == expected_order
    np.testing.assert_allclose([h["_score"] for h in hits], [vanke[d] for d in expected_order], rtol=1e-5)

    # as a should-clause next to a text query sent straight to the engine, it reorders the text matches
    body = {"query": {"bool": {"must": {"match": {"title": "万科"}}, "should": [entity_query(meta, "万科", boost=100.0)]}}}
    hits = engine.search(index_name, body)["hits"]["hits"]
    assert [h["_id"] for h in hits] == expected_order

    # an entity nobody was scored for matches nothing
    assert engine.search(index_name, {"query": entity_query(meta, "不存在")})["hits"]["hits"] == []


def test_pairwise_fallback_with_title_keywords(
    engine: Engine, index_name: str, tmp_path: Path, dictionary: Dictionary, base_dir: Path
) -> None:
    meta = build_index(engine, index_name, tmp_path, dictionary)
    torch.manual_seed(0)
    cross = registry.create("cross", base=str(base_dir), device="cpu", max_length=48)
    report = score_entities(
        engine, cross, EntityScoreSettings(index=index_name, entities="title-keywords", progress=False), dictionary=dictionary
    )
    assert report.precomputed is False and not report.failed
    stored = stored_scores(engine, index_name, meta)
    # d3's title 万科周末 and d2's 万科与茅台: entities come from the title only (d1's body words are not entities)
    for doc in DOCS:
        if not doc["content"]:
            assert doc["id"] not in stored
            continue
        title_words = [w for w, _ in extract_keywords(doc["title"], dictionary)]
        assert list(stored[doc["id"]]) == title_words
        expected = cross.predict([(w, doc["content"]) for w in title_words])
        np.testing.assert_allclose(list(stored[doc["id"]].values()), expected, atol=1e-4)
    assert list(stored["d1"]) == ["万科", "股权"]


def test_cli_scores_and_rescoring_replaces_old_entities(
    engine: Engine, index_name: str, tmp_path: Path, dictionary: Dictionary, bertca_dir: Path
) -> None:
    meta = build_index(engine, index_name, tmp_path, dictionary)
    runner = CliRunner()
    args = ["score-entities", index_name, "--model", str(bertca_dir), "--engine", engine.url]
    result = runner.invoke(index_cli, args)
    assert result.exit_code == 0, result.output
    assert f"{index_name}: read 6 / updated 5 / failed 0" in result.output
    assert "precomputed document encodings" in result.output
    assert len(stored_scores(engine, index_name, meta)["d2"]) == 2  # 万科, 茅台

    result = runner.invoke(index_cli, [*args, "--max-entities", "1"])
    assert result.exit_code == 0, result.output
    assert all(len(s) == 1 for s in stored_scores(engine, index_name, meta).values())


def test_cli_errors_name_the_problem(engine: Engine, index_name: str, tmp_path: Path, bertca_dir: Path) -> None:
    runner = CliRunner()
    engine.create_index(index_name, mappings={"properties": {"title": {"type": "text"}}})
    result = runner.invoke(index_cli, ["score-entities", index_name, "--model", str(bertca_dir), "--engine", engine.url])
    assert result.exit_code == 1
    assert f"index {index_name!r} was not built by `jingpai index`" in result.output

    result = runner.invoke(index_cli, ["score-entities", f"{index_name}-missing", "--model", str(bertca_dir), "--engine", engine.url])
    assert result.exit_code == 1
    assert f"no index or alias named '{index_name}-missing'" in result.output

    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    result = runner.invoke(index_cli, ["score-entities", index_name, "--model", str(not_a_model), "--engine", engine.url])
    assert result.exit_code == 1
    assert "is not a saved jingpai model: jingpai_model.json is missing" in result.output


def test_settings_and_fields_are_checked(engine: Engine, index_name: str, tmp_path: Path, dictionary: Dictionary, bertca: Reranker) -> None:
    build_index(engine, index_name, tmp_path, dictionary)
    with pytest.raises(EntityScoringError, match=r"needs the keyword dictionary \(--dict DIR\)"):
        score_entities(engine, bertca, EntityScoreSettings(index=index_name, entities="title-keywords"))
    with pytest.raises(EntityScoringError, match=r"body field 'body' is not a text field of index .*; expected one of title, content"):
        score_entities(engine, bertca, EntityScoreSettings(index=index_name, body_field="body"))
    with pytest.raises(ValueError, match=r"unknown entity source 'names'; expected one of keywords, title-keywords"):
        EntityScoreSettings(index=index_name, entities="names")  # type: ignore[arg-type]


def test_rank_features_encoding_and_query() -> None:
    meta = IndexMeta(text_fields=("title", "content"), dict_version=None, weight_encoding="rank_features",
                     entity_encoding="rank_features")
    encoded = encode_entity_scores({"S&P 500": 0.7, "node.js": 0.0}, meta)
    assert encoded == {"S&P_500": 0.7, "node_js": MIN_FEATURE}
    assert entity_query(meta, "node.js", boost=2.0) == {
        "rank_feature": {"field": "jingpai.entity_scores.node_js", "boost": 2.0}
    }
    nested = IndexMeta(text_fields=("title", "content"), dict_version=None, weight_encoding="term_frequency",
                       entity_encoding="nested")
    assert encode_entity_scores({"万科": 0.25}, nested) == [{"entity": "万科", "score": 0.25}]
    with pytest.raises(ValueError, match="entity must be a non-empty string"):
        entity_query(nested, " ")
