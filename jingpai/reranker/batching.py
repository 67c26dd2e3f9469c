"""Whole-query batches for the training loop (``TrainSettings(batching="queries")``): an in-window loss
(:mod:`jingpai.reranker.losses`) can only compare a query's candidates that arrive in the same batch.

>>> pairs = [LabeledPair("a", "x", 1), LabeledPair("b", "y", 0), LabeledPair("a", "z", 0), LabeledPair("c", "w", 1)]
>>> query_groups(pairs)
[[0, 2], [1], [3]]
>>> pack_groups(query_groups(pairs), order=[2, 0, 1], size=2)
[[3], [0, 2], [1]]

A batch never splits a query: a group larger than ``size`` becomes one batch of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jingpai.reranker.data import LabeledPair


def query_groups(pairs: Sequence[LabeledPair]) -> list[list[int]]:
    """Indices of ``pairs`` grouped by query (``qid`` when set, else the query text), in first-seen order."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        groups.setdefault(p.qid if p.qid is not None else p.query, []).append(i)
    return list(groups.values())


def pack_groups(groups: Sequence[list[int]], *, order: Iterable[int], size: int) -> list[list[int]]:
    """Batches of pair indices: the groups in ``order``, each batch filled with whole groups up to ``size`` pairs."""
    batches: list[list[int]] = []
    current: list[int] = []
    for g in order:
        if current and len(current) + len(groups[g]) > size:
            batches.append(current)
            current = []
        current = current + groups[g]
    if current:
        batches.append(current)
    return batches


__all__ = ["pack_groups", "query_groups"]
