"""The demo UI, mounted on a gateway under ``/_jingpai/ui``: engine order next to jingpai order.

:func:`ui_routes` returns the routes that ``jingpai demo`` and ``jingpai gateway --ui`` hand to the gateway app
(``create_app(settings, routes=ui_routes())``), which puts them in front of its catch-all pass-through route:

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

The pieces: :mod:`jingpai.ui.context` (settings, errors, the in-process gateway client),
:mod:`jingpai.ui.schema` (the JSON shapes), :mod:`jingpai.ui.search` (the search endpoint).

Example:
    >>> routes = [*ui_routes(), Route("/{path:path}", passthrough)]      # doctest: +SKIP
    >>> app.state.jingpai_ui = UiSettings(default_index="jingpai-demo")   # doctest: +SKIP
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jingpai.ui.context import UiError, UiSettings, api, engine_error, gateway_client, settings_of
from jingpai.ui.schema import Column, IndexChoice, IndicesResponse, SearchParams, SearchResponse, Segment, UiHit
from jingpai.ui.search import api_search, segments, snippet

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


# ---------------------------------------------------------------------------------------------- endpoints


async def index_page(request: Request) -> Response:
    """The single page."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8")


async def redirect_to_page(request: Request) -> Response:
    return RedirectResponse(url=f"{request.scope.get('root_path', '')}{UI_PREFIX}/", status_code=307)


@api
async def api_indices(request: Request) -> Response:
    """The indices and aliases the engine lets the user read (not the hidden/system ones), jingpai indices first.

    Everything is asked with the user's credentials. A secured engine refuses a user allowed only some indices
    the listing of all of them (403): the list is then the default index alone, if the engine lets the user read
    its mapping, else that refusal (never another index's name)."""
    ui = settings_of(request)
    async with gateway_client(request) as client:
        mappings = await client.get("/_mapping")
        only_default = mappings.status_code == 403 and bool(ui.default_index)
        if only_default:
            mappings = await client.get(f"/{quote(str(ui.default_index), safe='')}/_mapping")
        else:
            aliases = await client.get("/_alias")
    if mappings.status_code != 200:
        raise engine_error(mappings, "listing indices")
    if only_default:  # the default index's physical indices, listed under the name the UI was given
        alias_map = {p: {"aliases": {ui.default_index: {}}} for p in mappings.json() if p != ui.default_index}
    else:
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
