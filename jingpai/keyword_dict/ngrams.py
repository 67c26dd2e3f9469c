"""Vectorised n-gram counting over unit sequences (numpy), chunk by chunk with bounded memory.

Units (:mod:`jingpai.keyword_dict.text`) get integer ids; a corpus chunk becomes one id array with a
separator (0) between segments. Unit ids are a function of the unit alone (a Han character is its code
point, a Latin/digit run a stable hash of its text), so ids and keys computed in different processes or
from different texts agree.

Within a chunk, :func:`rank_levels` counts n-grams exactly: level by level it sorts the pairs
(row of the (n-1)-gram, row of the last unit), packed with the position into one 64-bit word, so every
position learns the row of the n-gram starting there. Across chunks, n-grams are identified by a 64-bit
polynomial hash of their ids (wrapping arithmetic; with a few million distinct n-grams a collision has
probability ~1e-7) in :class:`Level` tables that keep their unit ids, so prefixes and suffixes are hashed
from the table itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from jingpai.cjk import HAN_RANGES

logger = logging.getLogger(__name__)

#: odd 64-bit multiplier of the polynomial keys (golden ratio): spreads ids over the key space
KEY_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


RUN_BASE = 0x110000  # ids of Latin/digit runs start above every code point

# character class of every BMP code point: 0 other, 1 Han, 2 Latin letter or digit (ASCII / full-width);
# every unit character is in the BMP, so astral code points are looked up as U+FFFF (class 0)
_OTHER, _HAN, _ALNUM = 0, 1, 2
_CLASS = np.zeros(0x10000, dtype=np.uint8)
for _lo, _hi in HAN_RANGES:
    _CLASS[_lo : _hi + 1] = _HAN
for _lo, _hi in ((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0xFF10, 0xFF19), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A)):
    _CLASS[_lo : _hi + 1] = _ALNUM


_Q = np.uint64(pow(int(KEY_MULTIPLIER), -1, 1 << 64))  # inverse of KEY_MULTIPLIER modulo 2**64


def _powers(base: np.uint64, count: int) -> np.ndarray:
    """``base**0 … base**(count-1)`` modulo 2**64."""
    out = np.full(count, base, dtype=np.uint64)
    out[0] = 1
    return np.cumprod(out, dtype=np.uint64)


def _classes(text: str) -> tuple[np.ndarray, np.ndarray]:
    """``(code points, character classes)`` of ``text``."""
    cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return cp, _CLASS[np.minimum(cp, 0xFFFF)]


class UnitCodec:
    """Unit ↔ positive integer id: a Han character is its code point, a Latin/digit run gets a stable id
    above all code points, 0 separates segments. Encoding is vectorised over code points (Python only
    touches Latin runs)."""

    def __init__(self) -> None:
        self._runs: dict[int, str] = {}

    def _unit_ids(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, unit start, unit character)`` per code point of ``text``: ids hold a unit's id at its first
        character (a Han character, or the first character of a Latin run) and 0 elsewhere."""
        cp, cls = _classes(text)
        han, alnum = cls == _HAN, cls == _ALNUM
        ids = np.where(han, cp, 0).astype(np.int64)
        run_start = alnum.copy()
        run_start[1:] &= ~alnum[:-1]
        if run_start.any():
            # a run's id is a polynomial hash of its code points, vectorised with prefix sums:
            # Σ v[j]·P^(e-1-j) over j in [s, e) = P^(e-1) · (S[e] − S[s]) where S[i] = Σ_{j<i} v[j]·P^(-j)
            pos = np.flatnonzero(alnum)
            first = np.flatnonzero(run_start[pos])
            last = np.append(first[1:], pos.shape[0]) - 1
            v = cp[pos].astype(np.uint64)
            sums = np.zeros(pos.shape[0] + 1, dtype=np.uint64)
            np.cumsum(v * _powers(_Q, pos.shape[0]), out=sums[1:])
            h = _powers(KEY_MULTIPLIER, pos.shape[0])[last] * (sums[last + 1] - sums[first])
            # × P spreads short runs' small hashes to the top bits, the strongest: keep those 56
            run_ids = ((h * KEY_MULTIPLIER) >> np.uint64(8)).astype(np.int64) + RUN_BASE
            ids[pos[first]] = run_ids
            for rid, k in dict(zip(run_ids.tolist(), range(run_ids.shape[0]))).items():
                if rid not in self._runs:
                    self._runs[rid] = text[pos[first[k]] : pos[last[k]] + 1]
        return ids, han | run_start, han | alnum

    def encode_docs(self, docs: Iterable[str], *, owners: bool = True) -> tuple[np.ndarray, np.ndarray | None, int]:
        """``(ids, doc_of_position, number of docs)``: all segments separated by 0, each position's doc index
        (-1 at separators that start no document; ``None`` unless ``owners``)."""
        docs = list(docs)
        if not docs:
            return np.zeros(1, np.int64), (np.full(1, -1, np.int64) if owners else None), 0
        text = "\n".join(docs) + "\n"  # a newline ends every document's last segment
        ids, unit_start, unit_char = self._unit_ids(text)
        # a Latin run is one unit at its first position; its other positions are dropped
        keep = unit_start | ~unit_char
        # ... and a run of separators collapses to one, which starts the array
        sep = ~unit_char
        keep[1:] &= ~(sep[1:] & sep[:-1])
        keep[0] = True
        ids = ids[keep]
        owner = None
        if owners:
            lengths = np.fromiter((len(d) + 1 for d in docs), dtype=np.int64, count=len(docs))
            owner = np.repeat(np.arange(len(docs), dtype=np.int64), lengths)[keep]
        if ids[0] != 0:
            ids = np.concatenate([[0], ids])
            owner = np.concatenate([[-1], owner]) if owner is not None else None
        return ids, owner, len(docs)

    def encode_words(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(units per word, unit ids)`` of whole words: a word of ``k`` units owns the next ``k`` ids; a word
        with a character that is no unit (or an empty word) gets 0 units."""
        if not words:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        ids, unit_start, unit_char = self._unit_ids("\n".join(words) + "\n")
        offsets = np.concatenate([[0], np.cumsum(lengths + 1)])
        chars = np.concatenate([[0], np.cumsum(unit_char)])
        whole = (lengths > 0) & (chars[offsets[1:] - 1] - chars[offsets[:-1]] == lengths)
        owner = np.repeat(np.arange(len(words)), lengths + 1)
        take = unit_start & whole[owner]
        return np.bincount(owner[take], minlength=len(words)), ids[take]

    def runs(self) -> dict[int, str]:
        """``{id: text}`` of the Latin/digit runs seen so far (another codec decodes them after :meth:`learn`)."""
        return dict(self._runs)

    def learn(self, runs: dict[int, str]) -> None:
        self._runs.update(runs)

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(chr(i) if i < RUN_BASE else self._runs[i] for i in ids)

    def decode_rows(self, rows: np.ndarray) -> list[str]:
        """:meth:`decode` of every row of an ``[M, n]`` id array (Han-only rows without a Python loop)."""
        if rows.shape[0] == 0:
            return []
        latin = (rows >= RUN_BASE).any(axis=1)
        chars = np.where(latin[:, None], 0x20, rows).astype(np.uint32)  # Latin rows are filled in below
        han = chars.view(f"<U{rows.shape[1]}")[:, 0].tolist()
        for i in np.flatnonzero(latin).tolist():
            han[i] = self.decode(rows[i].tolist())
        return han

    def digit_runs(self, *, min_len: int = 1) -> np.ndarray:
        """Ids of the runs seen so far that are all digits, at least ``min_len`` long."""
        return np.sort(np.fromiter((i for i, r in self._runs.items() if r.isdigit() and len(r) >= min_len), dtype=np.int64))


def hash_rows(units: np.ndarray) -> np.ndarray:
    """64-bit keys of id rows (shape ``[M, n]``)."""
    h = np.zeros(units.shape[0], dtype=np.uint64)
    for j in range(units.shape[1]):
        h = h * KEY_MULTIPLIER + units[:, j].astype(np.uint64)
    return h


def run_lengths(ids: np.ndarray) -> np.ndarray:
    """Units from each position up to the next separator (0 at a separator): the longest n-gram starting there."""
    is_sep = ids == 0
    seps = np.append(np.flatnonzero(is_sep), ids.shape[0])
    out = seps[np.cumsum(is_sep)] - np.arange(ids.shape[0])
    out[is_sep] = 0
    return out


@dataclass
class Level:
    """Distinct n-grams of one length: sorted keys, counts, unit ids (``[M, n]``)."""

    keys: np.ndarray
    counts: np.ndarray
    units: np.ndarray

    @classmethod
    def empty(cls, n: int) -> Level:
        return cls(np.empty(0, np.uint64), np.empty(0, np.int64), np.empty((0, n), np.int64))

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Counts of ``keys`` (0 where absent)."""
        if len(self) == 0:
            return np.zeros(keys.shape[0], np.int64)
        pos = np.clip(np.searchsorted(self.keys, keys), 0, len(self) - 1)
        return np.where(self.keys[pos] == keys, self.counts[pos], 0)

    def index_of(self, keys: np.ndarray) -> np.ndarray:
        """Row of each key, -1 where absent."""
        if len(self) == 0:
            return np.full(keys.shape[0], -1, np.int64)
        pos = np.clip(np.searchsorted(self.keys, keys), 0, len(self) - 1)
        return np.where(self.keys[pos] == keys, pos, -1)


def _runs(sorted_keys: np.ndarray) -> np.ndarray:
    """Start index of each run of equal values in a sorted array."""
    first = np.ones(sorted_keys.shape[0], dtype=bool)
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    return np.flatnonzero(first)


def member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each value is in ``sorted_set`` (``np.isin`` without its sort of both arrays)."""
    if sorted_set.shape[0] == 0:
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), sorted_set.shape[0] - 1)
    return sorted_set[at] == values


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (``np.unique`` without its extras; a plain sort is the fast path)."""
    s = np.sort(values)
    return s[_runs(s)] if s.shape[0] else s


def _reduce(keys: np.ndarray, counts: np.ndarray, units: np.ndarray) -> Level:
    order = np.argsort(keys, kind="stable")
    keys, counts, units = keys[order], counts[order], units[order]
    if keys.shape[0] == 0:
        return Level(keys, counts, units)
    starts = _runs(keys)
    return Level(keys[starts], np.add.reduceat(counts, starts), units[starts])


@dataclass
class Ranked:
    """Distinct n-grams of one length in an encoded chunk, seen from its positions.

    ``rank[i]`` is the row of the n-gram starting at position ``i`` (``-1``: none, because it crosses a
    separator or is an untabled singleton); row ``r`` occurs ``counts[r]`` times, once at ``rep[r]``.
    Rows are dense exact ranks (no hashing), valid within their chunk only.
    """

    rank: np.ndarray
    counts: np.ndarray
    rep: np.ndarray
    #: rows of each row's (n-1)-gram prefix and suffix in the level below (zeros for n = 1)
    prefix: np.ndarray
    suffix: np.ndarray

    def __len__(self) -> int:
        return int(self.counts.shape[0])


def _sort_groups(keys: np.ndarray, positions: np.ndarray, bound: int, position_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(positions in key order, keys in order, run starts)`` for non-negative integer ``keys`` < ``bound``.

    Key and position are packed into one 64-bit word where they fit: a plain sort of those is several
    times faster than an argsort of the keys, and hands back the positions without a gather.
    """
    if keys.shape[0] and (bound - 1).bit_length() + position_bits <= 64:
        packed = keys.astype(np.uint64) << np.uint64(position_bits)
        packed |= positions.astype(np.uint64)
        packed.sort()
        at = (packed & np.uint64((1 << position_bits) - 1)).astype(np.intp)
        packed >>= np.uint64(position_bits)
        return at, packed, _runs(packed)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    return positions[order], keys, _runs(keys) if keys.shape[0] else np.zeros(0, np.intp)


def _unit_keys(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(positions, keys, key bound)`` of level 1: a Han unit is its code point; Latin runs (huge hashed
    ids) get small ids above those."""
    pos = np.flatnonzero(ids)
    keys = ids[pos]
    runs = keys >= RUN_BASE
    bound = RUN_BASE
    if runs.any():
        run_ids = distinct(keys[runs])
        keys[runs] = RUN_BASE + np.searchsorted(run_ids, keys[runs])
        bound += run_ids.shape[0]
    return pos, keys, bound


def rank_levels(ids: np.ndarray, top: int, *, min_count: int = 1) -> list[Ranked]:
    """The distinct n-grams (``n = 1 … top``; index 0 unused) of one encoded chunk, by position.

    Each level sorts exact keys ``(rank of the (n-1)-gram, rank of the last unit)``, so n-grams are told
    apart exactly, whatever their length.

    Args:
        ids: an encoded chunk (:meth:`UnitCodec.encode_docs`).
        top: the longest n-gram counted.
        min_count: the fewest occurrences of a word candidate. From 2 on (for a corpus counted in one
            chunk, whose counts are final), only what candidate statistics read is ranked: n-grams seen
            at least twice whose prefix or suffix is seen ``min_count`` times (candidates, their parts,
            and their extensions one unit longer). An n-gram can recur only where its prefix and suffix
            do, so only such positions are sorted and long n-grams cost little. 1: rank everything.
    """
    size = ids.shape[0]
    position_bits = max(1, (size - 1).bit_length())
    pos, keys, bound = _unit_keys(ids)
    empty = np.zeros(0, np.intp)
    levels: list[Ranked] = [Ranked(np.zeros(0, np.int32), np.zeros(0, np.int64), empty, empty, empty)]
    last_unit = frequent = None
    units = 1  # distinct units (rows of level 1): the radix of the keys
    for n in range(1, top + 1):
        length = max(size - n + 1, 0)
        if n > 1:
            prev = levels[-1].rank
            fits = prev[:-1] >= 0
            fits &= prev[1:] >= 0
            if frequent is not None:
                fits &= frequent[:-1] | frequent[1:]
            pos = np.flatnonzero(fits)
            keys = prev[pos].astype(np.uint64)
            keys *= np.uint64(units)
            keys += last_unit[pos + (n - 1)]
            bound = max(len(levels[-1]), 1) * units
        at, sorted_keys, starts = _sort_groups(keys, pos, bound, position_bits)
        counts = np.diff(starts, append=at.shape[0])
        kept = counts > 1 if min_count > 1 else np.ones(counts.shape[0], bool)
        row = np.cumsum(kept, dtype=np.int32) - 1
        row[~kept] = -1
        rank = np.full(length, -1, np.int32)
        rank[at] = np.repeat(row, counts)
        starts = starts[kept]
        rep = at[starts]
        counts = counts[kept]
        if n == 1:
            last_unit = rank.astype(np.uint64)  # read only where the unit recurs (rank >= 0)
            units = max(rep.shape[0], 1)
            prefix = suffix = np.zeros(rep.shape[0], np.intp)
        else:
            prefix = (sorted_keys[starts] // np.uint64(units)).astype(np.intp)
            suffix = levels[-1].rank[rep + 1].astype(np.intp)
        if min_count > 2:
            frequent = np.append(counts >= min_count, False)[rank]  # rank -1 reads the appended False
        levels.append(Ranked(rank, counts, rep, prefix, suffix))
    return levels


def count_levels(ids: np.ndarray, top: int) -> list[Level]:
    """The n-gram tables (``n = 1 … top``, index 0 unused) of one encoded chunk."""
    levels: list[Level] = [Level.empty(0)]
    for n, ranked in enumerate(rank_levels(ids, top)[1:], start=1):
        units = ids[ranked.rep[:, None] + np.arange(n)]
        keys = hash_rows(units)
        order = np.argsort(keys)
        levels.append(Level(keys[order], ranked.counts[order], units[order]))
    return levels


def merge(a: Level, b: Level) -> Level:
    if len(a) == 0:
        return b
    if len(b) == 0:
        return a
    return _reduce(np.concatenate([a.keys, b.keys]), np.concatenate([a.counts, b.counts]), np.concatenate([a.units, b.units]))


def prune(level: Level, min_count: int) -> Level:
    keep = level.counts >= min_count
    return Level(level.keys[keep], level.counts[keep], level.units[keep])


def chunks(docs: Iterable[str], max_chars: int) -> Iterator[list[str]]:
    """Consecutive groups of documents of about ``max_chars`` characters."""
    batch: list[str] = []
    size = 0
    for doc in docs:
        batch.append(doc)
        size += len(doc)
        if size >= max_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


__all__ = [
    "KEY_MULTIPLIER",
    "RUN_BASE",
    "Level",
    "Ranked",
    "UnitCodec",
    "chunks",
    "count_levels",
    "distinct",
    "hash_rows",
    "member",
    "merge",
    "prune",
    "rank_levels",
    "run_lengths",
]
