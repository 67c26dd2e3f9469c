"""Word-level tokenizing, vocabulary, IDF statistics and word vectors for the word-level models.

HCAN and IASM work on words, not BERT characters: Chinese runs are cut by rjieba with the HMM off
(so the segmentation is deterministic and dictionary-driven), Latin runs by a regex that keeps
``u.s`` or ``don't`` whole and lower-cases them. Pure punctuation is dropped. TITA uses the same
tokenizer for the bag of words of its topic model.

The :class:`WordVocab` is built from training texts, stores each word's document frequency (and the
document frequency of adjacent word pairs, for HCAN's bigram weights) and is saved next to the model
weights, so a served model tokenizes and weights terms exactly as in training.

Example:
    >>> tok = WordTokenizer()
    >>> tok.cut("哪些因素会影响中国的GDP？ What's the U.S. GDP")  # doctest: +SKIP
    ['哪些因素', '会', '影响', '中国', '的', 'gdp', "what's", 'the', 'u.s', 'gdp']
    >>> vocab = WordVocab.build(["花呗 怎么 还款", "借呗 还款"], tokenizer=tok)  # doctest: +SKIP
    >>> vocab.encode(["还款", "没见过"])  # doctest: +SKIP
    [4, 1]
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from jingpai.cjk import HAN_CLASS
from jingpai.errors import UserError

logger = logging.getLogger(__name__)

PAD = "[PAD]"
UNK = "[UNK]"
SPECIALS = (PAD, UNK)
PAD_ID = 0
UNK_ID = 1
VOCAB_FILE = "word_vocab.json"

_HAN = HAN_CLASS
_RUN = re.compile(rf"[{_HAN}]+|[^{_HAN}]+")
_HAN_RUN = re.compile(rf"[{_HAN}]")
# a Latin/digit word, optionally joined by ' . - inside (don't, u.s, covid-19)
_LATIN = re.compile(r"[^\W_]+(?:['.\-][^\W_]+)*")


class VocabError(UserError, ValueError):
    """A vocabulary or word-vector file is missing, malformed or does not fit the model."""


class WordTokenizer:
    """rjieba (HMM off) for Chinese runs, a regex for everything else; lower-cased, no punctuation.

    Example:
        >>> WordTokenizer().cut("花呗还款 Hello, World!")  # doctest: +SKIP
        ['花呗', '还款', 'hello', 'world']
    """

    def __init__(self) -> None:
        import rjieba

        self._cut = rjieba.cut

    def cut(self, text: str) -> list[str]:
        """The words of ``text`` in order."""
        if not isinstance(text, str):
            raise TypeError(f"expected text as str, got {type(text).__name__}: {text!r}")
        words: list[str] = []
        for run in _RUN.findall(text):
            if _HAN_RUN.match(run):
                words.extend(w for w in self._cut(run, hmm=False) if w.strip())
            else:
                words.extend(m.group().lower() for m in _LATIN.finditer(run))
        return words


def _bigram_key(a: str, b: str) -> str:
    return f"{a}\t{b}"


@dataclass
class WordVocab:
    """Words → ids (0 = ``[PAD]``, 1 = ``[UNK]``) plus document frequencies over the training texts.

    Attributes:
        words: id → word, specials first.
        df: document frequency of each word (by id order; 0 for specials).
        num_docs: number of texts the statistics were counted over.
        bigram_df: document frequency of adjacent word pairs (``"a\\tb"``), most frequent kept.
    """

    words: list[str]
    df: list[int]
    num_docs: int
    bigram_df: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if list(self.words[: len(SPECIALS)]) != list(SPECIALS):
            raise VocabError(f"a WordVocab must start with {list(SPECIALS)}, got {self.words[:2]}")
        if len(self.df) != len(self.words):
            raise VocabError(f"df has {len(self.df)} entries for {len(self.words)} words")
        self.index = {w: i for i, w in enumerate(self.words)}

    # ------------------------------------------------------------------ building

    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        *,
        tokenizer: WordTokenizer | None = None,
        min_count: int = 1,
        max_size: int | None = None,
        max_bigrams: int = 200_000,
        stopwords: Collection[str] | None = None,
    ) -> WordVocab:
        """Count words and document frequencies over ``texts``.

        Args:
            texts: training texts (both sides of every pair; duplicates count as separate documents).
            tokenizer: word tokenizer (default :class:`WordTokenizer`).
            min_count: drop words seen fewer times than this.
            max_size: keep at most this many words (most frequent first), specials not counted.
            max_bigrams: keep the document frequency of at most this many word pairs.
            stopwords: words never kept (they map to ``[UNK]``); statistics still count them.

        Returns:
            The vocabulary.

        Raises:
            VocabError: no word survives (empty or all-punctuation texts, or ``min_count`` too high).
        """
        tok = tokenizer or WordTokenizer()
        stop = frozenset(stopwords or ())
        counts: Counter[str] = Counter()
        df: Counter[str] = Counter()
        bigram_df: Counter[str] = Counter()
        n = 0
        for text in texts:
            words = tok.cut(text)
            n += 1
            counts.update(words)
            df.update(set(words))
            bigram_df.update({_bigram_key(a, b) for a, b in zip(words, words[1:], strict=False)})
        kept = [w for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= min_count and w not in SPECIALS and w not in stop]
        if max_size is not None:
            kept = kept[:max_size]
        if not kept:
            raise VocabError(f"no word occurs at least min_count={min_count} times in the {n} texts given")
        bigrams = dict(sorted(bigram_df.items(), key=lambda kv: (-kv[1], kv[0]))[:max_bigrams])
        logger.info("built word vocabulary: %d words (of %d seen) from %d texts", len(kept), len(counts), n)
        return cls(words=[*SPECIALS, *kept], df=[0, 0, *(df[w] for w in kept)], num_docs=n, bigram_df=bigrams)

    # ------------------------------------------------------------------ lookup

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def encode(self, words: Sequence[str]) -> list[int]:
        """Ids of ``words``; unknown words map to ``[UNK]`` (id 1)."""
        return [self.index.get(w, UNK_ID) for w in words]

    def _idf_of_df(self, df: int) -> float:
        # smoothed, always positive; an unseen term gets the largest weight log(N+1)+1
        return math.log((1 + self.num_docs) / (1 + df)) + 1.0

    def idf(self, word: str) -> float:
        """Inverse document frequency of ``word`` over the training texts (unseen words: the maximum)."""
        i = self.index.get(word)
        return self._idf_of_df(self.df[i] if i is not None else 0)

    def bigram_idf(self, first: str, second: str) -> float:
        """IDF of the adjacent pair ``first second`` (pairs not kept count as unseen)."""
        return self._idf_of_df(self.bigram_df.get(_bigram_key(first, second), 0))

    def phrase_idf(self, words: Sequence[str]) -> float:
        """Weight of a phrase: unigram IDF for one word, mean bigram IDF of its adjacent pairs otherwise."""
        if not words:
            return 0.0
        if len(words) == 1:
            return self.idf(words[0])
        pairs = [self.bigram_idf(a, b) for a, b in zip(words, words[1:], strict=False)]
        return sum(pairs) / len(pairs)

    # ------------------------------------------------------------------ persistence

    def save(self, directory: str | Path) -> Path:
        """Write ``word_vocab.json`` into ``directory``."""
        path = Path(directory) / VOCAB_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"words": self.words, "df": self.df, "num_docs": self.num_docs, "bigram_df": self.bigram_df}
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> WordVocab:
        """Read the vocabulary :meth:`save` wrote.

        Raises:
            VocabError: the file is missing or lacks a field.
        """
        path = Path(directory) / VOCAB_FILE
        if not path.exists():
            raise VocabError(f"{path} is missing: the model directory has no word vocabulary")
        data = json.loads(path.read_text(encoding="utf-8"))
        try:
            return cls(words=data["words"], df=data["df"], num_docs=data["num_docs"], bigram_df=data.get("bigram_df", {}))
        except KeyError as exc:
            raise VocabError(f"{path} lacks field {exc.args[0]!r}; expected words, df, num_docs") from exc


def pad_ids(rows: Sequence[Sequence[int]], *, length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id lists with ``[PAD]`` (0) to ``length`` (default: the longest row, at least 1).

    Returns:
        ``(ids, mask)`` int64 / bool arrays of shape ``[len(rows), length]``.
    """
    width = length if length is not None else max([1, *(len(r) for r in rows)])
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=bool)
    for i, row in enumerate(rows):
        row = list(row)[:width]
        ids[i, : len(row)] = row
        mask[i, : len(row)] = True
    return ids, mask


