"""The index-meta cache: which indices jingpai built, with their field roles and dictionary version.

The gateway reads an index's mapping with the *client's* credentials (it has none of its own), so what one
client may read must never answer another's lookup: the cache is keyed by index and by a fingerprint of
every request header that may carry credentials (:class:`Credentials`). Mappings come from a
:class:`MappingSource` (the engine proxy; a stub in tests).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from cachetools import TTLCache

from jingpai.indexer.mapping import META_KEY, IndexMeta
from jingpai.plugin.gateway.proxy import HOP_BY_HOP, MappingAnswer

# the whole gateway logs under one name, as before it was a package (operators' logging configs name it)
logger = logging.getLogger(__package__)

#: request headers that cannot change what the engine lets a client see; every other header (Authorization,
#: Cookie, run-as and proxy-auth headers whatever their names) keys the index-metadata cache
NOT_CREDENTIALS = frozenset({
    "accept", "accept-encoding", "accept-language", "content-type", "content-length", "content-encoding", "user-agent",
    "x-opaque-id", "traceparent", "tracestate", "x-elastic-client-meta", "elastic-api-version", "x-request-id",
    "cache-control", "pragma", "expect",
})
#: (index, credentials) entries of the index-metadata cache
META_CACHE_SIZE = 4096
#: request headers not sent on the gateway's own mapping lookup (it has no body)
_NOT_ON_LOOKUP = HOP_BY_HOP | {"content-length", "content-encoding", "content-type"}


@dataclass(frozen=True)
class Credentials:
    """A client's request headers as plain data: sent on the mapping lookup made for it, and keying its cache
    entries (:attr:`key`)."""

    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, headers: Iterable[tuple[str, str]]) -> Credentials:
        """From a request's headers (hop-by-hop and body framing left out)."""
        return cls(tuple((k, v) for k, v in headers if k.lower() not in _NOT_ON_LOOKUP))

    @functools.cached_property
    def key(self) -> str:
        """A fingerprint of every header that may carry credentials (all but :data:`NOT_CREDENTIALS`)."""
        relevant = sorted((k.lower(), v) for k, v in self.headers if k.lower() not in NOT_CREDENTIALS)
        return hashlib.sha256(json.dumps(relevant).encode("utf-8", "surrogateescape")).hexdigest()


class MappingSource(Protocol):
    """Where the cache reads mappings: ``GET /{index}/_mapping`` sent with the given headers."""

    async def get_mapping(self, index: str, headers: list[tuple[str, str]]) -> MappingAnswer: ...


def meta_of(mappings: dict, index: str) -> IndexMeta | None:
    """The meta of ``index`` when *every* physical index behind it was built by jingpai (the newest one's),
    else ``None``: a search over a mix of jingpai and other indices is not rewritten."""
    metas = {name: ((m or {}).get("mappings") or {}).get("_meta", {}).get(META_KEY) for name, m in (mappings or {}).items()}
    if not metas or not all(metas.values()):
        return None
    return IndexMeta.from_dict(metas[max(metas)])


class IndexMetaCache:
    """The jingpai meta of indices, per index and credentials, for ``ttl_s`` seconds.

    A 404 is cached (not a jingpai index); auth and transient errors are not.
    """

    def __init__(self, source: MappingSource, *, ttl_s: float, maxsize: int = META_CACHE_SIZE) -> None:
        self.source = source
        self._cache: TTLCache[tuple[str, str], IndexMeta | None] = TTLCache(maxsize=maxsize, ttl=ttl_s)

    async def get(self, index: str | None, credentials: Credentials) -> IndexMeta | None:
        """The jingpai meta of ``index`` as the client with ``credentials`` may read it (``None``: not a
        jingpai index, no index, or its mapping could not be read).

        Raises:
            ValueError: the engine answered the mapping with something that is not JSON.
        """
        if not index:
            return None
        key = (index, credentials.key)
        if key in self._cache:
            return self._cache[key]
        answer = await self.source.get_mapping(index, list(credentials.headers))
        if answer.status == 200:
            meta = meta_of(answer.mappings or {}, index)
        else:
            meta = None
            logger.info("cannot read the mapping of %r (HTTP %d): not augmenting or reranking", index, answer.status)
            if answer.status != 404:
                return None  # auth or transient errors are not cached
        self._cache[key] = meta
        return meta


__all__ = ["META_CACHE_SIZE", "NOT_CREDENTIALS", "Credentials", "IndexMetaCache", "MappingSource", "meta_of"]
