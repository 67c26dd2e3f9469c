"""Issue #30, item 2: no JSON body, and no NDJSON line (``_bulk``, ``_msearch``), nested deeper than
``max_body_depth`` reaches the engine through the gateway (a ``_bulk`` document nested 5,000 deep kills
OpenSearch 2.19 with a ``StackOverflowError``); the client gets a 400 in the engine's error shape on a
connection that stays usable.

Real engines (both kinds) behind the session's default gateways (``max_body_depth`` 100). The deep bodies
are never sent to the engines directly: 101 levels is enough to be refused, and harmless if it got through.
"""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

from jingpai.plugin.settings import GatewaySettings
from tests.plugin.conftest import Setup

pytestmark = pytest.mark.engine

LIMIT = GatewaySettings(engine_url="http://127.0.0.1:1").max_body_depth
JSON = {"content-type": "application/json"}
NDJSON = {"content-type": "application/x-ndjson"}


def nested(depth: int) -> str:
    """A JSON object nested ``depth`` levels deep (objects only)."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def refused(resp: httpx.Response, where: str, depth: int) -> None:
    assert resp.status_code == 400, resp.text
    reason = (f"{where} is nested {depth} levels deep (objects and arrays), deeper than the gateway forwards: max_body_depth "
              f"is {LIMIT} (--max-body-depth (env JINGPAI_GATEWAY_MAX_BODY_DEPTH, config key max_body_depth))")
    cause = {"type": "jingpai_nested_too_deep_exception", "reason": reason}
    assert resp.json() == {"error": {"root_cause": [cause], **cause}, "status": 400}


@pytest.fixture
def client(setup: Setup) -> Iterator[httpx.Client]:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with httpx.Client(base_url=setup.gateway_url, timeout=60, limits=limits) as c:
        yield c


@pytest.fixture
def fresh_index(setup: Setup) -> Iterator[str]:
    name = f"test-deep-{uuid.uuid4().hex[:8]}"
    yield name
    setup.engine.raw.indices.delete(index=name, ignore_unavailable=True)


def still_serves(client: httpx.Client, setup: Setup) -> None:
    after = client.post(f"/{setup.index}/_search", json={"query": {"match": {"content": "中国经济"}}, "size": 3})
    assert after.status_code == 200, after.text
    assert setup.engine.request("GET", "/_cluster/health")["status"] in ("green", "yellow")  # the node is alive


def test_bulk_line_nested_too_deep_is_refused_and_nothing_is_forwarded(setup: Setup, client: httpx.Client, fresh_index: str) -> None:
    lines = [{"index": {"_index": fresh_index}}, {"a": 1}, {"index": {"_index": fresh_index}}]
    body = "".join(json.dumps(line) + "\n" for line in lines) + nested(LIMIT + 1) + "\n"
    resp = client.post("/_bulk", content=body.encode(), headers=NDJSON)
    refused(resp, "line 4 of the body of POST /_bulk", LIMIT + 1)
    assert not setup.engine.raw.indices.exists(index=fresh_index)  # not even the good first document
    still_serves(client, setup)


def test_bulk_at_the_limit_is_forwarded(setup: Setup, client: httpx.Client, fresh_index: str) -> None:
    body = json.dumps({"index": {"_index": fresh_index}}) + "\n" + json.dumps({"a": 1}) + "\n"
    body += json.dumps({"index": {"_index": fresh_index}}) + "\n" + nested(LIMIT) + "\n"
    resp = client.post(f"/{fresh_index}/_bulk", content=body.encode(), headers=JSON)  # an NDJSON API whatever the type says
    assert resp.status_code == 200, resp.text
    items = resp.json()["items"]
    assert items[0]["index"]["status"] == 201
    assert items[1]["index"]["status"] == 400  # the engine's own answer: deeper than index.mapping.depth.limit


@pytest.mark.parametrize("case", ["json", "gzip", "comment"])
def test_document_nested_too_deep_is_refused(setup: Setup, client: httpx.Client, fresh_index: str, case: str) -> None:
    deep = nested(LIMIT + 1)
    if case == "comment":
        # the engines accept comments: a quote inside one must not hide the levels after it
        deep = '{"x": 1 /* " */, "a": ' + nested(LIMIT) + "}"
    body = deep.encode()
    headers = dict(JSON)
    if case == "gzip":
        body, headers["content-encoding"] = gzip.compress(body), "gzip"
    resp = client.put(f"/{fresh_index}/_doc/1", content=body, headers=headers)
    refused(resp, f"the body of PUT /{fresh_index}/_doc/1", LIMIT + 1)
    assert not setup.engine.raw.indices.exists(index=fresh_index)
    still_serves(client, setup)


def test_search_and_msearch_nested_too_deep_are_refused(setup: Setup, client: httpx.Client) -> None:
    query = {"bool": {"must": [{"match": {"content": "中国经济"}}]}}
    for _ in range(LIMIT // 3):
        query = {"bool": {"must": [query]}}
    search = json.dumps({"query": query})
    depth = 6 + 3 * (LIMIT // 3)  # the body, query, bool, must, clause, match; 3 more per bool around it
    assert depth > LIMIT
    resp = client.post(f"/{setup.index}/_search", content=search.encode(), headers=JSON)
    refused(resp, f"the body of POST /{setup.index}/_search", depth)
    body = json.dumps({"index": setup.index}) + "\n" + json.dumps({"query": {"match_all": {}}}) + "\n"
    body += json.dumps({"index": setup.index}) + "\n" + search + "\n"
    resp = client.post("/_msearch", content=body.encode(), headers=NDJSON)
    refused(resp, "line 4 of the body of POST /_msearch", depth)
    still_serves(client, setup)


@pytest.mark.parametrize("path", ["/{index}/_search", "/{index}/_count"])
def test_source_parameter_nested_too_deep_is_refused(setup: Setup, client: httpx.Client, path: str) -> None:
    """The engines read ``?source=`` as the body of a request without one."""
    target = path.format(index=setup.index)
    resp = client.get(target, params={"source": nested(LIMIT + 1), "source_content_type": "application/json"})
    refused(resp, f"the source parameter of GET {target}", LIMIT + 1)
    shallow = client.get(target, params={"source": json.dumps({"query": {"match_all": {}}}), "source_content_type": "application/json"})
    assert shallow.status_code == 200, shallow.text
    still_serves(client, setup)


def test_bodies_of_other_media_types_are_the_engines_to_judge(setup: Setup, client: httpx.Client, fresh_index: str) -> None:
    """A body that is not JSON by its media type is not measured: the engine answers it, as before."""
    body, headers = b"[" * (LIMIT + 1), {"content-type": "text/plain"}
    direct = httpx.put(f"{setup.engine.url}/{fresh_index}/_doc/1", content=body, headers=headers, timeout=30)
    resp = client.put(f"/{fresh_index}/_doc/1", content=body, headers=headers)
    assert direct.status_code >= 400 and (resp.status_code, resp.json()) == (direct.status_code, direct.json())
