"""The gateway's Prometheus metrics (:class:`GatewayMetrics`), one registry per app, served at
``GET /_jingpai/metrics``.

What is counted (docs/gateway.md, *Metrics*):

- ``jingpai_gateway_requests_total{endpoint, status}``: requests by endpoint kind (:data:`ENDPOINT_KINDS`)
  and status class (``2xx`` … ``5xx``); ``jingpai_gateway_request_seconds{endpoint}`` their latency until
  the answer starts (a pass-through streams its body after that);
- ``jingpai_gateway_searches_total{outcome}``: each search the engine answered (an ``_msearch`` counts each
  of its searches): ``reranked``, or the ``jingpai.reason`` it was not (:data:`KNOWN_REASONS`);
  ``jingpai_gateway_augment_total{outcome}``: ``augmented``, its ``augment_reason``, ``disabled``
  (``?jingpai=off``) or ``not_augmented`` (nothing to add);
- ``jingpai_gateway_engine_seconds{hop}``: the engine hop (``search``, ``msearch``, ``mapping`` lookups,
  ``passthrough`` until the engine's headers);
- ``jingpai_gateway_rerank_seconds{outcome}``: reranker calls, ``ok`` or the fail-open reason (the wait for
  a rerank slot is not in it: a search that got none counts as ``reranker_busy`` in the outcomes);
- ``jingpai_gateway_reranker_breaker_state{state}``: 1 for the circuit breaker's current state;
- ``jingpai_gateway_dictionaries_loaded`` and ``jingpai_gateway_dictionary_loaded{version}``: the keyword
  dictionary versions loaded.
"""

from __future__ import annotations

import functools
import time
import typing
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from jingpai.plugin.dictionaries import DictionaryStore
from jingpai.plugin.gateway.plan import SearchPlan
from jingpai.plugin.rerank_client import REASONS as CLIENT_REASONS
from jingpai.plugin.rerank_client import BreakerState, CircuitBreaker

EndpointKind = Literal["search", "msearch", "passthrough", "jingpai"]
ENDPOINT_KINDS: tuple[str, ...] = typing.get_args(EndpointKind)
STATUS_CLASSES: tuple[str, ...] = ("2xx", "3xx", "4xx", "5xx")
#: why a search was not reranked, decided before the engine answers (jingpai.plugin.gateway.plan)
PLAN_REASONS: tuple[str, ...] = (
    "disabled", "augment_only", "no_reranker_configured", "scroll", "pit", "search_after", "sort", "size_0",
    "aggregations_only", "window_exceeded", "beyond_window", "no_full_text_query", "not_a_jingpai_index",
    "no_target_index", "unsupported_request",
)
#: why a planned rerank did not happen: the finishing step's, RerankUnavailable's reasons
#: (jingpai.plugin.rerank_client.RerankClient) and the gateway's own bound (reranker_busy)
FAIL_OPEN_REASONS: tuple[str, ...] = ("no_hits", "no_document_text", *CLIENT_REASONS, "reranker_busy")
KNOWN_REASONS: tuple[str, ...] = PLAN_REASONS + FAIL_OPEN_REASONS
AUGMENT_OUTCOMES: tuple[str, ...] = (
    "augmented", "not_augmented", "disabled", "dictionary_not_loaded", "no_full_text_query", "not_a_jingpai_index", "no_target_index",
    "unsupported_request",
)
BREAKER_STATES: tuple[str, ...] = typing.get_args(BreakerState)
#: seconds; from a cached pass-through (~1 ms) to an engine or reranker timeout
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)

Endpoint = Callable[[Request], Awaitable[Response]]


class _StateCollector(Collector):
    """Gauges read at scrape time: the breaker's state and the loaded dictionary versions."""

    def __init__(self, breaker: CircuitBreaker | None, dictionaries: DictionaryStore) -> None:
        self.breaker = breaker
        self.dictionaries = dictionaries

    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily("jingpai_gateway_reranker_breaker_state",
                                  "1 for the reranker circuit breaker's current state (no samples without a reranker)", labels=["state"])
        if self.breaker is not None:
            current = self.breaker.state
            for name in BREAKER_STATES:
                state.add_metric([name], 1.0 if name == current else 0.0)
        yield state
        versions = self.dictionaries.versions
        yield GaugeMetricFamily("jingpai_gateway_dictionaries_loaded", "Keyword dictionary versions loaded", value=len(versions))
        loaded = GaugeMetricFamily("jingpai_gateway_dictionary_loaded", "1 for each keyword dictionary version loaded", labels=["version"])
        for version in versions:
            loaded.add_metric([version], 1.0)
        yield loaded


