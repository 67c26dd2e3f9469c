"""Issue #17, gateway items: malformed requests get the engine's own answer on a connection that stays
usable, URI searches and raw UTF-8 paths work, ``_msearch`` cannot flood the reranker, ``filter_path`` is
applied after reranking, the index-metadata cache is per credentials, and nothing internal leaks by default.

Real engines (both kinds), the real rerank service with a tiny model, gateways served by uvicorn on
loopback, and a keep-alive ``httpx.Client``.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from jingpai.plugin.gateway import FilterPath, create_app
from jingpai.plugin.settings import GatewaySettings
from jingpai.reranker.service import create_app as create_service_app
from tests.plugin.conftest import Setup, free_port, ids, search, serve

pytestmark = pytest.mark.engine

BROAD = {"match": {"content": "中国经济增长"}}


@pytest.fixture
def client(setup: Setup) -> Iterator[httpx.Client]:
    """One keep-alive connection's worth of client to the gateway (a pool of one)."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with httpx.Client(base_url=setup.gateway_url, timeout=60, limits=limits) as c:
        yield c


def _local_port(resp: httpx.Response) -> int:
    return resp.extensions["network_stream"].get_extra_info("client_addr")[1]


def _same_connection_still_works(client: httpx.Client, setup: Setup, before: httpx.Response) -> None:
    after = client.post(f"/{setup.index}/_search", json={"query": BROAD, "size": 3})
    assert after.status_code == 200, after.text
    assert after.json()["jingpai"]["reranked"] is True
    assert _local_port(after) == _local_port(before), "the gateway dropped the keep-alive connection"


def _concrete(setup: Setup) -> str:
    """The physical index behind the jingpai alias of ``setup``."""
    return next(iter(setup.engine.raw.indices.get_alias(name=setup.index)))


def _error_type(resp: httpx.Response) -> str:
    return resp.json()["error"]["type"] if isinstance(resp.json().get("error"), dict) else resp.json()["error"]


# ------------------------------------------------------------------ item 8: malformed requests


# nested arrays, not queries: a 5,000-deep bool query overflows OpenSearch 2.19's stack and kills the node
DEEP = '{"query":{"match":{"content":"中国经济"}},"size":' + "[" * 5000 + "]" * 5000 + "}"

MALFORMED_SEARCHES = {
    "lone_surrogate": '{"query":{"match":{"content":"\\ud800中国经济"}},"size":3}',
    "deeply_nested": DEEP,
    "source_includes_int": json.dumps({"query": BROAD, "_source": {"includes": 5}}),
    "source_list_of_objects": json.dumps({"query": BROAD, "_source": [{"a": 1}]}),
    "size_not_a_number": json.dumps({"query": BROAD, "size": "many"}),
}


@pytest.mark.parametrize("case", list(MALFORMED_SEARCHES))
def test_malformed_search_gets_the_engines_status_on_a_live_connection(setup: Setup, client: httpx.Client, case: str) -> None:
    body = MALFORMED_SEARCHES[case].encode()
    headers = {"content-type": "application/json"}
    direct = httpx.post(f"{setup.engine.url}/{setup.index}/_search", content=body, headers=headers, timeout=60)
    resp = client.post(f"/{setup.index}/_search", content=body, headers=headers)
    assert resp.status_code == direct.status_code, resp.text  # (OpenSearch answers _source: [{…}] with a 500 of its own)
    if direct.status_code == 200:
        assert ids(resp.json()) == ids(direct.json()) or resp.json()["jingpai"]["reranked"] is True
        assert "jingpai" in resp.json()
    elif case == "deeply_nested":
        # answered by the gateway itself (max_body_depth), never forwarded: tests/plugin/test_gateway_depth.py
        assert _error_type(resp) == "jingpai_nested_too_deep_exception"
    else:
        assert _error_type(resp) == _error_type(direct)  # the engine's own error, relayed
    _same_connection_still_works(client, setup, resp)


@pytest.mark.parametrize("header", [{"index": 123}, {"index": {"a": 1}}, {"index": [1, 2]}])
def test_msearch_bad_header_index_gets_the_engines_per_item_error(setup: Setup, client: httpx.Client, header: dict) -> None:
    lines = [header, {"query": BROAD}, {"index": setup.index}, {"query": BROAD, "size": 3}]
    body = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
    headers = {"content-type": "application/x-ndjson"}
    direct = httpx.post(f"{setup.engine.url}/_msearch", content=body, headers=headers, timeout=60)
    resp = client.post("/_msearch", content=body, headers=headers)
    assert resp.status_code == direct.status_code, resp.text
    if direct.status_code == 200:
        got, expected = resp.json()["responses"], direct.json()["responses"]
        assert ["error" in item for item in got] == ["error" in item for item in expected]
        assert [item.get("status") for item in got] == [item.get("status") for item in expected]
        assert got[1]["jingpai"]["reranked"] is True
    else:
        assert _error_type(resp) == _error_type(direct)
    _same_connection_still_works(client, setup, resp)


