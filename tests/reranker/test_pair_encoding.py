"""Pair inputs from text and from each side's token ids (:class:`PairEncoder`), on the tokenizers of four
real model families (tiny vocabularies built locally), against the ``transformers`` tokenizer's own call."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer

from jingpai.reranker.pair_encoding import PairEncoder, longest_first
from jingpai.reranker.tiny import FAMILIES, build_tiny_checkpoint

TEXTS = ["苹果公司发布新款 iPhone 手机，售价 5999 元起。", "what is bm25", "影响中国GDP增长的因素有哪些", "Hugo Young wrote The Iron Lady"]
PAIRS = [
    ("苹果 手机", "苹果公司发布新款 iPhone 手机，售价 5999 元起。"),
    ("what is bm25", "BM25 is a ranking function " * 12),  # long document: only the document is cut
    ("影响中国GDP增长的因素有哪些" * 6, "短"),  # long query: only the query is cut
    ("影响中国GDP增长的因素" * 5, "苹果公司发布新款手机" * 5),  # both cut, to halves
    ("", "空"),
    ("a", ""),
]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    import transformers
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("pair-encoding")
    out = {}
    for family in FAMILIES:
        if family == "modernbert" and not hasattr(transformers, "ModernBertConfig"):
            continue
        path = build_tiny_checkpoint(root / family, TEXTS, family=family, num_labels=1, max_position=64)
        out[family] = AutoTokenizer.from_pretrained(path)
    return out


def sides(tokenizer, pairs: list[tuple[str, str]]) -> list[tuple[object, object]]:
    """Each side's own encoding (no special tokens, uncut), as the rerank service measures texts."""
    own = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    own.no_truncation()
    own.no_padding()
    return [(own.encode(q, add_special_tokens=False), own.encode(d, add_special_tokens=False)) for q, d in pairs]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("max_length", [3, 8, 24, 64])
def test_joined_token_ids_are_the_tokenizers_pair_input(tokenizers, family: str, max_length: int) -> None:
    if family not in tokenizers:
        pytest.skip(f"this transformers has no {family}")
    tokenizer = tokenizers[family]
    encoder = PairEncoder(tokenizer)
    assert encoder.fast and encoder.templated  # the fast path is the one under test
    theirs = dict(tokenizer([q for q, _ in PAIRS], [d for _, d in PAIRS], padding=True, truncation="longest_first",
                            max_length=max_length, return_tensors="pt"))
    joined = encoder.tensors([encoder.join(q, d, max_length=max_length) for q, d in sides(tokenizer, PAIRS)])
    from_text = encoder(PAIRS, max_length=max_length)
    assert joined.keys() == theirs.keys() == from_text.keys()
    for name, tensor in theirs.items():
        assert torch.equal(joined[name], tensor), name
        assert torch.equal(from_text[name], tensor), name


def test_longest_first_is_the_tokenizers_cut_for_every_length(tokenizers) -> None:
    tokenizer = tokenizers["bert"]
    encoder = PairEncoder(tokenizer)
    pairs = [("a " * q, "b " * d) for q in range(12) for d in range(12)]
    for max_length in (5, 9, 14):
        for (q, d), enc in zip(pairs, encoder.encode(pairs, max_length=max_length), strict=True):
            kept = longest_first(q.count("a"), d.count("b"), max_length - 3)
            assert (enc.ids.count(tokenizer.convert_tokens_to_ids("a")), enc.ids.count(tokenizer.convert_tokens_to_ids("b"))) == kept


def test_a_left_padding_tokenizer_goes_through_its_own_call(tokenizers) -> None:
    import copy

    left = copy.deepcopy(tokenizers["bert"])
    left.padding_side = "left"
    encoder = PairEncoder(left)
    assert not encoder.fast
    theirs = dict(left([q for q, _ in PAIRS], [d for _, d in PAIRS], padding=True, truncation="longest_first", max_length=24, return_tensors="pt"))
    ours = encoder(PAIRS, max_length=24)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], v) for k, v in theirs.items())
    with pytest.raises(TypeError, match="tokenizer BertTokenizer is not a right-padding fast tokenizer with a pad token; call the encoder on text"):
        encoder.encode(PAIRS, max_length=24)


@pytest.mark.parametrize("max_length", [3, 24])  # 3: too short for the template, the tokenizer's post_process joins
def test_only_the_counted_tokens_of_a_longer_encoding_are_joined(tokenizers, max_length: int) -> None:
    # the rerank service measures a long document on a prefix longer than the tokens it keeps
    tokenizer = tokenizers["bert"]
    encoder = PairEncoder(tokenizer)
    doc = "影响中国GDP增长的因素有哪些" * 4
    kept = 10
    (query, longer), = sides(tokenizer, [("苹果 手机", doc)])
    (_, exact), = sides(tokenizer, [("", doc[:kept])])
    assert len(longer) > kept and len(exact) == kept
    counted = encoder.tensors([encoder.join(query, longer, max_length=max_length, document_tokens=kept)])
    cut = encoder.tensors([encoder.join(query, exact, max_length=max_length)])
    assert all(torch.equal(counted[k], v) for k, v in cut.items())


@pytest.mark.parametrize("max_length", [4, 8, 24, 64])
def test_cut_reads_are_laid_out_as_the_tokenizers_pair_input(tokenizers, max_length: int) -> None:
    """Pairs joined from each side's array read (:class:`CutPair`: nothing copied per pair, the batch laid into the
    template at once) and a batch mixing them with Rust encodings give the tokenizer's own tensors."""
    from jingpai.reranker.pair_encoding import CutPair

    tokenizer = tokenizers["bert"]
    encoder = PairEncoder(tokenizer)
    assert encoder.reads_ids
    theirs = dict(tokenizer([q for q, _ in PAIRS], [d for _, d in PAIRS], padding=True, truncation="longest_first",
                            max_length=max_length, return_tensors="pt"))
    reads = [(encoder.side_ids([q], cap=1 << 30)[0], encoder.side_ids([d], cap=1 << 30)[0]) for q, d in PAIRS]
    cut = [encoder.join(q, d, max_length=max_length) for q, d in reads]
    assert all(isinstance(c, CutPair) for c in cut)
    mixed = [*cut[:2], *encoder.encode(PAIRS[2:4], max_length=max_length), *cut[4:]]
    for batch in (cut, mixed):
        ours = encoder.tensors(batch)
        assert ours.keys() == theirs.keys()
        for name, tensor in theirs.items():
            assert torch.equal(ours[name], tensor), name