class GatewayMetrics:
    """Prometheus metrics of one gateway app (its own registry, so several apps can live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("jingpai_gateway_requests", "Requests answered, by endpoint kind and status class",
                                ["endpoint", "status"], registry=r)
        self.request_seconds = Histogram("jingpai_gateway_request_seconds", "Time until the answer starts, by endpoint kind",
                                         ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.searches = Counter("jingpai_gateway_searches", "Searches the engine answered: reranked, or why not (jingpai.reason)",
                                ["outcome"], registry=r)
        self.augments = Counter("jingpai_gateway_augment", "Searches the engine answered: augmented, or why not (augment_reason)",
                                ["outcome"], registry=r)
        self.engine_seconds = Histogram("jingpai_gateway_engine_seconds", "Engine hop latency, by hop", ["hop"],
                                        buckets=LATENCY_BUCKETS, registry=r)
        self.rerank_seconds = Histogram("jingpai_gateway_rerank_seconds", "Reranker call latency: ok or the fail-open reason",
                                        ["outcome"], buckets=LATENCY_BUCKETS, registry=r)
        #: labelled children by (metric name, labels): ``labels()`` validates and locks on every call, which
        #: is a measurable share of a pass-through search's CPU
        self._children: dict[tuple[str, tuple[str, ...]], Any] = {}
        # every known label value from the start: a rate over a series that appears late misses its first sample
        for kind in ENDPOINT_KINDS:
            for status in STATUS_CLASSES:
                self.requests.labels(kind, status)
        for outcome in ("reranked", *KNOWN_REASONS):
            self.searches.labels(outcome)
        for outcome in AUGMENT_OUTCOMES:
            self.augments.labels(outcome)

    def _child(self, metric: Counter | Histogram, *labels: str) -> Any:
        key = (metric._name, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def watch(self, *, breaker: CircuitBreaker | None, dictionaries: DictionaryStore) -> None:
        """Expose the breaker's state and the loaded dictionaries (read at each scrape)."""
        self.registry.register(_StateCollector(breaker, dictionaries))

    def observed(self, kind: EndpointKind, endpoint: Endpoint) -> Endpoint:
        """``endpoint`` counted and timed as ``kind`` (wrap a route that answers its own errors)."""

        @functools.wraps(endpoint)
        async def answer(request: Request) -> Response:
            started = time.perf_counter()
            response = await endpoint(request)
            self._child(self.requests, kind, f"{response.status_code // 100}xx").inc()
            self._child(self.request_seconds, kind).observe(time.perf_counter() - started)
            return response

        return answer

    def engine_hop(self, hop: str, seconds: float) -> None:
        self._child(self.engine_seconds, hop).observe(seconds)

    def rerank_call(self, outcome: str, seconds: float) -> None:
        self.rerank_seconds.labels(outcome).observe(seconds)

    def search_answered(self, plan: SearchPlan, reason: str | None) -> None:
        """One search answered with a ``jingpai`` object whose ``reason`` is ``reason`` (``None``: reranked)."""
        self._child(self.searches, "reranked" if reason is None else reason).inc()
        if plan.rewrite and plan.rewrite.augmented:
            outcome = "augmented"
        else:  # not_augmented: a jingpai index's query the dictionary and segmenter found nothing to add to
            outcome = plan.augment_reason or ("disabled" if plan.mode == "off" else "not_augmented")
        self._child(self.augments, outcome).inc()

    def exposition(self, request: Request) -> Response:
        """The registry in the format the scraper accepts (Prometheus text, or OpenMetrics when asked for)."""
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(self.registry), media_type=content_type)


__all__ = [
    "AUGMENT_OUTCOMES", "ENDPOINT_KINDS", "FAIL_OPEN_REASONS", "KNOWN_REASONS", "PLAN_REASONS", "EndpointKind", "GatewayMetrics",
]
