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

from jingpai.keyword_dict.text import segments, units


def document_frequencies(docs: Iterable[str], vocabulary: Iterable[str]) -> tuple[Counter[str], int]:
    """``(df, number of documents)`` of each vocabulary word over ``docs`` (substring occurrence).

    Words are matched on unit boundaries, so ``GDP`` does not match inside ``GDPR``.
    """
    vocab = {tuple(units(w)): w for w in vocabulary}
    vocab.pop((), None)
    lengths = sorted({len(k) for k in vocab})
    df: Counter[str] = Counter()
    n_docs = 0
    for doc in docs:
        n_docs += 1
        seen: set[str] = set()
        for seg in segments(doc):
            for n in lengths:
                for i in range(len(seg) - n + 1):
                    word = vocab.get(tuple(seg[i : i + n]))
                    if word is not None:
                        seen.add(word)
        df.update(seen)
    return df, n_docs


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


__all__ = ["diff_idf", "document_frequencies", "score_domain"]
