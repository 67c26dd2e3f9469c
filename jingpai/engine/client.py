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
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from jingpai.engine import vectors
from jingpai.engine.auth import (
    AUTH_ENV, NO_AUTH, EngineAccessError, EngineAuth, EngineAuthError, EnginePermissionError, EngineTLSError, access_error,
)
from jingpai.engine.defaults import DEFAULT_ENGINE_URL
# detection lives beside this module (its own concept); re-exported so callers keep importing from here
from jingpai.engine.detection import EngineConnectionError, EngineInfo, EngineKind, detect
from jingpai.errors import UnavailableError

logger = logging.getLogger(__name__)

class DocumentReadError(UnavailableError, RuntimeError):
    """The engine answered a multi-get with an error for a document (e.g. the index does not exist)."""


class Engine:
    """An Elasticsearch or OpenSearch cluster behind one interface.

    Args:
        info: what :func:`detect` found.
        timeout_s: request timeout.
        headers: extra HTTP headers sent with every request.
        auth: credentials (an ``Authorization`` header on every request) and the CA of an ``https://`` engine.

    Attributes:
        raw: the official client (``elasticsearch.Elasticsearch`` or ``opensearchpy.OpenSearch``),
            for the rare call this class does not wrap.
    """

    def __init__(self, info: EngineInfo, *, timeout_s: float = 30.0, headers: dict[str, str] | None = None,
                 auth: EngineAuth | None = None) -> None:
        self.info = info
        self.auth = auth or NO_AUTH
        sent = {**(headers or {}), **self.auth.headers()}
        tls: dict[str, Any] = {"ca_certs": str(self.auth.ca_file)} if self.auth.ca_file is not None else {}
        if info.kind == "elasticsearch":
            from elasticsearch import Elasticsearch, helpers

            self.raw = Elasticsearch(
                info.url, request_timeout=timeout_s, headers=sent, max_retries=3, retry_on_timeout=True,
                retry_on_status=(502, 503, 504), **tls,
            )
        else:
            from opensearchpy import OpenSearch, helpers

            # pool_maxsize: urllib3 keeps one connection per host by default, and concurrent requests
            # (the indexer keeps two bulk requests in flight) would each open and drop a new one
            self.raw = OpenSearch(
                [info.url], timeout=timeout_s, headers=sent, max_retries=3, retry_on_timeout=True,
                retry_on_status=(502, 503, 504), pool_maxsize=10, verify_certs=True, ssl_show_warn=False, **tls,
            )
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

    def access_error(self, exc: BaseException, *, action: str | None = None) -> EngineAccessError | None:
        """``exc`` as an :class:`EngineAccessError` naming this engine's user and the fix (``None``: no 401/403/TLS error)."""
        return access_error(exc, url=self.url, auth=self.auth, action=action)

    def close(self) -> None:
        self.raw.close()

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is worth retrying: connection failure, timeout, 429 or 5xx."""
        if self.kind == "elasticsearch":
            from elastic_transport import ConnectionError as TransportConnectionError
            from elasticsearch import ApiError

            if isinstance(exc, TransportConnectionError):  # includes ConnectionTimeout
                return True
            return isinstance(exc, ApiError) and (exc.status_code == 429 or exc.status_code >= 500)
        from opensearchpy.exceptions import ConnectionError as OSConnectionError, TransportError

        if isinstance(exc, OSConnectionError):
            return True
        return isinstance(exc, TransportError) and isinstance(exc.status_code, int) and (
            exc.status_code == 429 or exc.status_code >= 500
        )

    def is_api_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the engine answering with an error (any HTTP status), as opposed to a
        bug on this side or no answer at all."""
        if self.kind == "elasticsearch":
            from elasticsearch import ApiError

            return isinstance(exc, ApiError)
        from opensearchpy.exceptions import TransportError

        return isinstance(exc, TransportError) and isinstance(exc.status_code, int)

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

    def get_index_settings(self, name: str) -> dict[str, str]:
        """The explicitly set settings of one index, flat (``{"index.refresh_interval": "1s", …}``)."""
        resp = self.raw.indices.get_settings(index=name, flat_settings=True)
        return dict(next(iter(dict(resp).values()))["settings"])

    def put_index_settings(self, name: str, settings: dict[str, str | None]) -> None:
        """Update dynamic index settings (flat keys; ``None`` resets a setting to its default)."""
        if self.kind == "elasticsearch":
            self.raw.indices.put_settings(index=name, settings=settings)
        else:
            self.raw.indices.put_settings(index=name, body=settings)

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

    def index_document(self, index: str, doc_id: str, document: dict, *, refresh: bool = False) -> None:
        if self.kind == "elasticsearch":
            self.raw.index(index=index, id=doc_id, document=document, refresh=refresh)
        else:
            self.raw.index(index=index, id=doc_id, body=document, refresh=refresh)

    # ------------------------------------------------------------------ aliases and capabilities

    def indices(self, pattern: str) -> dict[str, int]:
        """``{physical index: doc count}`` for indices matching ``pattern`` (empty when none)."""
        rows = self.raw.cat.indices(index=pattern, format="json", h="index,docs.count")
        if isinstance(rows, dict) and rows.get("status") == 404:
            return {}
        return {row["index"]: int(row.get("docs.count") or 0) for row in rows}

    def alias_targets(self, alias: str) -> list[str]:
        """Physical indices behind ``alias`` (empty if the alias does not exist)."""
        # GET, not HEAD: a refusal (403) carries the engine's reason, which names the missing permission; and asked of
        # the alias's own indices (not of every index), so a user allowed only those may read it. 404: no such alias
        if self.kind == "elasticsearch":
            found = self.raw.options(ignore_status=404).indices.get_alias(index=alias, name=alias)
            return [] if found.meta.status == 404 else sorted(found.body)
        found = self.raw.indices.get_alias(index=alias, name=alias, ignore=404)
        return [] if found.get("status") == 404 and "error" in found else sorted(found)

    def swap_alias(self, alias: str, new_index: str) -> None:
        """Point ``alias`` at ``new_index`` only, atomically (one ``_aliases`` request)."""
        actions: list[dict] = [{"remove": {"index": old, "alias": alias}} for old in self.alias_targets(alias) if old != new_index]
        actions.append({"add": {"index": new_index, "alias": alias}})
        if self.kind == "elasticsearch":
            self.raw.indices.update_aliases(actions=actions)
        else:
            self.raw.indices.update_aliases(body={"actions": actions})

    def modules(self) -> set[str]:
        """Names of the modules and plugins installed on the (first) node, e.g. ``mapper-extras``."""
        info = self.raw.nodes.info(node_id="_local", metric="plugins")
        node = next(iter(info["nodes"].values()))
        return {m["name"] for m in node.get("modules", [])} | {p["name"] for p in node.get("plugins", [])}

    # ------------------------------------------------------------------ dense vectors (jingpai.engine.vectors)

    def check_vectors(self) -> None:
        """Raise :class:`~jingpai.engine.vectors.VectorsUnsupportedError` unless this engine can index dense
        vectors (Elasticsearch 8 always can; OpenSearch with its k-NN plugin)."""
        problem = vectors.missing_support(self.kind, self.modules())
        if problem is not None:
            raise vectors.VectorsUnsupportedError(f"{self.kind} {self.version} at {self.url}: {problem}")

    def vector_mapping(self, dims: int, *, index: vectors.VectorIndex = "hnsw") -> dict:
        """The mapping of a vector field of ``dims`` dimensions holding unit-length vectors, int8-quantised and
        HNSW-indexed (``index="flat"``: no graph, exact search): ``dense_vector`` (Elasticsearch) or ``knn_vector``
        (OpenSearch)."""
        return vectors.field_mapping(self.kind, dims, index=index)

    def vector_index_settings(self, *, index: vectors.VectorIndex = "hnsw") -> dict:
        """Settings an index with a vector field needs at creation (OpenSearch with HNSW: ``index.knn``; else none)."""
        return vectors.index_settings(self.kind, index=index)

    def knn_search(
        self, index: str, vector: Sequence[float], *, field: str, k: int = 10, num_candidates: int = 100,
        filter: dict | None = None, vector_index: vectors.VectorIndex = "hnsw",
    ) -> dict:
        """The ``k`` documents whose ``field`` vectors are nearest to ``vector``, as :meth:`search` returns them.

        Args:
            index: index or alias.
            vector: the query vector, as many dimensions as the field (scaled to unit length here).
            field: the vector field (an index built by ``jingpai index --vectors``: ``IndexMeta.vector_field``).
            k: hits returned.
            num_candidates: HNSW candidates examined per shard (>= ``k``; more: better recall, slower).
            filter: a query the hits must match, applied during the graph search.
            vector_index: how the field is indexed (``IndexMeta.vector_index``): ``flat`` fields are searched exactly.

        Returns:
            The search response: ``hits.hits`` best first, ``_score`` = ``(1 + cosine) / 2`` on both engines,
            ``_source`` without the vector field.
        """
        body = vectors.knn_body(self.kind, [float(x) for x in vector], field=field, k=k, num_candidates=num_candidates, filter=filter,
                                index=vector_index)
        return self.search(index, body)

    def search(self, index: str, body: dict, **params: Any) -> dict:
        """Run a search with a full request body; return the response as a dict."""
        if self.kind == "elasticsearch":
            return dict(self.raw.search(index=index, body=body, **params))
        return dict(self.raw.search(index=index, body=body, params=params or None))

    def get_sources(self, index: str, ids: Sequence[str], *, fields: Sequence[str]) -> dict[str, dict]:
        """``{id: _source limited to fields}`` of the documents of ``ids`` that ``index`` holds (one ``_mget``);
        ids it does not hold are absent.

        Raises:
            DocumentReadError: the engine answered with an error for a document (a missing index, a failed shard).
        """
        docs = [{"_id": doc_id, "_source": list(fields)} for doc_id in ids]
        if not docs:
            return {}
        if self.kind == "elasticsearch":
            resp = self.raw.mget(index=index, docs=docs)
        else:
            resp = self.raw.mget(index=index, body={"docs": docs})
        failed = next((d for d in resp["docs"] if d.get("error")), None)
        if failed is not None:
            error = failed["error"]
            reason = error.get("reason", error) if isinstance(error, dict) else error
            raise DocumentReadError(f"{self.kind} could not read document {failed['_id']!r} of {index}: {reason}")
        return {d["_id"]: d.get("_source") or {} for d in resp["docs"] if d.get("found")}

    def scan(
        self,
        index: str,
        *,
        query: dict | None = None,
        source: list[str] | None = None,
        page_size: int = 500,
        keep_alive: str = "5m",
    ) -> Iterator[dict]:
        """Every hit (``_index``, ``_id``, ``_source``) of ``query`` (default: all documents), unordered.

        Uses the official helpers' scroll-based ``scan``; ``source`` limits the returned ``_source`` fields.
        """
        body: dict[str, Any] = {"query": query or {"match_all": {}}}
        if source is not None:
            body["_source"] = source
        yield from self._helpers.scan(self.raw, index=index, query=body, size=page_size, scroll=keep_alive)

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        """A raw REST call (for APIs the clients do not wrap alike, e.g. ML Commons or ``_inference``).

        Raises:
            The official client's API error for non-2xx answers (its ``status_code``/``meta.status``
            and message carry the engine's error).
        """
        if self.kind == "elasticsearch":
            headers = {"accept": "application/json", "content-type": "application/json"}
            resp = self.raw.perform_request(method, path, body=body, headers=headers if body is not None else {"accept": "application/json"})
            return dict(resp.body) if isinstance(resp.body, dict) else {"response": resp.body}
        resp = self.raw.transport.perform_request(method, path, body=body)
        return dict(resp) if isinstance(resp, dict) else {"response": resp}


def connect(url: str, *, timeout_s: float = 30.0, headers: dict[str, str] | None = None, auth: EngineAuth | None = None) -> Engine:
    """Detect the engine at ``url`` and return an :class:`Engine` for it (as ``auth``'s identity, if given).

    Raises:
        EngineAccessError: credentials missing or rejected, or the engine's certificate not trusted.
        EngineConnectionError: nothing answers at ``url``.
    """
    info = detect(url, headers=headers, auth=auth)
    logger.info("connected to %s %s at %s as %s", info.kind, info.version, info.url, (auth or NO_AUTH).who)
    return Engine(info, timeout_s=timeout_s, headers=headers, auth=auth)


__all__ = [
    "AUTH_ENV", "DEFAULT_ENGINE_URL", "DocumentReadError", "Engine", "EngineAccessError", "EngineAuth", "EngineAuthError",
    "EngineConnectionError", "EngineInfo", "EngineKind", "EnginePermissionError", "EngineTLSError", "NO_AUTH", "access_error", "connect",
    "detect",
]
