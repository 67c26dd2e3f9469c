"""The demo UI, served by the gateway under ``/_jingpai/ui``: engine order next to jingpai order.

:func:`ui_routes` returns the routes the gateway app (:func:`jingpai.plugin.gateway.create_app`) puts in
front of its catch-all pass-through route:

- ``GET /_jingpai/ui`` → redirect to ``/_jingpai/ui/``;
- ``GET /_jingpai/ui/`` → ``static/index.html``; ``GET /_jingpai/ui/static/*`` → ``app.js``, ``app.css``;
- ``GET /_jingpai/ui/api/indices`` → the indices to pick from (:class:`IndicesResponse`);
- ``GET /_jingpai/ui/api/search?q=…&index=…`` → the same query run twice through the gateway's own
  ``/{index}/_search`` code path — ``?jingpai=off`` (engine order) and with augmentation / reranking —
  with engine score, model score, fused score, places moved, the fusion that ran and the query's
  dictionary keywords (:class:`SearchResponse`).

The API calls the gateway app in-process (``httpx.ASGITransport`` on ``request.app``), so what the UI
shows is exactly what an Elasticsearch/OpenSearch client pointed at the gateway gets. Every UI response
carries a Content-Security-Policy that allows only same-origin scripts, styles and requests (no inline
script); the page renders all document and query text with ``textContent``.

Example:
    >>> routes = [*ui_routes(), Route("/{path:path}", passthrough)]      # doctest: +SKIP
    >>> app.state.jingpai_ui = UiSettings(default_index="jingpai-demo")   # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import BaseModel, Field, ValidationError
from starlette.requests import Request
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jingpai.keyword_dict import keyword_spans

logger = logging.getLogger(__name__)

UI_PREFIX = "/_jingpai/ui"
STATIC_DIR = Path(__file__).resolve().parent / "static"

#: same-origin only; no inline script or style, no plugins, no framing, no foreign form targets
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS: dict[str, str] = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}

# Elasticsearch/OpenSearch index names: no whitespace, no \ / * ? " < > | , # and not starting with - _ +
_INDEX_NAME = re.compile(r"^[^\s\\/*?\"<>|,#_+\-][^\s\\/*?\"<>|,#]*$")
#: rerank reasons that are a choice, not a failure: no banner for them
_QUIET_REASONS = frozenset({None, "disabled", "augment_only", "no_hits"})


@dataclass(frozen=True)
class UiSettings:
    """How the UI behaves; put one on the gateway app as ``app.state.jingpai_ui`` (else the defaults).

    Args:
        default_index: index selected when the page opens (``None``: the first jingpai index).
        size: hits per column when the request does not say.
        max_size: the most hits per column a request may ask for.
        compare_window: engine hits fetched to find where each jingpai hit was in the engine order.
        snippet_chars: characters of content shown under each title.
        title_fields: source fields tried, in order, for a hit's title (then the index's first text field).
        content_fields: source fields tried, in order, for the snippet (then the index's other text fields).
        banner: a notice shown above the results on every search (e.g. the demo started without a model).
    """

    default_index: str | None = None
    size: int = 10
    max_size: int = 50
    compare_window: int = 50
    snippet_chars: int = 160
    title_fields: tuple[str, ...] = ("title", "name", "headline")
    content_fields: tuple[str, ...] = ("content", "body", "text", "article")
    banner: str | None = None

    def __post_init__(self) -> None:
        for name in ("size", "max_size", "compare_window", "snippet_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"UiSettings.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.size > self.max_size:
            raise ValueError(f"UiSettings.size ({self.size}) must not exceed max_size ({self.max_size})")


# ---------------------------------------------------------------------------------------------- models


class SearchParams(BaseModel):
    """Query parameters of ``GET /_jingpai/ui/api/search``."""

    q: str = Field(min_length=1, max_length=512)
    index: str = Field(min_length=1, max_length=255)
    size: int | None = Field(default=None, ge=1)
    augment: bool = True
    rerank: bool = True


class Segment(BaseModel):
    """A run of text; ``kw`` marks an occurrence of one of the query's dictionary keywords."""

    text: str
    kw: bool = False


class UiHit(BaseModel):
    """One hit as a column shows it.

    ``engine_score`` is the engine's ``_score`` (in a reranked column: of the augmented query, before
    fusion), ``model_score`` the reranker's score and ``fused_score`` the gateway's fused ``_score`` that
    orders the reranked column; the last two are ``None`` for a hit that was not reranked.
    """

    id: str
    rank: int
    title: list[Segment] = Field(default_factory=list)
    snippet: list[Segment] = Field(default_factory=list)
    category: str | None = None
    date: str | None = None
    engine_score: float | None = None
    engine_rank: int | None = None
    model_score: float | None = None
    fused_score: float | None = None
    moved: int | None = None
    new: bool = False


class Column(BaseModel):
    """One column: the request's mode and its hits."""

    mode: Literal["off", "augment", "rerank"]
    hits: list[UiHit] = Field(default_factory=list)
    total: int | None = None
    took_ms: float | None = None


class SearchResponse(BaseModel):
    """Both orders of one query."""

    query: str
    index: str
    keywords: list[str] = Field(default_factory=list)
    engine: Column
    jingpai: Column
    reranked: bool = False
    reason: str | None = None
    augmented: bool = False
    model: str | None = None
    took_rerank_ms: float | None = None
    #: the fusion the gateway ran (its response's ``jingpai.fusion``, e.g. ``{"mode": "linear", "weight": 0.5}``)
    fusion: dict[str, Any] | None = None
    banner: str | None = None


class IndexChoice(BaseModel):
    name: str
    jingpai: bool = False
    text_fields: list[str] = Field(default_factory=list)


class IndicesResponse(BaseModel):
    indices: list[IndexChoice] = Field(default_factory=list)
    default: str | None = None
    banner: str | None = None


# ---------------------------------------------------------------------------------------------- errors


class UiError(Exception):
    """A UI API error; ``status`` is the HTTP status it is answered with."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _error_response(exc: Exception) -> JSONResponse:
    """The one place that maps UI API exceptions to HTTP errors (``{"error": message}``)."""
    if isinstance(exc, UiError):
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'request'}: {err['msg']} (got {err.get('input')!r})" for err in exc.errors()
        )
        return JSONResponse({"error": f"invalid search parameters: {problems}"}, status_code=422)
    if isinstance(exc, httpx.HTTPError):
        logger.warning("UI API could not reach the gateway/engine: %s", exc)
        return JSONResponse({"error": f"the engine could not be reached: {type(exc).__name__}: {exc}"}, status_code=502)
    logger.exception("unexpected UI API error")
    return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)


def _api(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:  # noqa: BLE001 — every API error goes through _error_response
            return _error_response(exc)

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


# ---------------------------------------------------------------------------------------------- headers


class SecurityHeaders:
    """ASGI middleware adding :data:`SECURITY_HEADERS` (the CSP among them) to every UI response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode("latin-1").lower() not in SECURITY_HEADERS]
                headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except HTTPException as exc:
            # e.g. StaticFiles' 404 or a 405: answered here so it carries the headers too, in the same
            # engine-shaped JSON as the gateway's own errors
            from jingpai.plugin.gateway import http_error

            response = http_error(exc.status_code, str(exc.detail), exc.headers)
            await response(scope, receive, send_with_headers)