def test_msearch_without_final_newline_gets_the_engines_error(setup: Setup, client: httpx.Client) -> None:
    body = (json.dumps({"index": setup.index}) + "\n" + json.dumps({"query": BROAD})).encode()  # no final \n
    headers = {"content-type": "application/x-ndjson"}
    direct = httpx.post(f"{setup.engine.url}/_msearch", content=body, headers=headers, timeout=60)
    resp = client.post("/_msearch", content=body, headers=headers)
    assert direct.status_code == 400
    assert resp.status_code == 400 and _error_type(resp) == _error_type(direct), resp.text
    _same_connection_still_works(client, setup, resp)


@pytest.fixture
def ui_client(setup: Setup, reranker_url: str, dictionary) -> Iterator[httpx.Client]:
    """A pool-of-one client to a gateway that also serves the demo UI, as `jingpai gateway --ui` builds it."""
    from jingpai.ui.app import ui_routes

    settings = GatewaySettings(engine_url=setup.engine.url, reranker_url=reranker_url, window=20, dict_dirs=(dictionary[1],),
                               timeout_ms=20_000)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with serve(create_app(settings, routes=ui_routes())) as gw, httpx.Client(base_url=gw.url, timeout=60, limits=limits) as c:
        yield c


def test_the_gateway_serves_no_ui_of_its_own() -> None:
    from starlette.testclient import TestClient

    # the engine's port is closed on purpose: /_jingpai/ui is the engine's path like any other (502 here)
    with TestClient(create_app(GatewaySettings(engine_url=f"http://127.0.0.1:{free_port()}"))) as plain:
        assert plain.get("/_jingpai/ui/").status_code == 502
        assert plain.get("/_jingpai/health").status_code == 200


def test_ui_errors_are_es_shaped_json(setup: Setup, ui_client: httpx.Client) -> None:
    client = ui_client
    missing = client.get("/_jingpai/ui/no-such-page")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/json")
    assert missing.json() == {
        "error": {"root_cause": [{"type": "jingpai_not_found_exception", "reason": "Not Found"}],
                  "type": "jingpai_not_found_exception", "reason": "Not Found"},
        "status": 404,
    }
    wrong_method = client.post("/_jingpai/ui/api/search")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["reason"] == "Method Not Allowed"
    assert "content-security-policy" in wrong_method.headers
    _same_connection_still_works(client, setup, wrong_method)


# ------------------------------------------------------------------ item 9: URI search, raw UTF-8 paths


def test_uri_search_is_reranked(setup: Setup, client: httpx.Client) -> None:
    direct = httpx.get(f"{setup.engine.url}/{setup.index}/_search", params={"q": "content:中国经济增长", "size": 5})
    assert direct.status_code == 200
    resp = client.get(f"/{setup.index}/_search", params={"q": "content:中国经济增长", "size": 5})
    assert resp.status_code == 200, resp.text
    info = resp.json()["jingpai"]
    assert info["reranked"] is True and info["window"] == 20
    assert len(ids(resp.json())) == 5
    assert set(ids(resp.json())) <= set(ids(search(setup.gateway_url, setup.index, {"size": 20}, q="content:中国经济增长", jingpai="augment")))


def _raw_get(url: str, target: bytes, requests: int = 2) -> list[tuple[int, dict]]:
    """``requests`` GETs of a raw (not percent-encoded) target on one connection: ``[(status, json)]``."""
    host, port = url.removeprefix("http://").split(":")
    answers = []
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        for _ in range(requests):
            sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
            reply = http.client.HTTPResponse(sock)
            reply.begin()
            answers.append((reply.status, json.loads(reply.read() or b"null")))
    return answers


