"""The ``_search`` gateway: the engine's REST API with keyword augmentation and reranking.

``create_app(settings)`` returns a Starlette app that forwards every request to ``settings.engine_url``:

- ``GET|POST /{index}/_search``, ``/_search``, ``/{index}/_msearch``, ``/_msearch`` are parsed; on
  indices built by ``jingpai index`` (mapping ``_meta.jingpai``) their full-text clauses are widened
  (:mod:`jingpai.plugin.augment`) and the top window of hits is reranked by ``jingpai serve``, the
  model's scores fused with the engine's (:mod:`jingpai.reranker.fusion`). Each response gets a
  top-level ``jingpai`` object (:class:`JingpaiInfo`) and reranked hits a ``_jingpai`` object with the
  engine's score and rank and the model's score. Hits past the window keep the engine's order, so paging
  with ``from``/``size`` never repeats or skips a hit.
- every other request is streamed through unchanged (method, path, query, headers, body; status,
  headers and body of the answer). The gateway adds no headers or credentials of its own and only
  ever talks to the configured engine and reranker URLs.

Malformed requests are forwarded unchanged so the engine answers them (:class:`NotOursToJudge`); no error
drops the client's keep-alive connection (:meth:`Gateway.guarded`); reranker calls are bounded gateway-wide
and per ``_msearch`` (``reason: reranker_busy`` past ``timeout_ms`` of waiting); a client's ``filter_path``
is applied after reranking (:class:`FilterPath`); the index-metadata cache is keyed by credentials.

Per request: ``?jingpai=off|augment|rerank``, ``?jingpai_fusion=…&jingpai_fusion_weight=…&jingpai_rrf_k=…``
and a body section ``ext.jingpai`` (:class:`JingpaiExt`), all removed before the request is forwarded.

Example:
    >>> app = create_app(GatewaySettings(engine_url="http://127.0.0.1:9200", reranker_url="http://127.0.0.1:8081"))  # doctest: +SKIP
    >>> uvicorn.run(app, port=8080)                                                                                  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import fnmatch
import functools
import gzip
import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import quote, urlencode
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from cachetools import TTLCache
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from yarl import URL

from jingpai.indexer.mapping import IndexMeta, NotAJingpaiIndexError, read_meta
from jingpai.plugin.augment import DictionaryStore, QueryRewriter, RewriteResult, find_full_text
from jingpai.commands.gateway import setting_hint
from jingpai.plugin.http_protocol import Utf8TargetHttpToolsProtocol
from jingpai.plugin.rerank_client import CircuitBreaker, RerankClient, RerankUnavailable
from jingpai.plugin.filter_path import FilterPath
from jingpai.plugin.settings import GATEWAY_MODES, GatewaySettings
from jingpai.reranker.fusion import FusionError, FusionSpec, fused_order

logger = logging.getLogger(__name__)

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
# RFC 9110 §7.6.1 hop-by-hop headers, plus those recomputed for the forwarded message
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host"}
)
#: request headers that cannot change what the engine lets a client see; every other header (Authorization,
#: Cookie, run-as and proxy-auth headers whatever their names) keys the index-metadata cache
NOT_CREDENTIALS = frozenset({
    "accept", "accept-encoding", "accept-language", "content-type", "content-length", "content-encoding", "user-agent",
    "x-opaque-id", "traceparent", "tracestate", "x-elastic-client-meta", "elastic-api-version", "x-request-id",
    "cache-control", "pragma", "expect",
})
#: (index, credentials) entries of the index-metadata cache
META_CACHE_SIZE = 4096


# ---------------------------------------------------------------------------------------------- models


class FusionParams(BaseModel):
    """A request's fusion overrides (``ext.jingpai`` keys, or ``?jingpai_<key>=`` URL parameters)."""

    model_config = ConfigDict(extra="forbid")

    fusion: Literal["replace", "linear", "rrf"] | None = None
    fusion_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    rrf_k: int | None = Field(default=None, ge=1)

    def over(self, base: FusionSpec) -> FusionSpec:
        """These overrides on top of ``base`` (the index's or the gateway's fusion)."""
        return base.override(**self.model_dump(include=set(FusionParams.model_fields)))


#: URL parameter -> FusionParams field
FUSION_URL_PARAMS: dict[str, str] = {f"jingpai_{name}": name for name in FusionParams.model_fields}


class JingpaiExt(FusionParams):
    """The ``ext.jingpai`` section of a search body (removed before forwarding)."""

    mode: Literal["off", "augment", "rerank"] | None = None
    window: int | None = Field(default=None, ge=1)
    fields: list[str] | None = Field(default=None, min_length=1)
    model: str | None = None
    query: str | None = Field(default=None, min_length=1)


class JingpaiInfo(BaseModel):
    """The top-level ``jingpai`` object added to every search response."""

    mode: Literal["off", "augment", "rerank"]
    reranked: bool
    reason: str | None = None
    augmented: bool = False
    augment_reason: str | None = None
    keywords: list[str] = Field(default_factory=list)
    model: str | None = None
    window: int | None = None
    took_rerank_ms: float | None = None
    fusion: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------------- errors


class GatewayError(Exception):
    """An error the gateway itself answers, in the engine's error shape."""

    status = 500
    error_type = "jingpai_gateway_exception"


class BadGatewayRequest(GatewayError):
    status = 400
    error_type = "jingpai_illegal_argument_exception"


class NotOursToJudge(Exception):
    """Part of a search the gateway cannot interpret (a ``_source`` of the wrong type, a non-numeric ``size``,
    an ``_msearch`` header whose ``index`` is not a name): the client's request goes to the engine unchanged
    and the engine answers it, with its own status and error."""