# ---------------------------------------------------------------------------------------------- helpers


def settings_of(request: Request) -> UiSettings:
    """The :class:`UiSettings` on the app (``app.state.jingpai_ui``), else the defaults."""
    value = getattr(request.app.state, "jingpai_ui", None)
    return value if isinstance(value, UiSettings) else UiSettings()


def _gateway_client(request: Request) -> httpx.AsyncClient:
    """An HTTP client whose requests go through the gateway app itself, in-process."""
    headers = {}
    # the engine may need the user's credentials; the gateway forwards them as they came
    if "authorization" in request.headers:
        headers["authorization"] = request.headers["authorization"]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=request.app), base_url="http://jingpai-gateway", headers=headers, timeout=None)


def _engine_error(resp: httpx.Response, what: str) -> UiError:
    try:
        error = resp.json().get("error")
        reason = error.get("reason") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        reason = resp.text[:300]
    status = resp.status_code if resp.status_code in (400, 404) else 502
    return UiError(f"{what} failed: HTTP {resp.status_code}: {reason}", status=status)


def segments(text: str, keywords: list[str]) -> list[Segment]:
    """``text`` cut into runs, the keyword occurrences marked (for highlighting without HTML)."""
    out: list[Segment] = []
    pos = 0
    for start, end in keyword_spans(text, keywords):
        if start > pos:
            out.append(Segment(text=text[pos:start]))
        out.append(Segment(text=text[start:end], kw=True))
        pos = end
    if pos < len(text):
        out.append(Segment(text=text[pos:]))
    return out


