"""Tiny, randomly initialised Hugging Face checkpoints built locally (no hub download).

Tests of every transformer component (and an offline demo) need *a* checkpoint that loads through the
ordinary ``AutoModel.from_pretrained(dir)`` / ``AutoTokenizer.from_pretrained(dir)`` path. A real
pretrained model cannot be downloaded at run time, so :func:`build_tiny_checkpoint` writes a small
model with random weights plus a character-level vocabulary covering the given texts, in one of the
encoder families rerankers are built on (:data:`FAMILIES`): ``bert`` (WordPiece, token types),
``xlm-roberta`` (sentencepiece-style Unigram, ``<s> A </s></s> B </s>``, no token types),
``deberta-v2`` (Unigram, relative positions) and ``modernbert`` (no token types). With ``num_labels``
it writes a ``*ForSequenceClassification`` checkpoint — a cross-encoder as ``save_pretrained`` leaves it.

Example:
    >>> from jingpai.reranker.tiny import build_tiny_checkpoint
    >>> path = build_tiny_checkpoint("/tmp/tiny-bert", ["哪些因素会影响中国的GDP", "stock market"])  # doctest: +SKIP
    >>> AutoModel.from_pretrained(path)                                                         # doctest: +SKIP
    >>> build_tiny_checkpoint("/tmp/tiny-xlmr", ["rerank me"], family="xlm-roberta", num_labels=1)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import string
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import torch

logger = logging.getLogger(__name__)

Family = Literal["bert", "xlm-roberta", "deberta-v2", "modernbert"]
FAMILIES: tuple[str, ...] = ("bert", "xlm-roberta", "deberta-v2", "modernbert")

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: XLM-R's special tokens in its own id order (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3)
XLMR_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
#: DeBERTa-v2's special tokens in its own id order (``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]`` 2, ``[SEP]`` 3)
DEBERTA_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: always in the vocabulary, so English words outside ``texts`` still tokenize to characters
EXTRA_CHARS = string.ascii_lowercase + string.digits + string.punctuation
#: sentencepiece-style vocabularies keep case (no lower-casing normaliser)
CASED_EXTRA_CHARS = EXTRA_CHARS + string.ascii_uppercase
#: the one score every Unigram piece gets: with equal scores the fewest pieces win, ties left to right
PIECE_SCORE = -10.0


def _vocab_chars(texts: Iterable[str], *, lower: bool = True) -> list[str]:
    # BertTokenizer lower-cases and strips accents before WordPiece, so index the normalised form;
    # the Unigram tokenizers only NFC-normalise (DeBERTa) or leave text as it is (XLM-R without charsmap)
    joined = "\n".join(texts)
    norm = unicodedata.normalize("NFD", joined.lower()) if lower else joined + unicodedata.normalize("NFC", joined)
    seen = {
        ch: None
        for ch in dict.fromkeys(norm)
        if not ch.isspace() and (not lower or unicodedata.category(ch) != "Mn") and not unicodedata.category(ch).startswith("C")
    }
    for ch in EXTRA_CHARS if lower else CASED_EXTRA_CHARS:
        seen.setdefault(ch, None)
    return list(seen)


def _wordpiece_tokenizer(path: Path, texts: list[str], *, max_length: int) -> Any:
    from transformers import BertTokenizer

    chars = _vocab_chars(texts)
    vocab = list(SPECIAL_TOKENS) + chars + [f"##{ch}" for ch in chars]
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return BertTokenizer(vocab=str(vocab_file), do_lower_case=True, model_max_length=max_length)


def _unigram_vocab(specials: Iterable[str], texts: list[str]) -> list[tuple[str, float]]:
    chars = _vocab_chars(texts, lower=False)
    return [(tok, 0.0) for tok in specials] + [(p, PIECE_SCORE) for ch in chars for p in (ch, f"▁{ch}")] + [("▁", PIECE_SCORE)]


def build_tokenizer(path: Path, texts: list[str], *, family: Family, max_length: int) -> Any:
    """A character-level tokenizer of ``family``'s kind covering ``texts`` (not yet saved).

    ``bert``: lower-casing WordPiece (``vocab.txt`` is written to ``path``). ``xlm-roberta`` /
    ``deberta-v2``: the family's own Unigram tokenizer class over a char vocabulary. ``modernbert``:
    the WordPiece model in a plain fast tokenizer that, like ModernBERT's, returns no token types.
    """
    from transformers import DebertaV2Tokenizer, PreTrainedTokenizerFast, XLMRobertaTokenizer

    if family == "xlm-roberta":
        return XLMRobertaTokenizer(vocab=_unigram_vocab(XLMR_SPECIAL_TOKENS, texts), model_max_length=max_length)
    if family == "deberta-v2":
        return DebertaV2Tokenizer(vocab=_unigram_vocab(DEBERTA_SPECIAL_TOKENS, texts), model_max_length=max_length)
    wordpiece = _wordpiece_tokenizer(path, texts, max_length=max_length)
    if family == "bert":
        return wordpiece
    (path / "vocab.txt").unlink()
    return PreTrainedTokenizerFast(
        tokenizer_object=wordpiece.backend_tokenizer, model_max_length=max_length, model_input_names=["input_ids", "attention_mask"],
        cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]",
    )


def _hf_config(family: Family, tokenizer: Any, *, sizes: dict[str, int], max_length: int, num_labels: int | None) -> Any:
    from transformers import BertConfig, DebertaV2Config, ModernBertConfig, XLMRobertaConfig

    common: dict[str, Any] = {
        "vocab_size": len(tokenizer), "hidden_size": sizes["hidden_size"], "num_hidden_layers": sizes["num_layers"],
        "num_attention_heads": sizes["num_heads"], "intermediate_size": sizes["intermediate_size"],
        "pad_token_id": tokenizer.pad_token_id,
    }
    if num_labels is not None:
        common["num_labels"] = num_labels
    if family == "bert":
        return BertConfig(max_position_embeddings=max_length, **common)
    if family == "xlm-roberta":
        # RoBERTa positions start after the padding index: max_length tokens need max_length + 2 positions
        return XLMRobertaConfig(max_position_embeddings=max_length + 2, type_vocab_size=1, bos_token_id=tokenizer.bos_token_id,
                                eos_token_id=tokenizer.eos_token_id, **common)
    if family == "deberta-v2":
        return DebertaV2Config(max_position_embeddings=max_length, type_vocab_size=0, relative_attention=True, position_buckets=32,
                               pos_att_type=["p2c", "c2p"], position_biased_input=False, **common)
    return ModernBertConfig(max_position_embeddings=max_length, cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
                            bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id, local_attention=16,
                            global_attn_every_n_layers=2, **common)


def build_tiny_checkpoint(
    directory: str | Path,
    texts: Iterable[str],
    *,
    family: Family = "bert",
    num_labels: int | None = None,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 2,
    intermediate_size: int = 64,
    max_position: int = 256,
    seed: int = 0,
) -> Path:
    """Write a randomly initialised HF model of ``family`` and its tokenizer to ``directory``.

    The vocabulary holds the family's special tokens and every character of ``texts`` (for ``bert``
    lower-cased, as ``BertTokenizer`` normalises, plus its ``##`` continuation form; for the Unigram
    families both the bare and the ``▁``-prefixed piece) and ASCII letters, digits and punctuation.

    Args:
        directory: output folder (created if needed).
        texts: sample texts whose characters must be in the vocabulary.
        family: one of :data:`FAMILIES`.
        num_labels: ``None``: a bare encoder (``AutoModel``), as a ``--base`` checkpoint; ``1`` / ``2``:
            a ``*ForSequenceClassification`` model with a head of that width (a cross-encoder).
        hidden_size, num_layers, num_heads, intermediate_size: model sizes.
        max_position: tokens per input the model takes (the tokenizer's ``model_max_length``).
        seed: torch seed for the random weights (same seed + texts → identical checkpoint).

    Returns:
        ``directory`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: ``hidden_size`` is not a multiple of ``num_heads``, or an unknown ``family``.
    """
    from transformers import AutoModel, AutoModelForSequenceClassification

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} must be a multiple of num_heads={num_heads}")
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path, list(texts), family=family, max_length=max_position)
    tokenizer.save_pretrained(path)
    sizes = {"hidden_size": hidden_size, "num_layers": num_layers, "num_heads": num_heads, "intermediate_size": intermediate_size}
    config = _hf_config(family, tokenizer, sizes=sizes, max_length=max_position, num_labels=num_labels)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        auto = AutoModel if num_labels is None else AutoModelForSequenceClassification
        model = auto.from_config(config)
    model.save_pretrained(path)
    logger.info("wrote tiny %s checkpoint %s (%d tokens, hidden %d) to %s", family, type(model).__name__, len(tokenizer), hidden_size, path)
    return path


__all__ = ["FAMILIES", "Family", "build_tiny_checkpoint", "build_tokenizer"]