def es_error(status: int, error_type: str, reason: str) -> JSONResponse:
    """An Elasticsearch/OpenSearch-shaped error body, so clients raise their usual exception types."""
    cause = {"type": error_type, "reason": reason}
    return JSONResponse({"error": {"root_cause": [cause], **cause}, "status": status}, status_code=status)


def _dumps(value: Any) -> bytes:
    """``value`` as JSON bytes: UTF-8 where possible, ``\\uXXXX`` escapes when a string holds a lone surrogate
    (which a client may send escaped, and which UTF-8 cannot encode)."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value).encode("ascii")


def _clean_text(text: str) -> str:
    """``text`` without lone surrogates (replaced by ``?``), so it can be sent to the reranker as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _validation_problems(exc: ValidationError, where: Any) -> str:
    """``field: message (got value)`` for each error; ``where(loc)`` names the field as the client wrote it."""
    return "; ".join(f"{where(err['loc'])}: {err['msg']} (got {err.get('input')!r})" for err in exc.errors())


def handle_exception(exc: Exception, *, method: str, path: str, expose_internals: bool = False) -> Response:
    """The one place that turns exceptions into HTTP errors (ES-shaped bodies).

    Args:
        expose_internals: name the engine's host and the low-level error in the body; otherwise only the
            error's type is named and the details go to the gateway's log.
    """
    if isinstance(exc, GatewayError):
        return es_error(exc.status, exc.error_type, str(exc))
    if isinstance(exc, HTTPException):
        return http_error(exc.status_code, str(exc.detail), exc.headers)
    detail = f"{type(exc).__name__}: {exc}" if expose_internals else f"{type(exc).__name__} (details in the gateway log)"
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        logger.warning("engine timed out on %s %s: %s", method, path, exc)
        return es_error(504, "jingpai_engine_timeout_exception", f"the engine did not answer {method} {path} in time: {detail}")
    if isinstance(exc, aiohttp.ClientError):
        logger.warning("engine unreachable for %s %s: %s", method, path, exc)
        return es_error(502, "jingpai_engine_unreachable_exception", f"cannot reach the engine: {detail}")
    logger.exception("unexpected error on %s %s", method, path)
    return es_error(500, "jingpai_gateway_exception", f"internal gateway error: {detail}")


def http_error(status: int, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An HTTP-level error of the gateway's own routes (404, 405 …) in the engine's error shape."""
    kinds = {404: "jingpai_not_found_exception", 405: "jingpai_method_not_allowed_exception"}
    response = es_error(status, kinds.get(status, "jingpai_http_exception"), reason)
    response.headers.update(headers or {})
    return response


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return http_error(exc.status_code, str(exc.detail), exc.headers)


# ---------------------------------------------------------------------------------------------- planning


@dataclass
class SearchPlan:
    """What the gateway decided for one search before forwarding it."""

    body: dict
    params: dict[str, str]
    mode: str
    reason: str | None = None
    augment_reason: str | None = None
    rewrite: RewriteResult | None = None
    rerank: bool = False
    query_text: str = ""
    from_: int = 0
    size: int = 10
    window: int = 0
    fusion: FusionSpec | None = None
    fields: tuple[str, ...] = ()
    added_source: tuple[str, ...] = ()
    drop_source: bool = False
    #: the client's ``filter_path``, taken off the engine request and applied to the reranked answer
    filter_path: FilterPath | None = None
    #: whether ``body`` differs from what the client sent (else the client's bytes are forwarded as they came)
    rewritten: bool = False

    def info(self, **kwargs: Any) -> dict:
        data = {
            "mode": self.mode,
            "reranked": False,
            "reason": self.reason,
            "augmented": bool(self.rewrite and self.rewrite.augmented),
            "augment_reason": None if (self.rewrite and self.rewrite.augmented) else self.augment_reason,
            "keywords": [w for w, _ in self.rewrite.keywords] if self.rewrite else [],
            "window": self.window or None,
            **kwargs,
        }
        return JingpaiInfo(**data).model_dump()


class _FetchedMappings:
    """Adapter so :func:`jingpai.indexer.mapping.read_meta` reads a mapping fetched over the proxy."""

    def __init__(self, mappings: dict) -> None:
        self._mappings = mappings

    def get_mapping(self, name: str) -> dict:
        return self._mappings


def _meta_of(mappings: dict, index: str) -> IndexMeta | None:
    """The index's meta when every physical index behind ``index`` was built by jingpai, else ``None``."""
    if not mappings or not all((m.get("mappings") or {}).get("_meta", {}).get("jingpai") for m in mappings.values()):
        return None
    try:
        return read_meta(_FetchedMappings(mappings), index)  # type: ignore[arg-type]
    except NotAJingpaiIndexError:
        return None


def _source_selects(name: str, includes: list[str], excludes: list[str]) -> bool:
    if includes and not any(fnmatch.fnmatchcase(name, p) for p in includes):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in excludes)


@dataclass(frozen=True)
class Upstream:
    """An engine answer the gateway read whole."""

    status_code: int
    headers: Any
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


def _path_part(name: str) -> str:
    """An index expression (names, commas, wildcards, date math) as one percent-encoded URL path segment."""
    return quote(name, safe=",*:+")


def _append_member(content: bytes, key: str, value: Any) -> bytes | None:
    """``content`` (a JSON object's bytes) with ``"key": value`` added as its last member; ``None`` if it
    does not look like a JSON object."""
    head = content.rstrip()
    if not head.endswith(b"}") or not head.lstrip().startswith(b"{"):
        return None
    head = head[:-1].rstrip()
    comma = b"" if head.endswith(b"{") else b","
    return head + comma + json.dumps(key).encode() + b":" + _dumps(value) + b"}"


