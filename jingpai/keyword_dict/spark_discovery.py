"""New-word discovery as Spark jobs: :mod:`~jingpai.keyword_dict.discovery`'s statistics over the whole
corpus, with n-gram tables shuffled by key instead of held by one process.

1. **count** — each task encodes its documents per domain (:class:`~jingpai.keyword_dict.ngrams.UnitCodec`)
   and counts their n-grams (``n = 1 … max_n + 1``, :func:`~jingpai.keyword_dict.ngrams.count_levels`);
   the tables are split by a bucket of the n-gram's 64-bit key and ``reduceByKey`` merges them per
   ``(domain, n, bucket)``: every count is the n-gram's count in the whole domain (no pruning).
2. **edges** — each ``(n+1)``-gram seen twice or more sends ``c·log c`` to the bucket of its prefix and of
   its suffix; grouped with the candidates (``n``-grams seen ``min_count`` times) there, they give both
   neighbour entropies (:func:`~jingpai.keyword_dict.discovery.edge_entropy`).
3. **splits** — the candidates with free edges (few: they are collected) name the parts their PMI
   reads; those counts are looked up in the tables and the weakest split is scored on the driver
   (:func:`~jingpai.keyword_dict.discovery.weakest_split_pmi`).

Records are numpy tables, one per ``(domain, n, bucket)`` and task, not one per n-gram: the shuffle moves
arrays. Partitioning, shuffles and retries are Spark's.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from jingpai.keyword_dict.discovery import candidate_mask, edge_entropy, weakest_split_pmi
from jingpai.keyword_dict.ngrams import KEY_MULTIPLIER, RUN_BASE, Level, UnitCodec, chunks, count_levels, distinct, hash_rows, member, merge, prune
from jingpai.keyword_dict.settings import DiscoverySettings

if TYPE_CHECKING:
    from pyspark import RDD

logger = logging.getLogger(__name__)

#: the key of the Latin/digit run texts in the count tables (no domain is named None)
RUNS = None


def bucket_of(keys: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket of each n-gram key (the product mixes the last unit, which a key only adds, into the top bits)."""
    return (((keys * KEY_MULTIPLIER) >> np.uint64(32)) % np.uint64(buckets)).astype(np.intp)


def _split(keys: np.ndarray, buckets: int, *columns: np.ndarray) -> Iterator[tuple[int, tuple[np.ndarray, ...]]]:
    """``(bucket, (keys, *columns) of its rows)`` per bucket present (rows keep their order)."""
    where = bucket_of(keys, buckets)
    for b in np.unique(where).tolist():
        rows = where == b
        yield b, (keys[rows], *(c[rows] for c in columns))


def count_partition(rows: Iterable[tuple[str, str]], *, top: int, buckets: int, chunk_chars: int) -> Iterator[tuple[tuple, Any]]:
    """``((domain, n, bucket), Level)`` n-gram tables of one task's ``(domain, text)`` records, plus
    ``((RUNS, 0, bucket), {run id: text})`` for decoding Latin/digit runs later."""
    by_domain: dict[str, list[str]] = defaultdict(list)
    for domain, text in rows:
        by_domain[domain].append(text)
    for domain, docs in by_domain.items():
        for batch in chunks(docs, chunk_chars):  # memory bounded by the chunk, as on one machine
            codec = UnitCodec()
            ids, _, _ = codec.encode_docs(batch, owners=False)
            for n, level in enumerate(count_levels(ids, top)[1:], start=1):
                for b, (keys, counts, units) in _split(level.keys, buckets, level.counts, level.units):
                    yield (domain, n, b), Level(keys, counts, units)
            runs = codec.runs()
            if runs:
                ids = np.fromiter(runs, dtype=np.int64, count=len(runs))
                for b, (part,) in _split(ids.astype(np.uint64), buckets):
                    yield (RUNS, 0, b), {i: runs[i] for i in part.astype(np.int64).tolist()}


def merge_tables(a: Any, b: Any) -> Any:
    """``reduceByKey``'s merge: n-gram tables add their counts; run texts are a union."""
    return {**a, **b} if isinstance(a, dict) else merge(a, b)


