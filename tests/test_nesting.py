"""``jingpai.nesting.deeper_than``: the depth of JSON / NDJSON measured on the bytes, as a parser would see it."""

from __future__ import annotations

import json
import random

import pytest

from jingpai.nesting import Nesting, deeper_than


def depth_of(value) -> int:
    """The nesting of a parsed value (objects and arrays), iteratively."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            stack += [(child, level + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def random_value(rng: random.Random, depth: int):
    """Values whose keys and strings are full of what a byte scanner could mistake for structure."""
    pick = rng.random()
    if depth and pick < 0.4:
        return {rng.choice(['a', 'b"}', "\\{", "[[", "x/*", "//y", "中{"]) + str(i): random_value(rng, depth - 1) for i in range(rng.randint(0, 3))}
    if depth and pick < 0.7:
        return [random_value(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return rng.choice(["{", "}", "[", "]", "\\", '"', '\\"', "a\\\\", 1, None, "/*", "*/", "//", "http://x/{"])


def test_depth_is_the_parsers_whatever_the_strings_hold() -> None:
    rng = random.Random(0)
    for _ in range(600):
        value = random_value(rng, rng.randint(0, 10))
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
        depth = depth_of(value)
        for limit in {0, max(depth - 1, 0), depth}:
            found = deeper_than(text, limit)
            assert (found.depth if found else None) == (depth if depth > limit else None), (text, limit)


def test_ndjson_lines_count_on_their_own_and_name_the_deepest() -> None:
    rng = random.Random(1)
    for _ in range(200):
        values = [random_value(rng, rng.randint(0, 8)) for _ in range(rng.randint(1, 5))]
        depths = [depth_of(v) for v in values]
        text = "".join(json.dumps(v) + "\n" for v in values)
        found = deeper_than(text.encode(), max(depths) - 1, ndjson=True)
        assert found is not None and found.depth == max(depths) and depths[found.line - 1] == max(depths)
        assert deeper_than(text, max(depths), ndjson=True) is None


@pytest.mark.parametrize(("text", "limit", "ndjson", "expected"), [
    (b'{"a": "{{{{[[[["}', 1, False, None),
    (b'{"a": "\\\\"}' + b"[" * 4, 2, False, Nesting(4, 1)),  # an escaped backslash ends the string
    (b'{"a": "\\"{{{{"}', 1, False, None),  # an escaped quote does not
    (b'{"a": /* { [ " */ {"b": 1}} // {{{{', 2, False, None),  # comments, which the engines accept
    (b'{"x": 1 /* " */, "a": {"a": {"a": {}}}}', 3, False, Nesting(4, 1)),  # a quote in a comment hides nothing
    (b'{"index": {}}\n{"a": "unterminated\n' + b"[" * 5 + b"\n", 4, True, Nesting(5, 3)),  # a broken line ends at its break
    (b'{"a":\n [\n  [1]\n ]\n}', 2, False, Nesting(3, 3)),  # pretty-printed JSON: one text over many lines
    ("{\"标题\": [[\"中文\"]]}", 2, False, Nesting(3, 1)),
])
def test_strings_escapes_comments_and_lines(text, limit: int, ndjson: bool, expected: Nesting | None) -> None:
    assert deeper_than(text, limit, ndjson=ndjson) == expected


def test_5000_levels_take_no_recursion() -> None:
    deep = b'{"a":' * 4999 + b"{}" + b"}" * 4999
    assert deeper_than(deep, 100) == Nesting(5000, 1)
    with pytest.raises(RecursionError):
        json.loads(deep)  # what the indexer used to do with it
