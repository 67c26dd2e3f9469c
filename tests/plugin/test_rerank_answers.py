"""A faulty reranker never breaks, stalls or silently corrupts a search (issue 53): every wrong answer the gateway's
client can get, replayed through the real :class:`RerankClient` against the stand-in reranker on loopback
(``bench/standin_reranker.py``, real HTTP).

The cases are written to the shared vectors ``tests/vectors/rerank_answers.json`` (``python -m
tests.plugin.test_rerank_answers`` rewrites them), which the OpenSearch plugin's JUnit tests replay against its
Java ``RerankClient`` (``RerankAnswersTest``): the same reason and the same message for every case. Each case is
``status``, ``content_type`` and ``body`` (the answer to 20 texts), or a body built from a rule the stand-in and the
Java test both follow (``pad_bytes``, ``trickle_ms``, ``chunked``, ``gzip``), and what the client must make of it:
the ``scores`` in input order, or the fail-open ``reason`` and its ``message`` (``{url}``: the reranker's URL,
``{timeout_ms}``: the replay's deadline).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from bench.standin_reranker import VECTORS, StandIn, load_cases
from jingpai.plugin.answers import MAX_ANSWER_BYTES
from jingpai.plugin.rerank_client import RerankClient, RerankUnavailable

N = 20
#: the deadline of every replay: a trickle must end at it, long before its body would
TIMEOUT_MS = 1000
SCORES = [round(((i * 7) % N) / N + 0.013, 4) for i in range(N)]
JSON = "application/json"


def _items(order: list[int] | None = None, **change: Any) -> list[dict[str, Any]]:
    """The valid answer's items, best first as TEI sorts them (``order``: indices in another order)."""
    order = order if order is not None else sorted(range(N), key=lambda i: -SCORES[i])
    return [{"index": i, "score": SCORES[i], **change.get(str(i), {})} for i in order]


def _dump(items: list[Any]) -> str:
    return json.dumps(items, separators=(",", ":"))


def _with(position: int, raw: str) -> str:
    """The valid body with the ``score`` of its item at ``position`` written as ``raw`` (non-JSON literals too)."""
    items = _items()
    marker = -12345.5
    items[position]["score"] = marker
    return _dump(items).replace(json.dumps(marker), raw)


def _bad(message: str) -> dict[str, Any]:
    return {"reason": "reranker_bad_response", "message": "{url}/rerank: " + message}


