"""Domain corpora for dictionary building: JSONL, labelled TSV (one file, many domains), plain text.

- JSONL: one object per line; the document is the ``text_field`` (or several, joined by newlines).
- labelled TSV: ``label<TAB>text`` by default (columns configurable); labels may be ids mapped to
  names by a label-names file (one name per line, line *i* names id *i*, as THUCNews' classes.txt).
- plain text: any other suffix, one document per line.

Blank lines are skipped; anything else that cannot become a document raises :class:`CorpusReadError`
naming the file and line.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


logger = logging.getLogger(__name__)


class CorpusReadError(ValueError):
    """A domain corpus line cannot be read (file and line named)."""


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each decodable line; undecodable lines are counted and reported."""
    bad: list[int] = []
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                bad.append(number)
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (" …" if len(bad) > 10 else "")
        logger.warning("%s: skipped %d line(s) that are not valid UTF-8: line %s", path, len(bad), shown)


@dataclass(frozen=True)
class LabelledSpec:
    """How to read a labelled TSV file.

    Args:
        label_column: 0-based column of the label.
        text_column: 0-based column of the text.
        label_names: file with one domain name per line naming label ids 0, 1, … (``None``: labels are names).
    """

    label_column: int = 0
    text_column: int = 1
    label_names: Path | None = None


def read_documents(path: str | Path, *, text_fields: Sequence[str] = ("text",)) -> Iterator[str]:
    """Documents of one domain corpus file (JSONL by suffix ``.jsonl``/``.ndjson``, else one per line)."""
    path = Path(path)
    if not path.is_file():
        raise CorpusReadError(f"corpus file {path} does not exist")
    is_json = path.suffix.lower() in (".jsonl", ".ndjson")
    if path.stat().st_size == 0:
        raise CorpusReadError(f"corpus file {path} is empty")
    for number, line in _lines(path):
        line = line.strip()
        if not line:
            continue
        if not is_json:
            yield line
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusReadError(f"{path}:{number}: malformed JSON ({exc.msg})") from exc
        parts = [record.get(f) for f in text_fields] if isinstance(record, dict) else []
        texts = [p for p in parts if isinstance(p, str) and p.strip()]
        if not texts:
            raise CorpusReadError(f"{path}:{number}: expected a string in field(s) {', '.join(text_fields)}")
        yield "\n".join(texts)


def read_labelled(path: str | Path, spec: LabelledSpec | None = None) -> dict[str, list[str]]:
    """``{domain: [documents]}`` from one labelled TSV file."""
    spec = spec or LabelledSpec()
    path = Path(path)
    if not path.is_file():
        raise CorpusReadError(f"labelled corpus {path} does not exist")
    names: list[str] | None = None
    if spec.label_names is not None:
        names = [n.strip() for n in Path(spec.label_names).read_text(encoding="utf-8").splitlines() if n.strip()]
    need = max(spec.label_column, spec.text_column) + 1
    domains: dict[str, list[str]] = defaultdict(list)
    for number, line in _lines(path):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < need:
            raise CorpusReadError(
                f"{path}:{number}: expected at least {need} tab-separated columns "
                f"(label in column {spec.label_column}, text in column {spec.text_column}), found {len(parts)}"
            )
        label, text = parts[spec.label_column].strip(), parts[spec.text_column].strip()
        if names is not None:
            try:
                label = names[int(label)]
            except (ValueError, IndexError) as exc:
                raise CorpusReadError(
                    f"{path}:{number}: label {label!r} is not an id 0..{len(names) - 1} of {spec.label_names}"
                ) from exc
        if not label or not text:
            raise CorpusReadError(f"{path}:{number}: empty label or text")
        domains[label].append(text)
    return dict(domains)


__all__ = ["CorpusReadError", "LabelledSpec", "read_documents", "read_labelled"]
