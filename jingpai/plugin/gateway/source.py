"""``_source`` folding: the rerank fields are fetched with the window even when the client's ``_source``
filter leaves them out, and removed again from the hits it gets back.

:func:`fold_source` (planning) moves the URL's ``_source*`` parameters into the body, so one place decides
what the window returns, and widens the filter by the rerank fields; :func:`unfold_page` (finishing) takes
the added fields out of the page; :func:`doc_text` is the text of a hit the reranker scores.
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass
from typing import Any

from jingpai.indexer.rerank_keywords import text_digest
from jingpai.plugin.gateway.errors import NotOursToJudge

# the whole gateway logs under one name, as before it was a package (operators' logging configs name it)
logger = logging.getLogger(__package__)


@dataclass(frozen=True)
class SourceFold:
    """What :func:`fold_source` changed: the fields to rerank on, those it added and whether ``_source`` goes."""

    fields: tuple[str, ...]
    added: tuple[str, ...] = ()
    drop: bool = False


def as_list(value: Any, name: str = "_source") -> list[str]:
    """A ``_source`` pattern list (``None``, ``"a,b"`` or ``["a", "b"]``); anything else is the engine's to judge."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise NotOursToJudge(f"[{name}] is neither a string nor a list of strings: {value!r}")


def selects(name: str, includes: list[str], excludes: list[str]) -> bool:
    """Whether a ``_source`` filter of ``includes`` / ``excludes`` patterns returns field ``name``."""
    if includes and not any(fnmatch.fnmatchcase(name, p) for p in includes):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in excludes)


def get_path(source: dict, path: str) -> Any:
    """The value at a dotted ``path`` of a document (objects or a flat dotted key)."""
    node: Any = source
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return source.get(path) if isinstance(source, dict) else None
        node = node[part]
    return node


def pop_path(source: dict, path: str) -> None:
    """Remove the value at a dotted ``path`` (a flat dotted key first), and the objects it leaves empty (the engines
    return no empty object for a source filter, so one left here held only what was removed)."""
    if path in source:
        source.pop(path)
        return
    parts = path.split(".")
    nodes: list[Any] = [source]
    for part in parts[:-1]:
        nodes.append(nodes[-1].get(part) if isinstance(nodes[-1], dict) else None)
    if not isinstance(nodes[-1], dict) or parts[-1] not in nodes[-1]:
        return
    nodes[-1].pop(parts[-1])
    for depth in range(len(parts) - 1, 0, -1):
        if nodes[depth] == {}:
            nodes[depth - 1].pop(parts[depth - 1])


def fold_url_source(body: dict, params: dict[str, str]) -> None:
    """Move ``?_source``, ``?_source_includes`` and ``?_source_excludes`` into ``body["_source"]``."""
    if not any(k in params for k in ("_source", "_source_includes", "_source_excludes")):
        return
    source: Any = {
        "includes": as_list(params.pop("_source_includes", None)) or
        ([] if params.get("_source") in ("true", "false") else as_list(params.get("_source"))),
        "excludes": as_list(params.pop("_source_excludes", None)),
    }
    if params.pop("_source", None) == "false":
        source = False
    body["_source"] = source


def fold_source(body: dict, params: dict[str, str], fields: tuple[str, ...]) -> SourceFold:
    """Fold the URL's source filter into ``body`` and widen it so the window returns ``fields``.

    ``body`` and ``params`` are the plan's own copies and are changed in place. Fields the client's
    ``excludes`` hide are not reranked on (logged): the client asked not to see them.

    Raises:
        NotOursToJudge: a ``_source`` of a type the engines do not accept.
    """
    fold_url_source(body, params)
    user_source = body.get("_source")
    if user_source is False:
        body["_source"] = {"includes": list(fields)}
        return SourceFold(fields, added=fields, drop=True)
    if isinstance(user_source, (str, list)):
        includes = as_list(user_source)
        missing = tuple(f for f in fields if not selects(f, includes, []))
        body["_source"] = includes + list(missing)
        return SourceFold(fields, added=missing)
    if isinstance(user_source, dict):
        includes = as_list(user_source.get("includes", user_source.get("include")))
        excludes = as_list(user_source.get("excludes", user_source.get("exclude")))
        hidden = [f for f in fields if not selects(f, [], excludes)]
        if hidden:
            logger.info("rerank fields %s are excluded by the request's _source filter; reranking without them", hidden)
        fields = tuple(f for f in fields if f not in hidden)
        missing = tuple(f for f in fields if not selects(f, includes, excludes))
        if includes and missing:
            body["_source"] = {**user_source, "includes": includes + list(missing)}
            body["_source"].pop("include", None)
        return SourceFold(fields, added=missing if includes else ())
    if user_source not in (None, True):
        raise NotOursToJudge(f"[_source] is not a boolean, string, list or object: {user_source!r}")
    return SourceFold(fields)


def unfold_page(hits: list[dict], fold: SourceFold) -> None:
    """Take what :func:`fold_source` added out of the returned ``hits`` (in place)."""
    for hit in hits:
        source = hit.get("_source")
        if fold.drop:
            hit.pop("_source", None)
        elif isinstance(source, dict):
            for name in fold.added:
                pop_path(source, name)


def doc_text(hit: dict, fields: tuple[str, ...], doc_chars: int) -> str:
    """The text of ``hit`` the reranker scores: its ``fields`` joined by newlines, cut to ``doc_chars``."""
    source = hit.get("_source") or {}
    parts: list[str] = []
    for name in fields:
        value = get_path(source, name)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value if v is not None)
        if value not in (None, ""):
            parts.append(str(value))
    return "\n".join(parts)[:doc_chars]


def stored_keywords(hit: dict, field: str, text: str) -> list[str] | None:
    """The keywords the index stored for ``hit`` (``jingpai index --rerank-keywords``) when they are those of
    ``text``, the text the reranker gets (the stored digest is ``text``'s); ``None``: none stored, stored for another
    text (other rerank fields, another cut), or not of the stored shape (a document written by something else)."""
    stored = get_path(hit.get("_source") or {}, field)
    if not isinstance(stored, dict) or stored.get("sha1") != text_digest(text):
        return None
    words = stored.get("words")
    return words if isinstance(words, list) and all(isinstance(w, str) for w in words) else None


__all__ = ["SourceFold", "as_list", "doc_text", "stored_keywords", "fold_source", "fold_url_source", "get_path", "pop_path", "selects", "unfold_page"]
