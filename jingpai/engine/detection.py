"""What answers at an engine URL: :func:`detect` asks the node (kind and version), with the fallbacks a user
without monitoring permissions needs, and names the fix when credentials or the certificate are refused.
:mod:`jingpai.engine.client` re-exports everything here; callers import it from there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from jingpai.engine.auth import NO_AUTH, EngineAuth, access_error
from jingpai.errors import UnavailableError

logger = logging.getLogger(__name__)

EngineKind = Literal["opensearch", "elasticsearch"]


class EngineConnectionError(UnavailableError, RuntimeError):
    """No Elasticsearch/OpenSearch answered at the given URL."""


@dataclass(frozen=True)
class EngineInfo:
    kind: EngineKind
    version: str
    url: str


def detect(url: str, *, timeout_s: float = 10.0, headers: dict[str, str] | None = None, auth: EngineAuth | None = None) -> EngineInfo:
    """Ask the node at ``url`` what it is.

    ``GET /_nodes/_local`` is used rather than ``GET /`` because the Elasticsearch integ-test
    distribution has no root endpoint. Elasticsearch marks every response with ``X-Elastic-Product``.
    A user without ``cluster:monitor/nodes/info`` (403) is asked ``GET /`` (``cluster:monitor/main``); a user
    with neither gets the engine kind from the answer's headers and version ``unknown``.

    Raises:
        EngineAccessError: 401 (credentials missing or rejected) or an untrusted certificate, naming the fix.
        EngineConnectionError: nothing answers, or the answer is not from ES/OpenSearch.
    """
    auth = auth or NO_AUTH
    base = url.rstrip("/")
    sent = {**(headers or {}), **auth.headers()}
    verify: Any = auth.ssl_context() or True
    try:
        with httpx.Client(timeout=timeout_s, headers=sent, verify=verify) as client:
            resp = client.get(f"{base}/_nodes/_local", params={"filter_path": "nodes.*.version,nodes.*.build_flavor"})
            if resp.status_code == 403:
                root = client.get(f"{base}/")
                if root.status_code == 200 and isinstance(root.json().get("version"), dict):
                    version = root.json()["version"]
                    kind_: EngineKind = "opensearch" if version.get("distribution") == "opensearch" else "elasticsearch"
                    return EngineInfo(kind=kind_, version=str(version.get("number")), url=base)
                kind_ = "elasticsearch" if resp.headers.get("x-elastic-product") == "Elasticsearch" else "opensearch"
                logger.info("%s may not read the engine's version at %s (HTTP 403 to GET /_nodes/_local and GET /): taking it "
                            "for %s", auth.who, base, kind_)
                return EngineInfo(kind=kind_, version="unknown", url=base)
    except httpx.HTTPError as exc:
        problem = access_error(exc, url=base, auth=auth)
        if problem is not None:
            raise problem from exc
        if isinstance(exc, httpx.RemoteProtocolError) and base.startswith("http://"):
            raise EngineConnectionError(f"the engine at {base} closed the connection without an answer; if it serves HTTPS "
                                        f"(a secured node), use {'https://' + base[len('http://'):]}") from exc
        raise EngineConnectionError(f"no engine answers at {url}: {exc}; start one with `jingpai engine up`") from exc
    if resp.status_code == 401:
        problem = access_error(httpx.HTTPStatusError("HTTP 401", request=resp.request, response=resp), url=base, auth=auth)
        assert problem is not None
        raise problem
    if resp.status_code != 200:
        raise EngineConnectionError(f"{url} answered HTTP {resp.status_code} to GET /_nodes/_local: {resp.text[:200]}")
    nodes = resp.json().get("nodes") or {}
    if not nodes:
        raise EngineConnectionError(f"{url} did not describe its nodes; is it Elasticsearch or OpenSearch?")
    version = next(iter(nodes.values()))["version"]
    kind: EngineKind = "elasticsearch" if resp.headers.get("x-elastic-product") == "Elasticsearch" else "opensearch"
    return EngineInfo(kind=kind, version=version, url=url.rstrip("/"))


__all__ = ["EngineConnectionError", "EngineInfo", "EngineKind", "detect"]
