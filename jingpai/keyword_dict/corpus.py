"""Domain corpora for dictionary building: JSONL, labelled TSV (one file, many domains), plain text.

- JSONL: one object per line; the document is the ``text_field`` (or several, joined by newlines).
- labelled TSV: ``label<TAB>text`` by default (columns configurable); labels may be ids mapped to
  names by a label-names file (one name per line, line *i* names id *i*, as THUCNews' classes.txt).
- plain text: any other suffix, one document per line.

Files are UTF-8 unless an encoding is given. Blank lines are skipped, and so are a few undecodable
lines (with a warning); anything else that cannot become a document raises :class:`CorpusReadError`
naming the file and line: a directory, an empty, binary or compressed file, a file in another encoding
(GBK is recognised and named), a file without documents, or labelled columns that look swapped.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from jingpai.cjk import HAN_CLASS
from jingpai.errors import UserError
from jingpai.textio import encoding_label, numbered_lines


logger = logging.getLogger(__name__)


class CorpusReadError(UserError, ValueError):
    """A domain corpus cannot be read: not a text file, not in the expected encoding, or a line that
    cannot become a document (file and line named)."""


#: undecodable lines beyond this share of a file's lines mean the file is in another encoding (an
#: error), not that a few lines are corrupt (skipped with a warning)
MAX_UNDECODABLE_SHARE = 0.01
#: bytes read from the start of a file to tell text from binary or compressed data
_SNIFF_BYTES = 8192
#: a labelled file with at least this many rows and more distinct labels than half its rows has its
#: label and text columns swapped: real domains hold many documents each
SWAPPED_MIN_ROWS = 20
_HAN = re.compile(f"[{HAN_CLASS}]")


def check_encoding(encoding: str) -> str:
    """``encoding``'s canonical name if corpora can be read in it (known, and ``\\n`` is the byte ``\\n``).

    Raises:
        ValueError: an unknown encoding, or one such as UTF-16 whose lines cannot be split on bytes.
    """
    try:
        name = codecs.lookup(encoding).name
    except LookupError as exc:
        raise ValueError(f"unknown encoding {encoding!r}; expected a Python codec name such as utf-8, gb18030, big5") from exc
    if "\n".encode(name) != b"\n":
        raise ValueError(
            f"encoding {encoding!r} is not supported (lines are split on the byte \\n); "
            f"convert the file with `iconv -f {encoding} -t UTF-8`"
        )
    return name


def check_file(path: Path, what: str) -> None:
    """Raise :class:`CorpusReadError` unless ``path`` is a non-empty file that does not look binary."""
    if path.is_dir():
        inside = sorted(p.name for p in path.iterdir())
        shown = f"holding {', '.join(inside[:3])}{', …' if len(inside) > 3 else ''}" if inside else "empty"
        raise CorpusReadError(f"{what} {path} is a directory ({shown}), not a file; give one file per corpus")
    if not path.exists():
        raise CorpusReadError(f"{what} {path} does not exist")
    if not path.is_file():
        raise CorpusReadError(f"{what} {path} is not a regular file")
    if path.stat().st_size == 0:
        raise CorpusReadError(f"{what} {path} is empty")
    with path.open("rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    if head.startswith(b"\x1f\x8b"):
        raise CorpusReadError(f"{what} {path} is gzip-compressed; decompress it first (gunzip -k {path})")
    if head.startswith(b"PK\x03\x04"):
        raise CorpusReadError(f"{what} {path} is a zip archive; unzip it and give the text file inside")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise CorpusReadError(f"{what} {path} is UTF-16 text; convert it with `iconv -f UTF-16 -t UTF-8 {path} > {path}.utf8`")
    nul = head.find(b"\0")
    if nul >= 0:
        raise CorpusReadError(
            f"{what} {path} looks binary, not text (NUL byte at offset {nul}); give a UTF-8 text file "
            f"(if it is UTF-16 text, convert it with `iconv -f UTF-16 -t UTF-8`)"
        )


def not_decodable(path: object, encoding: str, first: int, bad: int, lines: int, sample: bytes) -> str:
    """The error for a file in another encoding than ``encoding`` (``bad`` of its ``lines`` non-blank lines
    undecodable, the ``first`` one ``sample``), with a guess if the text reads as GB18030."""
    where = f"{path}:{first}: not {encoding_label(encoding)}: {bad} of {lines} non-blank lines cannot be decoded"
    # GBK/GB18030 is by far the most common legacy encoding of Chinese corpora; a trial decode that
    # yields Han text is a safe guess, where a general detector is unreliable on one short line
    try:
        guess = sample.decode("gb18030").strip()
    except UnicodeDecodeError:
        guess = ""
    if encoding != "gb18030" and _HAN.search(guess):
        return (
            f"{where}; it reads as GBK/GB18030 ({guess[:20]!r}): convert it with "
            f"`iconv -f GB18030 -t UTF-8 {path} > {path}.utf8` or pass --encoding gb18030"
        )
    try:
        utf8 = sample.decode("utf-8").strip()
    except UnicodeDecodeError:
        utf8 = ""
    if utf8:
        return f"{where}; it reads as UTF-8 ({utf8[:20]!r}): leave out --encoding {encoding}, or convert every corpus file to one encoding"
    return f"{where}; convert it to UTF-8 with `iconv -f ENCODING -t UTF-8 {path}` or pass --encoding ENCODING"


def _lines(path: Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each decodable line.

    A few undecodable lines (at most :data:`MAX_UNDECODABLE_SHARE` of the non-blank ones) are skipped
    and reported; more raise :class:`CorpusReadError` once the file is read: it is in another encoding.
    """
    bad: list[int] = []
    sample = b""
    lines = 0
    for line in numbered_lines(path, encoding=encoding):
        if line.raw.strip():
            lines += 1
        if line.error is None:
            yield line.number, line.require()
        else:
            bad.append(line.number)
            sample = sample or line.raw
    if len(bad) > MAX_UNDECODABLE_SHARE * lines:
        raise CorpusReadError(not_decodable(path, encoding, bad[0], len(bad), lines, sample))
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (" …" if len(bad) > 10 else "")
        logger.warning("%s: skipped %d line(s) that are not valid %s: line %s", path, len(bad), encoding_label(encoding), shown)


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


