"""Readers for the labelled-pair formats in ``../shared/data`` → one common :class:`LabeledPair`.

Formats (``format=``):

- ``pairs``: TSV ``s1<TAB>s2<TAB>label`` (AFQMC, LCQMC, OPPO).
- ``pawsx``: TSV with a header line, ``id<TAB>s1<TAB>s2<TAB>label`` (PAWS-X); the id becomes ``docid``.
- ``stsb``: TSV ``s1<TAB>s2<TAB>score`` with graded scores 0-5 (Chinese STS-B).
- ``nli``: TSV ``premise<TAB>hypothesis<TAB>label`` with labels ``entailment`` / ``neutral`` /
  ``contradiction`` (CMNLI, CSNLI, OCNLI, CINLID): entailment → 1 (match), contradiction → 0; neutral pairs
  are neither and are skipped (their count is logged).
- ``sohu``: JSONL ``{"sentence1", "sentence2", "label"}`` with labels 0/3/5 (SOHU 2021).
- ``qa``: a TrecQA/WikiQA folder: ``a.toks`` (question), ``b.toks`` (candidate), ``sim.txt`` (0/1) and
  ``id.txt`` (``qid`` alone, or ``qid 0 docid rel``), one line per pair.
- ``microblog``: a TREC Microblog folder, same files with ``id.txt`` as TREC run lines
  ``qid Q0 tweetid rank score tag``.
- ``judged``: a ``qrels-<split>.tsv`` beside a corpus (``corpus.jsonl`` / ``articles.jsonl``): every judgment of
  that split as a pair (the query's model text, the document, its grade; :mod:`jingpai.reranker.judged`).
- ``auto``: picked from the path (folder → ``qa``/``microblog`` by the shape of ``id.txt``;
  ``.jsonl`` → ``sohu``; a TSV whose first line is a ``id sentence1 …`` header → ``pawsx``; one whose third
  column is an NLI label word → ``nli``; otherwise
  ``pairs``, or ``stsb`` when over a quarter of the labels in its first 200 lines are scores above 1).

Labels (``label_mode=``): ``raw`` keeps the value; ``levels3`` buckets graded scores on the 0-5 scale
into 0 (0-1, irrelevant), 1 (2-3, partial), 2 (4-5, relevant) — binary labels map to 0 and 2;
``binary`` is 1 for the top bucket only (binary labels stay as they are).

Every malformed line raises :class:`DataFormatError` naming ``file:line`` and what was expected.

Example:
    >>> pairs = read_pairs("../shared/data/zh/stsb/dev.tsv", format="stsb", label_mode="levels3")  # doctest: +SKIP
    >>> pairs[0]                                                                                   # doctest: +SKIP
    LabeledPair(query='一个戴着安全帽的男人在跳舞。', document='一个戴着安全帽的男人在跳舞。', label=2.0, qid=None, docid=None)
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from jingpai.errors import UserError
from jingpai.reranker.judged import read_judged, split_of
from jingpai.textio import numbered_lines

logger = logging.getLogger(__name__)

DataFormat = Literal["auto", "pairs", "pawsx", "stsb", "nli", "sohu", "qa", "microblog", "judged"]
LabelMode = Literal["raw", "binary", "levels3"]
FORMATS: tuple[str, ...] = get_args(DataFormat)
LABEL_MODES: tuple[str, ...] = get_args(LabelMode)

#: largest label value per format (binary formats: 1; graded: 5)
SCALE: dict[str, float] = {"pairs": 1.0, "pawsx": 1.0, "stsb": 5.0, "nli": 1.0, "sohu": 5.0, "qa": 1.0, "microblog": 1.0}
QA_FILES = ("a.toks", "b.toks", "sim.txt", "id.txt")
#: NLI label word → match label (``None``: not a matching pair, skipped)
NLI_LABELS: dict[str, float | None] = {"entailment": 1.0, "contradiction": 0.0, "neutral": None}


class DataFormatError(UserError, ValueError):
    """A data file is missing, malformed, or of an unknown format."""


@dataclass(frozen=True)
class LabeledPair:
    """One labelled (query, document) pair.

    Attributes:
        query: the query / first sentence.
        document: the document / candidate / second sentence.
        label: relevance label (0/1, a graded score, or a level, per ``label_mode``).
        qid: query id when the data has one (QA folders, runs); ``None`` for plain pair files.
        docid: document id when the data has one.
    """

    query: str
    document: str
    label: float
    qid: str | None = None
    docid: str | None = None


def bucket3(score: float, *, scale: float) -> int:
    """Level 0/1/2 of ``score`` on a 0-``scale`` range, bucketed on the 0-5 scale (0-1 / 2-3 / 4-5)."""
    five = score * 5.0 / scale
    return 0 if five < 2 else 1 if five < 4 else 2


def convert_label(score: float, *, scale: float, label_mode: LabelMode) -> float:
    """Apply ``label_mode`` (see module docs) to a raw label."""
    if label_mode == "raw":
        return score
    level = bucket3(score, scale=scale)
    if label_mode == "levels3":
        return float(level)
    return 1.0 if level == 2 else 0.0


def _number(text: str, where: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise DataFormatError(f"{where}: {what} must be a number, got {text!r}") from exc
    if value != value or value in (float("inf"), float("-inf")):  # float() reads "nan"/"inf": no label is either
        raise DataFormatError(f"{where}: {what} must be a finite number, got {text!r}")
    return value


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line; a line that is not UTF-8 raises :class:`DataFormatError`."""
    for line in numbered_lines(path):
        if line.error is not None:
            raise DataFormatError(str(line.error)) from line.error
        yield line.number, line.require()