def count_ngrams(docs: RDD, s: DiscoverySettings, *, buckets: int) -> RDD:
    """The n-gram tables of every domain (``n = 1 … max_n + 1``), keyed ``(domain, n, bucket)``."""
    count = _bind(count_partition, top=s.max_n + 1, buckets=buckets, chunk_chars=s.chunk_chars)
    return docs.mapPartitions(count).reduceByKey(merge_tables)


def _bind(fn, **kwargs):
    """``fn`` with keyword arguments fixed, as a closure Spark pickles with the function."""
    return lambda rows: fn(rows, **kwargs)


def _extension_pieces(item: tuple[tuple, Level], buckets: int) -> Iterator[tuple[tuple, tuple]]:
    """``Σ c·log c`` material of an ``(n+1)``-gram table: ``("R", prefix keys, c·log c)`` to the buckets of
    its prefixes (their right neighbours) and ``("L", suffix keys, c·log c)`` to those of its suffixes."""
    (domain, m, _), level = item
    level = prune(level, 2)  # c·log c = 0 for c = 1
    if not len(level):
        return
    clogc = level.counts * np.log(level.counts)
    for side, keys in (("R", hash_rows(level.units[:, :-1])), ("L", hash_rows(level.units[:, 1:]))):
        for b, (part, weights) in _split(keys, buckets, clogc):
            yield (domain, m - 1, b), (side, part, weights)


def _edge_stats(item: tuple[tuple, Iterable[tuple]], min_entropy: float) -> Iterator[tuple]:
    """``(domain, n, units, counts)`` of the candidates in one bucket whose both edges are free enough."""
    (domain, n, _), values = item
    candidates, pieces = None, {"L": [], "R": []}
    for value in values:
        if value[0] == "C":
            candidates = value[1]
        else:
            pieces[value[0]].append(value[1:])
    if candidates is None:
        return
    counts = candidates.counts.astype(np.float64)
    log_c = np.log(counts)
    entropy = {}
    for side, found in pieces.items():
        keys = np.concatenate([k for k, _ in found]) if found else np.zeros(0, np.uint64)
        weights = np.concatenate([w for _, w in found]) if found else np.zeros(0)
        rows = candidates.index_of(keys)
        hit = rows >= 0
        entropy[side] = edge_entropy(log_c, counts, np.bincount(rows[hit], weights=weights[hit], minlength=len(candidates)))
    keep = np.minimum(entropy["L"], entropy["R"]) >= min_entropy
    if keep.any():
        yield domain, n, candidates.units[keep], candidates.counts[keep]


def free_candidates(tables: RDD, s: DiscoverySettings, *, buckets: int) -> list[tuple[str, int, np.ndarray, np.ndarray]]:
    """``(domain, n, units, counts)`` of the n-grams (``max(2, min_n) ≤ n ≤ max_n``) seen ``min_count`` times
    whose left and right neighbour entropies reach ``min_entropy`` (collected: candidates, not corpus)."""
    lo = max(2, s.min_n)
    grams = tables.filter(lambda kv: kv[0][0] is not RUNS)
    candidates = (
        grams.filter(lambda kv: lo <= kv[0][1] <= s.max_n)
        .mapValues(lambda level: prune(level, s.min_count))
        .filter(lambda kv: len(kv[1]) > 0)
        .mapValues(lambda level: ("C", level))
    )
    extensions = grams.filter(lambda kv: lo + 1 <= kv[0][1]).flatMap(lambda kv: _extension_pieces(kv, buckets))
    min_entropy = s.min_entropy
    return candidates.union(extensions).groupByKey().flatMap(lambda kv: _edge_stats(kv, min_entropy)).collect()


def _needed_parts(free: list[tuple[str, int, np.ndarray, np.ndarray]]) -> dict[tuple[str, int], np.ndarray]:
    """``{(domain, k): sorted keys}`` of the parts that the candidates' splits read."""
    parts: dict[tuple[str, int], list[np.ndarray]] = defaultdict(list)
    for domain, n, units, _ in free:
        for k in range(1, n):
            parts[domain, k].append(hash_rows(units[:, :k]))
            parts[domain, n - k].append(hash_rows(units[:, k:]))
    return {key: distinct(np.concatenate(found)) for key, found in parts.items()}