def _as_list(value: Any, name: str = "_source") -> list[str]:
    """A ``_source`` pattern list (``None``, ``"a,b"`` or ``["a", "b"]``); anything else is the engine's to judge."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise NotOursToJudge(f"[{name}] is neither a string nor a list of strings: {value!r}")


def _get_path(source: dict, path: str) -> Any:
    node: Any = source
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return source.get(path) if isinstance(source, dict) else None
        node = node[part]
    return node


def _pop_path(source: dict, path: str) -> None:
    if path in source:
        source.pop(path)
        return
    parts = path.split(".")
    node: Any = source
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def _int_param(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise NotOursToJudge(f"[{name}] is a boolean: {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise NotOursToJudge(f"[{name}] is not an integer: {value!r}") from exc
    if number < 0:
        raise NotOursToJudge(f"[{name}] is negative: {number}")
    return number


def _index_expression(value: Any) -> str | None:
    """An ``_msearch`` header's ``index`` (a name, comma list or list of names) as one expression."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise NotOursToJudge(f"_msearch header [index] is neither a string nor a list of strings: {value!r}")



def _sorts_by_other_fields(sort: Any) -> bool:
    """Whether a ``sort`` value orders by anything other than descending ``_score``."""
    if sort in (None, [], ""):
        return False
    items = sort if isinstance(sort, list) else [sort]
    for item in items:
        if isinstance(item, str):
            for part in item.split(","):
                name, _, order = part.partition(":")
                if name != "_score" or order not in ("", "desc"):
                    return True
        elif isinstance(item, dict):
            for name, spec in item.items():
                order = spec.get("order", "desc") if isinstance(spec, dict) else spec
                if name != "_score" or order != "desc":
                    return True
        else:
            return True
    return False


# ---------------------------------------------------------------------------------------------- the app


