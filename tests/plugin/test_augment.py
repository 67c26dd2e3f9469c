"""Query rewriting (no engine): which clauses are widened, with what, and what is left alone."""

from __future__ import annotations

import pytest

from jingpai.indexer.mapping import IndexMeta
from jingpai.keyword_dict import Dictionary, Segmenter
from jingpai.plugin.augment import DictionaryStore, QueryRewriter, find_full_text, parse_full_text

D = Dictionary.from_scores({"中国": {"econ": 1.5}, "GDP": {"econ": 3.0}, "银行": {"finance": 1.8}})
TF_META = IndexMeta(text_fields=("title", "content"), dict_version=D.version, weight_encoding="term_frequency", entity_encoding="nested")
RF_META = IndexMeta(text_fields=("title", "content"), dict_version=D.version, weight_encoding="rank_features", entity_encoding="rank_features")


def rewriter(meta: IndexMeta = TF_META) -> QueryRewriter:
    # every added clause at boost 1.0, so the tests see each of them and the raw keyword weights
    return QueryRewriter(meta, dictionary=D, segmenter=Segmenter(D), seg_boost=1.0, keyword_boost=1.0, weight_boost=1.0)


def test_match_is_wrapped_with_segmented_and_keyword_clauses() -> None:
    original = {"match": {"content": {"query": "中国的GDP", "operator": "and"}}}
    result = rewriter()(original)
    should = result.query["bool"]["should"]
    assert result.query["bool"]["minimum_should_match"] == 1
    assert should[0] == original
    assert should[1]["multi_match"]["fields"] == ["jingpai.seg.content"]
    assert set(should[1]["multi_match"]["query"].split()) >= {"中国", "GDP"}
    assert set(should[2]["terms"]["jingpai.keywords"]) == {"中国", "GDP"}
    assert set(should[3]["match"]["jingpai.kw"]["query"].split()) == {"中国", "GDP"}
    assert [w for w, _ in result.keywords] == ["GDP", "中国"]
    assert result.augmented == 1 and result.query_text == "中国的GDP"


def test_rank_features_encoding_uses_rank_feature_clauses() -> None:
    should = rewriter(RF_META)({"match_phrase": {"title": "中国GDP"}}).query["bool"]["should"]
    features = {c["rank_feature"]["field"]: c["rank_feature"]["boost"] for c in should if "rank_feature" in c}
    assert features == {"jingpai.kw.GDP": pytest.approx(1.0), "jingpai.kw.中国": pytest.approx(0.5)}


def test_negative_contexts_and_other_fields_are_left_alone() -> None:
    query = {
        "bool": {
            "must": [{"multi_match": {"query": "银行", "fields": ["title^2", "tags"]}}],
            "must_not": [{"match": {"content": "中国"}}],
            "filter": [{"term": {"lang": "zh"}}, {"match": {"author": "中国"}}],
        }
    }
    result = rewriter()(query)
    assert result.query["bool"]["must_not"] == query["bool"]["must_not"]
    assert result.query["bool"]["filter"] == query["bool"]["filter"]
    widened = result.query["bool"]["must"][0]["bool"]["should"]
    assert widened[1]["multi_match"]["fields"] == ["jingpai.seg.title"]  # tags is not a text field
    assert [c.text for c in result.clauses] == ["银行"]


def test_query_string_syntax_is_removed_and_default_field_targets_all_text_fields() -> None:
    clause = parse_full_text("query_string", {"query": 'title:"中国GDP" AND (银行 OR 利率~2)'}, ("title", "content"))
    assert clause is not None
    assert clause.text == "中国GDP 银行 利率 2"
    assert clause.fields == ("title", "content")
    assert parse_full_text("simple_query_string", {"query": "x", "fields": ["other*"]}, ("title",)) is None


def test_find_full_text_walks_compound_queries() -> None:
    query = {"function_score": {"query": {"dis_max": {"queries": [{"match": {"title": "中国"}}, {"match_phrase": {"content": "GDP"}}]}}}}
    assert [(c.kind, c.text, c.fields) for c in find_full_text(query, ("title", "content"))] == [
        ("match", "中国", ("title",)),
        ("match_phrase", "GDP", ("content",)),
    ]


def test_dictionary_store_matches_by_version(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    D.save(tmp_path / "d")
    store = DictionaryStore([tmp_path / "d"])
    assert store.versions == [D.version]
    assert store.get(D.version)[0].version == D.version
    with caplog.at_level("WARNING"):
        assert store.get("000000000000") is None
    assert "keyword dictionary 000000000000 (used by an index) is not loaded" in caplog.text
