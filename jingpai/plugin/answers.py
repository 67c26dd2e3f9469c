"""The answers of the model services the gateway calls (a reranker's ``POST /rerank``, an embedder's
``POST /embed``, both ``GET /info``), read within bounds and validated in one place.

- :func:`fetch` sends one request and reads at most ``max_bytes`` of its answer: a larger ``Content-Length``
  is refused before the body is read, a body that grows past the bound is cut off there, and a compressed
  answer is refused (identity is asked for, so a bound on the wire is a bound in memory). Time is the
  caller's: it bounds the whole call (``asyncio.timeout``) — connect, send, wait and read, a body that
  trickles in one byte at a time included.
- :func:`json_body` takes an answer's JSON (``application/json`` only; ``NaN`` and ``Infinity`` are no JSON).
- :func:`rerank_scores`: exactly one finite score per text, the items' indices a permutation of ``0..n-1``.
- :func:`embed_vectors`: the vectors asked for, each non-empty and finite.

Anything else raises :class:`BadAnswer`, whose message names what was wrong; the clients turn it into their
bad-response reason (``reranker_bad_response``, ``embed_bad_response``) and the gateway logs it while failing
open. The same rules and messages are the OpenSearch plugin's (``RerankClient.java``), pinned by the shared
vectors ``tests/vectors/rerank_answers.json``.
"""

from __future__ import annotations

import json
import math
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jingpai.errors import JingpaiError

if TYPE_CHECKING:  # plugin/settings.py reads MAX_ANSWER_BYTES from here: `jingpai gateway --help` must not import httpx
    import httpx

#: the largest answer read from a model service by default (``max_answer_bytes``): a window of 500 scores is
#: about 20 KB, a 4096-d vector about 90 KB
MAX_ANSWER_BYTES = 1 << 20
JSON_TYPE = "application/json"
#: the kernel's receive buffer of a model service's connection: an event loop that drains a socket whole (uvloop,
#: the gateway's) would otherwise pull megabytes of an answer that is then refused (measured: +60 MB RSS over 40 MB
#: answers, +9 MB with this)
RECEIVE_BUFFER = 1 << 16
#: the deepest nesting of an answer read (a ranking nests 2: a list of objects)
MAX_DEPTH = 32


class BadAnswer(JingpaiError, ValueError):
    """A model service answered something that is not what was asked for (the message says what)."""


@dataclass(frozen=True)
class Answer:
    """One answer as read: its status, content type (``None``: none given) and body."""

    status: int
    content_type: str | None
    body: bytes

    def text(self, limit: int = 200) -> str:
        """The start of the body as text (for error messages)."""
        return self.body[: limit * 4].decode("utf-8", "replace")[:limit]


def client(timeout_s: float) -> httpx.AsyncClient:
    """The HTTP client of a model service: no proxies from the environment, a backstop timeout (the caller's deadline
    is the real bound) and a small receive buffer (:data:`RECEIVE_BUFFER`)."""
    import httpx

    transport = httpx.AsyncHTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)])
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), trust_env=False, transport=transport)


def too_large(max_bytes: int) -> str:
    return f"the answer is larger than {max_bytes} bytes (max_answer_bytes)"


async def fetch(client: httpx.AsyncClient, method: str, url: str, *, max_bytes: int, payload: Any = None) -> Answer:
    """``method url`` (with the JSON ``payload``), its answer read up to ``max_bytes``.

    Raises:
        BadAnswer: the answer is larger than ``max_bytes`` or compressed.
        httpx.HTTPError: no connection, or it broke (the caller's deadline bounds the time).
    """
    request = client.build_request(method, url, json=payload, headers={"accept-encoding": "identity"})
    resp = await client.send(request, stream=True)
    try:
        encoding = resp.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise BadAnswer(f"the answer is compressed ({encoding}); identity was asked for")
        declared = resp.headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > max_bytes:
            raise BadAnswer(too_large(max_bytes))
        # the chunks as they come, joined once the whole answer is in (no buffer grown and copied over and over)
        chunks, size = [], 0
        async for chunk in resp.aiter_raw():
            size += len(chunk)
            if size > max_bytes:
                raise BadAnswer(too_large(max_bytes))
            chunks.append(chunk)
    finally:
        await resp.aclose()
    return Answer(resp.status_code, resp.headers.get("content-type"), b"".join(chunks))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON number")


