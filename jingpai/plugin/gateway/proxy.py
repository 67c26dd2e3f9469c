"""The gateway's transport to the engine: requests streamed through unchanged, and requests whose answer
the gateway reads (searches, mapping lookups).

The gateway adds no headers or credentials of its own: the client's headers are forwarded as they came,
less the hop-by-hop ones (and the body framing when the gateway rewrote the body), and it only ever talks
to ``settings.engine_url``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from yarl import URL

from jingpai.plugin.gateway.errors import BadGatewayRequest
from jingpai.plugin.settings import GatewaySettings

# RFC 9110 §7.6.1 hop-by-hop headers, plus those recomputed for the forwarded message
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host"}
)


@dataclass(frozen=True)
class Upstream:
    """An engine answer the gateway read whole."""

    status_code: int
    headers: Any
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass(frozen=True)
class MappingAnswer:
    """The engine's answer to ``GET /{index}/_mapping``: its status and, on 200, the parsed mappings."""

    status: int
    mappings: dict | None = None


def dumps(value: Any) -> bytes:
    """``value`` as JSON bytes: UTF-8 where possible, ``\\uXXXX`` escapes when a string holds a lone surrogate
    (which a client may send escaped, and which UTF-8 cannot encode)."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value).encode("ascii")


def append_member(content: bytes, key: str, value: Any) -> bytes | None:
    """``content`` (a JSON object's bytes) with ``"key": value`` added as its last member; ``None`` if it
    does not look like a JSON object."""
    return append_encoded(content, key, dumps(value))


def append_encoded(content: bytes, key: str, encoded: bytes) -> bytes | None:
    """:func:`append_member` with the value already encoded as JSON (a constant the caller keeps)."""
    # indexes and a memoryview instead of rstrip/slices: a search answer is tens of kilobytes, and each
    # slice of it would be one more copy per search
    end = len(content)
    while end and content[end - 1] in b" \t\r\n":
        end -= 1
    start = 0
    while start < end and content[start] in b" \t\r\n":
        start += 1
    if end - start < 2 or content[start] != 0x7B or content[end - 1] != 0x7D:  # { … }
        return None
    last = end - 1
    while content[last - 1] in b" \t\r\n":
        last -= 1
    comma = b"" if content[last - 1] == 0x7B else b","
    return b"".join((memoryview(content)[:last], comma, json.dumps(key).encode(), b":", encoded, b"}"))


def path_part(name: str) -> str:
    """An index expression (names, commas, wildcards, date math) as one percent-encoded URL path segment."""
    return quote(name, safe=",*:+")


def forward_headers(headers: Iterable[tuple[str, str]], *, body_rewritten: bool) -> list[tuple[str, str]]:
    """The client's headers as they came, minus hop-by-hop ones (and body framing when rewritten)."""
    drop = set(HOP_BY_HOP)
    if body_rewritten:
        drop |= {"content-length", "content-encoding"}
    return [(k, v) for k, v in headers if k.lower() not in drop]


def body_headers(request: Request, *, ndjson: bool = False) -> list[tuple[str, str]]:
    """:func:`forward_headers` for a body the gateway wrote: the client's ``Content-Type`` when it sent one,
    else the one the engine requires for a body (a URI search ``GET …/_search?q=`` sends none): JSON, or
    the compatible-with media type the client's ``Accept`` asks for (the engine wants both to match)."""
    headers = forward_headers(request.headers.items(), body_rewritten=True)
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


def response_headers(resp: aiohttp.ClientResponse | Upstream, *, body_rewritten: bool) -> dict[str, str]:
    """The engine's answer headers for the client (framing recomputed; encoding dropped when re-encoded)."""
    drop = set(HOP_BY_HOP) | {"content-length"}
    if body_rewritten:
        drop |= {"content-encoding"}
    return {k: v for k, v in resp.headers.items() if k.lower() not in drop}


async def read_body(request: Request) -> bytes:
    """The request body, gunzipped when the client sent ``Content-Encoding: gzip``.

    Raises:
        BadGatewayRequest: marked gzip but not gzip data.
    """
    body = await request.body()
    if request.headers.get("content-encoding", "").lower() == "gzip" and body:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError) as exc:
            raise BadGatewayRequest(f"request body is marked Content-Encoding: gzip but is not gzip data: {exc}") from exc
    return body


def engine_ssl(settings: GatewaySettings) -> ssl.SSLContext | bool:
    """The TLS check of the engine hop: a context trusting ``engine_ca_file``, else aiohttp's default (system CAs)."""
    if settings.engine_ca_file is None:
        return True
    return ssl.create_default_context(cafile=str(settings.engine_ca_file))