def test_raw_utf8_path_and_query_get_the_engines_answer(setup: Setup) -> None:
    # the engines read raw bytes of a request target as Latin-1: the query finds nothing and the index
    # 索引… is "ç´¢å¼…", a 404; the gateway must answer the same, on a connection that stays open
    for target in (f"/{setup.index}/_search?q=content:中国经济增长&size=3", f"/索引-{uuid.uuid4().hex[:6]}/_search?q=中国"):
        direct = _raw_get(setup.engine.url, target.encode())
        answers = _raw_get(setup.gateway_url, target.encode())
        assert [status for status, _ in answers] == [status for status, _ in direct], answers
        for (_, got), (_, expected) in zip(answers, direct):
            if "error" in expected:
                assert got["error"]["reason"] == expected["error"]["reason"]  # the same mojibake index name
            else:
                assert got["hits"]["total"] == expected["hits"]["total"] and ids(got) == ids(expected)
                assert got["jingpai"]["reason"] in ("no_hits", None)


# ------------------------------------------------------------------ item 10: _msearch amplification


class _InFlight:
    """ASGI middleware counting the requests the wrapped app is serving at once (the peak is kept)."""

    def __init__(self, app) -> None:
        self.app, self.now, self.peak, self.total = app, 0, 0, 0
        self._lock = threading.Lock()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/rerank"):
            await self.app(scope, receive, send)
            return
        with self._lock:
            self.now += 1
            self.total += 1
            self.peak = max(self.peak, self.now)
        try:
            await self.app(scope, receive, send)
        finally:
            with self._lock:
                self.now -= 1


def test_big_msearch_bounds_rerank_calls_and_flags_each_item(setup: Setup, dictionary, rerank_model, service_settings) -> None:
    counted = _InFlight(create_service_app(service_settings, rerank_model))
    lines = []
    for i in range(200):
        lines += [{"index": setup.index}, {"query": {"match": {"content": ["中国经济增长", "银行利率", "股票投资"][i % 3]}}, "size": 5}]
    body = ("\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n").encode()
    headers = {"content-type": "application/x-ndjson"}
    started = time.perf_counter()
    direct = httpx.post(f"{setup.engine.url}/_msearch", content=body, headers=headers, timeout=120)
    direct_s = time.perf_counter() - started
    assert direct.status_code == 200
    with serve(counted) as service:
        settings = GatewaySettings(engine_url=setup.engine.url, reranker_url=service.url, dict_dirs=(dictionary[1],), timeout_ms=2000)
        with serve(create_app(settings)) as gw:
            started = time.perf_counter()
            resp = httpx.post(f"{gw.url}/_msearch", content=body, headers=headers, timeout=120)
            took_s = time.perf_counter() - started
    assert resp.status_code == 200
    items = resp.json()["responses"]
    assert len(items) == 200 and not any("error" in item for item in items)
    assert counted.peak <= 4, f"{counted.peak} rerank calls at once for one _msearch"
    for item in items:
        info = item["jingpai"]
        assert isinstance(info["reranked"], bool)
        assert info["reranked"] or info["reason"] in ("reranker_busy", "reranker_timeout", "circuit_open")
    reranked = sum(item["jingpai"]["reranked"] for item in items)
    assert reranked == counted.total or reranked >= 1
    # every item either reranked or fell back within the timeout: bounded by ~2 × timeout_ms, not 200 ×
    assert took_s < 2 * 2.0 + 10 * direct_s + 5, (took_s, direct_s)


# ------------------------------------------------------------------ item 11: filter_path


@pytest.mark.parametrize(
    "expression",
    ["hits.hits._id", "hits.total,hits.hits._source.title", "**._id", "hits.hits._s*", "-hits.hits._source,-_shards",
     "hits.*.title", "-_shards,hits.hits._id,-hits.hits._index", "nothing.here", "hits.hits._source"],
)
def test_filter_path_matches_the_engines_own(setup: Setup, expression: str) -> None:
    body = {"query": BROAD, "size": 3, "_source": ["title"]}
    full = httpx.post(f"{setup.engine.url}/{setup.plain_index}/_search", json=body, timeout=60).json()
    filtered = httpx.post(f"{setup.engine.url}/{setup.plain_index}/_search", json=body, params={"filter_path": expression}, timeout=60).json()
    ours = FilterPath.parse(expression).apply(full)
    ours.pop("took", None), filtered.pop("took", None)  # differs between the two calls
    assert ours == filtered


