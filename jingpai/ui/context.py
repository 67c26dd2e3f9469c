"""What every UI endpoint shares: the UI's settings on the gateway app, its error type and the one
mapping of errors to HTTP answers, and the in-process client that calls the gateway app itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jingpai.errors import JingpaiError

logger = logging.getLogger(__name__)


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


class UiError(JingpaiError):
    """A UI API error; ``status`` is the HTTP status it is answered with."""

    def __init__(self, message: str, *, status: int = 400, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def error_response(exc: Exception) -> JSONResponse:
    """The one place that maps UI API exceptions to HTTP errors (``{"error": message}``)."""
    if isinstance(exc, UiError):
        return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=exc.headers)
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


def api(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a UI API endpoint so every exception it raises is answered by :func:`error_response`."""
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:  # noqa: BLE001 — every API error goes through error_response
            return error_response(exc)

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


def settings_of(request: Request) -> UiSettings:
    """The :class:`UiSettings` on the app (``app.state.jingpai_ui``), else the defaults."""
    value = getattr(request.app.state, "jingpai_ui", None)
    return value if isinstance(value, UiSettings) else UiSettings()


def gateway_client(request: Request) -> httpx.AsyncClient:
    """An HTTP client whose requests go through the gateway app itself, in-process."""
    headers = {}
    # the engine may need the user's credentials; the gateway forwards them as they came
    if "authorization" in request.headers:
        headers["authorization"] = request.headers["authorization"]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=request.app), base_url="http://jingpai-gateway", headers=headers, timeout=None)


def engine_error(resp: httpx.Response, what: str) -> UiError:
    """The :class:`UiError` for a failed gateway/engine response (its reason; 400/401/403/404 kept, else 502).

    A secured engine's 401 keeps its ``WWW-Authenticate`` challenge, so a browser asks the user to sign in and sends
    those credentials with the page's next requests (which the gateway forwards to the engine)."""
    try:
        error = resp.json().get("error")
        reason = error.get("reason") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        reason = resp.text[:300]
    status = resp.status_code if resp.status_code in (400, 401, 403, 404) else 502
    challenge = resp.headers.get("www-authenticate") if status == 401 else None
    return UiError(f"{what} failed: HTTP {resp.status_code}: {reason}", status=status,
                   headers={"www-authenticate": challenge} if challenge else None)


__all__ = ["UiError", "UiSettings", "api", "engine_error", "error_response", "gateway_client", "settings_of"]