class EngineProxy:
    """The HTTP hop to the engine; also the gateway's :class:`~jingpai.plugin.gateway.meta.MappingSource`.

    Args:
        observe: called with ``(hop, seconds)`` after each engine request (metrics): ``hop`` is the
            caller's name for it (``search``, ``msearch``, ``mapping``, ``passthrough`` until the headers).
    """

    def __init__(self, settings: GatewaySettings, *, observe: Callable[[str, float], None] | None = None) -> None:
        self.settings = settings
        self.observe = observe
        #: ``elasticsearch`` or ``opensearch`` once an answer was read (Elasticsearch 8 marks every answer with
        #: ``X-Elastic-Product``); a hybrid search's kNN body differs between the two
        self.engine_kind: str | None = None
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The HTTP session to the engine (one per event loop: an aiohttp session belongs to the loop it was made in).

        aiohttp rather than httpx on this hop: relaying an ~86 kB search answer costs ~0.6 ms of CPU with
        aiohttp against ~2.1 ms with httpx/httpcore (measured on loopback), and that CPU is the gateway's
        added latency when nothing is reranked.
        """
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._loop = loop
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.settings.engine_timeout_s),
                # an https:// engine's certificate is checked against engine_ca_file (else the system's CAs)
                connector=aiohttp.TCPConnector(limit=256, ssl=engine_ssl(self.settings)),
                # cookies are the clients' own business: a jar would store one client's engine cookies and
                # send them with the next client's requests (and it costs CPU on every request)
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                # forward the client's headers only: no User-Agent, Accept or Content-Type of our own
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
                auto_decompress=False,
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    def target_url(self, request: Request) -> str:
        """The engine URL of ``request``: the client's path and query, byte for byte."""
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        url = self.settings.engine_url + raw_path.decode("latin-1")
        query = request.scope.get("query_string", b"").decode("latin-1")
        return f"{url}?{query}" if query else url

    async def passthrough(self, request: Request) -> Response:
        """Stream any request to the engine and its answer back, unchanged."""
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        started = time.perf_counter()
        resp = await self.session.request(
            request.method,
            URL(self.target_url(request), encoded=True),
            headers=forward_headers(request.headers.items(), body_rewritten=False),
            data=request.stream() if has_body else None,
            allow_redirects=False,
            auto_decompress=False,
        )
        self._observe("passthrough", started)

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.content.iter_any():
                    yield chunk
            finally:
                resp.release()

        return StreamingResponse(relay(), status_code=resp.status, headers=response_headers(resp, body_rewritten=False))

    def _observe(self, hop: str, started: float) -> None:
        if self.observe is not None:
            self.observe(hop, time.perf_counter() - started)

    async def fetch(self, method: str, path: str, *, headers: list[tuple[str, str]], body: bytes | None = None,
                    params: Any = None, hop: str = "search") -> Upstream:
        """One request to the engine whose answer the gateway reads (sent uncompressed: it is decoded here anyway);
        ``hop`` names it for the metrics."""
        url = f"{self.settings.engine_url}{path}"
        if params:
            url += "?" + urlencode(params)
        headers = [(k, v) for k, v in headers if k.lower() != "accept-encoding"]
        started = time.perf_counter()
        async with self.session.request(method, URL(url, encoded=True), headers=headers, data=body or None,
                                        allow_redirects=False, auto_decompress=True) as resp:
            upstream = Upstream(resp.status, resp.headers, await resp.read())
        if resp.status == 200:
            self.engine_kind = "elasticsearch" if resp.headers.get("X-Elastic-Product") == "Elasticsearch" else "opensearch"
        self._observe(hop, started)
        return upstream

    async def get_mapping(self, index: str, headers: list[tuple[str, str]]) -> MappingAnswer:
        """``GET /{index}/_mapping`` with ``headers`` (the client's own credentials).

        Raises:
            ValueError: a 200 answer that is not JSON.
        """
        resp = await self.fetch("GET", f"/{path_part(index)}/_mapping", headers=headers, hop="mapping")
        return MappingAnswer(resp.status_code, resp.json() if resp.status_code == 200 else None)


__all__ = [
    "HOP_BY_HOP", "EngineProxy", "engine_ssl", "MappingAnswer", "Upstream", "append_encoded", "append_member", "body_headers", "dumps",
    "forward_headers", "path_part", "read_body", "response_headers",
]
