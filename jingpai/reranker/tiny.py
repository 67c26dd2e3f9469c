"""Tiny, randomly initialised BERT checkpoints built locally (no hub download).

Tests of every BERT-family component (and an offline demo) need *a* checkpoint that loads through the
ordinary ``AutoModel.from_pretrained(dir)`` / ``AutoTokenizer.from_pretrained(dir)`` path. A real
pretrained model cannot be downloaded at run time, so :func:`build_tiny_checkpoint` writes a small
``BertModel`` with random weights plus a character-level WordPiece vocabulary covering the given texts.

Example:
    >>> from jingpai.reranker.tiny import build_tiny_checkpoint
    >>> path = build_tiny_checkpoint("/tmp/tiny-bert", ["哪些因素会影响中国的GDP", "stock market"])  # doctest: +SKIP
    >>> AutoModel.from_pretrained(path)                                                         # doctest: +SKIP
"""

from __future__ import annotations

import logging
import string
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: always in the vocabulary, so English words outside ``texts`` still tokenize to characters
EXTRA_CHARS = string.ascii_lowercase + string.digits + string.punctuation


def _vocab_chars(texts: Iterable[str]) -> list[str]:
    # BertTokenizer lower-cases and strips accents before WordPiece, so index the normalised form
    norm = unicodedata.normalize("NFD", "\n".join(texts).lower())
    seen = {
        ch: None
        for ch in dict.fromkeys(norm)
        if not ch.isspace() and unicodedata.category(ch) != "Mn" and not unicodedata.category(ch).startswith("C")
    }
    for ch in EXTRA_CHARS:
        seen.setdefault(ch, None)
    return list(seen)


def build_tiny_checkpoint(
    directory: str | Path,
    texts: Iterable[str],
    *,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 2,
    intermediate_size: int = 64,
    max_position: int = 256,
    seed: int = 0,
) -> Path:
    """Write a randomly initialised HF ``BertModel`` and a ``BertTokenizer`` vocabulary to ``directory``.

    The vocabulary holds the special tokens, every character of ``texts`` (lower-cased, as
    ``BertTokenizer`` normalises), its ``##`` continuation form (so Latin words split into characters
    instead of becoming ``[UNK]``) and ASCII letters, digits and punctuation.

    Args:
        directory: output folder (created if needed).
        texts: sample texts whose characters must be in the vocabulary.
        hidden_size, num_layers, num_heads, intermediate_size, max_position: ``BertConfig`` sizes.
        seed: torch seed for the random weights (same seed + texts → identical checkpoint).

    Returns:
        ``directory`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: ``hidden_size`` is not a multiple of ``num_heads``.
    """
    from transformers import BertConfig, BertModel, BertTokenizer

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} must be a multiple of num_heads={num_heads}")
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    chars = _vocab_chars(texts)
    vocab = list(SPECIAL_TOKENS) + chars + [f"##{ch}" for ch in chars]
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(vocab=str(vocab_file), do_lower_case=True, model_max_length=max_position)
    tokenizer.save_pretrained(path)

    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position,
        pad_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertModel(config)
    model.save_pretrained(path)
    logger.info("wrote tiny BERT checkpoint (%d tokens, hidden %d) to %s", len(vocab), hidden_size, path)
    return path


__all__ = ["build_tiny_checkpoint"]
