"""uvicorn's httptools protocol, accepting raw (unencoded) non-ASCII bytes in the request target as the
engines do.

``GET /索引/_search?q=中国`` sent with raw UTF-8 bytes (curl sends them so) is answered by Elasticsearch and
OpenSearch, which read each such byte as one Latin-1 character (``/索引`` is the index ``ç´¢å¼``, a 404), but
llhttp (httptools, and h11 too) refuses bytes above 0x7F in a request target with ``400 Invalid HTTP
request received.`` :class:`Utf8TargetHttpToolsProtocol` rewrites each such byte in the request line as the
percent-encoded UTF-8 of its Latin-1 character before the parser sees it, so the engine decodes the
forwarded target to exactly the text it reads from the raw bytes: the gateway answers what the engine
answers directly.

Example:
    >>> uvicorn.run(app, http=Utf8TargetHttpToolsProtocol)  # doctest: +SKIP
"""

from __future__ import annotations

import re

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_HIGH_BYTE = re.compile(rb"[\x80-\xff]")


def percent_encode_high_bytes(line: bytes) -> bytes:
    """``line`` with every byte above 0x7F written as the percent-encoded UTF-8 of its Latin-1 character
    (``b"\\xe7"`` → ``b"%C3%A7"``); ASCII, ``%`` escapes included, is kept."""
    return _HIGH_BYTE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().decode("latin-1").encode("utf-8")).encode("ascii"), line)


class Utf8TargetHttpToolsProtocol(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` that percent-encodes the non-ASCII bytes of each request line (see above).

    Only bytes known to be a request line are touched: those of a connection's first message and those
    after a message completed with nothing of the next one fed yet (``on_message_begin`` marks that). A
    request line that a pipelining client sends in the same segment as the previous request's end is
    parsed as it came.
    """

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 — uvicorn's signature
        super().__init__(*args, **kwargs)
        self._at_message_start = True
        self._in_request_line = False

    def data_received(self, data: bytes) -> None:
        if self._at_message_start:
            self._in_request_line = True
            self._at_message_start = False
        if self._in_request_line:
            end = data.find(b"\n")
            line, rest = (data, b"") if end < 0 else (data[:end], data[end:])
            self._in_request_line = end < 0
            if _HIGH_BYTE.search(line):
                data = percent_encode_high_bytes(line) + rest
        super().data_received(data)

    def on_message_begin(self) -> None:
        self._at_message_start = False
        super().on_message_begin()

    def on_message_complete(self) -> None:
        self._at_message_start = True
        super().on_message_complete()


__all__ = ["Utf8TargetHttpToolsProtocol", "percent_encode_high_bytes"]