class Gateway:
    """The gateway's state (HTTP clients, caches) and request handlers; see :func:`create_app`."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.dictionaries = DictionaryStore(settings.dict_dirs)
        self._engine: aiohttp.ClientSession | None = None
        self._engine_loop: asyncio.AbstractEventLoop | None = None
        self.reranker: RerankClient | None = None
        if settings.reranker_url:
            breaker = CircuitBreaker(failure_threshold=settings.breaker_failures, reset_timeout_s=settings.breaker_reset_s)
            self.reranker = RerankClient(settings.reranker_url, timeout_ms=settings.timeout_ms, breaker=breaker)
        # keyed by (index, fingerprint of the client's credentials): what one client may read never serves another
        self._meta_cache: TTLCache[tuple[str, str], IndexMeta | None] = TTLCache(maxsize=META_CACHE_SIZE, ttl=settings.meta_ttl_s)
        self._rerank_slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None
        self._timeout_hint = setting_hint("timeout_ms")

    @property
    def engine(self) -> aiohttp.ClientSession:
        """The HTTP session to the engine (one per event loop: an aiohttp session belongs to the loop it was made in).

        aiohttp rather than httpx on this hop: relaying an ~86 kB search answer costs ~0.6 ms of CPU with
        aiohttp against ~2.1 ms with httpx/httpcore (measured on loopback), and that CPU is the gateway's
        added latency when nothing is reranked.
        """
        loop = asyncio.get_running_loop()
        if self._engine is None or self._engine.closed or self._engine_loop is not loop:
            self._engine_loop = loop
            self._engine = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.settings.engine_timeout_s),
                connector=aiohttp.TCPConnector(limit=256),
                trust_env=False,
                # forward the client's headers only: no User-Agent, Accept or Content-Type of our own
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
                auto_decompress=False,
            )
        return self._engine

    @property
    def rerank_slots(self) -> asyncio.Semaphore:
        """The gateway-wide bound on rerank calls in flight (``rerank_concurrency``), one per event loop."""
        loop = asyncio.get_running_loop()
        if self._rerank_slots is None or self._slots_loop is not loop:
            self._slots_loop = loop
            self._rerank_slots = asyncio.Semaphore(self.settings.rerank_concurrency)
        return self._rerank_slots

    def guarded(self, endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """``endpoint`` answering its exceptions itself (:func:`handle_exception`).

        Starlette hands exceptions not handled by a route to its server-error middleware, which re-raises
        them after answering, and uvicorn then drops the client's keep-alive connection; answered here, the
        connection stays usable.
        """

        @functools.wraps(endpoint)
        async def guarded(request: Request) -> Response:
            try:
                return await endpoint(request)
            except Exception as exc:  # noqa: BLE001 — every error is answered by handle_exception
                return handle_exception(exc, method=request.method, path=request.url.path,
                                        expose_internals=self.settings.expose_internals)

        return guarded

    async def aclose(self) -> None:
        if self._engine is not None and not self._engine.closed:
            await self._engine.close()
        if self.reranker is not None:
            await self.reranker.aclose()

    # ------------------------------------------------------------------ forwarding helpers

    @staticmethod
    def forward_headers(request: Request, *, body_rewritten: bool) -> list[tuple[str, str]]:
        """The client's headers as they came, minus hop-by-hop ones (and body framing when rewritten)."""
        drop = set(HOP_BY_HOP)
        if body_rewritten:
            drop |= {"content-length", "content-encoding"}
        return [(k, v) for k, v in request.headers.items() if k.lower() not in drop]

    @staticmethod
    def body_headers(request: Request, *, ndjson: bool = False) -> list[tuple[str, str]]:
        """:meth:`forward_headers` for a body the gateway wrote: the client's ``Content-Type`` when it sent one,
        else the one the engine requires for a body (a URI search ``GET …/_search?q=`` sends none): JSON, or
        the compatible-with media type the client's ``Accept`` asks for (the engine wants both to match)."""
        headers = Gateway.forward_headers(request, body_rewritten=True)
        if any(k.lower() == "content-type" for k, _ in headers):
            return headers
        accept = request.headers.get("accept", "")
        compat = re.match(r"\s*application/vnd\.(elasticsearch|opensearch)\+json\s*;\s*compatible-with\s*=\s*(\d+)", accept)
        if compat:
            kind = "x-ndjson" if ndjson else "json"
            content_type = f"application/vnd.{compat.group(1)}+{kind};compatible-with={compat.group(2)}"
        else:
            content_type = "application/x-ndjson" if ndjson else "application/json"
        return [*headers, ("content-type", content_type)]

    @staticmethod
    def response_headers(resp: aiohttp.ClientResponse | Upstream, *, body_rewritten: bool) -> dict[str, str]:
        drop = set(HOP_BY_HOP) | {"content-length"}
        if body_rewritten:
            drop |= {"content-encoding"}
        return {k: v for k, v in resp.headers.items() if k.lower() not in drop}

    def engine_url(self, request: Request) -> str:
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        url = self.settings.engine_url + raw_path.decode("latin-1")
        query = request.scope.get("query_string", b"").decode("latin-1")
        return f"{url}?{query}" if query else url

    async def passthrough(self, request: Request) -> Response:
        """Stream any request to the engine and its answer back, unchanged."""
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        resp = await self.engine.request(
            request.method,
            URL(self.engine_url(request), encoded=True),  # the client's path and query, byte for byte
            headers=self.forward_headers(request, body_rewritten=False),
            data=request.stream() if has_body else None,
            allow_redirects=False,
            auto_decompress=False,
        )

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.content.iter_any():
                    yield chunk
            finally:
                resp.release()

        return StreamingResponse(relay(), status_code=resp.status, headers=self.response_headers(resp, body_rewritten=False))

    async def fetch(self, method: str, path: str, *, headers: list[tuple[str, str]], body: bytes | None = None,
                    params: dict[str, str] | None = None) -> Upstream:
        """One request to the engine whose answer the gateway reads (sent uncompressed: it is decoded here anyway)."""
        url = f"{self.settings.engine_url}{path}"
        if params:
            url += "?" + urlencode(params)
        headers = [(k, v) for k, v in headers if k.lower() != "accept-encoding"]
        async with self.engine.request(method, URL(url, encoded=True), headers=headers, data=body or None,
                                       allow_redirects=False, auto_decompress=True) as resp:
            return Upstream(resp.status, resp.headers, await resp.read())

    async def read_body(self, request: Request) -> bytes:
        body = await request.body()
        if request.headers.get("content-encoding", "").lower() == "gzip" and body:
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError) as exc:
                raise BadGatewayRequest(f"request body is marked Content-Encoding: gzip but is not gzip data: {exc}") from exc
        return body

    @staticmethod
    def credentials_key(request: Request) -> str:
        """A fingerprint of every request header that may carry credentials (all but :data:`NOT_CREDENTIALS`)."""
        relevant = sorted((k.lower(), v) for k, v in request.headers.items() if k.lower() not in NOT_CREDENTIALS | HOP_BY_HOP)
        return hashlib.sha256(json.dumps(relevant).encode("utf-8", "surrogateescape")).hexdigest()

    async def index_meta(self, index: str | None, request: Request) -> IndexMeta | None:
        """The jingpai meta of ``index``, fetched with the client's own credentials and cached for ``meta_ttl_s``
        per index and credentials (:meth:`credentials_key`): one client's lookup never answers another's."""
        if not index:
            return None
        key = (index, self.credentials_key(request))
        if key in self._meta_cache:
            return self._meta_cache[key]
        headers = [(k, v) for k, v in self.forward_headers(request, body_rewritten=True) if k.lower() not in ("content-type",)]
        resp = await self.fetch("GET", f"/{_path_part(index)}/_mapping", headers=headers)
        if resp.status_code == 200:
            meta = _meta_of(resp.json(), index)
        else:
            meta = None
            logger.info("cannot read the mapping of %r (HTTP %d): not augmenting or reranking", index, resp.status_code)
            if resp.status_code not in (404,):
                return None  # auth or transient errors are not cached
        self._meta_cache[key] = meta
        return meta

    # ------------------------------------------------------------------ planning one search

    def _parse_ext(self, body: dict) -> JingpaiExt:
        ext = body.get("ext")
        if not isinstance(ext, dict) or "jingpai" not in ext:
            return JingpaiExt()
        raw = ext.pop("jingpai")
        if not ext:
            body.pop("ext")
        try:
            return JingpaiExt.model_validate(raw)
        except ValidationError as exc:
            problems = _validation_problems(exc, lambda loc: ".".join(str(p) for p in loc) or "ext.jingpai")
            raise BadGatewayRequest(
                f"invalid ext.jingpai: {problems}; valid keys: {', '.join(JingpaiExt.model_fields)}"
            ) from exc

    @staticmethod
    def _fusion_params(params: dict[str, str]) -> FusionParams:
        """Pop and validate the ``?jingpai_fusion…`` URL parameters (they never reach the engine).

        Raises:
            BadGatewayRequest: a bad value; the message names the parameter and the valid values.
        """
        given = {field: params.pop(name) for name, field in FUSION_URL_PARAMS.items() if name in params}
        try:
            return FusionParams.model_validate(given)
        except ValidationError as exc:
            problems = _validation_problems(exc, lambda loc: f"?jingpai_{'.'.join(str(p) for p in loc)}")
            raise BadGatewayRequest(f"invalid fusion parameter: {problems}") from exc

    async def plan(self, request: Request, index: str | None, body: dict, params: dict[str, str], mode_param: str | None,
                   fusion_param: FusionParams | None = None) -> SearchPlan:
        """Decide augmentation and reranking for one search and rewrite its body and parameters.

        A search the gateway cannot interpret (:class:`NotOursToJudge`, or a shape its planning trips over)
        is planned unchanged, ``reason: unsupported_request``: the engine answers it as it would directly.

        Args:
            fusion_param: the request's URL fusion parameters; they win over ``ext.jingpai``, which wins over
                the index's ``indices`` entry, which wins over the gateway's fusion.

        Raises:
            BadGatewayRequest: a bad ``ext.jingpai`` or fusion parameter (the gateway's own input).
        """
        try:
            return await self._plan(request, index, body, params, mode_param, fusion_param)
        except (NotOursToJudge, RecursionError, TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
            logger.warning("forwarding a search on %r unchanged (the engine judges it): %s: %s", index, type(exc).__name__, exc)
            return self.unchanged_plan(body, params, mode_param or self.settings.mode)

    @staticmethod
    def unchanged_plan(body: dict, params: dict[str, str], mode: str) -> SearchPlan:
        """The client's search as it came (only ``ext.jingpai`` removed): not augmented, not reranked."""
        plan = SearchPlan(body=body, params=dict(params), mode=mode, reason="unsupported_request", augment_reason="unsupported_request")
        ext = body.get("ext")
        if isinstance(ext, dict) and "jingpai" in ext:
            rest = {k: v for k, v in ext.items() if k != "jingpai"}
            plan.body = {k: v for k, v in body.items() if k != "ext"} | ({"ext": rest} if rest else {})
            plan.rewritten = True
        return plan

    async def _plan(self, request: Request, index: str | None, body: dict, params: dict[str, str], mode_param: str | None,
                    fusion_param: FusionParams | None) -> SearchPlan:
        body = copy.deepcopy(body)
        had_ext = isinstance(body.get("ext"), dict) and "jingpai" in body["ext"]
        ext = self._parse_ext(body)
        mode = mode_param or ext.mode or self.settings.mode
        plan = SearchPlan(body=body, params=dict(params), mode=mode, rewritten=had_ext)
        requested = FusionParams.model_validate({
            **ext.model_dump(include=set(FusionParams.model_fields), exclude_none=True),
            **(fusion_param.model_dump(exclude_none=True) if fusion_param else {}),
        })
        try:
            plan.fusion = requested.over(self.settings.fusion_for(index))
        except FusionError as exc:
            raise BadGatewayRequest(f"invalid fusion for this request: {exc}") from exc
        if mode == "off":
            plan.reason = "disabled"
            return plan
        # request shapes that are never reranked are decided first: they need no index lookup
        plan.reason = "augment_only" if mode == "augment" else self._shape_reason(body, params)
        meta = await self.index_meta(index, request)
        if meta is None:
            missing = "not_a_jingpai_index" if index else "no_target_index"
            plan.augment_reason = missing
            plan.reason = plan.reason or missing
            return plan
        query = body.get("query")
        plan.rewrite = RewriteResult(query=query, clauses=find_full_text(query, meta.text_fields) if query is not None else [])
        if not plan.rewrite.clauses:
            plan.augment_reason = "no_full_text_query"
        else:
            rewriter = self._rewriter(meta)
            if rewriter is None:
                plan.augment_reason = "dictionary_not_loaded"
            else:
                plan.rewrite = rewriter(query)
                if plan.rewrite.augmented:
                    body["query"] = plan.rewrite.query
                    plan.rewritten = True
        if plan.reason is None:
            plan.reason = self._content_reason(body, params, plan.rewrite, ext)
        if plan.reason is None:
            self._prepare_rerank(plan, meta, ext)
        return plan

    def _rewriter(self, meta: IndexMeta) -> QueryRewriter | None:
        if meta.dict_version is None:
            dictionary, segmenter = None, self.dictionaries.plain_segmenter()
        else:
            entry = self.dictionaries.get(meta.dict_version)
            if entry is None:
                return None
            dictionary, segmenter = entry
        return QueryRewriter(
            meta,
            dictionary=dictionary,
            segmenter=segmenter,
            keywords_top_k=self.settings.keywords_top_k,
            seg_boost=self.settings.seg_boost,
            keyword_boost=self.settings.keyword_boost,
            weight_boost=self.settings.weight_boost,
        )

    def _shape_reason(self, body: dict, params: dict[str, str]) -> str | None:
        """Why a request is not reranked because of its shape (``None``: it may be)."""
        if self.reranker is None:
            return "no_reranker_configured"
        if "scroll" in params:
            return "scroll"
        if "pit" in body:
            return "pit"
        if "search_after" in body:
            return "search_after"
        if _sorts_by_other_fields(body.get("sort")) or _sorts_by_other_fields(params.get("sort")):
            return "sort"
        size = _int_param(params.get("size", body.get("size", 10)), "size")
        if size == 0:
            return "aggregations_only" if ("aggs" in body or "aggregations" in body) else "size_0"
        from_ = _int_param(params.get("from", body.get("from", 0)), "from")
        if from_ + size > self.settings.max_window:
            return "window_exceeded"
        return None

    @staticmethod
    def _content_reason(body: dict, params: dict[str, str], rewrite: RewriteResult, ext: JingpaiExt) -> str | None:
        if not (ext.query or rewrite.query_text or params.get("q")):
            return "no_full_text_query"
        return None

    def _prepare_rerank(self, plan: SearchPlan, meta: IndexMeta, ext: JingpaiExt) -> None:
        body, params = plan.body, plan.params
        plan.from_ = _int_param(params.get("from", body.get("from", 0)), "from")
        plan.size = _int_param(params.get("size", body.get("size", 10)), "size")
        if ext.window is not None and ext.window > self.settings.max_window:
            raise BadGatewayRequest(f"ext.jingpai.window {ext.window} exceeds the gateway's max_window {self.settings.max_window}")
        # The window is the engine's top W whatever the page: it does not grow with from + size, else each
        # page would rerank a different set and paging would repeat and skip hits. Reranking permutes
        # engine ranks 1..W among themselves, so positions >= W are the engine's own positions.
        plan.window = min(ext.window or self.settings.window, self.settings.max_window)
        if plan.from_ >= plan.window:
            plan.reason = "beyond_window"  # the engine answers this page as asked: no rerank needed
            return
        params.pop("from", None)
        params.pop("size", None)
        body["from"], body["size"] = 0, max(plan.window, plan.from_ + plan.size)
        plan.rerank = plan.rewritten = True
        if "filter_path" in params:
            # the engine would filter away what reranking reads (_source, _score): applied to the answer instead
            plan.filter_path = FilterPath.parse(params.pop("filter_path"))
        plan.query_text = ext.query or plan.rewrite.query_text or params.get("q", "")
        fields = tuple(ext.fields or self.settings.rerank_fields or meta.text_fields)
        # URL source filters are folded into the body so one place decides what the window must return
        if any(k in params for k in ("_source", "_source_includes", "_source_excludes")):
            source: Any = {
                "includes": _as_list(params.pop("_source_includes", None)) or
                ([] if params.get("_source") in ("true", "false") else _as_list(params.get("_source"))),
                "excludes": _as_list(params.pop("_source_excludes", None)),
            }
            if params.pop("_source", None) == "false":
                source = False
            body["_source"] = source
        user_source = body.get("_source")
        if user_source is False:
            body["_source"] = {"includes": list(fields)}
            plan.added_source, plan.drop_source = fields, True
        elif isinstance(user_source, (str, list)):
            includes = _as_list(user_source)
            missing = tuple(f for f in fields if not _source_selects(f, includes, []))
            body["_source"] = includes + list(missing)
            plan.added_source = missing
        elif isinstance(user_source, dict):
            includes = _as_list(user_source.get("includes", user_source.get("include")))
            excludes = _as_list(user_source.get("excludes", user_source.get("exclude")))
            hidden = [f for f in fields if not _source_selects(f, [], excludes)]
            if hidden:
                logger.info("rerank fields %s are excluded by the request's _source filter; reranking without them", hidden)
            fields = tuple(f for f in fields if f not in hidden)
            missing = tuple(f for f in fields if not _source_selects(f, includes, excludes))
            if includes and missing:
                body["_source"] = {**user_source, "includes": includes + list(missing)}
                body["_source"].pop("include", None)
            plan.added_source = missing if includes else ()
        elif user_source not in (None, True):
            raise NotOursToJudge(f"[_source] is not a boolean, string, list or object: {user_source!r}")
        plan.fields = fields

    # ------------------------------------------------------------------ finishing one search

    def _doc_text(self, hit: dict, fields: tuple[str, ...]) -> str:
        source = hit.get("_source") or {}
        parts: list[str] = []
        for name in fields:
            value = _get_path(source, name)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value if v is not None)
            if value not in (None, ""):
                parts.append(str(value))
        return "\n".join(parts)[: self.settings.doc_chars]

    def _finish_page(self, plan: SearchPlan, hits: list[dict]) -> list[dict]:
        page = hits[plan.from_ : plan.from_ + plan.size]
        for hit in page:
            source = hit.get("_source")
            if plan.drop_source:
                hit.pop("_source", None)
            elif isinstance(source, dict):
                for name in plan.added_source:
                    _pop_path(source, name)
        return page

    async def _rerank(self, query: str, texts: list[str], slots: tuple[asyncio.Semaphore, ...]) -> list[float]:
        """The reranker's scores, once a slot of each of ``slots`` and of the gateway-wide bound is held.

        Raises:
            RerankUnavailable: no slot within ``timeout_ms`` (``reranker_busy``), or the reranker failed.
        """
        assert self.reranker is not None
        async with contextlib.AsyncExitStack() as held:
            try:
                async with asyncio.timeout(self.settings.timeout_ms / 1000):
                    for slot in (*slots, self.rerank_slots):
                        await slot.acquire()
                        held.callback(slot.release)
            except TimeoutError as exc:
                raise RerankUnavailable(
                    "reranker_busy",
                    f"no rerank slot free within {self.settings.timeout_ms} ms ({self.settings.rerank_concurrency} calls at once "
                    f"gateway-wide, {self.settings.msearch_rerank_concurrency} per _msearch)",
                ) from exc
            return await self.reranker.rerank(_clean_text(query), [_clean_text(t) for t in texts])

    def _fail_open_hint(self, reason: str) -> str:
        if reason == "reranker_timeout":
            return f"; to let the reranker finish raise {self._timeout_hint}"
        if reason == "reranker_busy":
            return f"; to rerank more searches at once raise {setting_hint('rerank_concurrency')}"
        return ""

    async def finish(self, plan: SearchPlan, data: dict, *, slots: tuple[asyncio.Semaphore, ...] = (), log: bool = True) -> dict:
        """Rerank the window of an engine response (when planned), cut the page, add ``jingpai`` and apply the
        client's ``filter_path``.

        Args:
            slots: bounds to hold while calling the reranker besides the gateway-wide one (an ``_msearch``'s own).
            log: log a fail-open here (an ``_msearch`` logs one summary instead).
        """
        if not plan.rerank or not isinstance(data.get("hits"), dict):
            data["jingpai"] = plan.info()
            return self._filtered(plan, data)
        hits: list[dict] = data["hits"].get("hits") or []
        if not hits:
            plan.reason = "no_hits"
            data["hits"]["hits"] = []
            data["jingpai"] = plan.info()
            return self._filtered(plan, data)
        assert self.reranker is not None and plan.fusion is not None
        window, rest = hits[: plan.window], hits[plan.window :]
        texts = [self._doc_text(h, plan.fields) for h in window]
        if not any(texts):
            # every document would score as the empty text: no ranking signal, so none is claimed
            plan.reason = "no_document_text"
            logger.warning("not reranking: none of the %d hits has text in %s", len(window), list(plan.fields))
            data["hits"]["hits"] = self._finish_page(plan, hits)
            data["jingpai"] = plan.info()
            return self._filtered(plan, data)
        started = time.perf_counter()
        try:
            scores = await self._rerank(plan.query_text, texts, slots)
        except RerankUnavailable as exc:
            if log:
                logger.warning("serving engine order (fail-open): %s%s", exc, self._fail_open_hint(exc.reason))
            plan.reason = exc.reason
            data["hits"]["hits"] = self._finish_page(plan, hits)
            data["jingpai"] = plan.info(took_rerank_ms=round((time.perf_counter() - started) * 1000, 2))
            return self._filtered(plan, data)
        took = round((time.perf_counter() - started) * 1000, 2)
        engine_ranks = range(1, len(window) + 1)
        fused = plan.fusion.fuse([h.get("_score") for h in window], scores, engine_ranks=engine_ranks)
        for rank, hit in zip(engine_ranks, window):
            hit["_jingpai"] = {"engine_score": hit.get("_score"), "engine_rank": rank, "model_score": scores[rank - 1]}
            hit["_score"] = float(fused[rank - 1])
        # hits past the window keep the engine's order and score: they were not reranked
        data["hits"]["hits"] = self._finish_page(plan, [window[i] for i in fused_order(fused)] + rest)
        data["hits"]["max_score"] = float(fused.max())
        plan.reason = None
        data["jingpai"] = plan.info(
            reranked=True, model=await self.reranker.model_name(), took_rerank_ms=took, fusion=plan.fusion.describe()
        )
        return self._filtered(plan, data)

    @staticmethod
    def _filtered(plan: SearchPlan, data: dict) -> dict:
        return plan.filter_path.apply(data) if plan.filter_path is not None else data

    # ------------------------------------------------------------------ endpoints

    @staticmethod
    def _mode_param(params: dict[str, str]) -> str | None:
        mode = params.pop("jingpai", None)
        if mode is not None and mode not in GATEWAY_MODES:
            raise BadGatewayRequest(f"unknown ?jingpai={mode!r}; expected one of {', '.join(GATEWAY_MODES)}")
        return mode

    async def _send(self, request: Request, body: bytes, params: dict[str, str], path: str, *, wrote_body: bool,
                    ndjson: bool = False) -> Upstream:
        headers = self.body_headers(request, ndjson=ndjson) if wrote_body and body else self.forward_headers(request, body_rewritten=True)
        return await self.fetch(request.method, path, headers=headers, body=body, params=params)

    def _relay(self, resp: Upstream, filter_path: FilterPath | None = None) -> Response:
        """The engine's answer as it came; filtered by the client's ``filter_path`` when the gateway took it off."""
        headers = self.response_headers(resp, body_rewritten=True)
        if filter_path is not None:
            try:
                return Response(_dumps(filter_path.apply(resp.json())), status_code=resp.status_code, headers=headers)
            except (ValueError, RecursionError):
                pass  # not JSON: nothing to filter
        return Response(resp.content, status_code=resp.status_code, headers=headers)

    async def search(self, request: Request) -> Response:
        index = request.path_params.get("index")
        params = dict(request.query_params.multi_items())
        mode_param = self._mode_param(params)
        fusion_param = self._fusion_params(params)
        raw = await self.read_body(request)
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict):
            # not ours to judge: the engine answers with its own parse error
            return await self.passthrough(request)
        plan = await self.plan(request, index, body, params, mode_param, fusion_param)
        path = f"/{_path_part(index)}/_search" if index else "/_search"
        if plan.rewritten:
            payload = _dumps(plan.body)
        else:
            payload = raw  # nothing to change: the client's own bytes, without encoding them again
        resp = await self._send(request, payload, plan.params, path, wrote_body=plan.rewritten)
        if resp.status_code != 200:
            return self._relay(resp, plan.filter_path)
        headers = self.response_headers(resp, body_rewritten=True)
        if not plan.rerank:
            # the engine's answer plus the jingpai object: spliced into its bytes instead of parsing and
            # re-encoding tens of kilobytes of hits (the gateway's whole cost when it does not rerank)
            member: dict = {"jingpai": plan.info()}
            if "filter_path" in plan.params:  # the engine filtered its members; the same filter applies to ours
                member = FilterPath.parse(plan.params["filter_path"]).apply(member)
            spliced = _append_member(resp.content, "jingpai", member["jingpai"]) if member else resp.content
            if spliced is not None:
                return Response(spliced, status_code=200, headers=headers)
        data = await self.finish(plan, resp.json())
        return Response(_dumps(data), status_code=200, headers=headers)

    async def health(self, request: Request) -> Response:
        """``GET /_jingpai/health``: the gateway is up; its reranker and dictionaries as it sees them.

        It does not call the engine (that needs the client's credentials); the engine has its own health API.
        """
        reranker = None
        expose = self.settings.expose_internals  # anyone may call this: URLs only when the operator allows
        if self.reranker is not None:
            reranker = {"url": self.reranker.url} if expose else {}
            reranker["breaker"] = self.reranker.breaker.state
        return JSONResponse({
            "status": "ok",
            **({"engine_url": self.settings.engine_url} if expose else {}),
            "mode": self.settings.mode,
            "reranker": reranker,
            "dictionaries": self.dictionaries.versions,
        })

    async def msearch(self, request: Request) -> Response:
        """``_msearch``: each search planned like a ``_search``; unchanged lines are forwarded as the client's
        bytes. Reranking is bounded per request (``msearch_rerank_concurrency``) and gateway-wide
        (``rerank_concurrency``); a search that gets no slot within ``timeout_ms`` is served in the engine's
        order (``reason: reranker_busy``)."""
        index = request.path_params.get("index")
        params = dict(request.query_params.multi_items())
        mode_param = self._mode_param(params)
        fusion_param = self._fusion_params(params)
        raw = await self.read_body(request)
        if not raw.endswith(b"\n"):  # both engines refuse a body without its final newline: theirs to say how
            return await self.passthrough(request)
        try:
            # NDJSON lines end at \n only (a JSON string may hold U+2028, which str.splitlines would cut at)
            raw_lines = [line for line in raw.split(b"\n") if line.strip()]
            lines = [json.loads(line) for line in raw_lines]
        except (ValueError, RecursionError):
            return await self.passthrough(request)
        if len(lines) % 2 or not all(isinstance(x, dict) for x in lines):
            return await self.passthrough(request)
        filters = params.pop("filter_path", None)
        filter_path = FilterPath.parse(filters) if filters is not None else None
        plans: list[SearchPlan] = []
        out_lines: list[bytes] = []
        for i in range(0, len(lines), 2):
            header, body = lines[i], lines[i + 1]
            try:
                target = _index_expression(header.get("index", index))
            except NotOursToJudge as exc:
                logger.warning("forwarding _msearch search %d unchanged (the engine judges it): %s", i // 2, exc)
                plan = self.unchanged_plan(body, {}, mode_param or self.settings.mode)
            else:
                plan = await self.plan(request, target, body, {}, mode_param, fusion_param)
            plans.append(plan)
            out_lines += [raw_lines[i], _dumps(plan.body) if plan.rewritten else raw_lines[i + 1]]
        payload = b"\n".join(out_lines) + b"\n"
        path = f"/{_path_part(index)}/_msearch" if index else "/_msearch"
        resp = await self._send(request, payload, params, path, wrote_body=any(p.rewritten for p in plans), ndjson=True)
        if resp.status_code != 200:
            return self._relay(resp, filter_path)
        data = resp.json()
        responses = data.get("responses") or []
        per_request = asyncio.Semaphore(self.settings.msearch_rerank_concurrency)

        async def finish_one(plan: SearchPlan, item: Any) -> Any:
            if not isinstance(item, dict) or "error" in item:
                return item
            return await self.finish(plan, item, slots=(per_request,), log=False)

        finished = await asyncio.gather(*(finish_one(p, r) for p, r in zip(plans, responses)))
        data["responses"] = [*finished, *responses[len(plans):]]
        fallbacks: dict[str, int] = {}
        for plan in plans:
            if plan.rerank and plan.reason is not None:
                fallbacks[plan.reason] = fallbacks.get(plan.reason, 0) + 1
        if fallbacks:
            hints = "".join(self._fail_open_hint(r) for r in sorted(fallbacks))
            logger.warning("_msearch: %d of %d searches served in engine order (fail-open): %s%s",
                           sum(fallbacks.values()), len(plans), fallbacks, hints)
        if filter_path is not None:
            data = filter_path.apply(data)
        return Response(_dumps(data), status_code=200, headers=self.response_headers(resp, body_rewritten=True))


def create_app(settings: GatewaySettings) -> Starlette:
    """The gateway as an ASGI app (serve it with uvicorn).

    Args:
        settings: :class:`~jingpai.plugin.settings.GatewaySettings`.

    Returns:
        A Starlette app; ``app.state.gateway`` is its :class:`Gateway`.

    Raises:
        jingpai.keyword_dict.DictionaryError: a ``dict_dirs`` entry holds no dictionary.
    """
    gateway = Gateway(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await gateway.aclose()

    from jingpai.ui.app import ui_routes  # the demo UI at /_jingpai/ui, ahead of the pass-through

    guarded = gateway.guarded
    routes = [
        *ui_routes(),
        Route("/_jingpai/health", guarded(gateway.health), methods=["GET"]),
        Route("/_search", guarded(gateway.search), methods=["GET", "POST"]),
        Route("/_msearch", guarded(gateway.msearch), methods=["GET", "POST"]),
        Route("/{index}/_search", guarded(gateway.search), methods=["GET", "POST"]),
        Route("/{index}/_msearch", guarded(gateway.msearch), methods=["GET", "POST"]),
        Route("/{path:path}", guarded(gateway.passthrough), methods=ALL_METHODS),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_exception})
    app.state.gateway = gateway
    # uvicorn's HTTP parser refuses raw UTF-8 in a request target, which the engines accept (jingpai.serving
    # and `jingpai gateway` serve the app with this protocol)
    app.state.http_protocol = Utf8TargetHttpToolsProtocol
    return app


__all__ = [
    "BadGatewayRequest", "FilterPath", "FusionParams", "Gateway", "GatewayError", "JingpaiExt", "JingpaiInfo", "NotOursToJudge",
    "SearchPlan", "create_app", "es_error", "handle_exception", "http_error",
]