#: one row of a reader: ``(s1, s2, label, qid, docid, "file:line")``
_Row = tuple[str, str, float, str | None, str | None, str]


def _read_tsv(path: Path, fmt: str) -> Iterator[_Row]:
    header = fmt == "pawsx"
    columns = 4 if header else 3
    names = "id, sentence1, sentence2, label" if header else ("s1, s2, score" if fmt == "stsb" else "s1, s2, label")
    for number, line in _lines(path):
        where = f"{path}:{number}"
        if header and number == 1:
            if not line.lower().startswith("id\t"):
                raise DataFormatError(f"{where}: expected a header line starting with 'id<TAB>' (PAWS-X format), got {line[:60]!r}")
            continue
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != columns:
            raise DataFormatError(f"{where}: expected {columns} tab-separated columns ({names}), found {len(parts)}")
        docid = parts[0] if header else None
        s1, s2, label = parts[-3:]
        yield s1, s2, _number(label, where, "label"), None, docid, where


def _read_nli(path: Path) -> Iterator[_Row]:
    skipped = 0
    for number, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        parts = line.split("\t")
        if len(parts) != 3:
            raise DataFormatError(f"{where}: expected 3 tab-separated columns (premise, hypothesis, label), found {len(parts)}")
        word = parts[2].strip().lower()
        if word not in NLI_LABELS:
            raise DataFormatError(f"{where}: NLI label must be one of {', '.join(NLI_LABELS)}, got {parts[2]!r}")
        label = NLI_LABELS[word]
        if label is None:
            skipped += 1
            continue
        yield parts[0], parts[1], label, None, None, where
    if skipped:
        logger.info("%s: skipped %d neutral NLI pairs (neither match nor mismatch)", path, skipped)