def json_body(answer: Answer) -> Any:
    """The answer's JSON value.

    Raises:
        BadAnswer: another content type than ``application/json``, no JSON (``NaN``, ``Infinity`` included), or
            JSON nested deeper than :data:`MAX_DEPTH`.
    """
    mime = (answer.content_type or "").split(";")[0].strip().lower()
    if mime != JSON_TYPE:
        raise BadAnswer(f"the answer's content type is {mime or '(none)'}, not {JSON_TYPE}")
    try:
        value = json.loads(answer.body, parse_constant=_no_constant)
    except RecursionError as exc:
        raise BadAnswer(too_deep()) from exc
    except ValueError as exc:
        raise BadAnswer("the answer is not readable JSON") from exc
    if _depth(value) > MAX_DEPTH:
        raise BadAnswer(too_deep())
    return value


def too_deep() -> str:
    return f"the answer nests deeper than {MAX_DEPTH} levels"


def _depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (iteratively: the value may be as deep as the parser allowed)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (list, dict)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond a double's range
        return False


def rerank_scores(data: Any, n: int) -> list[float]:
    """The scores of ``n`` texts in input order from a TEI ``/rerank`` answer (``[{index, score}, ...]``).

    Raises:
        BadAnswer: not exactly one item per text, an index that is no integer, out of ``0..n-1`` or repeated, a
            score that is no finite number (the message names the first such item).
    """
    if not isinstance(data, list):
        raise BadAnswer("the answer is not a list of {index, score} items")
    if len(data) != n:
        raise BadAnswer(f"expected one score per text ({n}), got {len(data)} items")
    scores: list[float | None] = [None] * n
    for k, item in enumerate(data):
        if not isinstance(item, dict):
            raise BadAnswer(f"item {k} is not an {{index, score}} object")
        index, score = item.get("index"), item.get("score")
        if not _integer(index):
            raise BadAnswer(f"item {k}: index is not an integer")
        if not 0 <= index < n:
            raise BadAnswer(f"item {k}: index {index} is out of range 0..{n - 1}")
        if scores[index] is not None:
            raise BadAnswer(f"item {k}: index {index} is repeated")
        if not isinstance(score, (int, float)) or isinstance(score, bool):
            raise BadAnswer(f"item {k}: score is not a number")
        if not _finite(score):
            raise BadAnswer(f"item {k}: score is not a finite number")
        scores[index] = float(score)
    return scores  # type: ignore[return-value]  # every slot filled: n items, n distinct indices in range


def embed_vectors(data: Any, count: int) -> list[list[float]]:
    """``count`` vectors from a TEI ``/embed`` answer (``[[float, ...], ...]``), each non-empty and finite.

    Raises:
        BadAnswer: not a list of ``count`` lists of finite numbers (the message names the first wrong vector).
    """
    if not isinstance(data, list) or not all(isinstance(v, list) for v in data):
        raise BadAnswer("the answer is not a list of vectors")
    if len(data) != count:
        raise BadAnswer(f"expected {count} vector(s), got {len(data)}")
    for k, vector in enumerate(data):
        if not vector:
            raise BadAnswer(f"vector {k} is empty")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector):
            raise BadAnswer(f"vector {k} holds a value that is not a number")
        if not all(_finite(x) for x in vector):
            raise BadAnswer(f"vector {k} holds a value that is not a finite number")
    return [[float(x) for x in vector] for vector in data]


__all__ = [
    "JSON_TYPE", "MAX_ANSWER_BYTES", "MAX_DEPTH", "RECEIVE_BUFFER", "Answer", "BadAnswer", "client", "embed_vectors", "fetch", "json_body",
    "rerank_scores", "too_large",
]
