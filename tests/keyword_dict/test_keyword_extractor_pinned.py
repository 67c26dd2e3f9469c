"""Issue 54's faster keyword path gives the keywords and spans of the code it replaced, on real articles.

The reference is the extractor as it was: the segmenter's filtered tokens, every dictionary word scored and sorted
by score (stable), the top k kept, and the spans of those words searched in the whole text.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from jingpai.keyword_dict import Dictionary, KeywordExtractor, Segmenter, keyword_spans


def articles(shared_data: Path, start: int, stop: int) -> list[str]:
    with (shared_data / "zh/sohu/dc-test.jsonl").open(encoding="utf-8") as fh:
        rows = [json.loads(line)["sentence2"] for _, line in zip(range(stop), fh)]
    return rows[start:]


@pytest.fixture(scope="module")
def real_dictionary(shared_data: Path) -> Dictionary:
    """Words of other real articles (their frequent segmenter tokens), with repeated scores so that ties occur, plus
    words nested in others and zero and negative scores (never keywords)."""
    counts = Counter(t for text in articles(shared_data, 200, 260) for t in Segmenter().cut(text) if len(t) > 1)
    words = [w for w, c in counts.most_common() if c >= 3]
    scores = {w: {"news": (0.5, 1.25, 2.0, 0.0, -1.0)[i % 5]} for i, w in enumerate(words)}
    scores |= {"A股": {"finance": 2.0}, "A股市场": {"finance": 2.0}, "股市": {"finance": 1.25}}
    return Dictionary.from_scores(scores)


def old_weighted(text: str, dictionary: Dictionary, segmenter: Segmenter, top_k: int | None) -> list[tuple[str, float]]:
    weights = dictionary.weights()
    counts = Counter(filter(weights.__contains__, segmenter.cut(text)))
    scored = [(w, s) for w, s in ((w, weights[w] * c) for w, c in counts.items()) if s > 0]
    scored.sort(key=lambda ws: -ws[1])
    return scored if top_k is None else scored[:top_k]


@pytest.mark.parametrize("top_k", [10, 3, None])
def test_keywords_and_spans_as_before_on_real_articles(shared_data: Path, real_dictionary: Dictionary, top_k: int | None) -> None:
    extractor = KeywordExtractor(real_dictionary, top_k=top_k)
    texts = [*articles(shared_data, 0, 80), "A股市场与A股", "中国 \u3000GDP\t", ""]
    tied = 0
    for text in texts:
        before = old_weighted(text, real_dictionary, extractor.segmenter, top_k)
        assert extractor.weighted(text) == before, text[:40]
        tied += len({s for _, s in before}) < len(before)
        whole = keyword_spans(text, [w for w, _ in before])
        assert extractor.spans(text) == whole
        for end in (0, 1, 50, 253, 320, len(text)):
            assert extractor.spans(text, before=end) == [s for s in whole if s[0] < end], (text[:40], end)
    assert tied > 20  # the ties' order (first occurrence) is what is pinned


def test_a_whitespace_word_is_still_counted_with_its_filter() -> None:
    # a dictionary word that is whitespace (no built dictionary has one) keeps the segmenter's whitespace filter
    dictionary = Dictionary.from_scores({"\u3000": {"x": 5.0}, "中国": {"x": 1.0}})
    extractor = KeywordExtractor(dictionary)
    assert extractor.weighted("中国\u3000中国") == old_weighted("中国\u3000中国", dictionary, extractor.segmenter, 10)


def test_spans_before_a_cut_are_the_whole_texts_spans_there() -> None:
    text = "A股市场与A股市"
    words = ["A股", "股市", "A股市场", "市"]
    whole = keyword_spans(text, words)
    assert whole == [(0, 4), (5, 7), (7, 8)]
    for end in range(len(text) + 2):
        assert keyword_spans(text, words, before=end) == [s for s in whole if s[0] < end], end
