"""Marking the query's mention in the document: ``^新华网^北京9月29日电`` tells a cross-encoder *where* the name is.

An entity query (the judged sets' ``short name（full name）``, :mod:`jingpai.reranker.judged`) is about one string that
every candidate contains; what decides relevance is what that string means *there* ("新华网北京电" is the news agency's
byline, "新华网拟发行" the listed company). Wrapping each occurrence of the name in a marker character before the pair
is tokenized — the entity markers of relation classification (Baldini Soares et al., 2019, "Matching the Blanks") —
lets the model attend to the mention's context without having to find it first. Measured on A14 (docs/models.md,
issue 52): the same cross-encoder recipe, held-out training companies nDCG@10 .949 → .969.

The *mention* is the query up to its first opening parenthesis (full-width ``（`` or ASCII ``(``), stripped: the short
name of ``short name（full name）``, or the whole query when it has none. The marker must be a character the corpus does
not use (A14's passages never contain ``^``) and one the tokenizer keeps as its own piece.

Example:
    >>> mark_mentions("新华网（新华网股份有限公司）", "新华网北京电。新华网拟发行", "^")
    '^新华网^北京电。^新华网^拟发行'
    >>> mark_mentions("光伏", "光伏板块大涨", "^")
    '^光伏^板块大涨'
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from jingpai.errors import UserError

#: where a query's mention ends: its first opening parenthesis, full-width or ASCII
_OPEN = re.compile(r"[（(]")


class MentionMarkerError(UserError, ValueError):
    """The marker is not one character, or it occurs in the query's mention itself."""


def mention_of(query: str) -> str:
    """The part of ``query`` that the documents mention: the text before its first ``（`` / ``(``, stripped.

    >>> mention_of("中国长城（中国长城科技集团股份有限公司）")
    '中国长城'
    >>> mention_of(" 机器人 ")
    '机器人'
    >>> mention_of("（只有括号）")
    ''
    """
    return _OPEN.split(query, maxsplit=1)[0].strip()


def check_marker(marker: str) -> str:
    """``marker`` if it is a single non-space character.

    >>> check_marker("^")
    '^'
    >>> check_marker("<<")
    Traceback (most recent call last):
    ...
    jingpai.reranker.mentions.MentionMarkerError: mention marker must be one non-space character, got '<<'
    """
    if len(marker) != 1 or marker.isspace():
        raise MentionMarkerError(f"mention marker must be one non-space character, got {marker!r}")
    return marker


def mark_mentions(query: str, document: str, marker: str) -> str:
    """``document`` with every occurrence of ``query``'s mention wrapped in ``marker``.

    A query without a mention (empty before its parenthesis) leaves the document as it is; so does a mention
    that already holds the marker, which marking would make ambiguous.

    >>> mark_mentions("（x）", "abc", "^")
    'abc'
    >>> mark_mentions("日照港", "日照港股份 日照港", "^")
    '^日照港^股份 ^日照港^'
    """
    name = mention_of(query)
    if not name or marker in name:
        return document
    return document.replace(name, f"{marker}{name}{marker}")


def mark_pairs(pairs: Sequence[tuple[str, str]], marker: str | None) -> Sequence[tuple[str, str]]:
    """Each ``(query, document)`` pair with the document's mentions marked (``marker`` ``None``: the pairs as given).

    >>> mark_pairs([("日照港", "日照港涨停")], "^")
    [('日照港', '^日照港^涨停')]
    """
    if marker is None:
        return pairs
    return [(q, mark_mentions(q, d, marker)) for q, d in pairs]
