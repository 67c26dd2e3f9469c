"""``jingpai tune``'s labelled queries — from labelled pairs whose questions are indexed
(:func:`queries_from_pairs`) or from TREC qrels and a queries file (:func:`queries_from_trec`) — and the error
every part of the tuning raises (:class:`TuneError`). :mod:`jingpai.plugin.tune` measures on them and re-exports
all three.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jingpai.errors import UserError

logger = logging.getLogger(__name__)


class TuneError(UserError, ValueError):
    """Tuning cannot run: bad options, unreadable labels, nothing to evaluate (the message says which)."""


@dataclass(frozen=True)
class LabelledQuery:
    """One query: its text, documents excluded from its results and graded relevant documents."""

    qid: str
    text: str
    relevant: dict[str, int]
    exclude: tuple[str, ...] = ()


def _text_ids(engine: Any, index: str, text_field: str) -> dict[str, list[str]]:
    ids: dict[str, list[str]] = defaultdict(list)
    for hit in engine.scan(index, source=[text_field]):
        text = (hit.get("_source") or {}).get(text_field)
        if isinstance(text, str):
            ids[text].append(hit["_id"])
    return ids


def queries_from_pairs(engine: Any, index: str, path: str | Path, *, text_field: str) -> list[LabelledQuery]:
    """Retrieval queries from labelled pairs whose questions are all indexed (one document per question).

    Each positive pair (q1, q2) with q1 != q2 becomes a query: search q1, exclude q1's own document(s),
    relevant = q2's document(s). Pairs whose questions are not in the index are skipped (logged).

    Raises:
        TuneError: unreadable pairs, or no positive pair found in the index.
    """
    from jingpai.reranker.data import DataFormatError, read_pairs

    try:
        pairs = read_pairs(path, label_mode="binary")
    except DataFormatError as exc:
        raise TuneError(f"cannot read labelled pairs: {exc}") from exc
    ids = _text_ids(engine, index, text_field)
    queries: list[LabelledQuery] = []
    missing = 0
    for pair in pairs:
        if pair.label < 1 or pair.query == pair.document:
            continue
        if pair.query not in ids or pair.document not in ids:
            missing += 1
            continue
        relevant = {doc: 1 for doc in ids[pair.document]}
        queries.append(LabelledQuery(f"q{len(queries)}", pair.query, relevant, exclude=tuple(ids[pair.query])))
    if missing:
        logger.warning("%d positive pair(s) of %s have a question not indexed in %s (field %s): skipped", missing, path, index, text_field)
    if not queries:
        raise TuneError(f"no positive pair of {path} has both questions in index {index!r} (field {text_field!r})")
    return queries


def queries_from_trec(qrels_path: str | Path, queries_path: str | Path) -> list[LabelledQuery]:
    """Queries from a TREC qrels file and a ``qid<TAB>text`` queries file (qrels name the index's ``_id``\\ s).

    Raises:
        TuneError: a missing or malformed file, or no query with a relevant document.
    """
    import ir_measures

    relevant: dict[str, dict[str, int]] = defaultdict(dict)
    try:
        for qrel in ir_measures.read_trec_qrels(str(qrels_path)):
            if qrel.relevance > 0:
                relevant[qrel.query_id][qrel.doc_id] = int(qrel.relevance)
        lines = Path(queries_path).read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError, IndexError) as exc:
        raise TuneError(f"cannot read TREC qrels {qrels_path} / queries {queries_path}: {exc}") from exc
    queries: list[LabelledQuery] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        qid, sep, text = line.partition("\t")
        if not sep or not text.strip():
            raise TuneError(f"{queries_path}:{n}: expected 'qid<TAB>query text', got {line[:80]!r}")
        if relevant.get(qid):
            queries.append(LabelledQuery(qid, text.strip(), relevant[qid]))
    if not queries:
        raise TuneError(f"no query of {queries_path} has a relevant document in {qrels_path}")
    return queries


__all__ = ["LabelledQuery", "TuneError", "queries_from_pairs", "queries_from_trec"]
