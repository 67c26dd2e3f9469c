"""Judged collections: a corpus, queries and graded judgments (qrels) per split, read into one :class:`JudgedSet`.

Two layouts (``../shared/data/zh``; a user's own folder in either layout works the same):

* **search** (QBQTC, KUAKE-QTR): ``corpus.jsonl`` ``{id, text}``, ``queries-<split>.tsv`` ``id<TAB>text``,
  ``qrels-<split>.tsv`` ``query_id<TAB>doc_id<TAB>grade`` (every judged candidate, grade 0 too);
* **entity** (A14 stock news, the BERTCA task): ``articles.jsonl`` ``{id, text}``, ``entity-meta-<split>.tsv``
  (header ``entity_id, short_name, full_name, …``), ``qrels-<split>.tsv`` ``entity_id<TAB>article_id<TAB>grade``.
  The *search text* of an entity is its short name (what a user types); the *model text* is
  ``short_name（full_name）`` — the full name tells a model which company the short name means.

``jingpai train --train DIR/qrels-train.tsv`` reads a split's judged pairs (format ``judged``, detected from
the file name and the corpus beside it).

Example:
    >>> s = read_judged("../shared/data/zh/a14_stock_news", "dev")   # doctest: +SKIP
    >>> len(s.queries), s.max_grade, s.model_text["000001"]            # doctest: +SKIP
    (60, 1, '平安银行（平安银行股份有限公司）')
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from jingpai.errors import UserError
from jingpai.textio import numbered_lines

logger = logging.getLogger(__name__)

CORPUS_FILES = ("corpus.jsonl", "articles.jsonl")
_QRELS = re.compile(r"^qrels-(?P<split>[\w.-]+)\.tsv$")


class JudgedDataError(UserError, ValueError):
    """A judged collection's file is missing or malformed (the message names ``file:line``)."""


@dataclass
class JudgedSet:
    """One split of a judged collection.

    Attributes:
        queries: query id → the text searched with (an entity's short name).
        model_text: query id → the text a model reads (``short_name（full_name）`` for entities; else the query).
        docs: document id → text (the whole corpus, every split's documents).
        qrels: query id → {document id → grade}.
    """

    name: str
    split: str
    queries: dict[str, str]
    model_text: dict[str, str]
    docs: dict[str, str]
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def max_grade(self) -> int:
        return max((g for judged in self.qrels.values() for g in judged.values()), default=1) or 1

    def pairs(self) -> list[tuple[str, str, str, str, int]]:
        """``(query id, doc id, model text, doc text, grade)`` for every judgment, in qrels order."""
        return [(q, d, self.model_text[q], self.docs[d], g) for q, judged in self.qrels.items() for d, g in judged.items()]


def corpus_file(folder: Path) -> Path | None:
    """The corpus file of a judged folder (``None``: it is no judged folder)."""
    return next((folder / n for n in CORPUS_FILES if (folder / n).is_file()), None)


def split_of(qrels: Path) -> str | None:
    """``train`` for ``…/qrels-train.tsv`` beside a corpus file; ``None`` for any other path."""
    m = _QRELS.match(qrels.name)
    return m.group("split") if m and corpus_file(qrels.parent) is not None else None


def _read_corpus(path: Path) -> dict[str, str]:
    docs: dict[str, str] = {}
    for row in numbered_lines(path):
        number, line = row.number, row.require()
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            docs[str(rec["id"])] = str(rec["text"])
        except (ValueError, KeyError, TypeError) as exc:
            raise JudgedDataError(f"{path}:{number}: expected a JSON object with 'id' and 'text' ({exc})") from exc
    return docs


def _tsv(path: Path, columns: int, *, header: bool = False) -> list[tuple[int, list[str]]]:
    if not path.is_file():
        raise JudgedDataError(f"{path} is missing: a judged folder's split needs it")
    rows = []
    for row in numbered_lines(path):
        number, line = row.number, row.require()
        if not line.strip() or (header and number == 1):
            continue
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) < columns:
            raise JudgedDataError(f"{path}:{number}: expected {columns} tab-separated fields, found {len(parts)}")
        rows.append((number, parts))
    return rows


def _queries(folder: Path, split: str) -> tuple[dict[str, str], dict[str, str]]:
    meta = folder / f"entity-meta-{split}.tsv"
    if meta.is_file():
        rows = _tsv(meta, 3, header=True)
        search = {p[0]: p[1] for _, p in rows}
        return search, {p[0]: f"{p[1]}（{p[2]}）" if p[2] and p[2] != p[1] else p[1] for _, p in rows}
    search = {p[0]: p[1] for _, p in _tsv(folder / f"queries-{split}.tsv", 2)}
    return search, dict(search)


def read_judged(folder: str | Path, split: str) -> JudgedSet:
    """Split ``split`` of the judged collection in ``folder`` (either layout).

    Raises:
        JudgedDataError: a file is missing, a line is malformed, or a judgment names an unknown query or document.
    """
    root = Path(folder)
    corpus = corpus_file(root)
    if corpus is None:
        raise JudgedDataError(f"{root} is no judged collection: expected one of {', '.join(CORPUS_FILES)} there")
    docs = _read_corpus(corpus)
    queries, model_text = _queries(root, split)
    qrels: dict[str, dict[str, int]] = {}
    path = root / f"qrels-{split}.tsv"
    for number, (qid, did, grade, *_) in _tsv(path, 3):
        if qid not in queries or did not in docs:
            what = f"query {qid!r}" if qid not in queries else f"document {did!r}"
            raise JudgedDataError(f"{path}:{number}: {what} is not in the collection")
        try:
            qrels.setdefault(qid, {})[did] = int(grade)
        except ValueError as exc:
            raise JudgedDataError(f"{path}:{number}: grade {grade!r} is no integer") from exc
    judged = {q: queries[q] for q in qrels}
    logger.info("read %s %s: %d queries, %d judgments, %d documents", root.name, split, len(judged), sum(map(len, qrels.values())), len(docs))
    return JudgedSet(root.name, split, judged, {q: model_text[q] for q in judged}, docs, qrels)


__all__ = ["CORPUS_FILES", "JudgedDataError", "JudgedSet", "corpus_file", "read_judged", "split_of"]