def test_filter_path_is_applied_after_reranking(setup: Setup, client: httpx.Client) -> None:
    body = {"query": BROAD, "size": 8}
    full = client.post(f"/{setup.index}/_search", json=body, params={"jingpai_fusion": "replace"}).json()
    assert full["jingpai"]["reranked"] is True
    only_ids = client.post(f"/{setup.index}/_search", json=body, params={"jingpai_fusion": "replace", "filter_path": "hits.hits._id"})
    assert only_ids.status_code == 200
    assert only_ids.json() == {"hits": {"hits": [{"_id": i} for i in ids(full)]}}  # the model's order, no jingpai member
    with_info = client.post(
        f"/{setup.index}/_search", json=body, params={"jingpai_fusion": "replace", "filter_path": "hits.hits._id,jingpai.reranked,-hits.hits._score"}
    ).json()
    assert with_info == {"hits": {"hits": [{"_id": i} for i in ids(full)]}, "jingpai": {"reranked": True}}
    not_reranked = client.post(f"/{setup.index}/_search", json=body, params={"jingpai": "augment", "filter_path": "hits.total"}).json()
    assert set(not_reranked) == {"hits"} and set(not_reranked["hits"]) == {"total"}
    msearch = client.post(
        "/_msearch", params={"filter_path": "responses.hits.hits._id,responses.jingpai.reason", "jingpai_fusion": "replace"},
        content=(json.dumps({"index": setup.index}) + "\n" + json.dumps(body, ensure_ascii=False) + "\n").encode(),
        headers={"content-type": "application/x-ndjson"},
    ).json()
    assert msearch == {"responses": [{"hits": {"hits": [{"_id": i} for i in ids(full)]}, "jingpai": {"reason": None}}]}


# ------------------------------------------------------------------ item 12: credentials and what leaks


def test_index_meta_cache_is_per_credentials(setup: Setup, dictionary, reranker_url: str) -> None:
    alias = f"{setup.index}-cred-{uuid.uuid4().hex[:6]}"
    concrete = _concrete(setup)
    setup.engine.raw.indices.put_alias(index=concrete, name=alias)
    settings = GatewaySettings(engine_url=setup.engine.url, reranker_url=reranker_url, dict_dirs=(dictionary[1],),
                               timeout_ms=20_000, meta_ttl_s=600)
    alice = {"authorization": "Basic YWxpY2U6c2VjcmV0"}
    bob = {"authorization": "Basic Ym9iOnNlY3JldA=="}
    try:
        with serve(create_app(settings)) as gw:
            def reason(headers: dict) -> str | None:
                resp = httpx.post(f"{gw.url}/{alias}/_search", json={"query": BROAD}, headers=headers, timeout=60)
                assert resp.status_code == 200, resp.text
                return resp.json()["jingpai"]["reason"]

            assert reason(alice) is None  # a jingpai index: reranked; its mapping is now cached for alice
            # the alias now names the plain index: only a fresh mapping lookup can tell
            setup.engine.raw.indices.update_aliases(body={"actions": [
                {"remove": {"index": concrete, "alias": alias}}, {"add": {"index": setup.plain_index, "alias": alias}},
            ]})
            assert reason(alice) is None  # alice's cached mapping (meta_ttl_s)
            assert reason(bob) == "not_a_jingpai_index"  # bob's request never reads alice's cache entry
            assert reason({}) == "not_a_jingpai_index"
    finally:
        setup.engine.raw.indices.delete_alias(index="_all", name=alias)


def test_health_and_errors_name_no_internal_urls_by_default(reranker_url: str) -> None:
    engine_url = f"http://127.0.0.1:{free_port()}"
    quiet = GatewaySettings(engine_url=engine_url, reranker_url=reranker_url)
    with serve(create_app(quiet)) as gw:
        health = httpx.get(f"{gw.url}/_jingpai/health").json()
        unreachable = httpx.post(f"{gw.url}/some-index/_search", json={"query": BROAD})
    assert "engine_url" not in health and health["reranker"] == {"breaker": "closed"}
    assert unreachable.status_code == 502
    reason = unreachable.json()["error"]["reason"]
    assert reason == "cannot reach the engine: ClientConnectorError (details in the gateway log)"
    assert engine_url.removeprefix("http://") not in unreachable.text
    verbose = GatewaySettings(engine_url=engine_url, reranker_url=reranker_url, expose_internals=True)
    with serve(create_app(verbose)) as gw:
        health = httpx.get(f"{gw.url}/_jingpai/health").json()
        unreachable = httpx.post(f"{gw.url}/some-index/_search", json={"query": BROAD})
    assert health["engine_url"] == engine_url and health["reranker"]["url"] == reranker_url
    assert engine_url.removeprefix("http://") in unreachable.json()["error"]["reason"]
