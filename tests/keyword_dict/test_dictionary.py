"""Dictionary files, versions, segmentation and keyword extraction."""

from __future__ import annotations

from pathlib import Path

import jieba
import pytest

from jingpai.keyword_dict import Dictionary, DictionaryError, Entry, Segmenter, extract_keywords, keyword_spans


@pytest.fixture
def small() -> Dictionary:
    return Dictionary.from_scores(
        {"风光360": {"auto": 3.0}, "360公司": {"science": 2.5}, "GDP": {"finance": 2.0}, "中国": {"finance": 0.6, "politics": 0.9}},
        freqs={"GDP": 40, "中国": 300},
    )


def test_save_load_round_trip_and_version_is_content_hash(tmp_path: Path, small: Dictionary) -> None:
    small.save(tmp_path / "d")
    loaded = Dictionary.load(tmp_path / "d")
    assert loaded.version == small.version
    assert loaded.domains("中国") == {"finance": 0.6, "politics": 0.9}
    assert (tmp_path / "d/keywords/finance.txt").read_text(encoding="utf-8").split() == ["GDP", "中国"]
    other = Dictionary.from_scores({"GDP": {"finance": 2.1}})
    assert other.version != small.version


def test_userdict_is_a_valid_jieba_dictionary(tmp_path: Path, small: Dictionary) -> None:
    small.save(tmp_path / "d")
    tok = jieba.Tokenizer()
    tok.load_userdict(str(tmp_path / "d/userdict.txt"))
    assert "风光360" in tok.lcut("风光360发布新车", HMM=False)


def test_backends_agree_and_dictionary_words_stay_whole(small: Dictionary) -> None:
    text = "风光360发布新车，360公司股价大涨，中国GDP增长"
    tokens = Segmenter(small).cut(text)
    assert tokens == Segmenter(small, backend="jieba").cut(text)
    assert "风光360" in tokens and "360公司" in tokens
    assert "风光360" not in Segmenter().cut(text)
    with pytest.raises(ValueError, match="unknown segmenter backend 'ik'; expected one of rjieba, jieba"):
        Segmenter(small, backend="ik")  # type: ignore[arg-type]


def test_backends_identical_on_real_news_with_learned_dictionary(shared_data: Path) -> None:
    from jingpai.keyword_dict import build_dictionary
    from jingpai.keyword_dict.corpus import LabelledSpec, read_labelled

    base = shared_data / "zh/thucnews_titles"
    learned = build_dictionary(read_labelled(base / "part1.tsv", LabelledSpec(1, 0, base / "classes.txt")))
    docs = [line.split("\t", 1)[1] for line in (shared_data / "zh/cnews_sample/docs.tsv").read_text(encoding="utf-8").splitlines()[::4]]
    fast, ref = Segmenter(learned), Segmenter(learned, backend="jieba")
    differing = [i for i, doc in enumerate(docs) if fast.cut(doc) != ref.cut(doc)]
    assert len(docs) == 250 and differing == []


def test_extract_keywords_weights_by_score_and_tf(small: Dictionary) -> None:
    assert extract_keywords("哪些因素会影响中国的GDP", small) == [("GDP", 2.0), ("中国", 0.9)]
    assert extract_keywords("中国中国中国GDP", small, top_k=1) == [("中国", pytest.approx(2.7))]
    assert extract_keywords("今天天气不错", small) == []


def test_keyword_spans_prefer_longest() -> None:
    assert keyword_spans("A股市场与A股", ["A股", "A股市场"]) == [(0, 4), (5, 7)]
    assert keyword_spans("无关", []) == []


def regex_spans(text: str, words: list[str]) -> list[tuple[int, int]]:
    """What keyword_spans was: one regular expression of the words, longest first."""
    import re

    ordered = sorted({w for w in words if w}, key=len, reverse=True)
    if not ordered:
        return []
    return [m.span() for m in re.finditer("|".join(re.escape(w) for w in ordered), text)]


def test_keyword_spans_find_what_the_regular_expression_found(shared_data: Path) -> None:
    import json

    cases = [("aaaa", ["aa"]), ("aaa", ["aa", "a"]), ("abcd", ["bc", "abc", "cd"]), ("abab", ["ab", "ba", "aba"]),
             ("A股市场与A股市", ["A股", "股市", "A股市场", "市"]), ("x.y*z", [".", "*z", ""]), ("", ["a"])]
    for text, words in cases:
        assert keyword_spans(text, words) == regex_spans(text, words), (text, words)
    segmenter = Segmenter()
    rows = [json.loads(line) for _, line in zip(range(60), (shared_data / "zh/sohu/dc-test.jsonl").open(encoding="utf-8"))]
    for row in rows:
        text = row["sentence2"]
        tokens = [t for t in segmenter.cut(text[:400]) if len(t) > 1]
        words = [*tokens[::7][:12], text[5:7], text[5:9]]  # real words, some nested in others
        assert keyword_spans(text, words) == regex_spans(text, words)


def test_load_errors_name_file_and_line(tmp_path: Path, small: Dictionary) -> None:
    with pytest.raises(DictionaryError, match="is not a jingpai dictionary: dictionary.tsv is missing"):
        Dictionary.load(tmp_path)
    small.save(tmp_path / "d")
    tsv = tmp_path / "d/dictionary.tsv"
    tsv.write_text(tsv.read_text(encoding="utf-8") + "坏行\tfinance\n", encoding="utf-8")
    with pytest.raises(DictionaryError, match=r"dictionary.tsv:7: expected 4 tab-separated columns"):
        Dictionary.load(tmp_path / "d")


def test_edited_tsv_is_detected(tmp_path: Path, small: Dictionary) -> None:
    small.save(tmp_path / "d")
    tsv = tmp_path / "d/dictionary.tsv"
    tsv.write_text(tsv.read_text(encoding="utf-8").replace("2.000000", "9.000000"), encoding="utf-8")
    with pytest.raises(DictionaryError, match="does not match the version in meta.json"):
        Dictionary.load(tmp_path / "d")


def test_entries_are_validated() -> None:
    with pytest.raises(DictionaryError, match="duplicate dictionary entry for word 'GDP' in domain 'finance'"):
        Dictionary([Entry("GDP", "finance", 1.0), Entry("GDP", "finance", 2.0)])
    with pytest.raises(DictionaryError, match="unknown domain 'x'; expected one of finance"):
        Dictionary([Entry("GDP", "finance", 1.0)]).domain_words("x")