def snippet(text: str, keywords: list[str], chars: int) -> str:
    """About ``chars`` characters of ``text``, starting a little before its first keyword occurrence."""
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    spans = keyword_spans(text, keywords)
    start = max(0, spans[0][0] - chars // 4) if spans else 0
    start = min(start, len(text) - chars)
    piece = text[start : start + chars]
    return ("…" if start > 0 else "") + piece + ("…" if start + chars < len(text) else "")


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(_as_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _pick(source: dict, names: tuple[str, ...] | list[str]) -> str:
    for name in names:
        value = source.get(name)
        if value not in (None, "", []):
            return _as_text(value)
    return ""


@dataclass(frozen=True)
class _Fields:
    title: tuple[str, ...]
    content: tuple[str, ...]


def _fields_for(ui: UiSettings, text_fields: list[str]) -> _Fields:
    title = tuple(dict.fromkeys([*ui.title_fields, *text_fields[:1]]))
    content = tuple(dict.fromkeys([*ui.content_fields, *text_fields[1:]]))
    return _Fields(title=title, content=content)


def _hit(hit: dict, rank: int, keywords: list[str], ui: UiSettings, fields: _Fields) -> UiHit:
    source = hit.get("_source") or {}
    title = _pick(source, fields.title) or str(hit.get("_id", ""))
    content = _pick(source, fields.content)
    category = _pick(source, ("category", "label", "domain")) or None
    date = _pick(source, ("date", "published", "timestamp", "@timestamp")) or None
    return UiHit(
        id=str(hit.get("_id", "")),
        rank=rank,
        title=segments(title, keywords),
        snippet=segments(snippet(content, keywords, ui.snippet_chars), keywords),
        category=category,
        date=date,
    )


async def _text_fields(client: httpx.AsyncClient, index: str) -> tuple[bool, list[str]]:
    """``(built by jingpai, text fields)`` of an index or alias, from its mapping ``_meta``."""
    resp = await client.get(f"/{quote(index, safe='')}/_mapping")
    if resp.status_code != 200:
        raise _engine_error(resp, f"reading the mapping of index {index!r}")
    for _, body in sorted(resp.json().items(), reverse=True):
        meta = ((body.get("mappings") or {}).get("_meta") or {}).get("jingpai")
        if isinstance(meta, dict) and meta.get("text_fields"):
            return True, [str(f) for f in meta["text_fields"]]
    return False, []


def _banner(info: dict, params: SearchParams, index: str) -> str | None:
    reason = info.get("reason")
    if not params.rerank or info.get("reranked") or reason in _QUIET_REASONS:
        if params.augment and not info.get("augmented") and info.get("augment_reason") == "not_a_jingpai_index":
            return f"Index {index} was not built by `jingpai index`: the jingpai column shows the engine order."
        return None
    if reason == "not_a_jingpai_index":
        return f"Index {index} was not built by `jingpai index`: no augmentation or reranking, both columns show the engine order."
    if reason == "no_reranker_configured":
        return "Reranker unavailable (the gateway has no reranker configured): the jingpai column shows the engine order."
    return f"Reranker unavailable ({reason}): the jingpai column shows the engine order (fail-open)."


# ---------------------------------------------------------------------------------------------- endpoints


async def index_page(request: Request) -> Response:
    """The single page."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8")


async def redirect_to_page(request: Request) -> Response:
    return RedirectResponse(url=f"{request.scope.get('root_path', '')}{UI_PREFIX}/", status_code=307)


@_api
async def api_indices(request: Request) -> Response:
    """The indices and aliases the engine holds (not the hidden/system ones), jingpai indices first."""
    ui = settings_of(request)
    async with _gateway_client(request) as client:
        mappings = await client.get("/_mapping")
        aliases = await client.get("/_alias")
    if mappings.status_code != 200:
        raise _engine_error(mappings, "listing indices")
    alias_map = aliases.json() if aliases.status_code == 200 else {}
    choices: dict[str, IndexChoice] = {}
    for physical, body in sorted(mappings.json().items()):
        if physical.startswith("."):
            continue
        meta = ((body.get("mappings") or {}).get("_meta") or {}).get("jingpai")
        is_jingpai = isinstance(meta, dict) and bool(meta.get("text_fields"))
        fields = [str(f) for f in meta["text_fields"]] if is_jingpai else []
        names = sorted((alias_map.get(physical) or {}).get("aliases") or {}) or [physical]
        for name in names:
            if name.startswith("."):
                continue
            choices.setdefault(name, IndexChoice(name=name, jingpai=is_jingpai, text_fields=fields))
    ordered = sorted(choices.values(), key=lambda c: (not c.jingpai, c.name))
    default = ui.default_index if ui.default_index in choices else next((c.name for c in ordered if c.jingpai), None)
    return JSONResponse(IndicesResponse(indices=ordered, default=default, banner=ui.banner).model_dump())


@_api
async def api_search(request: Request) -> Response:
    """Run one query through the gateway twice: engine order (``?jingpai=off``) and jingpai order."""
    ui = settings_of(request)
    params = SearchParams.model_validate(dict(request.query_params))
    if not _INDEX_NAME.match(params.index):
        raise UiError(f"index {params.index!r} is not a valid index name (no spaces, commas, wildcards or \\ / ? \" < > | #)", status=422)
    size = params.size or ui.size
    if size > ui.max_size:
        raise UiError(f"size {size} exceeds the UI's max_size {ui.max_size}", status=422)
    # the gateway always augments before it reranks, so rerank implies augmentation
    mode: Literal["off", "augment", "rerank"] = "rerank" if params.rerank else "augment" if params.augment else "off"
    path = f"/{quote(params.index, safe='')}/_search"
    async with _gateway_client(request) as client:
        is_jingpai, text_fields = await _text_fields(client, params.index)
        match: dict[str, Any] = {"query": params.q}
        if text_fields:
            match["fields"] = text_fields
        body = {"query": {"multi_match": match}, "_source": {"excludes": ["jingpai"]}, "track_total_hits": True}
        engine_resp = await client.post(path, params={"jingpai": "off"}, json={**body, "size": max(size, ui.compare_window)})
        if engine_resp.status_code != 200:
            raise _engine_error(engine_resp, f"searching index {params.index!r}")
        jingpai_resp = await client.post(path, params={"jingpai": mode}, json={**body, "size": size})
        if jingpai_resp.status_code != 200:
            raise _engine_error(jingpai_resp, f"searching index {params.index!r} through jingpai")
    engine_data, jingpai_data = engine_resp.json(), jingpai_resp.json()
    info = jingpai_data.get("jingpai") or {}
    keywords = [str(k) for k in info.get("keywords") or []]
    fields = _fields_for(ui, text_fields)

    engine_hits = engine_data["hits"]["hits"]
    engine_rank = {str(h.get("_id")): i for i, h in enumerate(engine_hits, start=1)}
    engine_column = Column(mode="off", total=_total(engine_data), took_ms=engine_data.get("took"))
    for rank, hit in enumerate(engine_hits[:size], start=1):
        item = _hit(hit, rank, keywords, ui, fields)
        item.engine_score, item.engine_rank = hit.get("_score"), rank
        engine_column.hits.append(item)

    jingpai_column = Column(mode=mode, total=_total(jingpai_data), took_ms=jingpai_data.get("took"))
    reranked = bool(info.get("reranked"))
    model_scores: dict[str, tuple[float | None, float | None]] = {}
    for rank, hit in enumerate(jingpai_data["hits"]["hits"], start=1):
        item = _hit(hit, rank, keywords, ui, fields)
        before = engine_rank.get(item.id)
        scored = hit.get("_jingpai")
        # hits past the rerank window carry no _jingpai: they keep the engine's order and score
        if reranked and isinstance(scored, dict):
            item.fused_score, item.model_score = hit.get("_score"), scored.get("model_score")
            model_scores[item.id] = (item.model_score, item.fused_score)
            item.engine_score = scored.get("engine_score")
        else:
            item.engine_score = hit.get("_score")
        # positions are compared with the plain engine column, which is what the user sees on the left
        item.engine_rank = before
        item.moved = before - rank if before is not None else None
        item.new = before is None
        jingpai_column.hits.append(item)
    for item in engine_column.hits:
        item.model_score, item.fused_score = model_scores.get(item.id, (None, None))

    banner = " ".join(b for b in (ui.banner, _banner(info, params, params.index)) if b) or None
    response = SearchResponse(
        query=params.q,
        index=params.index,
        keywords=keywords,
        engine=engine_column,
        jingpai=jingpai_column,
        reranked=reranked,
        reason=info.get("reason"),
        augmented=bool(info.get("augmented")),
        model=info.get("model"),
        took_rerank_ms=info.get("took_rerank_ms"),
        fusion=info.get("fusion") if reranked else None,
        banner=banner,
    )
    logger.debug("UI search %r on %s (jingpai index: %s): mode %s, reranked %s", params.q, params.index, is_jingpai, mode, reranked)
    return JSONResponse(response.model_dump())


def _total(data: dict) -> int | None:
    total = (data.get("hits") or {}).get("total")
    if isinstance(total, dict):
        return total.get("value")
    return total if isinstance(total, int) else None


def ui_routes() -> list[BaseRoute]:
    """The UI's routes, to be placed before the gateway's catch-all pass-through route.

    Returns:
        ``[Route("/_jingpai/ui") → redirect, Mount("/_jingpai/ui", …)]``; every response under the mount
        carries :data:`SECURITY_HEADERS`.

    Example:
        >>> app = Starlette(routes=[*ui_routes(), Route("/{path:path}", passthrough)])  # doctest: +SKIP
    """
    from starlette.middleware import Middleware

    inner = [
        Route("/", index_page, methods=["GET", "HEAD"]),
        Route("/api/indices", api_indices, methods=["GET"]),
        Route("/api/search", api_search, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="jingpai-ui-static"),
    ]
    return [
        Route(UI_PREFIX, redirect_to_page, methods=["GET", "HEAD"]),
        Mount(UI_PREFIX, routes=inner, middleware=[Middleware(SecurityHeaders)], name="jingpai-ui"),
    ]


__all__ = [
    "CSP",
    "SECURITY_HEADERS",
    "STATIC_DIR",
    "UI_PREFIX",
    "Column",
    "IndexChoice",
    "IndicesResponse",
    "SearchParams",
    "SearchResponse",
    "Segment",
    "UiError",
    "UiHit",
    "UiSettings",
    "segments",
    "snippet",
    "ui_routes",
]
