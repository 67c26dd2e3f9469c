"""Vectorised n-gram tables over unit sequences (numpy), built chunk by chunk with bounded memory.

Units (:mod:`jingpai.keyword_dict.text`) get integer ids; a corpus chunk becomes one id array with a
separator (0) between segments. An n-gram is identified by a 64-bit polynomial hash of its ids
(wrapping arithmetic; with a few million distinct n-grams a collision has probability ~1e-7) and keeps
its unit ids, so prefixes and suffixes are hashed from the table itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from jingpai.keyword_dict.text import segments

logger = logging.getLogger(__name__)

_P = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier (golden ratio), spreads ids over the key space


_RUN_BASE = 0x110000  # ids of Latin/digit runs start above every code point


def _is_han(cp: np.ndarray) -> np.ndarray:
    return ((cp >= 0x3400) & (cp <= 0x4DBF)) | ((cp >= 0x4E00) & (cp <= 0x9FFF)) | ((cp >= 0xF900) & (cp <= 0xFAFF))


def _is_alnum(cp: np.ndarray) -> np.ndarray:
    return (
        ((cp >= 0x30) & (cp <= 0x39)) | ((cp >= 0x41) & (cp <= 0x5A)) | ((cp >= 0x61) & (cp <= 0x7A))
        | ((cp >= 0xFF10) & (cp <= 0xFF19)) | ((cp >= 0xFF21) & (cp <= 0xFF3A)) | ((cp >= 0xFF41) & (cp <= 0xFF5A))
    )


class UnitCodec:
    """Unit ↔ positive integer id: a Han character is its code point, a Latin/digit run gets an id above
    all code points, 0 separates segments. Encoding is vectorised over code points (no per-unit Python)."""

    def __init__(self) -> None:
        self._run_ids: dict[str, int] = {}
        self._runs: list[str] = []

    def _run_id(self, run: str) -> int:
        i = self._run_ids.get(run)
        if i is None:
            i = self._run_ids[run] = _RUN_BASE + len(self._runs)
            self._runs.append(run)
        return i

    def encode_docs(self, docs: Iterable[str]) -> tuple[np.ndarray, np.ndarray, int]:
        """``(ids, doc_of_position, number of docs)``: all segments separated by 0, each position's doc index."""
        docs = list(docs)
        if not docs:
            return np.zeros(1, np.int64), np.full(1, -1, np.int64), 0
        text = "\n".join(docs) + "\n"  # a newline ends every document's last segment
        cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        lengths = np.fromiter((len(d) + 1 for d in docs), dtype=np.int64, count=len(docs))
        owner = np.repeat(np.arange(len(docs), dtype=np.int64), lengths)
        han, alnum = _is_han(cp), _is_alnum(cp)
        ids = np.where(han, cp, 0)
        # a Latin/digit run becomes one unit at its first position; its other positions are dropped
        prev = np.concatenate([[False], alnum[:-1]])
        run_start = alnum & ~prev
        keep = han | run_start | ~alnum
        if run_start.any():
            nxt = np.concatenate([alnum[1:], [False]])
            starts = np.flatnonzero(run_start)
            ends = np.flatnonzero(alnum & ~nxt) + 1
            ids[starts] = [self._run_id(text[a:b]) for a, b in zip(starts.tolist(), ends.tolist())]
        ids, owner = ids[keep], owner[keep]
        # collapse runs of separators to one
        sep = ids == 0
        dup = sep & np.concatenate([[False], sep[:-1]])
        ids, owner = ids[~dup], owner[~dup]
        if ids[0] != 0:
            ids, owner = np.concatenate([[0], ids]), np.concatenate([[-1], owner])
        return ids, owner, len(docs)

    def encode_word(self, units: list[str]) -> list[int] | None:
        """Ids of a word's units, or ``None`` when a Latin run never occurred (the word cannot occur either)."""
        out = []
        for u in units:
            if len(u) == 1 and ("\u3400" <= u <= "\u4dbf" or "\u4e00" <= u <= "\u9fff" or "\uf900" <= u <= "\ufaff"):
                out.append(ord(u))
            else:
                i = self._run_ids.get(u)
                if i is None:
                    return None
                out.append(i)
        return out

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(chr(i) if i < _RUN_BASE else self._runs[i - _RUN_BASE] for i in ids)


def hash_rows(units: np.ndarray) -> np.ndarray:
    """64-bit keys of id rows (shape ``[M, n]``)."""
    h = np.zeros(units.shape[0], dtype=np.uint64)
    for j in range(units.shape[1]):
        h = h * _P + units[:, j].astype(np.uint64)
    return h


def window_keys(ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, start positions)`` of every n-gram of ``ids`` that does not cross a separator."""
    length = ids.shape[0] - n + 1
    if length <= 0:
        return np.empty(0, np.uint64), np.empty(0, np.int64)
    seps = np.concatenate([[0], np.cumsum(ids == 0)])
    starts = np.arange(length)
    ok = seps[starts + n] - seps[starts] == 0
    h = np.zeros(length, dtype=np.uint64)
    for j in range(n):
        h = h * _P + ids[j : j + length].astype(np.uint64)
    return h[ok], starts[ok]


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


def _reduce(keys: np.ndarray, counts: np.ndarray, units: np.ndarray) -> Level:
    order = np.argsort(keys, kind="stable")
    keys, counts, units = keys[order], counts[order], units[order]
    if keys.shape[0] == 0:
        return Level(keys, counts, units)
    first = np.concatenate([[True], keys[1:] != keys[:-1]])
    starts = np.flatnonzero(first)
    return Level(keys[starts], np.add.reduceat(counts, starts), units[starts])


def count_level(ids: np.ndarray, n: int) -> Level:
    """The n-gram table of one encoded chunk."""
    keys, starts = window_keys(ids, n)
    if keys.shape[0] == 0:
        return Level.empty(n)
    uniq, first, counts = np.unique(keys, return_index=True, return_counts=True)
    rows = starts[first][:, None] + np.arange(n)[None, :]
    return Level(uniq, counts.astype(np.int64), ids[rows])


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


__all__ = ["Level", "UnitCodec", "chunks", "count_level", "hash_rows", "merge", "prune", "window_keys"]