def _read_sohu(path: Path) -> Iterator[_Row]:
    for number, line in _lines(path):
        where = f"{path}:{number}"
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFormatError(f"{where}: expected a JSON object per line: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise DataFormatError(f"{where}: expected a JSON object with sentence1, sentence2, label; got {type(record).__name__}")
        missing = [k for k in ("sentence1", "sentence2", "label") if k not in record]
        if missing:
            raise DataFormatError(f"{where}: missing field(s) {missing}; expected sentence1, sentence2, label")
        s1, s2 = record["sentence1"], record["sentence2"]
        if not isinstance(s1, str) or not isinstance(s2, str):
            raise DataFormatError(f"{where}: sentence1 and sentence2 must be strings")
        yield s1, s2, _number(str(record["label"]), where, "label"), None, None, where


def _read_qa(folder: Path, fmt: str) -> Iterator[_Row]:
    missing = [name for name in QA_FILES if not (folder / name).is_file()]
    if missing:
        raise DataFormatError(f"{folder}: missing {', '.join(missing)}; a {fmt} folder needs {', '.join(QA_FILES)}")
    columns = {name: (folder / name).read_text(encoding="utf-8").splitlines() for name in QA_FILES}
    counts = {name: len(lines) for name, lines in columns.items()}
    if len(set(counts.values())) != 1:
        raise DataFormatError(f"{folder}: files must have one line per pair, but line counts differ: {counts}")
    for i, (a, b, sim, ident) in enumerate(zip(*(columns[n] for n in QA_FILES), strict=True)):
        fields = ident.split()
        where = f"{folder / 'id.txt'}:{i + 1}"
        if fmt == "microblog":
            if len(fields) != 6:
                raise DataFormatError(f"{where}: expected a TREC run line 'qid Q0 docid rank score tag', found {len(fields)} fields")
            qid, docid = fields[0], fields[2]
        elif len(fields) == 1:
            qid, docid = fields[0], None
        elif len(fields) == 4:
            qid, docid = fields[0], fields[2]
        else:
            raise DataFormatError(f"{where}: expected 'qid' or 'qid 0 docid rel', found {len(fields)} fields")
        label_at = f"{folder / 'sim.txt'}:{i + 1}"
        yield a.strip(), b.strip(), _number(sim.strip(), label_at, "label"), qid, docid, label_at


def detect_format(path: str | Path) -> str:
    """The concrete format of ``path`` (see module docs for the rules).

    Raises:
        DataFormatError: the path does not exist or its format cannot be told.
    """
    p = Path(path)
    if p.is_dir():
        id_file = p / "id.txt"
        if not id_file.is_file():
            raise DataFormatError(f"{p}: a data folder needs {', '.join(QA_FILES)}; id.txt is missing")
        with id_file.open(encoding="utf-8") as fh:
            first = fh.readline().split()
        return "microblog" if len(first) == 6 else "qa"
    if not p.is_file():
        raise DataFormatError(f"{p} does not exist")
    if split_of(p) is not None:
        return "judged"
    if p.suffix == ".jsonl":
        return "sohu"
    # undecodable bytes are the reader's to report (with their line), not the detector's
    with p.open(encoding="utf-8", errors="replace") as fh:
        head = [line.rstrip("\r\n") for _, line in zip(range(200), fh, strict=False)]
    if head and head[0].lower().startswith("id\t"):
        return "pawsx"
    if head and all(line.split("\t")[-1].strip().lower() in NLI_LABELS for line in head if line.strip()):
        return "nli"
    labels: list[float] = []
    for line in head:
        parts = line.split("\t")
        try:
            if len(parts) == 3:
                labels.append(float(parts[2]))
        except ValueError:
            continue
    # graded scores when over a quarter of the labels lie above 1 (STS-B: 55-75 %): one stray "2" in a 0/1
    # file is a bad label, reported with its line by the reader, not a reason to read every label as a 0-5 score
    if 4 * sum(label > 1 for label in labels) > len(labels):
        return "stsb"
    return "pairs"


def read_pairs(
    path: str | Path,
    *,
    format: DataFormat = "auto",
    label_mode: LabelMode = "raw",
    limit: int | None = None,
) -> list[LabeledPair]:
    """Read labelled pairs from a file or folder of any supported format.

    Args:
        path: file (TSV/JSONL) or folder (QA / Microblog).
        format: one of :data:`FORMATS` (``auto`` detects it).
        label_mode: ``raw`` | ``binary`` | ``levels3`` (see module docs).
        limit: keep only the first ``limit`` pairs.

    Returns:
        The pairs in file order.

    Raises:
        DataFormatError: unknown format/mode, missing file, or a malformed line (named ``file:line``).
    """
    if format not in FORMATS:
        raise DataFormatError(f"unknown data format {format!r}; expected one of {', '.join(FORMATS)}")
    if label_mode not in LABEL_MODES:
        raise DataFormatError(f"unknown label mode {label_mode!r}; expected one of {', '.join(LABEL_MODES)}")
    p = Path(path)
    fmt = detect_format(p) if format == "auto" else format
    if fmt == "judged":
        return _judged_pairs(p, label_mode=label_mode, limit=limit)
    if fmt in ("qa", "microblog"):
        if not p.is_dir():
            raise DataFormatError(f"{p}: format {fmt!r} expects a folder with {', '.join(QA_FILES)}")
        rows: Iterable[_Row] = _read_qa(p, fmt)
    else:
        if not p.is_file():
            raise DataFormatError(f"{p}: format {fmt!r} expects a file, and none exists there")
        rows = _read_sohu(p) if fmt == "sohu" else _read_nli(p) if fmt == "nli" else _read_tsv(p, fmt)
    scale = SCALE[fmt]
    out: list[LabeledPair] = []
    for s1, s2, label, qid, docid, where in rows:
        if label < 0 or label > scale:
            hint = "; graded 0-5 scores are read with --format stsb" if fmt == "pairs" else ""
            raise DataFormatError(f"{where}: label {label:g} is outside 0..{scale:g} for format {fmt!r}{hint}")
        out.append(LabeledPair(s1, s2, convert_label(label, scale=scale, label_mode=label_mode), qid, docid))
        if limit is not None and len(out) >= limit:
            break
    logger.info("read %d pairs from %s (format %s, labels %s)", len(out), p, fmt, label_mode)
    return out


def _judged_pairs(path: Path, *, label_mode: LabelMode, limit: int | None) -> list[LabeledPair]:
    split = split_of(path)
    if split is None:
        raise DataFormatError(f"{path}: format 'judged' expects a qrels-<split>.tsv beside corpus.jsonl or articles.jsonl")
    if label_mode != "raw":
        raise DataFormatError(f"{path}: judged grades are read as they are (label mode 'raw'), not {label_mode!r}")
    judged = read_judged(path.parent, split)
    out = [LabeledPair(text, doc, float(grade), qid, did) for qid, did, text, doc, grade in judged.pairs()][:limit]
    logger.info("read %d judged pairs from %s (grades 0..%d)", len(out), path, judged.max_grade)
    return out


def read_many(
    paths: Iterable[str | Path],
    *,
    format: DataFormat = "auto",
    label_mode: LabelMode = "raw",
    limit: int | None = None,
) -> list[LabeledPair]:
    """:func:`read_pairs` over several paths, concatenated (``limit`` applies per path)."""
    out: list[LabeledPair] = []
    for path in paths:
        out.extend(read_pairs(path, format=format, label_mode=label_mode, limit=limit))
    return out


def holdout(pairs: Sequence[LabeledPair], fraction: float, *, seed: int = 0) -> tuple[list[LabeledPair], list[LabeledPair]]:
    """Split ``pairs`` into ``(train, held out)`` for model selection, by query: every pair of a held-out
    query text is held out, so a selected model never saw the held-out queries.

    Raises:
        DataFormatError: ``fraction`` is not in (0, 1), or the split leaves one side empty.
    """
    if not 0.0 < fraction < 1.0:
        raise DataFormatError(f"holdout fraction must be in (0, 1), got {fraction}")
    queries = sorted({p.query for p in pairs})
    rng = random.Random(seed)
    held_queries = set(rng.sample(queries, max(1, round(len(queries) * fraction)))) if queries else set()
    train = [p for p in pairs if p.query not in held_queries]
    held = [p for p in pairs if p.query in held_queries]
    if not train or not held:
        raise DataFormatError(f"holdout {fraction} of {len(pairs)} pairs ({len(queries)} queries) leaves an empty side; use more data or another fraction")
    logger.info("held out %d of %d pairs (%d queries) for model selection", len(held), len(pairs), len(held_queries))
    return train, held


def write_pairs(pairs: Iterable[LabeledPair], path: str | Path) -> Path:
    """Write pairs as a ``pairs`` TSV (``query<TAB>document<TAB>label``); tabs/newlines in text become spaces."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)

    def clean(text: str) -> str:
        return " ".join(text.replace("\t", " ").splitlines())

    with p.open("w", encoding="utf-8") as fh:
        for pair in pairs:
            fh.write(f"{clean(pair.query)}\t{clean(pair.document)}\t{pair.label:g}\n")
    return p


__all__ = [
    "FORMATS",
    "LABEL_MODES",
    "DataFormat",
    "DataFormatError",
    "LabelMode",
    "LabeledPair",
    "bucket3",
    "convert_label",
    "detect_format",
    "holdout",
    "read_many",
    "read_pairs",
    "write_pairs",
]
