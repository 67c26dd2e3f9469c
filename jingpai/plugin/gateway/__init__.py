"""The ``_search`` gateway: the engine's REST API with keyword augmentation and reranking.

``create_app(settings)`` returns a Starlette app that forwards every request to ``settings.engine_url``:

- ``GET|POST /{index}/_search``, ``/_search``, ``/{index}/_msearch``, ``/_msearch`` are parsed; on
  indices built by ``jingpai index`` (mapping ``_meta.jingpai``) their full-text clauses are widened
  (:mod:`jingpai.plugin.augment`) and the top window of hits is reranked by ``jingpai serve``, the
  model's scores fused with the engine's (:mod:`jingpai.reranker.fusion`). Each response gets a
  top-level ``jingpai`` object (:class:`JingpaiInfo`) and reranked hits a ``_jingpai`` object with the
  engine's score and rank and the model's score. Hits past the window keep the engine's order, so paging
  with ``from``/``size`` never repeats or skips a hit.
- ``GET /_jingpai/health``, ``POST /_jingpai/reload`` (rescan the dictionaries,
  :mod:`jingpai.plugin.dictionaries`) and ``GET /_jingpai/metrics`` (Prometheus) are the gateway's own.
- every other request is streamed through unchanged (method, path, query, headers, body; status,
  headers and body of the answer). The gateway adds no headers or credentials of its own and only
  ever talks to the configured engine and reranker URLs.

Malformed requests are forwarded unchanged so the engine answers them (:class:`NotOursToJudge`); no error
drops the client's keep-alive connection (:func:`~jingpai.plugin.gateway.app.guarded`); reranker calls are
bounded gateway-wide and per ``_msearch`` (``reason: reranker_busy`` past ``timeout_ms`` of waiting); a
client's ``filter_path`` is applied after reranking (:class:`FilterPath`); the index-metadata cache is keyed
by credentials.

Per request: ``?jingpai=off|augment|rerank``, ``?jingpai_fusion=…&jingpai_fusion_weight=…&jingpai_rrf_k=…``
and a body section ``ext.jingpai`` (:class:`JingpaiExt`), all removed before the request is forwarded.

The modules, in the order a search passes them:

========== =========================================================================================
models     the gateway's request/response vocabulary (``ext.jingpai``, ``?jingpai…``, ``jingpai``)
plan       a search's frozen plan, decided without I/O (augment? rerank which window? which fields?)
source     ``_source`` folding: the rerank fields fetched with the window, removed from the answer
meta       the per-credentials cache of which indices jingpai built (their field roles, dictionary)
proxy      the transport to the engine (pass-through streaming, searches, mapping lookups)
hybrid     on an index with vectors: the query's kNN search (embedded by ``/embed``) fused with BM25's hits
rerank     the reranker behind the gateway's concurrency bounds
finish     rerank + fuse the window, cut the page, add ``jingpai``, apply ``filter_path``
handlers   the routes (``_search``, ``_msearch``, pass-through): :class:`Gateway`
admin      the gateway's own ``/_jingpai/`` routes: ``health``, ``reload`` (dictionaries), ``metrics``
metrics    the Prometheus metrics of one app (:class:`GatewayMetrics`, its own registry)
app        :func:`create_app` and the one exception → engine-shaped HTTP error mapping
errors     :class:`GatewayError` (answered by the gateway) and :class:`NotOursToJudge` (by the engine)
========== =========================================================================================

Example:
    >>> app = create_app(GatewaySettings(engine_url="http://127.0.0.1:9200", reranker_url="http://127.0.0.1:8081"))  # doctest: +SKIP
    >>> uvicorn.run(app, port=8080, http=app.state.http_protocol)                                                    # doctest: +SKIP
"""

from __future__ import annotations

from jingpai.plugin.filter_path import FilterPath
from jingpai.plugin.gateway.app import create_app, es_error, handle_exception, http_error
from jingpai.plugin.gateway.errors import BadGatewayRequest, GatewayError, NotOursToJudge
from jingpai.plugin.gateway.handlers import Gateway
from jingpai.plugin.gateway.models import FusionParams, JingpaiExt, JingpaiInfo
from jingpai.plugin.gateway.plan import Planner, SearchPlan, SearchRequest, parse_search, plan_search
from jingpai.plugin.gateway.proxy import append_member

#: the old private name, still imported by tests and benchmarks
_append_member = append_member

__all__ = [
    "BadGatewayRequest", "FilterPath", "FusionParams", "Gateway", "GatewayError", "JingpaiExt", "JingpaiInfo", "NotOursToJudge",
    "Planner", "SearchPlan", "SearchRequest", "create_app", "es_error", "handle_exception", "http_error", "parse_search",
    "plan_search",
]
