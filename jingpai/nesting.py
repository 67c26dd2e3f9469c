"""How deeply a JSON text (or each line of an NDJSON text) nests, measured on its bytes without parsing it.

Parsers that recurse once per level (Python's ``json``, the engines' document parsers) fail on deeply
nested input: ``json.loads`` raises ``RecursionError`` near 1,000 levels and OpenSearch 2.19 dies of a
``StackOverflowError`` on a 5,000-deep ``_bulk`` document. :func:`deeper_than` finds such input first,
iteratively, so the indexer can quarantine the record and the gateway refuse the request.

The depth counts objects and arrays (``{}`` is 1, ``{"a": [1]}`` is 2). Brackets inside strings and
inside the ``/* … */`` and ``// …`` comments the engines accept do not count. It is measured in passes
over the whole text, each in C, so the common case costs about as much as copying the text once:

1. fewer ``{``/``[`` bytes than the limit: the text cannot nest deeper (no more work);
2. escaped backslashes and quotes removed (``bytes.replace``), then every byte but quotes, brackets,
   ``/``, ``*`` and line breaks deleted (``bytes.translate``), then strings and comments removed with
   one regular expression over what is left (a few percent of the text; without a ``/`` there is no
   comment, and the empty pairs of quotes go first, with ``bytes.replace``);
3. the running depth of the remaining brackets (numpy's ``cumsum``), reset at each line break for NDJSON.

Invalid JSON may be measured loosely (a stray ``/`` read as a comment), but only after the point where
a JSON parser stops reading it, so nothing a parser would go on to read deeper is missed.

>>> deeper_than(b'{"a": {"b": "{{{{"}}', 1)
Nesting(depth=2, line=1)
>>> deeper_than(b'{"a": {"b": "{{{{"}}', 2) is None
True
>>> deeper_than(b'{"index": {}}\\n[[[1]]]\\n', 2, ndjson=True)
Nesting(depth=3, line=2)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: every byte but the ones that can open or close a string, a comment or a level, or end an NDJSON line
_NOT_STRUCTURE = bytes(range(256)).translate(None, b'"{}[]/*\n')
#: the same for a text without ``/``, which has no comments
_NOT_STRUCTURE_NOR_COMMENT = bytes(range(256)).translate(None, b'"{}[]\n')
#: strings and comments of the reduced text: an NDJSON string or comment never spans a line break
_SKIPPED = re.compile(rb'"[^"]*"|/\*.*?\*/|//[^\n]*', re.DOTALL)
_SKIPPED_NDJSON = re.compile(rb'"[^"\n]*"|/\*[^\n]*?\*/|//[^\n]*')
_STRINGS = re.compile(rb'"[^"]*"')
_STRINGS_NDJSON = re.compile(rb'"[^"\n]*"')
#: +1 for an opening bracket, -1 (0xff as int8) for a closing one, 0 for the rest
_STEPS = bytes(1 if b in b"{[" else 0xFF if b in b"}]" else 0 for b in range(256))


@dataclass(frozen=True)
class Nesting:
    """How deep a text nests: the deepest ``depth`` (objects and arrays) and the 1-based ``line`` it is on."""

    depth: int
    line: int


def deeper_than(data: bytes | str, limit: int, *, ndjson: bool = False) -> Nesting | None:
    """The nesting of ``data`` when it goes deeper than ``limit`` levels, else ``None``.

    Args:
        data: a JSON text, or NDJSON lines with ``ndjson``.
        limit: the deepest nesting allowed (>= 0).
        ndjson: each line is a text of its own (the depth starts again at every ``\\n``).

    Returns:
        ``None`` when no point of ``data`` is nested deeper than ``limit``; otherwise the deepest point.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if raw.count(b"{") + raw.count(b"[") <= limit:
        return None
    if b"\\\\" in raw:
        raw = raw.replace(b"\\\\", b"")  # escaped backslashes first: the quote after one ends its string
    if b'\\"' in raw:
        raw = raw.replace(b'\\"', b"")
    if b"/" in raw:
        skipped = _SKIPPED_NDJSON if ndjson else _SKIPPED
        structure = skipped.sub(b"", raw.translate(None, _NOT_STRUCTURE))
    else:
        # no comments: two quotes in a row are an empty string, or the end of one and the start of the next,
        # so removing them leaves every other byte inside or outside a string as it was; what strings are
        # left hold brackets or line breaks, a few of them (one regular expression match per string is
        # slow on quote-dense texts such as _msearch bodies)
        reduced = raw.translate(None, _NOT_STRUCTURE_NOR_COMMENT).replace(b'""', b"")
        structure = (_STRINGS_NDJSON if ndjson else _STRINGS).sub(b"", reduced)
    if structure.count(b"{") + structure.count(b"[") <= limit:
        return None
    depth, at = _deepest(structure, ndjson=ndjson)
    if depth <= limit:
        return None
    return Nesting(depth, structure.count(b"\n", 0, at) + 1)


def _deepest(structure: bytes, *, ndjson: bool) -> tuple[int, int]:
    """``(deepest running depth, its index)`` over the brackets of ``structure``."""
    import numpy as np  # here, not at import: the indexer's settings (read by every --help) import this module

    depth = np.cumsum(np.frombuffer(structure.translate(_STEPS), dtype=np.int8), dtype=np.int64)
    if ndjson:
        breaks = np.frombuffer(structure, dtype=np.uint8) == 10
        if breaks.any():
            # each line counts from the depth where the previous line ended
            last_break = np.maximum.accumulate(np.where(breaks, np.arange(len(structure)), -1))
            depth = depth - np.where(last_break >= 0, depth[np.maximum(last_break, 0)], 0)
    at = int(depth.argmax())
    return int(depth[at]), at


__all__ = ["Nesting", "deeper_than"]
