"""The shared base of the word-level models (HCAN, IASM): a :class:`~jingpai.reranker.wordvocab.WordVocab`
asset saved next to the weights, rjieba words, and embeddings initialised from word vectors or at random.

Example:
    >>> model = HcanReranker.build(training_texts, HcanConfig(), vectors="vectors.txt")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from jingpai.reranker.base import Pair, Reranker, RerankerConfig
from jingpai.reranker.wordvocab import SPECIALS, VocabError, WordTokenizer, WordVocab, embedding_matrix, read_word_vectors

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WordRerankerConfig(RerankerConfig):
    """Options shared by the word-level models.

    Attributes:
        embedding_dim: word vector size (must match ``vectors`` given to ``build``).
        max_query_words: query words kept (HCAN pads every query to exactly this many).
        max_doc_words: document words kept.
        vocab_min_count: words rarer than this in the training texts map to ``[UNK]``.
        vocab_max_size: keep at most this many words (most frequent first); ``None``: all.
        seed: seed of the random initialisation (embeddings and layers).
    """

    embedding_dim: int = 100
    max_query_words: int = 20
    max_doc_words: int = 100
    vocab_min_count: int = 1
    vocab_max_size: int | None = 50_000
    seed: int = 0


class WordReranker(Reranker):
    """Base of the word-level models: a :class:`WordVocab` asset, rjieba words, embeddings from ``build``.

    Subclasses implement :meth:`_build_net` (and featurize/scores/loss).

    Args:
        config: the model's config.
        vocab: the word vocabulary (required; see :meth:`build`).
        embeddings: initial ``[len(vocab), embedding_dim]`` matrix (default: random).
        has_vector: which words have a pre-trained vector (default: every non-special word).
        device: torch device name.

    Raises:
        VocabError: no vocabulary was given.
    """

    config: WordRerankerConfig
    config_class = WordRerankerConfig

    def __init__(
        self,
        config: WordRerankerConfig,
        *,
        vocab: WordVocab | None = None,
        embeddings: np.ndarray | None = None,
        has_vector: np.ndarray | None = None,
        device: str | None = None,
    ) -> None:
        if vocab is None:
            raise VocabError(
                f"{type(self).__name__} needs a word vocabulary: create it with "
                f"{type(self).__name__}.build(training_texts, config) or load a saved model"
            )
        super().__init__(config, device=device)
        self.vocab = vocab
        self.tokenizer = WordTokenizer()
        if embeddings is None:
            embeddings, has_vector = embedding_matrix(vocab, config.embedding_dim, seed=config.seed)
        if embeddings.shape != (len(vocab), config.embedding_dim):
            raise VocabError(f"embeddings have shape {embeddings.shape}, expected ({len(vocab)}, {config.embedding_dim})")
        if has_vector is None:
            has_vector = np.ones(len(vocab), dtype=bool)
            has_vector[: len(SPECIALS)] = False
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.net = self._build_net(torch.from_numpy(np.asarray(embeddings, dtype=np.float32)), torch.from_numpy(has_vector))
        self.net.to(self.device)

    def _build_net(self, embeddings: torch.Tensor, has_vector: torch.Tensor) -> torch.nn.Module:
        raise NotImplementedError

    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        config: WordRerankerConfig | None = None,
        *,
        vectors: str | Path | dict[str, np.ndarray] | None = None,
        device: str | None = None,
    ) -> WordReranker:
        """A new, untrained model whose vocabulary and IDF statistics come from ``texts``.

        Args:
            texts: the training texts (queries and documents).
            config: the model config (default: the class's defaults).
            vectors: pre-trained word vectors (a word2vec/GloVe text file or a dict); ``None``: random.
            device: torch device name.

        Example:
            >>> model = HcanReranker.build([q for q, d in pairs] + [d for q, d in pairs], HcanConfig())  # doctest: +SKIP
        """
        config = config or cls.config_class()
        vocab = WordVocab.build(texts, min_count=config.vocab_min_count, max_size=config.vocab_max_size)
        if isinstance(vectors, (str, Path)):
            vectors = read_word_vectors(vectors)
        matrix, has_vector = embedding_matrix(vocab, config.embedding_dim, vectors=vectors, seed=config.seed)
        return cls(config, vocab=vocab, embeddings=matrix, has_vector=has_vector, device=device)

    def save_assets(self, directory: Path) -> None:
        self.vocab.save(directory)

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> WordReranker:
        return cls(config, vocab=WordVocab.load(directory), device=device)  # type: ignore[arg-type]

    def tokenize_pairs(self, pairs: Sequence[Pair]) -> tuple[list[list[str]], list[list[str]]]:
        """Word lists of queries and documents, cut to ``max_query_words`` / ``max_doc_words``."""
        queries, docs = [], []
        for i, pair in enumerate(pairs):
            if len(pair) != 2 or not all(isinstance(t, str) for t in pair):
                raise TypeError(f"pair {i} must be (query: str, document: str), got {pair!r}")
            queries.append(self.tokenizer.cut(pair[0])[: self.config.max_query_words])
            docs.append(self.tokenizer.cut(pair[1])[: self.config.max_doc_words])
            if not queries[-1] or not docs[-1]:
                logger.debug("pair %d has a side without words (%r); it is scored from padding only", i, pair)
        return queries, docs


__all__ = ["WordReranker", "WordRerankerConfig"]