def read_word_vectors(path: str | Path, *, limit: int | None = None) -> dict[str, np.ndarray]:
    """Read word2vec/GloVe *text* vectors (``word v1 v2 …`` per line; an optional ``count dim`` header).

    Args:
        path: the vectors file.
        limit: read at most this many vectors.

    Returns:
        ``{word: float32 vector}``.

    Raises:
        VocabError: a line has a different dimension than the first one (the message names the line).
    """
    vectors: dict[str, np.ndarray] = {}
    dim: int | None = None
    with Path(path).open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.rstrip().split(" ")
            if lineno == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # word2vec header
            if len(parts) < 2:
                continue
            values = np.asarray(parts[1:], dtype=np.float32)
            if dim is None:
                dim = values.size
            elif values.size != dim:
                raise VocabError(f"{path}:{lineno}: vector of {parts[0]!r} has {values.size} values, expected {dim}")
            vectors[parts[0]] = values
            if limit is not None and len(vectors) >= limit:
                break
    return vectors


def embedding_matrix(
    vocab: WordVocab,
    dim: int,
    *,
    vectors: dict[str, np.ndarray] | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """An initial embedding matrix for ``vocab``: given vectors where known, small random values elsewhere.

    Args:
        vocab: the vocabulary.
        dim: embedding size; must equal the vectors' dimension.
        vectors: pre-trained word vectors (e.g. from :func:`read_word_vectors`), or ``None`` for random.
        seed: seed of the random initialisation.

    Returns:
        ``(matrix [len(vocab), dim] float32, has_vector [len(vocab)] bool)``; ``has_vector`` is ``True``
        for words with a pre-trained vector (for every non-special word when ``vectors`` is ``None``),
        ``[PAD]`` is all zeros.

    Raises:
        VocabError: the vectors' dimension differs from ``dim``.
    """
    rng = np.random.default_rng(seed)
    matrix = rng.normal(0.0, 0.1, size=(len(vocab), dim)).astype(np.float32)
    matrix[PAD_ID] = 0.0
    has_vector = np.zeros(len(vocab), dtype=bool)
    if vectors is None:
        has_vector[len(SPECIALS) :] = True
        return matrix, has_vector
    found = 0
    for i, word in enumerate(vocab.words):
        vec = vectors.get(word)
        if vec is None or i < len(SPECIALS):
            continue
        if vec.size != dim:
            raise VocabError(f"word vectors have dimension {vec.size}, but the model's embedding_dim is {dim}")
        matrix[i] = vec
        has_vector[i] = True
        found += 1
    logger.info("word vectors cover %d of %d vocabulary words; the rest start random", found, len(vocab) - len(SPECIALS))
    return matrix, has_vector


__all__ = [
    "PAD",
    "PAD_ID",
    "UNK",
    "UNK_ID",
    "VocabError",
    "WordTokenizer",
    "WordVocab",
    "embedding_matrix",
    "pad_ids",
    "read_word_vectors",
]
