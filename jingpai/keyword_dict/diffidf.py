"""diff-idf: how much more a word belongs to one domain than to the rest of the corpus.

``diff_idf(w|d) = log(N_anti / (df_anti(w) + λ)) − log(N_d / (df_d(w) + λ))``

with document frequencies ``df`` (a document counts once however often it contains ``w``), ``N`` the
number of documents, ``d`` the domain corpus and *anti* every other domain (or a background corpus).
λ keeps words absent from one side finite; a larger λ favours frequent words.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from jingpai.keyword_dict.ngrams import UnitCodec, hash_rows, window_keys
from jingpai.keyword_dict.text import units


def document_frequencies(docs: Iterable[str], vocabulary: Iterable[str]) -> tuple[Counter[str], int]:
    """``(df, number of documents)`` of each vocabulary word over ``docs`` (substring occurrence).

    Words are matched on unit boundaries, so ``GDP`` does not match inside ``GDPR``.
    """
    ((df, n_docs),) = grouped_document_frequencies([docs], vocabulary)
    return df, n_docs


def grouped_document_frequencies(
    groups: Sequence[Iterable[str]], vocabulary: Iterable[str]
) -> list[tuple[Counter[str], int]]:
    """:func:`document_frequencies` for several corpora (domains) in one vectorised pass."""
    codec = UnitCodec()
    encoded = [codec.encode_docs(docs) for docs in groups]
    n_docs = [n for _, _, n in encoded]
    offsets = np.concatenate([[0], np.cumsum(n_docs)])
    ids = np.concatenate([e[0] for e in encoded])
    # global document numbers; -1 (separators) stays -1
    owner = np.concatenate([np.where(e[1] >= 0, e[1] + offsets[g], -1) for g, e in enumerate(encoded)])
    group_of_doc = np.repeat(np.arange(len(groups)), n_docs)
    by_len: dict[int, list[tuple[str, list[int]]]] = defaultdict(list)
    for word in vocabulary:
        parts = units(word)
        enc = codec.encode_word(parts) if parts else None
        if enc is not None:
            by_len[len(parts)].append((word, enc))
    out: list[Counter[str]] = [Counter() for _ in groups]
    for n, items in by_len.items():
        vocab_keys = hash_rows(np.asarray([e for _, e in items], dtype=np.int64))
        keys, starts = window_keys(ids, n)
        hit = np.isin(keys, vocab_keys)
        if not hit.any():
            continue
        # one (word, document) pair per document however often the word occurs in it
        pairs = np.unique(np.stack([keys[hit], owner[starts[hit]].astype(np.uint64)], axis=1), axis=0)
        word_of = dict(zip(vocab_keys.tolist(), (w for w, _ in items)))
        groups_of_pairs = group_of_doc[pairs[:, 1].astype(np.int64)]
        for g in range(len(groups)):
            found, counts = np.unique(pairs[groups_of_pairs == g, 0], return_counts=True)
            out[g].update({word_of[k]: int(c) for k, c in zip(found.tolist(), counts.tolist())})
    return list(zip(out, n_docs))


def diff_idf(df_domain: int, n_domain: int, df_anti: int, n_anti: int, *, smoothing: float = 1.0) -> float:
    """diff-idf of one word (see the module docstring).

    Example:
        >>> round(diff_idf(50, 100, 5, 900, smoothing=1.0), 3)
        3.325
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


__all__ = ["diff_idf", "document_frequencies", "grouped_document_frequencies", "score_domain"]
