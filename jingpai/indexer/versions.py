"""Versioned physical indices behind an alias: ``<alias>-<dict version>-<n>``.

A new dictionary version builds a new physical index; the alias moves to it in one atomic
``_aliases`` call once it is complete, so searches never see a half-built index or a stale analyzer.
Re-running with the same dictionary resumes into the newest physical index of that version, as long as
it was built with the same vector model (``jingpai index --vectors``) and the same choice of stored rerank keywords
(``--rerank-keywords``), recorded in its ``_meta`` next to the dictionary version; another gets a new generation.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from jingpai.engine.client import Engine
from jingpai.errors import UserError
from jingpai.indexer.mapping import META_KEY

logger = logging.getLogger(__name__)

NO_DICT = "nodict"
_VERSION_CHARS = 12


class IndexVersionError(UserError, ValueError):
    """The alias name is taken by a concrete index, or a version to delete is still in use."""


@dataclass(frozen=True)
class PhysicalIndex:
    """One physical index of an alias.

    Attributes:
        vector_model: the model its document vectors come from (``_meta.jingpai.vector_model``; ``None``:
            no vectors, or not jingpai's).
        vector_dims: their dimension.
        vector_index: how they are indexed (``hnsw`` / ``flat``; indices built before it was recorded are ``hnsw``).
    """

    name: str
    dict_version: str
    generation: int
    docs: int
    aliased: bool
    vector_model: str | None = None
    vector_dims: int | None = None
    vector_index: str | None = None
    #: whether its documents carry their rerank keywords (``jingpai index --rerank-keywords``)
    rerank_keywords: bool = False


def _tag(dict_version: str | None) -> str:
    return (dict_version or NO_DICT)[:_VERSION_CHARS].lower()


def list_versions(engine: Engine, alias: str) -> list[PhysicalIndex]:
    """Physical indices of ``alias``, oldest generation first."""
    pattern = re.compile(rf"^{re.escape(alias)}-([0-9a-z]+)-(\d+)$")
    live = set(engine.alias_targets(alias))
    matched = [(name, docs, m) for name, docs in engine.indices(f"{alias}-*").items() if (m := pattern.match(name))]
    metas = _physical_metas(engine, alias) if matched else {}
    found = [
        PhysicalIndex(name, m.group(1), int(m.group(2)), docs, name in live, *metas.get(name, (None, None, None, False)))
        for name, docs, m in matched
    ]
    return sorted(found, key=lambda p: p.generation)


def _physical_metas(engine: Engine, alias: str) -> dict[str, tuple[str | None, int | None, str | None, bool]]:
    """``{physical index: (vector model, dimension, vector index, rerank keywords)}`` from the ``_meta`` of every index
    named ``<alias>-*`` (one request); the dictionary version is in the name, the rest only here."""
    out = {}
    for name, body in engine.get_mapping(f"{alias}-*").items():
        meta = ((body.get("mappings") or {}).get("_meta") or {}).get(META_KEY) or {}
        model = meta.get("vector_model")
        out[name] = (model, meta.get("vector_dims"), (meta.get("vector_index") or "hnsw") if model else None, bool(meta.get("rerank_keywords")))
    return out


def choose_physical_index(
    engine: Engine, alias: str, dict_version: str | None, *, rebuild: bool = False, vector_model: str | None = None,
    vector_index: str | None = None, rerank_keywords: bool = False,
) -> tuple[str, bool]:
    """``(physical index name, already exists)`` for a run with ``dict_version``, ``vector_model`` and ``vector_index``.

    The newest physical index of the same dictionary version is resumed into when it holds vectors of the
    same model indexed the same way (or none, and the run has none); a run with another vector model or vector
    index (or vectors where there were none, or none where there were) builds a new generation, since a
    mapping's vector field cannot change. So does a run that stores rerank keywords (``--rerank-keywords``) where
    the index has none, or the reverse: its documents would hold them only in part.
    """
    if engine.index_exists(alias) and not engine.alias_targets(alias):
        raise IndexVersionError(
            f"{alias!r} is a concrete index, not a jingpai alias; choose another --index name or delete {alias!r}"
        )
    versions = list_versions(engine, alias)
    tag = _tag(dict_version)
    same = [p for p in versions if p.dict_version == tag]
    if same and not rebuild:
        if (same[-1].vector_model, same[-1].vector_index) == (vector_model, vector_index if vector_model else None):
            if same[-1].rerank_keywords == rerank_keywords:
                return same[-1].name, True
            logger.info("%s %s rerank keywords and this run %s: building a new generation", same[-1].name,
                        "stores" if same[-1].rerank_keywords else "has no", "has none" if same[-1].rerank_keywords else "stores them")
        else:
            logger.info(
                "%s has vectors from %s (%s) and this run %s: building a new generation", same[-1].name,
                same[-1].vector_model or "no model", same[-1].vector_index or "-",
                f"from {vector_model} ({vector_index})" if vector_model else "has none",
            )
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