VALID = _dump(_items())
HTML = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
#: name → (answer, expected)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "valid_best_first": ({"body": VALID}, {"scores": SCORES}),
    "valid_input_order": ({"body": _dump(_items(list(range(N))))}, {"scores": SCORES}),
    "valid_json_with_charset": ({"body": VALID, "content_type": "application/json; charset=utf-8"}, {"scores": SCORES}),
    "valid_extra_keys": ({"body": _dump(_items(**{"3": {"text": "中国GDP"}}))}, {"scores": SCORES}),
    "infinity": ({"body": _with(3, "Infinity")}, _bad("the answer is not readable JSON")),
    "minus_infinity": ({"body": _with(0, "-Infinity")}, _bad("the answer is not readable JSON")),
    "nan": ({"body": _with(5, "NaN")}, _bad("the answer is not readable JSON")),
    "score_overflows_a_double": ({"body": _with(2, "1e999")}, _bad("item 2: score is not a finite number")),
    "negative_indices": ({"body": _dump([{"index": -(i + 1), "score": SCORES[i]} for i in range(N)])},
                         _bad("item 0: index -1 is out of range 0..19")),
    "index_out_of_range": ({"body": _dump([*_items(list(range(N - 1))), {"index": N, "score": 0.5}])},
                           _bad("item 19: index 20 is out of range 0..19")),
    "duplicate_index": ({"body": _dump([*_items(list(range(N - 1))), {"index": 4, "score": 0.5}])}, _bad("item 19: index 4 is repeated")),
    "too_few_items": ({"body": _dump(_items(list(range(N - 1))))}, _bad("expected one score per text (20), got 19 items")),
    "too_many_items": ({"body": _dump([*_items(), {"index": 0, "score": 0.5}])}, _bad("expected one score per text (20), got 21 items")),
    "empty_list": ({"body": "[]"}, _bad("expected one score per text (20), got 0 items")),
    "string_scores": ({"body": _dump([{"index": i, "score": str(SCORES[i])} for i in range(N)])}, _bad("item 0: score is not a number")),
    "null_score": ({"body": _dump(_items(list(range(N)), **{"0": {"score": None}}))}, _bad("item 0: score is not a number")),
    "boolean_score": ({"body": _dump(_items(list(range(N)), **{"1": {"score": True}}))}, _bad("item 1: score is not a number")),
    "missing_score": ({"body": _dump([{"index": i} for i in range(N)])}, _bad("item 0: score is not a number")),
    "fractional_index": ({"body": _dump(_items(list(range(N)), **{"2": {"index": 2.0}}))}, _bad("item 2: index is not an integer")),
    "string_index": ({"body": _dump(_items(list(range(N)), **{"0": {"index": "0"}}))}, _bad("item 0: index is not an integer")),
    "object_not_list": ({"body": json.dumps({"results": _items()})}, _bad("the answer is not a list of {index, score} items")),
    "items_not_objects": ({"body": _dump(SCORES)}, _bad("item 0 is not an {index, score} object")),
    "truncated_json": ({"body": VALID[: len(VALID) // 2]}, _bad("the answer is not readable JSON")),
    "nested_5000_deep": ({"body": "[" * 5000 + "]" * 5000}, _bad("the answer nests deeper than 32 levels")),
    "nested_33_deep": ({"body": "[" * 33 + "]" * 33}, _bad("the answer nests deeper than 32 levels")),
    "html": ({"body": HTML, "content_type": "text/html"}, _bad("the answer's content type is text/html, not application/json")),
    "json_as_text_plain": ({"body": VALID, "content_type": "text/plain"}, _bad("the answer's content type is text/plain, not application/json")),
    "no_content_type": ({"body": VALID, "content_type": None}, _bad("the answer's content type is (none), not application/json")),
    "gzip_not_asked_for": ({"body": VALID, "gzip": True}, _bad("the answer is compressed (gzip); identity was asked for")),
    "http_500_html": ({"status": 500, "body": HTML, "content_type": "text/html"},
                      {"reason": "reranker_error", "message": "{url}/rerank answered HTTP 500: " + HTML}),
    "http_429": ({"status": 429, "body": '{"error":"queue full","error_type":"Overloaded"}'},
                 {"reason": "reranker_overloaded", "message": '{url}/rerank answered HTTP 429: {"error":"queue full","error_type":"Overloaded"}'}),
    "http_424": ({"status": 424, "body": '{"error":"scoring failed","error_type":"Backend"}'},
                 {"reason": "reranker_inference_failed", "message": '{url}/rerank answered HTTP 424: {"error":"scoring failed","error_type":"Backend"}'}),
    "trickle_one_byte_per_200ms": ({"body": VALID, "trickle_ms": 200},
                                   {"reason": "reranker_timeout", "message": "no answer from {url} within {timeout_ms} ms"}),
    "padded_40mb": ({"body": VALID, "pad_bytes": 2_000_000}, _bad(f"the answer is larger than {MAX_ANSWER_BYTES} bytes (max_answer_bytes)")),
    "padded_40mb_chunked": ({"body": VALID, "pad_bytes": 2_000_000, "chunked": True},
                            _bad(f"the answer is larger than {MAX_ANSWER_BYTES} bytes (max_answer_bytes)")),
}


def vectors() -> dict[str, Any]:
    cases = []
    for name, (answer, expected) in CASES.items():
        cases.append({"name": name, "status": answer.get("status", 200), "content_type": answer.get("content_type", JSON),
                      **{k: v for k, v in answer.items() if k not in ("status", "content_type")}, "expected": expected})
    return {"about": "answers of a reranker to POST /rerank of 20 texts and what a client must make of them: the scores in input "
                     "order, or the fail-open reason and message ({url}: the reranker's base URL; {timeout_ms}: the deadline)",
            "texts": N, "timeout_ms": TIMEOUT_MS, "max_answer_bytes": MAX_ANSWER_BYTES, "cases": cases}


def test_the_stored_vectors_are_the_cases() -> None:
    assert VECTORS.exists(), f"{VECTORS} is missing: run python -m tests.plugin.test_rerank_answers"
    assert json.loads(VECTORS.read_text(encoding="utf-8")) == vectors()


@pytest.fixture(scope="module")
def standin() -> StandIn:
    with StandIn() as server:
        yield server


def _replay(url: str) -> tuple[list[float] | RerankUnavailable, float]:
    async def go() -> list[float] | RerankUnavailable:
        client = RerankClient(url, timeout_ms=TIMEOUT_MS)
        try:
            return await client.rerank("中国GDP", [f"文本{i}" for i in range(N)])
        except RerankUnavailable as exc:
            return exc
        finally:
            await client.aclose()

    started = time.monotonic()
    out = asyncio.run(go())
    return out, time.monotonic() - started


@pytest.mark.parametrize("name", list(CASES))
def test_the_client_makes_of_each_answer_what_the_vectors_say(standin: StandIn, name: str) -> None:
    case = load_cases()[name]
    standin.use(case)
    got, took = _replay(standin.url)
    expected = case["expected"]
    if "scores" in expected:
        assert got == pytest.approx(expected["scores"], abs=1e-12)
    else:
        assert isinstance(got, RerankUnavailable), got
        message = expected["message"].replace("{url}", standin.url).replace("{timeout_ms}", str(TIMEOUT_MS))
        assert (got.reason, str(got)) == (expected["reason"], f"{expected['reason']}: {message}")
    # the whole call ends at the deadline however the answer comes (a trickle would take ~150 s, 40 MB a while)
    assert took < TIMEOUT_MS / 1000 + 2.0, f"{name} held the call {took:.1f} s"


def test_a_trickling_info_is_bounded_by_the_same_deadline(standin: StandIn) -> None:
    """The first call's ``GET /info`` is inside the deadline: a stand-in that trickles it holds nothing."""
    trickle = {"status": 200, "content_type": JSON, "body": VALID, "trickle_ms": 200}
    with StandIn("valid_best_first") as slow:
        slow.use_info(trickle)
        got, took = _replay(slow.url)
    assert isinstance(got, RerankUnavailable) and got.reason == "reranker_timeout", got
    assert took < TIMEOUT_MS / 1000 + 2.0


if __name__ == "__main__":
    VECTORS.write_text(json.dumps(vectors(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {VECTORS}")


# ------------------------------------------------------------------------------------------ the embedder's client

VECTOR = [0.6, 0.8, 0.0]
EMBED_CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "infinity": ({"body": "[[0.6, Infinity, 0.0]]"}, "embed_bad_response", "{url}/embed: the answer is not readable JSON"),
    "overflow": ({"body": "[[0.6, 1e999, 0.0]]"}, "embed_bad_response", "{url}/embed: vector 0 holds a value that is not a finite number"),
    "strings": ({"body": '[["0.6", "0.8", "0"]]'}, "embed_bad_response", "{url}/embed: vector 0 holds a value that is not a number"),
    "two_vectors": ({"body": json.dumps([VECTOR, VECTOR])}, "embed_bad_response", "{url}/embed: expected 1 vector(s), got 2"),
    "empty_vector": ({"body": "[[]]"}, "embed_bad_response", "{url}/embed: vector 0 is empty"),
    "html": ({"body": HTML, "content_type": "text/html"}, "embed_bad_response",
             "{url}/embed: the answer's content type is text/html, not application/json"),
    "wrong_dims": ({"body": json.dumps([[0.6, 0.8]])}, "embed_bad_response",
                   "{url}/embed answered a 2-d vector; the index's vectors are 3-d (serve the model it was indexed with)"),
    "trickle": ({"body": json.dumps([VECTOR]), "trickle_ms": 200}, "embed_timeout", "no answer from {url}/embed within {timeout_ms} ms"),
    "padded_chunked": ({"body": json.dumps([VECTOR * 200_000]), "chunked": True}, "embed_bad_response",
                       f"{{url}}/embed: the answer is larger than {MAX_ANSWER_BYTES} bytes (max_answer_bytes)"),
}


def _embed(url: str) -> tuple[list[float] | Exception, float]:
    from jingpai.plugin.embed_client import EmbedClient, EmbedUnavailable

    async def go() -> list[float] | Exception:
        client = EmbedClient(url, timeout_ms=TIMEOUT_MS)
        try:
            return await client.embed("花呗怎么还款", dims=3)
        except EmbedUnavailable as exc:
            return exc
        finally:
            await client.aclose()

    started = time.monotonic()
    out = asyncio.run(go())
    return out, time.monotonic() - started


@pytest.mark.parametrize("name", list(EMBED_CASES))
def test_the_embedder_client_follows_the_same_rules(standin: StandIn, name: str) -> None:
    answer, reason, message = EMBED_CASES[name]
    standin.use_embed({"status": 200, "content_type": JSON, **answer})
    got, took = _embed(standin.url)
    assert (getattr(got, "reason", None), str(got)) == (reason, f"{reason}: " + message.replace("{url}", standin.url).replace(
        "{timeout_ms}", str(TIMEOUT_MS)))
    assert took < TIMEOUT_MS / 1000 + 2.0, f"{name} held the call {took:.1f} s"


def test_the_embedder_client_takes_a_valid_vector(standin: StandIn) -> None:
    standin.use_embed({"status": 200, "content_type": JSON, "body": json.dumps([VECTOR])})
    assert _embed(standin.url)[0] == VECTOR
