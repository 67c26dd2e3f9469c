"""Fail-open: a stopped, restarted or unresponsive reranker never breaks search (real engines, real service)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from jingpai.plugin.gateway import create_app
from jingpai.plugin.settings import GatewaySettings
from jingpai.reranker.service import create_app as create_service_app
from tests.plugin.conftest import Setup, free_port, serve

pytestmark = pytest.mark.engine

BODY = {"query": {"match": {"content": "中国经济增长"}}, "size": 5}


def search(url: str, index: str, **params) -> dict:
    resp = httpx.post(f"{url}/{index}/_search", json=BODY, params=params, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def ids(resp: dict) -> list[str]:
    return [h["_id"] for h in resp["hits"]["hits"]]


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A listening socket that never answers: connections succeed, responses never come."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_stopped_reranker_fails_open_and_breaker_recovers(setup: Setup, dictionary, rerank_model, service_settings) -> None:
    port = free_port()
    settings = GatewaySettings(
        engine_url=setup.engine.url, reranker_url=f"http://127.0.0.1:{port}", window=20, dict_dirs=(dictionary[1],),
        breaker_failures=2, breaker_reset_s=0.5, timeout_ms=20_000,
    )
    with serve(create_app(settings)) as gw:
        engine_order = search(gw.url, setup.index, jingpai="augment")
        reasons = []
        for _ in range(3):
            resp = search(gw.url, setup.index)
            assert ids(resp) == ids(engine_order)  # engine order, same page
            assert resp["jingpai"]["reranked"] is False
            assert all("_jingpai" not in h for h in resp["hits"]["hits"])
            reasons.append(resp["jingpai"]["reason"])
        assert reasons == ["reranker_unreachable", "reranker_unreachable", "circuit_open"]
        health = httpx.get(f"{gw.url}/_jingpai/health")
        assert health.status_code == 200
        assert health.json()["reranker"] == {"breaker": "open"}  # no URL unless expose_internals
        assert health.json()["dictionaries"] == [dictionary[0].version]
        with serve(create_service_app(service_settings, rerank_model), port=port):
            deadline = time.monotonic() + 30
            resp = search(gw.url, setup.index)
            while not resp["jingpai"]["reranked"] and time.monotonic() < deadline:
                assert resp["jingpai"]["reason"] == "circuit_open"
                time.sleep(0.1)
                resp = search(gw.url, setup.index)
            assert resp["jingpai"]["reranked"] is True  # the half-open probe succeeded
            assert gw.app.state.gateway.reranker.breaker.state == "closed"
            assert httpx.get(f"{gw.url}/_jingpai/health").json()["reranker"]["breaker"] == "closed"
            assert search(gw.url, setup.index)["jingpai"]["reranked"] is True


def test_unresponsive_reranker_times_out_to_engine_order(setup: Setup, dictionary, blackhole: str, caplog: pytest.LogCaptureFixture) -> None:
    settings = GatewaySettings(engine_url=setup.engine.url, reranker_url=blackhole, dict_dirs=(dictionary[1],), timeout_ms=150)
    with serve(create_app(settings)) as gw, caplog.at_level(logging.WARNING, logger="jingpai.plugin.gateway"):
        engine_order = search(gw.url, setup.index, jingpai="augment")
        resp = search(gw.url, setup.index)
    assert resp["jingpai"]["reranked"] is False and resp["jingpai"]["reason"] == "reranker_timeout"
    assert ids(resp) == ids(engine_order)
    assert resp["jingpai"]["augmented"] is True  # augmentation does not depend on the reranker
    warnings = [r.getMessage() for r in caplog.records if r.name == "jingpai.plugin.gateway"]
    assert warnings == [
        f"serving engine order (fail-open): reranker_timeout: no answer from {blackhole} within 150 ms; to let the reranker "
        "finish raise --timeout-ms (env JINGPAI_GATEWAY_TIMEOUT_MS, config key timeout_ms)"
    ]


def test_engine_unreachable_is_an_es_style_502(reranker_url: str) -> None:
    settings = GatewaySettings(engine_url=f"http://127.0.0.1:{free_port()}", reranker_url=reranker_url)
    with serve(create_app(settings)) as gw:
        resp = httpx.get(f"{gw.url}/_cat/indices")
        searched = httpx.post(f"{gw.url}/some-index/_search", json=BODY)
    assert resp.status_code == 502 and searched.status_code == 502
    error = resp.json()["error"]
    assert error["type"] == "jingpai_engine_unreachable_exception"
    assert error["reason"].startswith("cannot reach the engine: ClientConnectorError")


#: the stand-in reranker's wrong answers (tests/vectors/rerank_answers.json) and the log line's detail each must give
FAULTY = {
    "infinity": "reranker_bad_response: {url}/rerank: the answer is not readable JSON",
    "negative_indices": "reranker_bad_response: {url}/rerank: item 0: index -1 is out of range 0..19",
    "html": "reranker_bad_response: {url}/rerank: the answer's content type is text/html, not application/json",
    "trickle_one_byte_per_200ms": "reranker_timeout: no answer from {url} within 1000 ms",
    "padded_40mb_chunked": "reranker_bad_response: {url}/rerank: the answer is larger than 1048576 bytes (max_answer_bytes)",
}


@pytest.mark.parametrize("case", list(FAULTY))
def test_a_faulty_reranker_fails_open_in_the_engine_order(setup: Setup, dictionary, case: str, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 53: a score of Infinity was a 500, negative indices were taken, a trickled body held the search ~115 s and a
    40 MB answer was read whole. Each now answers 200 in the engine's order, with the reason, a log line naming what was
    wrong, and within the deadline (generous margin: the trickle alone would take ~150 s)."""
    from bench.standin_reranker import StandIn

    with StandIn(case) as standin:
        settings = GatewaySettings(engine_url=setup.engine.url, reranker_url=standin.url, window=20, dict_dirs=(dictionary[1],),
                                   timeout_ms=1000, breaker_failures=100)
        with serve(create_app(settings)) as gw, caplog.at_level(logging.WARNING, logger="jingpai.plugin.gateway"):
            engine_order = search(gw.url, setup.index, jingpai="augment")
            started = time.monotonic()
            resp = search(gw.url, setup.index)
            took = time.monotonic() - started
    assert (resp["jingpai"]["reranked"], resp["jingpai"]["reason"]) == (False, FAULTY[case].split(":")[0])
    assert ids(resp) == ids(engine_order)
    assert took < 1.0 + 3.0, f"{case} held the search {took:.1f} s"
    warnings = [r.getMessage() for r in caplog.records if r.name == "jingpai.plugin.gateway"]
    assert [w for w in warnings if w.startswith("serving engine order")] == [
        "serving engine order (fail-open): " + FAULTY[case].format(url=standin.url) + (
            "; to let the reranker finish raise --timeout-ms (env JINGPAI_GATEWAY_TIMEOUT_MS, config key timeout_ms)"
            if case.startswith("trickle") else "")
    ]
