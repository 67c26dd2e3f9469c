"""Text units for n-gram statistics: one Han character, or one run of Latin letters/digits.

Treating an ASCII run as a single unit keeps ``GDP`` and ``5G`` whole, so mixed tokens such as
``A股`` (``A`` + ``股``) or ``5G手机`` come out of n-gram counting like any Chinese word. Anything
else (punctuation, whitespace, symbols) ends a *segment*: n-grams never cross it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from jingpai.cjk import HAN_CLASS

# Han (CJK unified + extension A + compatibility), or a run of ASCII/full-width letters and digits.
_UNIT = re.compile(rf"[{HAN_CLASS}]|[A-Za-z0-9\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]+")


def segments(text: str) -> Iterator[list[str]]:
    """Maximal runs of adjacent units, each as a list of units.

    Example:
        >>> list(segments("同步A股首秀：港股5G"))
        [['同', '步', 'A', '股', '首', '秀'], ['港', '股', '5G']]
    """
    current: list[str] = []
    end = 0
    for match in _UNIT.finditer(text):
        if match.start() != end and current:
            yield current
            current = []
        current.append(match.group())
        end = match.end()
    if current:
        yield current


def units(word: str) -> list[str]:
    """The units of one word (``"A股"`` → ``["A", "股"]``); empty if ``word`` has other characters."""
    found = _UNIT.findall(word)
    return found if "".join(found) == word else []


@lru_cache(maxsize=1 << 18)
def is_candidate_word(word: str) -> bool:
    """Whether ``word`` is made of units only and is not a pure number or a single unit."""
    parts = units(word)
    if not parts or word.isdigit():
        return False
    # numbers make poor keywords: "跌2" (from 跌2.5%), "大学2010年"; short ones like 3居, 98折, 360公司 stay
    if len(parts) >= 2 and (parts[-1].isdigit() or any(p.isdigit() and len(p) >= 4 for p in parts)):
        return False
    # a lone Han character is too ambiguous to be a keyword; a lone Latin run (GDP, iPhone) is not
    return len(parts) >= 2 or (len(word) >= 2 and word.isascii())
