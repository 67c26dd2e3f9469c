"""The gateway's guard against deeply nested request bodies: no JSON body, and no line of an NDJSON body
(``_bulk``, ``_msearch``), nested deeper than ``max_body_depth`` reaches the engine.

An engine's parsers recurse once per level: OpenSearch 2.19 dies of a ``StackOverflowError`` in its write
thread on a ``_bulk`` document nested 5,000 deep, whoever sent it. The gateway is the one door every client
goes through, so it measures the nesting of every body it forwards (:func:`jingpai.nesting.deeper_than`:
iterative, a few passes in C over the bytes, nothing for a body with fewer brackets than the limit) and
answers a deeper one with a 400 in the engine's error shape (:class:`NestedTooDeep`). The ``source`` URL
parameter, which the engines read as the body of a request without one, is measured too.

Bodies the gateway forwards unread (everything but ``_search`` and ``_msearch``) are read whole for this
when their content type is JSON or NDJSON (or not given), then forwarded as the client's bytes. Binary
(SMILE, CBOR) and YAML bodies are not measured.
"""

from __future__ import annotations

import logging

from starlette.requests import Request

from jingpai.nesting import deeper_than
from jingpai.plugin.gateway.errors import BadGatewayRequest, NestedTooDeep
from jingpai.plugin.gateway.proxy import read_body
from jingpai.plugin.settings import setting_hint

logger = logging.getLogger(__package__)

#: path segments of the engine's NDJSON APIs (``/_bulk``, ``/{index}/_msearch/template`` …)
NDJSON_ENDPOINTS = frozenset({"_bulk", "_msearch"})


def check_depth(raw: bytes, limit: int, *, ndjson: bool, request: Request, part: str = "body") -> None:
    """Raise :class:`NestedTooDeep` when ``raw`` (a JSON body, or NDJSON lines) nests deeper than ``limit``.

    Args:
        request: the request ``raw`` came with, and ``part`` what of it ``raw`` is: for the message
            (``body of POST /_bulk``), built only for a refusal — this runs on every search.
    """
    deep = deeper_than(raw, limit, ndjson=ndjson)
    if deep is None:
        return
    what = f"{part} of {request.method} {request.url.path}"
    where = f"line {deep.line} of the {what}" if ndjson else f"the {what}"
    message = (f"{where} is nested {deep.depth} levels deep (objects and arrays), deeper than the gateway forwards: "
               f"max_body_depth is {limit} ({setting_hint('max_body_depth')})")
    logger.warning("refused a request: %s", message)
    raise NestedTooDeep(message)


def check_source_parameter(request: Request, limit: int, *, ndjson: bool) -> None:
    """Raise :class:`NestedTooDeep` when the ``source`` URL parameter, which the engines read as the body of a
    request that has none (``GET /_search?source={…}&source_content_type=application/json``), nests too deep."""
    source = request.query_params.get("source")
    if source:
        check_depth(source.encode("utf-8", "surrogatepass"), limit, ndjson=ndjson, request=request, part="source parameter")


def is_ndjson(path: str, content_type: str) -> bool:
    """Whether a body to ``path`` is NDJSON: the engine's ``_bulk``/``_msearch`` APIs, or an NDJSON media type."""
    return "ndjson" in content_type.lower() or not NDJSON_ENDPOINTS.isdisjoint(path.split("/"))


def measured(content_type: str) -> bool:
    """Whether a body of ``content_type`` is measured: JSON and NDJSON media types, or none given."""
    kind = content_type.split(";")[0].strip().lower()
    return not kind or "json" in kind


async def check_passthrough(request: Request, limit: int) -> None:
    """Read the body of a request forwarded unread, and raise :class:`NestedTooDeep` when it nests too deep.

    The body stays cached on ``request``, so the pass-through forwards the client's bytes as they came (a
    gzip body is measured decompressed; one that does not decompress goes to the engine, which says so).
    """
    headers, path = request.headers, request.url.path
    content_type = headers.get("content-type", "")
    check_source_parameter(request, limit, ndjson=is_ndjson(path, request.query_params.get("source_content_type", "")))
    if "content-length" not in headers and "transfer-encoding" not in headers:
        return
    if not measured(content_type):
        return
    try:
        raw = await read_body(request)
    except BadGatewayRequest as exc:
        logger.info("not measuring the nesting of a body: %s; the engine answers it", exc)
        return
    check_depth(raw, limit, ndjson=is_ndjson(path, content_type), request=request)


__all__ = ["NDJSON_ENDPOINTS", "check_depth", "check_passthrough", "check_source_parameter", "is_ndjson", "measured"]