def _part_counts(tables: RDD, needed: dict[tuple[str, int], np.ndarray]) -> dict[tuple[str, int], Level]:
    """The counts of the ``needed`` parts, looked up in the tables (one small table per domain and length)."""
    wanted = tables.context.broadcast(needed)

    def take(item: tuple[tuple, Level]) -> Iterator[tuple[tuple[str, int], tuple[np.ndarray, np.ndarray]]]:
        (domain, n, _), level = item
        keys = wanted.value.get((domain, n))
        if keys is not None and len(level):
            rows = member(level.keys, keys)
            yield (domain, n), (level.keys[rows], level.counts[rows])

    found: dict[tuple[str, int], list] = defaultdict(list)
    for key, piece in tables.filter(lambda kv: kv[0][0] is not RUNS).flatMap(take).collect():
        found[key].append(piece)
    wanted.unpersist()
    out = {}
    for key, pieces in found.items():
        keys, counts = np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])
        order = np.argsort(keys)
        out[key] = Level(keys[order], counts[order], np.zeros((keys.shape[0], 0), np.int64))
    return out


def _run_texts(tables: RDD, free: list[tuple[str, int, np.ndarray, np.ndarray]]) -> dict[int, str]:
    """``{run id: text}`` of the Latin/digit runs inside the candidates."""
    ids = [units[units >= RUN_BASE] for _, _, units, _ in free]
    needed = set(np.concatenate(ids).tolist()) if ids else set()
    if not needed:
        return {}
    wanted = tables.context.broadcast(needed)
    runs = tables.filter(lambda kv: kv[0][0] is RUNS).flatMap(lambda kv: [(i, t) for i, t in kv[1].items() if i in wanted.value])
    out = dict(runs.collect())
    wanted.unpersist()
    return out


def discover_words(tables: RDD, s: DiscoverySettings, *, buckets: int, total_units: dict[str, int]) -> dict[str, dict[str, int]]:
    """``{domain: {word: count}}``: what :func:`~jingpai.keyword_dict.discovery.find_words` finds in each
    domain, from the count tables of :func:`count_ngrams` (``total_units``: units per domain)."""
    free = free_candidates(tables, s, buckets=buckets)
    parts = _part_counts(tables, _needed_parts(free))
    codec = UnitCodec()
    codec.learn(_run_texts(tables, free))
    empty = Level(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros((0, 0), np.int64))
    found: dict[str, dict[str, int]] = {domain: {} for domain in total_units}
    for domain, n, units, counts in free:
        log_c = np.log(counts.astype(np.float64))
        splits = ((parts.get((domain, k), empty).lookup(hash_rows(units[:, :k])),
                   parts.get((domain, n - k), empty).lookup(hash_rows(units[:, k:]))) for k in range(1, n))
        pmi = weakest_split_pmi(log_c, math.log(total_units[domain]), splits)
        keep = pmi >= s.min_pmi
        words = codec.decode_rows(units[keep])
        ok = candidate_mask(words)
        found[domain].update((w, c) for w, c, good in zip(words, counts[keep].tolist(), ok.tolist()) if good)
    logger.info("spark discovery: %d candidates with free edges, %s new words", sum(len(f[2]) for f in free),
                ", ".join(f"{d} {len(w)}" for d, w in found.items()))
    return found


def total_units(tables: RDD) -> dict[str, int]:
    """Units (Han characters and Latin/digit runs) per domain: the sum of its 1-gram counts."""
    ones = tables.filter(lambda kv: kv[0][0] is not RUNS and kv[0][1] == 1)
    return dict(ones.map(lambda kv: (kv[0][0], int(kv[1].counts.sum()))).reduceByKey(lambda a, b: a + b).collect())


__all__ = ["RUNS", "bucket_of", "count_ngrams", "count_partition", "discover_words", "free_candidates", "merge_tables", "total_units"]
