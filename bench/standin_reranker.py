"""A stand-in reranker on loopback that answers wrongly on purpose: the attacker of ``bench/faulty_reranker.py``
and of the fail-open tests.

It speaks TEI's routes — ``GET /info``, ``POST /rerank``, ``POST /embed`` — and answers each ``/rerank`` (or
``/embed``) as its current *case* says. The cases are the shared vectors ``tests/vectors/rerank_answers.json``
(written by ``tests/plugin/test_rerank_answers.py``, replayed by the plugin's JUnit tests): a ``status``,
``content_type`` and ``body``, or a body built from a rule:

- ``pad_bytes``: the valid answer with a ``text`` of that many bytes in every item (20 × 2 MB: 40 MB);
- ``trickle_ms``: the body is sent one byte every that many milliseconds;
- ``chunked``: no ``Content-Length``, the body in chunks (an answer that does not say how big it is);
- ``gzip``: the body compressed, with ``Content-Encoding: gzip``.

A served case never runs unbounded: a trickle or a padded body ends as soon as the client hangs up, and at the
latest when the server stops. The request is read whole first (as a real service would), and every answer
closes its connection.

Example:
    >>> with StandIn(case="infinity") as standin:          # doctest: +SKIP
    ...     RerankClient(standin.url, timeout_ms=3000)
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VECTORS = Path(__file__).resolve().parents[1] / "tests" / "vectors" / "rerank_answers.json"
#: bytes of a padded body written per write (a 40 MB answer is never held whole)
PIECE = 1 << 16


def load_cases(path: Path = VECTORS) -> dict[str, dict[str, Any]]:
    """The shared vectors' cases by name."""
    return {case["name"]: case for case in json.loads(path.read_text(encoding="utf-8"))["cases"]}


def padded_pieces(case: dict[str, Any]) -> list[bytes]:
    """A ``pad_bytes`` case's body in pieces: the case's ``body`` (a list of items) with a ``text`` of
    ``pad_bytes`` × ``x`` in each (as the Java tests build it)."""
    items = json.loads(case["body"])
    pad = b"x" * case["pad_bytes"]
    pieces = [b"["]
    for k, item in enumerate(items):
        head = json.dumps(item, separators=(",", ":")).encode()[:-1] + b',"text":"'
        pieces += [b"," if k else b"", head, pad, b'"}']
    pieces.append(b"]")
    return pieces


def body_pieces(case: dict[str, Any]) -> list[bytes]:
    if case.get("pad_bytes"):
        return padded_pieces(case)
    body = case["body"].encode("utf-8")
    return [gzip.compress(body)] if case.get("gzip") else [body]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        info = self.server.info_case
        if self.path == "/info" and info is not None:
            self._send(info["status"], info.get("content_type"), body_pieces(info), trickle_ms=info.get("trickle_ms"))
        elif self.path == "/info":
            self._send(200, "application/json", [json.dumps({"model_id": "standin", "max_client_batch_size": 64}).encode()])
        else:
            self._send(200 if self.path == "/health" else 404, "application/json", [b"{}"])

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        length = int(self.headers.get("content-length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append((self.path, request))
        case = self.server.case_for(self.path)
        if case is None:
            self._send(404, "application/json", [b'{"error": "no case"}'])
            return
        self._send(case["status"], case.get("content_type"), body_pieces(case), trickle_ms=case.get("trickle_ms"),
                   chunked=bool(case.get("chunked")), encoding="gzip" if case.get("gzip") else None)

    def _send(self, status: int, content_type: str | None, pieces: list[bytes], *, trickle_ms: float | None = None,
              chunked: bool = False, encoding: str | None = None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        if encoding:
            self.send_header("Content-Encoding", encoding)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(sum(len(p) for p in pieces)))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for piece in pieces:
                self._write(piece, trickle_ms, chunked)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass  # the client hung up: what the attack wants
        self.close_connection = True

    def _write(self, piece: bytes, trickle_ms: float | None, chunked: bool) -> None:
        if trickle_ms:
            for i in range(len(piece)):
                if self.server.stopping.wait(trickle_ms / 1000):
                    raise OSError("stand-in stopping")
                self._frame(piece[i : i + 1], chunked)
                self.wfile.flush()
            return
        for at in range(0, len(piece), PIECE):
            self._frame(piece[at : at + PIECE], chunked)

    def _frame(self, data: bytes, chunked: bool) -> None:
        if not data:
            return
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cases: dict[str, dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.cases = cases
        self.case: dict[str, Any] | None = None
        self.embed_case: dict[str, Any] | None = None
        self.info_case: dict[str, Any] | None = None
        self.requests: list[tuple[str, dict]] = []
        self.stopping = threading.Event()

    def case_for(self, path: str) -> dict[str, Any] | None:
        return self.embed_case if path == "/embed" else self.case if path == "/rerank" else None


class StandIn:
    """The stand-in reranker on a free loopback port; ``case`` names the vectors' case ``/rerank`` answers with.

    Args:
        case: the case's name (or a case itself: a dict of ``status``, ``content_type``, ``body`` …).
        cases: the cases by name (default: the shared vectors).
    """

    def __init__(self, case: str | dict[str, Any] | None = None, *, cases: dict[str, dict[str, Any]] | None = None) -> None:
        self._server = _Server(cases if cases is not None else load_cases())
        self._thread = threading.Thread(target=self._server.serve_forever, name="standin-reranker", daemon=True)
        if case is not None:
            self.use(case)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[tuple[str, dict]]:
        """``(path, JSON body)`` of every POST so far."""
        return self._server.requests

    def use(self, case: str | dict[str, Any]) -> None:
        """Answer ``/rerank`` as ``case`` says from now on."""
        self._server.case = self._server.cases[case] if isinstance(case, str) else case

    def use_embed(self, case: dict[str, Any]) -> None:
        """Answer ``/embed`` as ``case`` says from now on."""
        self._server.embed_case = case

    def use_info(self, case: dict[str, Any] | None) -> None:
        """Answer ``GET /info`` as ``case`` says from now on (``None``: a TEI-like ``{model_id}``)."""
        self._server.info_case = case

    def start(self) -> StandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["VECTORS", "StandIn", "body_pieces", "load_cases", "padded_pieces"]
