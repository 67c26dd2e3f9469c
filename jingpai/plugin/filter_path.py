"""The engines' ``filter_path`` response filter, for answers the gateway rewrites.

On a reranked search the gateway asks the engine for the whole answer (it needs ``_source`` and scores),
then applies the client's ``filter_path`` to the final answer, its own ``jingpai``/``_jingpai`` members
included, so the client sees what the engine itself would have filtered.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any


#: "nothing kept here" (distinct from None, which is a value a filtered answer may hold)
_NOTHING: Any = object()


@functools.lru_cache(maxsize=256)
def _segment_regex(segment: str) -> re.Pattern[str]:
    return re.compile("(?:" + ".*".join(re.escape(p) for p in segment.split("*")) + r")\Z")


@dataclass(frozen=True)
class FilterPath:
    """The engine's ``filter_path`` response filter, applied by the gateway to answers it rewrites.

    Same rules as Elasticsearch/OpenSearch: comma-separated dotted paths, ``*`` inside a name, ``**`` for any
    number of levels, arrays are looked through, a ``-`` prefix excludes (exclusions apply first), and
    objects or arrays left empty by an inclusion are dropped.
    """

    includes: tuple[tuple[str, ...], ...]
    excludes: tuple[tuple[str, ...], ...]

    @classmethod
    def parse(cls, expression: str) -> FilterPath:
        includes, excludes = [], []
        for part in expression.split(","):
            part = part.strip()
            if part:
                (excludes if part.startswith("-") else includes).append(tuple(part.lstrip("-").split(".")))
        return cls(tuple(includes), tuple(excludes))

    def apply(self, data: Any) -> Any:
        """The filtered copy of ``data`` (``{}`` when nothing is left)."""
        if self.excludes:
            data = self._exclude(data, self.excludes)
        if self.includes:
            data = self._include(data, self.includes)
        return {} if data is _NOTHING else data

    @staticmethod
    def _step(paths: tuple[tuple[str, ...], ...], key: str) -> tuple[bool, tuple[tuple[str, ...], ...]]:
        """Whether a path ends at ``key``, and the paths still open below it."""
        done, below = False, []
        for path in paths:
            candidates = [path]
            while candidates:
                p = candidates.pop()
                if not p:
                    continue
                if p[0] == "**":
                    below.append(p)  # ** takes this key and may take more
                    candidates.append(p[1:])  # or none
                    if len(p) == 1:
                        done = True
                elif _segment_regex(p[0]).match(key):
                    if len(p) == 1:
                        done = True
                    else:
                        below.append(p[1:])
        return done, tuple(dict.fromkeys(below))

    def _include(self, node: Any, paths: tuple[tuple[str, ...], ...]) -> Any:
        if isinstance(node, list):
            kept = [v for v in (self._include(item, paths) for item in node) if v is not _NOTHING]
            return kept or _NOTHING
        if not isinstance(node, dict):
            return _NOTHING
        out = {}
        for key, value in node.items():
            done, below = self._step(paths, key)
            if done:
                out[key] = value
            elif below:
                kept = self._include(value, below)
                if kept is not _NOTHING:
                    out[key] = kept
        return out or _NOTHING

    def _exclude(self, node: Any, paths: tuple[tuple[str, ...], ...]) -> Any:
        if isinstance(node, list):
            return [self._exclude(item, paths) for item in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            done, below = self._step(paths, key)
            if not done:
                out[key] = self._exclude(value, below) if below else value
        return out


__all__ = ["FilterPath"]
