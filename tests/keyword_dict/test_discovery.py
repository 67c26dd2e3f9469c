"""New-word discovery: PMI of the weakest split, neighbour entropy, mixed Latin/digit units."""

from __future__ import annotations

import dataclasses
import math

import pytest

from jingpai.keyword_dict.discovery import DiscoverySettings, candidate_mask, discover
from jingpai.keyword_dict.ngrams import UnitCodec
from jingpai.keyword_dict.text import is_candidate_word, segments, units

LOOSE = DiscoverySettings(min_count=3, min_pmi=0.0, min_entropy=0.0)


def test_segments_keep_latin_runs_whole_and_split_on_punctuation() -> None:
    assert list(segments("同步A股首秀：港股5G手机，GDP")) == [
        ["同", "步", "A", "股", "首", "秀"],
        ["港", "股", "5G", "手", "机"],
        ["GDP"],
    ]
    assert units("A股") == ["A", "股"]
    assert units("A-股") == []


@pytest.mark.parametrize(
    ("word", "ok"),
    [("A股", True), ("GDP", True), ("中国", True), ("中", False), ("2010", False), ("跌2", False), ("大学2010年", False), ("98折", True), ("PS3", True), ("360公司", True)],
)
def test_candidate_word_rules(word: str, ok: bool) -> None:
    assert is_candidate_word(word) is ok


def test_sticky_free_word_is_found_and_weak_split_rejected() -> None:
    # 区块链 appears in varied contexts (free edges); 链技 only inside 区块链技术 (its left side is fixed)
    docs = ["区块链技术发展很快", "我们发展区块链产业", "银行试水区块链应用", "区块链", "看好区块链前景"] * 2
    words = {c.word: c for c in discover(docs, DiscoverySettings(min_count=5, min_pmi=0.5, min_entropy=0.5))}
    assert "区块链" in words
    assert "块链" not in words  # its left neighbour is always 区: zero left entropy
    c = words["区块链"]
    assert c.freq == 10
    # left neighbours: 展, 水, 好 twice each, and 4 segment starts that each count as a distinct neighbour
    assert c.left_entropy == pytest.approx(-3 * (0.2 * math.log(0.2)) - 4 * (0.1 * math.log(0.1)))


def test_pmi_takes_the_weakest_split() -> None:
    docs = ["甲乙丙", "甲乙丁", "戊乙丙", "甲乙丙"]
    found = {c.word: c for c in discover(docs, DiscoverySettings(min_count=1, min_pmi=-100, min_entropy=0))}
    total = 12
    p = lambda c: c / total  # noqa: E731
    # 甲乙丙: splits 甲|乙丙 and 甲乙|丙; counts 甲3 乙4 丙3 甲乙3 乙丙3 甲乙丙2
    expected = min(math.log(p(2) / (p(3) * p(3))), math.log(p(2) / (p(3) * p(3))))
    assert found["甲乙丙"].pmi == pytest.approx(expected)
    assert found["乙丙"].pmi == pytest.approx(math.log(p(3) / (p(4) * p(3))))


def test_mixed_latin_tokens_are_discovered() -> None:
    docs = [f"{ctx}A股{tail}" for ctx, tail in zip("今昨明前后看", "涨跌稳强弱平")] * 2
    found = {c.word for c in discover(docs, LOOSE)}
    assert "A股" in found


def test_thresholds_are_validated() -> None:
    with pytest.raises(ValueError, match="n-gram range must satisfy 1 <= min_n <= max_n, got min_n=4, max_n=2"):
        DiscoverySettings(min_n=4, max_n=2)


def test_real_news_corpus(shared_data) -> None:
    docs = [line.split("\t", 1)[1] for line in (shared_data / "zh/cnews_sample/docs.tsv").read_text(encoding="utf-8").splitlines()[:300]]
    found = {c.word for c in discover(docs)}
    # sticky, free-edged domain words of this slice (sports / entertainment news)
    assert {"季后赛", "NBA"} & found
    assert not any(w.endswith("的") and len(w) == 2 for w in found if w in {"中国的", "我们的"})


def test_chunked_counting_equals_one_pass_and_pruning_bounds_tables(shared_data, caplog) -> None:
    docs = [line.split("\t", 1)[1] for line in (shared_data / "zh/cnews_sample/docs.tsv").read_text(encoding="utf-8").splitlines()[:120]]
    whole = discover(docs)
    chunked = discover(docs, DiscoverySettings(chunk_chars=20_000))
    assert whole and [(c.word, c.freq) for c in chunked] == [(c.word, c.freq) for c in whole]
    assert [c.pmi for c in chunked] == pytest.approx([c.pmi for c in whole])
    # one chunk is counted by exact ranks (pruned to what candidates read), several by merged hash tables
    for settings in (DiscoverySettings(), DiscoverySettings(min_count=3, max_n=4, min_pmi=1.0, min_entropy=0.5)):
        one = discover(docs, settings)
        many = discover(docs, dataclasses.replace(settings, chunk_chars=20_000))
        assert len(one) > 50 and [(c.word, c.freq) for c in many] == [(c.word, c.freq) for c in one]
        assert [(c.pmi, c.left_entropy, c.right_entropy) for c in many] == [pytest.approx((c.pmi, c.left_entropy, c.right_entropy)) for c in one]
    with caplog.at_level("INFO", logger="jingpai.keyword_dict.discovery"):
        bounded = discover(docs, DiscoverySettings(chunk_chars=20_000, max_table=20_000))
    assert any("pruned" in r.message for r in caplog.records)
    # lossy counting keeps the frequent words
    top = {c.word for c in whole[:50]}
    assert top <= {c.word for c in bounded}


def test_vectorised_candidate_rule_matches_is_candidate_word(shared_data) -> None:
    tricky = ["A股", "GDP", "中", "2010", "跌2", "大学2010年", "98折", "PS3", "360公司", "", "A-股", "ＧＤＰ", "１２３４",
              "a", "ab", "Ａｂ", "iPhone5", "3.5", "中国 人", "5G手机", "2010年", "1234中", "中1234", "x2010y"]
    text = (shared_data / "zh/cnews_sample/docs.tsv").read_text(encoding="utf-8")[:50_000]
    words = tricky + sorted({w for seg in segments(text) for n in (1, 2, 3) for w in ("".join(seg[i : i + n]) for i in range(len(seg)))})
    assert candidate_mask(words).tolist() == [is_candidate_word(w) for w in words]


def test_latin_run_ids_do_not_depend_on_the_codec_or_text() -> None:
    ids, _, _ = UnitCodec().encode_docs(["看好A股与GDP", "GDPR"])
    n_units, word_ids = UnitCodec().encode_words(["GDP", "GDPR", "A股"])
    assert n_units.tolist() == [1, 1, 2]
    assert set(word_ids.tolist()) <= set(ids.tolist())
    assert word_ids[0] != word_ids[1]  # GDP is not GDPR
