"""diff-idf: how much more a word belongs to one domain than to the rest of the corpus.

``diff_idf(w|d) = log(N_anti / (df_anti(w) + λ)) − log(N_d / (df_d(w) + λ))``

with document frequencies ``df`` (a document counts once however often it contains ``w``), ``N`` the
number of documents, ``d`` the domain corpus and *anti* every other domain (or a background corpus).
λ keeps words absent from one side finite; a larger λ favours frequent words.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from jingpai.keyword_dict.ngrams import KEY_MULTIPLIER, RUN_BASE, UnitCodec, chunks, distinct, hash_rows, run_lengths

@dataclass(frozen=True)
class VocabularyIndex:
    """Hash keys of vocabulary words, grouped by length in units (numpy only: cheap to send to workers).

    Keys are a function of the text alone (:mod:`jingpai.keyword_dict.ngrams`), so an index built once
    matches documents encoded in any process.
    """

    size: int
    #: ``(n, sorted keys of the n-unit words, their positions in the vocabulary)``, ascending n
    by_length: tuple[tuple[int, np.ndarray, np.ndarray], ...]
    #: sorted distinct keys of the n-unit prefixes of longer words, for n = 1 … longest - 1 (index n - 1)
    prefixes: tuple[np.ndarray, ...] = ()

    @classmethod
    def build(cls, vocabulary: Sequence[str]) -> VocabularyIndex:
        """Index ``vocabulary`` (words that are not made of units only never match)."""
        n_units, ids = UnitCodec().encode_words(vocabulary)
        offsets = np.concatenate([[0], np.cumsum(n_units)])
        groups = []
        for n in sorted(set(n_units.tolist()) - {0}):
            words = np.flatnonzero(n_units == n)
            keys = hash_rows(ids[offsets[words][:, None] + np.arange(n)])
            order = np.argsort(keys, kind="stable")
            groups.append((n, keys[order], words[order]))
        prefixes = []
        longer = np.flatnonzero(n_units > 1)
        h = np.zeros(longer.shape[0], np.uint64)
        for n in range(1, groups[-1][0] if groups else 1):
            longer_still = n_units[longer] > n
            longer, h = longer[longer_still], h[longer_still]
            h = h * KEY_MULTIPLIER + ids[offsets[longer] + n - 1].astype(np.uint64)
            prefixes.append(distinct(h))
        return cls(len(vocabulary), tuple(groups), tuple(prefixes))


#: narrow to prefixes of longer words from this length on: shorter n-grams nearly all start some word,
#: so filtering them would cost more than it saves
_NARROW_FROM = 3


class _KeyTable:
    """Row of each key, by direct addressing on the top bits of the key times an odd constant (one
    gather per lookup, where a binary search takes a dozen; the product mixes the last unit, which a
    polynomial key only adds, into the top bits); keys sharing a bucket fall back to the binary search."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys  # sorted
        bits = max(8, (8 * keys.shape[0]).bit_length())
        self.shift = np.uint64(64 - bits)
        bucket = ((keys * KEY_MULTIPLIER) >> self.shift).astype(np.intp)
        self.row = np.full(1 << bits, -1, np.int64)
        self.row[bucket] = np.arange(keys.shape[0])
        self.shared = np.bincount(bucket, minlength=1 << bits) > 1

    def find(self, queries: np.ndarray) -> np.ndarray:
        """Row of each query key, -1 where absent."""
        bucket = ((queries * KEY_MULTIPLIER) >> self.shift).astype(np.intp)
        row = self.row[bucket]
        row[self.keys[row] != queries] = -1  # row -1 reads the last key: a miss either way
        again = np.flatnonzero(self.shared[bucket] & (row < 0))
        if again.shape[0]:
            at = np.minimum(np.searchsorted(self.keys, queries[again]), self.keys.shape[0] - 1)
            row[again] = np.where(self.keys[at] == queries[again], at, -1)
        return row


def domain_document_frequencies(
    docs: Iterable[str], index: VocabularyIndex, chunk_chars: int = 2_000_000
) -> tuple[np.ndarray, int]:
    """``(df of each vocabulary word, number of documents)`` over one corpus (vocabulary order).

    A word occurs where its units do, on unit boundaries: ``GDP`` does not match inside ``GDPR``.
    The corpus is read in chunks of about ``chunk_chars`` characters (memory bounded by the chunk).

    Example:
        >>> df, n = domain_document_frequencies(["GDP增长", "GDPR法规"], VocabularyIndex.build(["GDP", "法规"]))
        >>> df.tolist(), n
        ([1, 1], 2)
    """
    df = np.zeros(index.size, np.int64)
    n_docs = 0
    for batch in chunks(docs, chunk_chars):
        n_docs += len(batch)
        if index.by_length:
            _add_document_frequencies(df, batch, index)
    return df, n_docs