def read_documents(path: str | Path, *, text_fields: Sequence[str] = ("text",), encoding: str = "utf-8") -> Iterator[str]:
    """Documents of one domain corpus file (JSONL by suffix ``.jsonl``/``.ndjson``, else one per line).

    Raises:
        CorpusReadError: not a non-empty text file, not in ``encoding``, no documents, or a bad JSON line.
        ValueError: an unusable ``encoding`` (see :func:`check_encoding`).
    """
    path = Path(path)
    encoding = check_encoding(encoding)
    check_file(path, "corpus file")
    is_json = is_jsonl(path)
    count = 0
    for number, line in _lines(path, encoding):
        line = line.strip()
        if not line:
            continue
        count += 1
        if not is_json:
            yield line
            continue
        yield json_document(line, text_fields, where=f"{path}:{number}")
    if not count:
        raise CorpusReadError(f"corpus file {path} has no documents: every line is blank")


def json_document(line: str, text_fields: Sequence[str], *, where: str) -> str:
    """The document of one stripped, non-blank JSONL line: its ``text_fields`` joined by newlines.

    Raises:
        CorpusReadError: malformed JSON, or no non-blank string in the fields (``where`` names the line).
    """
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorpusReadError(f"{where}: malformed JSON ({exc.msg})") from exc
    parts = [record.get(f) for f in text_fields] if isinstance(record, dict) else []
    texts = [p for p in parts if isinstance(p, str) and p.strip()]
    if not texts:
        raise CorpusReadError(f"{where}: expected a string in field(s) {', '.join(text_fields)}")
    return "\n".join(texts)


def is_jsonl(path: str | Path) -> bool:
    """Whether a corpus file is read as JSONL (by its suffix), else as one document per line."""
    return str(path).lower().endswith((".jsonl", ".ndjson"))


def _swap_hint(spec: LabelledSpec) -> str:
    return f"try --label-column {spec.text_column} --text-column {spec.label_column}"


