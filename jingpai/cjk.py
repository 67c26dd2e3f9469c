"""The Han (Chinese character) ranges jingpai treats as one-character units, defined once.

CJK Unified Ideographs, Extension A and the Compatibility Ideographs: the BMP blocks that hold the
characters of modern Chinese text. Astral extensions (B–G) are rare in the corpora we index and are
left to the tokenizers' own handling.

>>> is_han("苹"), is_han("a"), is_han("。")
(True, False, False)
>>> re.findall(f"[{HAN_CLASS}]+", "iPhone 15 苹果手机")
['苹果手机']
"""

from __future__ import annotations

import re

#: inclusive (first, last) code points of each Han block
HAN_RANGES: tuple[tuple[int, int], ...] = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF))

#: the ranges as the inside of a regex character class: ``f"[{HAN_CLASS}]"``
HAN_CLASS = "".join(f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in HAN_RANGES)

_HAN = re.compile(f"[{HAN_CLASS}]")


def is_han(ch: str) -> bool:
    """Whether the character ``ch`` is in one of :data:`HAN_RANGES`."""
    return any(lo <= ord(ch) <= hi for lo, hi in HAN_RANGES)


def has_han(text: str) -> bool:
    """Whether ``text`` holds at least one Han character."""
    return _HAN.search(text) is not None


__all__ = ["HAN_CLASS", "HAN_RANGES", "has_han", "is_han"]
