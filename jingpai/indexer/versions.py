"""Versioned physical indices behind an alias: ``<alias>-<dict version>-<n>``.

A new dictionary version builds a new physical index; the alias moves to it in one atomic
``_aliases`` call once it is complete, so searches never see a half-built index or a stale analyzer.
Re-running with the same dictionary resumes into the newest physical index of that version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jingpai.engine.client import Engine
from jingpai.errors import UserError

NO_DICT = "nodict"
_VERSION_CHARS = 12


class IndexVersionError(UserError, ValueError):
    """The alias name is taken by a concrete index, or a version to delete is still in use."""


@dataclass(frozen=True)
class PhysicalIndex:
    name: str
    dict_version: str
    generation: int
    docs: int
    aliased: bool


def _tag(dict_version: str | None) -> str:
    return (dict_version or NO_DICT)[:_VERSION_CHARS].lower()


def list_versions(engine: Engine, alias: str) -> list[PhysicalIndex]:
    """Physical indices of ``alias``, oldest generation first."""
    pattern = re.compile(rf"^{re.escape(alias)}-([0-9a-z]+)-(\d+)$")
    live = set(engine.alias_targets(alias))
    found = []
    for name, docs in engine.indices(f"{alias}-*").items():
        match = pattern.match(name)
        if match:
            found.append(PhysicalIndex(name, match.group(1), int(match.group(2)), docs, name in live))
    return sorted(found, key=lambda p: p.generation)


def choose_physical_index(engine: Engine, alias: str, dict_version: str | None, *, rebuild: bool = False) -> tuple[str, bool]:
    """``(physical index name, already exists)`` for a run with ``dict_version``."""
    if engine.index_exists(alias) and not engine.alias_targets(alias):
        raise IndexVersionError(
            f"{alias!r} is a concrete index, not a jingpai alias; choose another --index name or delete {alias!r}"
        )
    versions = list_versions(engine, alias)
    tag = _tag(dict_version)
    same = [p for p in versions if p.dict_version == tag]
    if same and not rebuild:
        return same[-1].name, True
    generation = max((p.generation for p in versions), default=0) + 1
    return f"{alias}-{tag}-{generation}", False


def delete_old_versions(engine: Engine, alias: str, *, keep: int = 0) -> list[str]:
    """Delete physical indices not behind the alias, keeping the ``keep`` newest of them; return the deleted names."""
    if keep < 0:
        raise IndexVersionError(f"keep must be >= 0, got {keep}")
    idle = [p for p in list_versions(engine, alias) if not p.aliased]
    doomed = idle[: max(0, len(idle) - keep)]
    for p in doomed:
        engine.delete_index(p.name)
    return [p.name for p in doomed]
