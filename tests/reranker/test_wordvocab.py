"""Word tokenizer, vocabulary/IDF statistics, word vectors and the padding-aware helpers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.reranker.masking import masked_max, masked_mean, masked_softmax
from jingpai.reranker.wordvocab import (
    PAD_ID,
    UNK_ID,
    VocabError,
    WordTokenizer,
    WordVocab,
    embedding_matrix,
    pad_ids,
    read_word_vectors,
)


@pytest.fixture(scope="module")
def tokenizer() -> WordTokenizer:
    return WordTokenizer()


def test_tokenizer_cuts_chinese_words_and_keeps_latin_words_whole(tokenizer: WordTokenizer) -> None:
    words = tokenizer.cut("哪些因素会影响中国的GDP？ What's the U.S. GDP, covid-19!")
    assert "中国" in words and "影响" in words
    assert words[-6:] == ["gdp", "what's", "the", "u.s", "gdp", "covid-19"]
    assert not any(w in {"？", "?", ",", "!", " "} for w in words)


def test_tokenizer_is_deterministic_hmm_off(tokenizer: WordTokenizer) -> None:
    # with the HMM on, jieba glues unknown character runs into new words; off, they stay split
    import rjieba

    text = "蚂蚁借呗等额还款可以换成先息后本吗"
    assert tokenizer.cut(text) == [w for w in rjieba.cut(text, hmm=False) if w.strip()]


def test_tokenizer_rejects_non_text(tokenizer: WordTokenizer) -> None:
    with pytest.raises(TypeError, match="expected text as str, got int: 5"):
        tokenizer.cut(5)  # type: ignore[arg-type]


def test_vocab_ids_df_and_idf() -> None:
    texts = ["银行 怎么 还款", "信用卡 怎么 还款", "银行 额度", "怎么 办"]
    vocab = WordVocab.build(texts)
    assert vocab.words[:2] == ["[PAD]", "[UNK]"]
    assert vocab.encode(["银行", "股票"]) == [vocab.index["银行"], UNK_ID]
    assert vocab.num_docs == 4
    assert vocab.df[vocab.index["怎么"]] == 3 and vocab.df[vocab.index["额度"]] == 1
    # rarer words weigh more; an unseen word weighs most
    assert vocab.idf("额度") > vocab.idf("银行") > vocab.idf("怎么")
    assert vocab.idf("股票") == pytest.approx(math.log(5) + 1)
    assert vocab.bigram_idf("怎么", "还款") < vocab.bigram_idf("银行", "额度") < vocab.bigram_idf("还款", "银行")
    assert vocab.phrase_idf(["怎么"]) == vocab.idf("怎么")
    assert vocab.phrase_idf(["银行", "怎么", "还款"]) == pytest.approx(
        (vocab.bigram_idf("银行", "怎么") + vocab.bigram_idf("怎么", "还款")) / 2
    )


def test_vocab_min_count_max_size_and_stopwords() -> None:
    texts = ["a b c", "a b", "a"]
    assert WordVocab.build(texts, min_count=2).words == ["[PAD]", "[UNK]", "a", "b"]
    assert WordVocab.build(texts, max_size=1).words == ["[PAD]", "[UNK]", "a"]
    assert WordVocab.build(texts, stopwords={"a"}).words == ["[PAD]", "[UNK]", "b", "c"]
    with pytest.raises(VocabError, match="no word occurs at least min_count=5 times in the 3 texts given"):
        WordVocab.build(texts, min_count=5)


def test_vocab_save_load_roundtrip(tmp_path: Path) -> None:
    vocab = WordVocab.build(["银行 怎么 还款", "what is gdp"])
    vocab.save(tmp_path)
    again = WordVocab.load(tmp_path)
    assert again.words == vocab.words and again.df == vocab.df and again.bigram_df == vocab.bigram_df
    assert again.idf("gdp") == vocab.idf("gdp")
    with pytest.raises(VocabError, match="word_vocab.json is missing: the model directory has no word vocabulary"):
        WordVocab.load(tmp_path / "nowhere")


def test_pad_ids() -> None:
    ids, mask = pad_ids([[5, 6, 7], [8]])
    assert ids.tolist() == [[5, 6, 7], [8, PAD_ID, PAD_ID]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    ids, mask = pad_ids([[5, 6, 7]], length=2)
    assert ids.tolist() == [[5, 6]] and mask.all()
    assert pad_ids([[]])[0].shape == (1, 1)


def test_word_vectors_fill_known_words_and_check_dimension(tmp_path: Path) -> None:
    vec_file = tmp_path / "vectors.txt"
    vec_file.write_text("2 3\n银行 1 0 0\n还款 0 1 0\n", encoding="utf-8")
    vectors = read_word_vectors(vec_file)
    assert set(vectors) == {"银行", "还款"}
    vocab = WordVocab.build(["银行 怎么 还款"])
    matrix, has_vector = embedding_matrix(vocab, 3, vectors=vectors)
    assert matrix[vocab.index["银行"]].tolist() == [1, 0, 0]
    assert has_vector.tolist() == [False, False, *(vocab.words[i] in vectors for i in range(2, len(vocab)))]
    assert not matrix[PAD_ID].any()
    with pytest.raises(VocabError, match="word vectors have dimension 3, but the model's embedding_dim is 4"):
        embedding_matrix(vocab, 4, vectors=vectors)
    bad = tmp_path / "bad.txt"
    bad.write_text("a 1 2\nb 1 2 3\n", encoding="utf-8")
    with pytest.raises(VocabError, match=r"bad.txt:2: vector of 'b' has 3 values, expected 2"):
        read_word_vectors(bad)


def test_masked_softmax_mean_max_ignore_padding() -> None:
    logits = torch.tensor([[1.0, 2.0, 50.0], [3.0, -1.0, 7.0]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    probs = masked_softmax(logits, mask, dim=-1)
    assert probs[0, 2] == 0 and probs[0].sum() == pytest.approx(1.0)
    assert probs[0, :2].tolist() == pytest.approx(torch.softmax(logits[0, :2], -1).tolist())
    assert probs[1].tolist() == [0, 0, 0]  # an all-padding row gives zeros, not NaN
    values = torch.tensor([[[1.0], [3.0], [100.0]]])
    m = torch.tensor([[True, True, False]])
    assert masked_mean(values, m, dim=1).item() == 2.0
    assert masked_max(values, m, dim=1).item() == 3.0
    assert masked_max(values, torch.zeros_like(m), dim=1).item() == 0.0
    assert np.isfinite(masked_mean(values, torch.zeros_like(m), dim=1).numpy()).all()
