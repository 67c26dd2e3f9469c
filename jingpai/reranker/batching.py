"""Whole-query batches for the training loop (``TrainSettings(batching="queries")``): an in-window loss
(:mod:`jingpai.reranker.losses`) can only compare a query's candidates that arrive in the same batch.

>>> pairs = [LabeledPair("a", "x", 1), LabeledPair("b", "y", 0), LabeledPair("a", "z", 0), LabeledPair("c", "w", 1)]
>>> query_groups(pairs)
[[0, 2], [1], [3]]
>>> pack_groups(query_groups(pairs), order=[2, 0, 1], size=2)
[[3], [0, 2], [1]]

A batch never splits a query: a group larger than ``size`` becomes one batch of its own.

``batching="lengths"`` (:func:`length_batches`) cuts the shuffled pairs into pools of ``pool`` batches
and batches each pool's pairs by length: a batch pads to its longest text, and on short questions
(LCQMC: 12 pieces on average, 32 in a typical shuffled batch) most of a step is padding otherwise.

>>> length_batches([5, 1, 4, 2, 3, 9], order=[0, 1, 2, 3, 4, 5], size=2, pool=2, rng_order=[1, 0, 2])
[[2, 0], [1, 3], [4, 5]]
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


def length_batches(
    lengths: Sequence[int], *, order: Sequence[int], size: int, pool: int, rng_order: Sequence[int],
) -> list[list[int]]:
    """Batches of ``size`` pair indices, similar lengths together, still random between epochs.

    Args:
        lengths: a length per pair (what its batch pads to, e.g. its longer side).
        order: this epoch's shuffled pair indices.
        size: pairs per batch.
        pool: batches per pool; pairs are sorted by length only within a pool of ``pool · size`` pairs
            of ``order``, so each batch still holds a random slice of the data.
        rng_order: a permutation of the batches (the batch order of the epoch).
    """
    span = size * pool
    batches: list[list[int]] = []
    for start in range(0, len(order), span):
        chunk = sorted(order[start : start + span], key=lambda i: lengths[i])
        batches.extend(list(chunk[b : b + size]) for b in range(0, len(chunk), size))
    return [batches[i] for i in rng_order]


__all__ = ["length_batches", "pack_groups", "query_groups"]
