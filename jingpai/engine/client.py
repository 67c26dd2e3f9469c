"""The one place that talks to Elasticsearch or OpenSearch.

:func:`connect` finds out which engine answers at a URL and wraps the matching official client
(``elasticsearch`` for Elasticsearch 8, ``opensearch-py`` for OpenSearch 2). Callers use
:class:`Engine`'s methods, which take and return plain dicts in the REST API's shapes, and never
branch on the engine kind themselves.

Example:
    >>> engine = connect("http://127.0.0.1:9200")        # doctest: +SKIP
    >>> engine.kind                                        # doctest: +SKIP
    'opensearch'
    >>> engine.search("news", {"query": {"match": {"title": "股票"}}})  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import httpx

logger = logging.getLogger(__name__)

EngineKind = Literal["opensearch", "elasticsearch"]


class EngineConnectionError(RuntimeError):
    """No Elasticsearch/OpenSearch answered at the given URL."""


@dataclass(frozen=True)
class EngineInfo:
    kind: EngineKind
    version: str
    url: str


def detect(url: str, *, timeout_s: float = 10.0, headers: dict[str, str] | None = None) -> EngineInfo:
    """Ask the node at ``url`` what it is.

    ``GET /_nodes/_local`` is used rather than ``GET /`` because the Elasticsearch integ-test
    distribution has no root endpoint. Elasticsearch marks every response with ``X-Elastic-Product``.

    Raises:
        EngineConnectionError: nothing answers, or the answer is not from ES/OpenSearch.
    """
    try:
        resp = httpx.get(
            f"{url.rstrip('/')}/_nodes/_local",
            params={"filter_path": "nodes.*.version,nodes.*.build_flavor"},
            timeout=timeout_s,
            headers=headers,
        )
    except httpx.HTTPError as exc:
        raise EngineConnectionError(f"no engine answers at {url}: {exc}; start one with `jingpai engine up`") from exc
    if resp.status_code != 200:
        raise EngineConnectionError(f"{url} answered HTTP {resp.status_code} to GET /_nodes/_local: {resp.text[:200]}")
    nodes = resp.json().get("nodes") or {}
    if not nodes:
        raise EngineConnectionError(f"{url} did not describe its nodes; is it Elasticsearch or OpenSearch?")
    version = next(iter(nodes.values()))["version"]
    kind: EngineKind = "elasticsearch" if resp.headers.get("x-elastic-product") == "Elasticsearch" else "opensearch"
    return EngineInfo(kind=kind, version=version, url=url.rstrip("/"))


class Engine:
    """An Elasticsearch or OpenSearch cluster behind one interface.

    Args:
        info: what :func:`detect` found.
        timeout_s: request timeout.
        headers: extra HTTP headers (e.g. ``Authorization``) sent with every request.

    Attributes:
        raw: the official client (``elasticsearch.Elasticsearch`` or ``opensearchpy.OpenSearch``),
            for the rare call this class does not wrap.
    """

    def __init__(self, info: EngineInfo, *, timeout_s: float = 30.0, headers: dict[str, str] | None = None) -> None:
        self.info = info
        if info.kind == "elasticsearch":
            from elasticsearch import Elasticsearch, helpers

            self.raw = Elasticsearch(info.url, request_timeout=timeout_s, headers=headers or {})
        else:
            from opensearchpy import OpenSearch, helpers

            self.raw = OpenSearch([info.url], timeout=timeout_s, headers=headers or {})
        self._helpers = helpers

    @property
    def kind(self) -> EngineKind:
        return self.info.kind

    @property
    def version(self) -> str:
        return self.info.version

    @property
    def url(self) -> str:
        return self.info.url

    def __repr__(self) -> str:
        return f"Engine({self.kind} {self.version} at {self.url})"

    def close(self) -> None:
        self.raw.close()

    # ------------------------------------------------------------------ indices

    def create_index(self, name: str, *, mappings: dict | None = None, settings: dict | None = None) -> None:
        body: dict[str, Any] = {}
        if mappings:
            body["mappings"] = mappings
        if settings:
            body["settings"] = settings
        if self.kind == "elasticsearch":
            self.raw.indices.create(index=name, **body)
        else:
            self.raw.indices.create(index=name, body=body)

    def delete_index(self, name: str, *, missing_ok: bool = True) -> None:
        if self.kind == "elasticsearch":
            client = self.raw.options(ignore_status=404) if missing_ok else self.raw
            client.indices.delete(index=name)
        else:
            self.raw.indices.delete(index=name, ignore=[404] if missing_ok else [])

    def index_exists(self, name: str) -> bool:
        return bool(self.raw.indices.exists(index=name))

    def refresh(self, name: str) -> None:
        self.raw.indices.refresh(index=name)

    def get_mapping(self, name: str) -> dict:
        """``{physical_index: {"mappings": …}}`` for an index or alias."""
        return dict(self.raw.indices.get_mapping(index=name))

    def count(self, name: str, query: dict | None = None) -> int:
        body = {"query": query} if query else None
        if self.kind == "elasticsearch":
            return int(self.raw.count(index=name, query=query)["count"] if query else self.raw.count(index=name)["count"])
        return int(self.raw.count(index=name, body=body)["count"])

    # ------------------------------------------------------------------ documents

    def bulk(
        self,
        actions: Iterable[dict],
        *,
        chunk_size: int = 500,
        max_retries: int = 5,
        refresh: bool = False,
    ) -> Iterator[tuple[bool, dict]]:
        """Stream bulk actions; yield ``(ok, item)`` per action, in order, never raising per item.

        Actions use the helpers' format (``{"_op_type", "_index", "_id", "_source"|fields…}``).
        429s are retried with exponential backoff by the official helper.
        """
        yield from self._helpers.streaming_bulk(
            self.raw,
            actions,
            chunk_size=chunk_size,
            max_retries=max_retries,
            raise_on_error=False,
            raise_on_exception=True,
            refresh=refresh,
        )

    def search(self, index: str, body: dict, **params: Any) -> dict:
        """Run a search with a full request body; return the response as a dict."""
        if self.kind == "elasticsearch":
            return dict(self.raw.search(index=index, body=body, **params))
        return dict(self.raw.search(index=index, body=body, params=params or None))


def connect(url: str, *, timeout_s: float = 30.0, headers: dict[str, str] | None = None) -> Engine:
    """Detect the engine at ``url`` and return an :class:`Engine` for it."""
    info = detect(url, headers=headers)
    logger.info("connected to %s %s at %s", info.kind, info.version, info.url)
    return Engine(info, timeout_s=timeout_s, headers=headers)


__all__ = ["Engine", "EngineConnectionError", "EngineInfo", "EngineKind", "connect", "detect"]
