"""The fused domain dictionary: word → {domain: diff-idf score}, plus corpus frequency.

A dictionary directory holds:

- ``dictionary.tsv`` — ``word  domain  score  freq``, one row per (word, domain), header line;
- ``userdict.txt`` — a jieba / rjieba user dictionary (``word freq n``);
- ``keywords/<domain>.txt`` and ``keywords/all.txt`` — one word per line, best first, for engine
  keyword lists (``keep_words``, ``user_dictionary`` of analyzer plugins, synonym rule sources);
- ``meta.json`` — ``version`` (content hash of ``dictionary.tsv``), build parameters, corpus statistics,
  creation time.

The version changes exactly when the content does, so indices and models can record which dictionary
they were built with.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jingpai.errors import UserError

logger = logging.getLogger(__name__)

TSV_FILE = "dictionary.tsv"
USERDICT_FILE = "userdict.txt"
META_FILE = "meta.json"
KEYWORDS_DIR = "keywords"
TSV_HEADER = "word\tdomain\tscore\tfreq"
#: jieba frequency given to dictionary words that carry no corpus frequency, high enough to keep them whole
MIN_USERDICT_FREQ = 1000
_WHITESPACE = re.compile("[\t\n\r ]")


class DictionaryError(UserError, ValueError):
    """A dictionary directory or file is missing or malformed (the message names the file and line)."""


@dataclass(frozen=True)
class Entry:
    """One row of the dictionary."""

    word: str
    domain: str
    score: float
    freq: int = 0


class Dictionary:
    """A versioned word → {domain: score} dictionary.

    Args:
        entries: rows; a (word, domain) pair may appear once.
        params: build parameters (stored in ``meta.json``).
        stats: corpus statistics (stored in ``meta.json``).
        created: ISO timestamp (``None``: now).

    Example:
        >>> d = Dictionary.from_scores({"GDP": {"finance": 2.5}, "中国": {"finance": 0.8, "politics": 1.1}})
        >>> d.weight("中国"), "GDP" in d, d.domain_words("finance")
        (1.1, True, ['GDP', '中国'])
    """

    def __init__(
        self,
        entries: Iterable[Entry],
        *,
        params: Mapping[str, Any] | None = None,
        stats: Mapping[str, Any] | None = None,
        created: str | None = None,
    ) -> None:
        self._setup(((e.word, e.domain, e.score, e.freq) for e in entries), params, stats, created)

    def _setup(self, rows: Iterable[tuple[str, str, float, int]], params, stats, created) -> None:
        self._scores: dict[str, dict[str, float]] = {}
        self._freq: dict[str, int] = {}
        self._tsv: str | None = None
        self._add(rows)
        self._weights: dict[str, float] | None = None
        self.params = dict(params or {})
        self.stats = dict(stats or {})
        self.created = created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.version = hashlib.sha1(self.to_tsv().encode("utf-8")).hexdigest()[:12]

    def _add(self, rows: Iterable[tuple[str, str, float, int]]) -> None:
        scores, freqs = self._scores, self._freq
        for word, domain, score, freq in rows:
            domains = scores.get(word)
            if domains is None:
                if not word or _WHITESPACE.search(word):
                    raise DictionaryError(f"dictionary word {word!r} is empty or contains whitespace")
                domains = scores[word] = {}
            elif domain in domains:
                raise DictionaryError(f"duplicate dictionary entry for word {word!r} in domain {domain!r}")
            domains[domain] = float(score)
            freqs[word] = max(freqs.get(word, 0), int(freq))

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[tuple[str, str, float, int]],
        *,
        params: Mapping[str, Any] | None = None,
        stats: Mapping[str, Any] | None = None,
        created: str | None = None,
    ) -> Dictionary:
        """Build from ``(word, domain, score, freq)`` tuples: the rows of :class:`Entry` without an object each."""
        d = cls.__new__(cls)
        d._setup(rows, params, stats, created)
        return d

    @classmethod
    def from_scores(
        cls,
        scores: Mapping[str, Mapping[str, float]],
        *,
        freqs: Mapping[str, int] | None = None,
        params: Mapping[str, Any] | None = None,
        stats: Mapping[str, Any] | None = None,
    ) -> Dictionary:
        """Build from ``{word: {domain: score}}`` (and optional ``{word: freq}``)."""
        freqs = freqs or {}
        entries = [Entry(w, d, s, freqs.get(w, 0)) for w, doms in scores.items() for d, s in doms.items()]
        return cls(entries, params=params, stats=stats)

    # ------------------------------------------------------------------ queries

    def __contains__(self, word: object) -> bool:
        return word in self._scores

    def __len__(self) -> int:
        return len(self._scores)

    def __repr__(self) -> str:
        return f"Dictionary(version={self.version}, words={len(self)}, domains={self.domain_names()})"

    def words(self) -> set[str]:
        return set(self._scores)

    def weights(self) -> dict[str, float]:
        """``{word: best score}`` for every word (computed once; for hot loops)."""
        if self._weights is None:
            self._weights = {w: max(doms.values()) for w, doms in self._scores.items()}
        return self._weights

    def weight(self, word: str) -> float:
        """The word's best score over its domains (0.0 if absent)."""
        domains = self._scores.get(word)
        return max(domains.values()) if domains else 0.0

    def domains(self, word: str) -> dict[str, float]:
        """``{domain: score}`` of ``word`` (empty if absent)."""
        return dict(self._scores.get(word, {}))

    def freq(self, word: str) -> int:
        return self._freq.get(word, 0)

    def domain_names(self) -> list[str]:
        return sorted({d for doms in self._scores.values() for d in doms})

    def domain_words(self, domain: str) -> list[str]:
        """Words of ``domain``, best score first.

        Raises:
            DictionaryError: ``domain`` is not in the dictionary (the message lists the domains).
        """
        rows = [(s, w) for w, doms in self._scores.items() for d, s in doms.items() if d == domain]
        if not rows:
            raise DictionaryError(f"unknown domain {domain!r}; expected one of {', '.join(self.domain_names())}")
        return [w for _, w in sorted(rows, key=lambda r: (-r[0], r[1]))]

    def _sorted_rows(self) -> list[tuple[str, float, str, float]]:
        """``(domain, -score, word, score)`` sorted: by domain, then descending score, then word."""
        rows = [(d, -s, w, s) for w, doms in self._scores.items() for d, s in doms.items()]
        rows.sort()
        return rows

    def entries(self) -> list[Entry]:
        """All rows, sorted by domain then descending score then word."""
        return [Entry(w, d, s, self._freq.get(w, 0)) for d, _, w, s in self._sorted_rows()]

    # ------------------------------------------------------------------ files

    def to_tsv(self) -> str:
        # computed once: the version hashes it and save() writes it (rows never change after construction)
        if self._tsv is None:
            freq = self._freq
            lines = [TSV_HEADER] + [f"{w}\t{d}\t{s:.6f}\t{freq.get(w, 0)}" for d, _, w, s in self._sorted_rows()]
            self._tsv = "\n".join(lines) + "\n"
        return self._tsv

    def userdict_lines(self) -> list[str]:
        """jieba user-dictionary lines ``word freq n``, best words first."""
        order = sorted(self._scores, key=lambda w: (-self.weight(w), w))
        return [f"{w} {max(self._freq.get(w, 0), MIN_USERDICT_FREQ)} n" for w in order]

    def save(self, directory: str | Path) -> Path:
        """Write the dictionary directory (see the module docstring); return its path."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        (path / TSV_FILE).write_text(self.to_tsv(), encoding="utf-8")
        (path / USERDICT_FILE).write_text("\n".join(self.userdict_lines()) + "\n", encoding="utf-8")
        kw = path / KEYWORDS_DIR
        kw.mkdir(exist_ok=True)
        for domain in self.domain_names():
            (kw / f"{domain}.txt").write_text("\n".join(self.domain_words(domain)) + "\n", encoding="utf-8")
        everything = sorted(self._scores, key=lambda w: (-self.weight(w), w))
        (kw / "all.txt").write_text("\n".join(everything) + "\n", encoding="utf-8")
        meta = {
            "version": self.version,
            "created": self.created,
            "words": len(self),
            "domains": {d: len(self.domain_words(d)) for d in self.domain_names()},
            "params": self.params,
            "stats": self.stats,
        }
        (path / META_FILE).write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> Dictionary:
        """Read a dictionary directory written by :meth:`save`.

        Raises:
            DictionaryError: files missing, a malformed row (file and line named), or a version mismatch.
        """
        path = Path(directory)
        tsv = path / TSV_FILE
        if not tsv.is_file():
            raise DictionaryError(f"{path} is not a jingpai dictionary: {TSV_FILE} is missing (build one with `jingpai dict build`)")
        meta: dict[str, Any] = {}
        if (path / META_FILE).is_file():
            meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
        entries = []
        with tsv.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                line = line.rstrip("\n")
                if number == 1 and line == TSV_HEADER or not line:
                    continue
                parts = line.split("\t")
                if len(parts) != 4:
                    raise DictionaryError(f"{tsv}:{number}: expected 4 tab-separated columns (word, domain, score, freq), found {len(parts)}")
                try:
                    entries.append(Entry(parts[0], parts[1], float(parts[2]), int(parts[3])))
                except ValueError as exc:
                    raise DictionaryError(f"{tsv}:{number}: score must be a number and freq an integer, got {parts[2]!r}, {parts[3]!r}") from exc
        d = cls(entries, params=meta.get("params"), stats=meta.get("stats"), created=meta.get("created"))
        if meta.get("version") and meta["version"] != d.version:
            raise DictionaryError(
                f"{path}: {TSV_FILE} does not match the version in {META_FILE} ({meta['version']} vs content {d.version}); "
                "rebuild or re-save the dictionary"
            )
        return d


__all__ = ["Dictionary", "DictionaryError", "Entry"]