def _named_label(label: str, text: str, names: list[str], spec: LabelledSpec, *, where: str, first_row: bool) -> str:
    """The domain name of label id ``label``; :class:`CorpusReadError` with a likely cause if it is none."""
    try:
        return names[int(label)]
    except (ValueError, IndexError) as exc:
        if text.isdigit():
            hint = f"; column {spec.text_column} holds {text!r}: are the label and text columns swapped? {_swap_hint(spec)}"
        elif first_row:
            hint = "; is it a header row? remove it"
        else:
            hint = ""
        raise CorpusReadError(f"{where}: label {label!r} is not an id 0..{len(names) - 1} of {spec.label_names}{hint}") from exc


def label_names(spec: LabelledSpec) -> list[str] | None:
    """The domain names of label ids 0, 1, … from ``spec.label_names`` (``None``: labels are names)."""
    if spec.label_names is None:
        return None
    return [n.strip() for n in Path(spec.label_names).read_text(encoding="utf-8").splitlines() if n.strip()]


def labelled_row(line: str, spec: LabelledSpec, names: list[str] | None, *, where: str, first_row: bool) -> tuple[str, str]:
    """``(domain, text)`` of one non-blank labelled line.

    Raises:
        CorpusReadError: too few columns, a label id without a name, or an empty label or text
            (``where`` names the line; ``first_row`` adds the header-row hint).
    """
    parts = line.split("\t")
    need = max(spec.label_column, spec.text_column) + 1
    if len(parts) < need:
        raise CorpusReadError(
            f"{where}: expected at least {need} tab-separated columns "
            f"(label in column {spec.label_column}, text in column {spec.text_column}), found {len(parts)}"
        )
    label, text = parts[spec.label_column].strip(), parts[spec.text_column].strip()
    if names is not None:
        label = _named_label(label, text, names, spec, where=where, first_row=first_row)
    if not label or not text:
        raise CorpusReadError(f"{where}: empty label or text")
    return label, text


def swapped_columns_error(path: object, rows: int, labels: int, first: tuple[int, str, str], spec: LabelledSpec) -> CorpusReadError | None:
    """The error for a labelled file whose label and text columns look swapped (``None``: they do not).

    ``first`` is the first row's ``(line number, label, text)``.
    """
    if rows < SWAPPED_MIN_ROWS or labels <= rows / 2:
        return None
    # one warning per one-document "domain" would bury the cause under thousands of lines
    return CorpusReadError(
        f"{path}: {labels} distinct labels in {rows} rows: nearly every row has a label of its own, "
        f"so the label and text columns look swapped (line {first[0]}: label {first[1][:30]!r} in column "
        f"{spec.label_column}, text {first[2][:30]!r} in column {spec.text_column}); {_swap_hint(spec)}"
    )


def read_labelled(path: str | Path, spec: LabelledSpec | None = None, *, encoding: str = "utf-8") -> dict[str, list[str]]:
    """``{domain: [documents]}`` from one labelled TSV file.

    Raises:
        CorpusReadError: not a non-empty text file, not in ``encoding``, a row without the columns or
            with an unknown label id, no rows, or label and text columns that look swapped (more
            distinct labels than half the rows).
        ValueError: an unusable ``encoding`` (see :func:`check_encoding`).
    """
    spec = spec or LabelledSpec()
    path = Path(path)
    encoding = check_encoding(encoding)
    check_file(path, "labelled corpus")
    names = label_names(spec)
    domains: dict[str, list[str]] = defaultdict(list)
    first: tuple[int, str, str] | None = None
    for number, line in _lines(path, encoding):
        if not line.strip():
            continue
        label, text = labelled_row(line, spec, names, where=f"{path}:{number}", first_row=first is None)
        first = first or (number, label, text)
        domains[label].append(text)
    if first is None:
        raise CorpusReadError(f"labelled corpus {path} has no rows: every line is blank")
    swapped = swapped_columns_error(path, sum(map(len, domains.values())), len(domains), first, spec)
    if swapped is not None:
        raise swapped
    if len(domains[first[1]]) == 1 and len(domains) > 1:
        # a header row ("label<TAB>text") would be a domain of one document, which cannot keep a word
        logger.warning("%s:%d: skipped as a header row: its label %r labels no other row", path, first[0], first[1])
        del domains[first[1]]
    return dict(domains)


__all__ = [
    "CorpusReadError",
    "LabelledSpec",
    "check_encoding",
    "check_file",
    "is_jsonl",
    "json_document",
    "label_names",
    "labelled_row",
    "not_decodable",
    "read_documents",
    "read_labelled",
    "swapped_columns_error",
]