def _add_document_frequencies(df: np.ndarray, docs: list[str], index: VocabularyIndex) -> None:
    ids, owner, _ = UnitCodec().encode_docs(docs)
    lengths = run_lengths(ids)
    units = ids.astype(np.uint64)
    wanted = {n: (keys, words) for n, keys, words in index.by_length}
    # start positions and keys of the n-grams that fit before a separator and could still grow into
    # a word: narrowed as n grows, to the prefixes of longer words
    pos = np.flatnonzero(lengths)
    h = units[pos]
    for n in range(1, index.by_length[-1][0] + 1):
        if n > 1:
            fits = lengths[pos] >= n
            pos = pos[fits]
            h = h[fits] * KEY_MULTIPLIER + units[pos + n - 1]
        if pos.shape[0] == 0:
            break
        if n in wanted:
            keys, words = wanted[n]
            at, queries = pos, h
            if n == 1 and keys[0] >= RUN_BASE:  # Latin runs only (GDP): look at Latin positions only
                latin = np.flatnonzero(h >= RUN_BASE)
                at, queries = pos[latin], h[latin]
            row = _KeyTable(keys).find(queries)
            hit = np.flatnonzero(row >= 0)
            # one (document, word) pair per document however often the word occurs in it
            pairs = distinct(owner[at[hit]] * keys.shape[0] + row[hit])
            df[words] += np.bincount(pairs % keys.shape[0], minlength=keys.shape[0])
        if _NARROW_FROM <= n <= len(index.prefixes):
            grows = np.flatnonzero(_KeyTable(index.prefixes[n - 1]).find(h) >= 0)
            pos, h = pos[grows], h[grows]


def document_frequencies(docs: Iterable[str], vocabulary: Iterable[str]) -> tuple[Counter[str], int]:
    """``(df, number of documents)`` of each vocabulary word over ``docs`` (substring occurrence).

    Words are matched on unit boundaries, so ``GDP`` does not match inside ``GDPR``.
    """
    ((df, n_docs),) = grouped_document_frequencies([docs], vocabulary)
    return df, n_docs


def grouped_document_frequencies(
    groups: Sequence[Iterable[str]], vocabulary: Iterable[str]
) -> list[tuple[Counter[str], int]]:
    """:func:`document_frequencies` for several corpora (domains)."""
    words = list(dict.fromkeys(vocabulary))
    index = VocabularyIndex.build(words)
    out = []
    for docs in groups:
        df, n_docs = domain_document_frequencies(docs, index)
        out.append((Counter({words[i]: int(df[i]) for i in np.flatnonzero(df).tolist()}), n_docs))
    return out


def diff_idf(df_domain: int, n_domain: int, df_anti: int, n_anti: int, *, smoothing: float = 1.0) -> float:
    """diff-idf of one word (see the module docstring).

    Example:
        >>> round(diff_idf(50, 100, 5, 900, smoothing=1.0), 3)
        4.337
    """
    if n_domain <= 0 or n_anti <= 0:
        raise ValueError(f"both corpora need documents, got n_domain={n_domain}, n_anti={n_anti}")
    if smoothing <= 0:
        raise ValueError(f"smoothing λ must be > 0, got {smoothing}")
    return math.log(n_anti / (df_anti + smoothing)) - math.log(n_domain / (df_domain + smoothing))


def score_domain(
    words: Sequence[str],
    df_domain: Counter[str],
    n_domain: int,
    df_anti: Counter[str],
    n_anti: int,
    *,
    smoothing: float = 1.0,
) -> dict[str, float]:
    """diff-idf of every word for one domain against its anti-domain."""
    return {w: diff_idf(df_domain[w], n_domain, df_anti[w], n_anti, smoothing=smoothing) for w in words}


__all__ = [
    "VocabularyIndex",
    "diff_idf",
    "document_frequencies",
    "domain_document_frequencies",
    "grouped_document_frequencies",
    "score_domain",
]
