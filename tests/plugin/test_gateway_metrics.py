"""``GET /_jingpai/metrics``: Prometheus counters and histograms of a real gateway in front of real engines and
a real reranker, moved by exactly what was sent, in an exposition ``prometheus_client`` parses back."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jingpai.plugin.gateway import create_app
from jingpai.plugin.gateway.metrics import KNOWN_REASONS
from jingpai.plugin.settings import GatewaySettings
from tests.plugin.conftest import Setup, free_port, serve

pytestmark = pytest.mark.engine

BROAD = {"match": {"content": "中国经济增长"}}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample of the gateway's exposition, keyed by (name, sorted labels); the text must parse."""
    resp = httpx.get(f"{url}/_jingpai/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(resp.text)
        for s in family.samples
    }


def moved(before: Samples, after: Samples, name: str) -> Counter:
    """How much each labelled series of ``name`` grew, as {the labels' values: growth}, zeros left out."""
    grown: Counter = Counter()
    for (sample, labels), value in after.items():
        if sample == name and value != before.get((sample, labels), 0.0):
            grown[tuple(v for k, v in labels if k != "le")] += value - before.get((sample, labels), 0.0)
    return grown


def post(url: str, path: str, body: dict, **params) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, params=params, timeout=60)


def test_counters_move_by_exactly_what_was_sent(setup: Setup, reranker_url: str, dictionary) -> None:
    settings = GatewaySettings(engine_url=setup.engine.url, reranker_url=reranker_url, dict_dirs=(dictionary[1],), timeout_ms=20_000)
    with serve(create_app(settings)) as gw:
        before = scrape(gw.url)
        assert all((("jingpai_gateway_searches_total", (("outcome", r),)) in before) for r in KNOWN_REASONS)  # all there from the start
        statuses = [
            post(gw.url, f"/{setup.index}/_search", {"query": BROAD, "size": 5}).status_code,            # reranked
            post(gw.url, f"/{setup.index}/_search", {"query": BROAD, "size": 5}).status_code,            # reranked
            post(gw.url, f"/{setup.index}/_search", {"query": BROAD}, jingpai="off").status_code,        # disabled
            post(gw.url, f"/{setup.plain_index}/_search", {"query": BROAD}).status_code,                 # not_a_jingpai_index
            post(gw.url, f"/{setup.index}/_search", {"query": BROAD}, jingpai="bogus").status_code,      # 400, never sent
        ]
        lines = [{"index": setup.index}, {"query": BROAD, "size": 5}, {"index": setup.index}, {"query": BROAD, "size": 0}]
        ndjson = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        statuses.append(httpx.post(f"{gw.url}/_msearch", content=ndjson.encode(), headers={"content-type": "application/x-ndjson"},
                                   timeout=60).status_code)
        statuses.append(httpx.get(f"{gw.url}/{setup.index}/_count").status_code)
        statuses.append(httpx.get(f"{gw.url}/no-such-index-{free_port()}/_doc/1").status_code)
        assert statuses == [200, 200, 200, 200, 400, 200, 200, 404]
        after = scrape(gw.url)
    assert moved(before, after, "jingpai_gateway_requests_total") == Counter({
        ("search", "2xx"): 4, ("search", "4xx"): 1, ("msearch", "2xx"): 1, ("passthrough", "2xx"): 1, ("passthrough", "4xx"): 1,
        ("jingpai", "2xx"): 1,  # the first scrape, counted once it was answered
    })
    assert moved(before, after, "jingpai_gateway_request_seconds_count") == Counter({
        ("search",): 5, ("msearch",): 1, ("passthrough",): 2, ("jingpai",): 1,
    })
    assert moved(before, after, "jingpai_gateway_searches_total") == Counter({
        ("reranked",): 3, ("disabled",): 1, ("not_a_jingpai_index",): 1, ("size_0",): 1,
    })
    assert moved(before, after, "jingpai_gateway_augment_total") == Counter({
        ("augmented",): 4, ("disabled",): 1, ("not_a_jingpai_index",): 1,
    })
    # the engine hop: four searches (the 400 never left), one _msearch, two pass-throughs, one mapping
    # lookup per index (then cached; ?jingpai=off looks nothing up)
    assert moved(before, after, "jingpai_gateway_engine_seconds_count") == Counter({
        ("search",): 4, ("msearch",): 1, ("passthrough",): 2, ("mapping",): 2,
    })
    assert moved(before, after, "jingpai_gateway_rerank_seconds_count") == Counter({("ok",): 3})
    assert after[("jingpai_gateway_rerank_seconds_bucket", (("le", "+Inf"), ("outcome", "ok")))] == 3
    assert after[("jingpai_gateway_reranker_breaker_state", (("state", "closed"),))] == 1
    assert after[("jingpai_gateway_reranker_breaker_state", (("state", "open"),))] == 0
    assert after[("jingpai_gateway_dictionaries_loaded", ())] == 1
    assert after[("jingpai_gateway_dictionary_loaded", (("version", dictionary[0].version),))] == 1


def test_fail_open_and_the_open_breaker_are_counted_per_app(setup: Setup, dictionary) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: reranker_unreachable, then the breaker opens
    settings = GatewaySettings(engine_url=setup.engine.url, reranker_url=down, breaker_failures=1, breaker_reset_s=600)
    with serve(create_app(settings)) as gw, serve(create_app(settings)) as other:
        before = scrape(gw.url)
        reasons = [post(gw.url, f"/{setup.index}/_search", {"query": BROAD, "size": 5}).json()["jingpai"]["reason"] for _ in range(2)]
        after = scrape(gw.url)
        untouched = scrape(other.url)
    assert reasons == ["reranker_unreachable", "circuit_open"]
    assert moved(before, after, "jingpai_gateway_searches_total") == Counter({("reranker_unreachable",): 1, ("circuit_open",): 1})
    # both reached RerankClient (the breaker refuses inside it); no dictionary given: not augmented
    assert moved(before, after, "jingpai_gateway_rerank_seconds_count") == Counter({("reranker_unreachable",): 1, ("circuit_open",): 1})
    assert moved(before, after, "jingpai_gateway_augment_total") == Counter({("dictionary_not_loaded",): 2})
    assert after[("jingpai_gateway_reranker_breaker_state", (("state", "open"),))] == 1
    assert after[("jingpai_gateway_dictionaries_loaded", ())] == 0
    # another app in the same process has its own registry: nothing of the first one's traffic
    assert sum(v for (name, _), v in untouched.items() if name == "jingpai_gateway_searches_total") == 0
    assert untouched[("jingpai_gateway_reranker_breaker_state", (("state", "closed"),))] == 1
