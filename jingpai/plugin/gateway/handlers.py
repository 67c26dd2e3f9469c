"""The gateway's routes: ``_search``, ``_msearch`` and the pass-through of everything else (its own
``/_jingpai/*`` routes are :mod:`~jingpai.plugin.gateway.admin`).

A search is read (:func:`~jingpai.plugin.gateway.plan.parse_search`), its index meta looked up with the
client's credentials (:mod:`~jingpai.plugin.gateway.meta`), planned
(:func:`~jingpai.plugin.gateway.plan.plan_search`), forwarded (:mod:`~jingpai.plugin.gateway.proxy`) and
finished (:func:`~jingpai.plugin.gateway.finish.finish`). A request the gateway cannot interpret goes to
the engine unchanged, so the engine answers it as it would directly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from jingpai.indexer.mapping import IndexMeta
from jingpai.plugin.augment import QueryRewriter
from jingpai.plugin.dictionaries import DictionaryStore
from jingpai.plugin.filter_path import FilterPath
from jingpai.plugin.gateway.depth import check_depth, check_passthrough, check_source_parameter
from jingpai.plugin.gateway.errors import NotOursToJudge
from jingpai.plugin.gateway.finish import finish
from jingpai.plugin.gateway.hybrid import HybridSearcher, KnnOutcome, fuse_hits
from jingpai.plugin.gateway.meta import Credentials, IndexMetaCache
from jingpai.plugin.gateway.metrics import GatewayMetrics
from jingpai.plugin.gateway.models import FusionParams, take_fusion, take_mode
from jingpai.plugin.gateway.plan import Planner, SearchPlan, msearch_target, parse_search, plan_search, unchanged_plan
from jingpai.plugin.gateway.proxy import (
    EngineProxy, Upstream, append_encoded, append_member, body_headers, dumps, forward_headers, path_part, read_body,
    response_headers,
)
from jingpai.plugin.gateway.rerank import BoundedReranker, fail_open_hint
from jingpai.plugin.rerank_client import RerankClient
from jingpai.plugin.settings import GatewaySettings

# the whole gateway logs under one name, as before it was a package (operators' logging configs name it)
logger = logging.getLogger(__package__)

#: a ``\\u`` escape of one of the letters of "jingpai" (a, g, i, j, n, p); escaped CJK text (``\\u4e2d``), which
#: JSON encoders with ASCII output write for every Chinese query, does not match
_ESCAPED_JINGPAI_LETTER = re.compile(rb"\\u00(?:6[179aAeE]|70)")

#: what planning may trip over on a search it cannot interpret: such a search is forwarded unchanged
_NOT_INTERPRETABLE = (NotOursToJudge, RecursionError, TypeError, ValueError, AttributeError, KeyError, IndexError)


class Gateway:
    """The gateway's state (engine proxy, index-meta cache, dictionaries, reranker, metrics) and request
    handlers; see :func:`jingpai.plugin.gateway.app.create_app`."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.metrics = GatewayMetrics()
        self.dictionaries = DictionaryStore(settings.dict_dirs, root=settings.dict_root)
        self.proxy = EngineProxy(settings, observe=self.metrics.engine_hop)
        self.meta = IndexMetaCache(self.proxy, ttl_s=settings.meta_ttl_s)
        self.bounded_reranker = BoundedReranker(settings, observe=self.metrics.rerank_call) if settings.reranker_url else None
        self.planner = Planner(settings, rewriter_for=self._rewriter)
        self.hybrid = HybridSearcher(settings, kind=lambda: self.proxy.engine_kind, fetch=lambda method, path, headers, body, hop: (
            self.proxy.fetch(method, path, headers=headers, body=body, hop=hop)))
        self.metrics.watch(breaker=self.reranker.breaker if self.reranker else None, dictionaries=self.dictionaries)
        # the jingpai object of every search forwarded unread (_forwarded_as_is), encoded once: it is
        # the same on each, and building it (model validation, JSON) cost ~25 µs of the gateway's ~0.5 ms there
        self._unread_info = dumps(SearchPlan(body={}, params={}, mode="off", reason="disabled").info())

    @property
    def reranker(self) -> RerankClient | None:
        """The ``jingpai serve`` client (``None``: no reranker configured)."""
        return self.bounded_reranker.client if self.bounded_reranker is not None else None

    async def aclose(self) -> None:
        self.dictionaries.close()
        await self.proxy.aclose()
        await self.hybrid.aclose()
        if self.bounded_reranker is not None:
            await self.bounded_reranker.aclose()

    def _rewriter(self, meta: IndexMeta) -> QueryRewriter | None:
        if meta.dict_version is None:
            dictionary, segmenter = None, self.dictionaries.plain_segmenter()
        else:
            # loaded (or found missing) by plan() before planning: planning does no I/O
            entry = self.dictionaries.loaded(meta.dict_version)
            if entry is None:
                return None
            dictionary, segmenter = entry
        s = self.settings
        return QueryRewriter(meta, dictionary=dictionary, segmenter=segmenter, keywords_top_k=s.keywords_top_k,
                             seg_boost=s.seg_boost, keyword_boost=s.keyword_boost, weight_boost=s.weight_boost)

    async def plan(self, index: str | None, body: dict, params: Mapping[str, str], credentials: Credentials, *,
                   mode_param: str | None, fusion_param: FusionParams | None = None, hybrid_allowed: bool = True) -> SearchPlan:
        """Read, look up and plan one search (:mod:`jingpai.plugin.gateway.plan`).

        A search the gateway cannot interpret (:class:`NotOursToJudge`, or a shape its planning trips over)
        is planned unchanged, ``reason: unsupported_request``: the engine answers it as it would directly.

        Raises:
            BadGatewayRequest: a bad ``ext.jingpai`` or fusion parameter (the gateway's own input).
        """
        try:
            search = parse_search(index, body, params, settings=self.settings, mode_param=mode_param, fusion_param=fusion_param)
            meta = await self.meta.get(index, credentials) if search.mode != "off" else None
            if meta is not None and meta.dict_version is not None:
                # a version not loaded yet is looked for under the dictionary root and loaded off the event loop
                await self.dictionaries.aget(meta.dict_version)
            return plan_search(search, meta, self.planner, hybrid_allowed=hybrid_allowed)
        except _NOT_INTERPRETABLE as exc:
            logger.warning("forwarding a search on %r unchanged (the engine judges it): %s: %s", index, type(exc).__name__, exc)
            return unchanged_plan(body, params, mode_param or self.settings.mode)

    async def _send(self, request: Request, body: bytes, params: Mapping[str, str], path: str, *, wrote_body: bool,
                    ndjson: bool = False) -> Upstream:
        if wrote_body and body:
            headers = body_headers(request, ndjson=ndjson)
        else:
            headers = forward_headers(request.headers.items(), body_rewritten=True)
        hop = "msearch" if ndjson else "search"
        return await self.proxy.fetch(request.method, path, headers=headers, body=body, params=params, hop=hop)

    @staticmethod
    def _relay(resp: Upstream, filter_path: FilterPath | None = None) -> Response:
        """The engine's answer as it came; filtered by the client's ``filter_path`` when the gateway took it off."""
        headers = response_headers(resp, body_rewritten=True)
        if filter_path is not None:
            try:
                return Response(dumps(filter_path.apply(resp.json())), status_code=resp.status_code, headers=headers)
            except (ValueError, RecursionError):
                pass  # not JSON: nothing to filter
        return Response(resp.content, status_code=resp.status_code, headers=headers)

    async def passthrough(self, request: Request) -> Response:
        """Stream any request to the engine and its answer back, unchanged; a JSON or NDJSON body is read
        first and refused when it nests deeper than ``max_body_depth`` (:mod:`.depth`).

        Raises:
            NestedTooDeep: the body (or one of its lines) nests too deep.
        """
        await check_passthrough(request, self.settings.max_body_depth)
        return await self.proxy.passthrough(request)

    async def search(self, request: Request) -> Response:
        """``_search``: planned, forwarded, and finished when reranked (else ``jingpai`` spliced into the answer)."""
        index = request.path_params.get("index")
        params = dict(request.query_params.multi_items())
        mode_param, fusion_param = take_mode(params), take_fusion(params)
        raw = await read_body(request)
        check_depth(raw, self.settings.max_body_depth, ndjson=False, request=request)
        check_source_parameter(request, self.settings.max_body_depth, ndjson=False)
        unread = self._forwarded_as_is(raw, mode_param, fusion_param)
        if unread:
            plan = SearchPlan(body={}, params=params, mode="off", reason="disabled")
        else:
            try:
                body = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError):
                body = None
            if not isinstance(body, dict):
                # not ours to judge: the engine answers with its own parse error
                return await self.passthrough(request)
            credentials = Credentials.of(request.headers.items())
            plan = await self.plan(index, body, params, credentials, mode_param=mode_param, fusion_param=fusion_param)
        path = f"/{path_part(index)}/_search" if index else "/_search"
        # nothing to change: the client's own bytes, without encoding them again
        payload = dumps(plan.body) if plan.rewritten else raw
        # a hybrid search's kNN half (embed, then kNN) runs while the engine answers its BM25 half
        knn = asyncio.create_task(self.hybrid.knn(plan.hybrid, body_headers(request))) if plan.hybrid is not None else None
        try:
            resp = await self._send(request, payload, plan.params, path, wrote_body=plan.rewritten)
        except BaseException:
            if knn is not None:
                knn.cancel()
            raise
        if resp.status_code != 200:
            if knn is not None:
                knn.cancel()
            return self._relay(resp, plan.filter_path)
        headers = response_headers(resp, body_rewritten=True)
        if knn is not None:
            return await self._finish_hybrid(plan, resp.json(), knn, headers)
        if not plan.rerank:
            # the engine's answer plus the jingpai object: spliced into its bytes instead of parsing and
            # re-encoding tens of kilobytes of hits (the gateway's whole cost when it does not rerank)
            if unread and "filter_path" not in plan.params:
                spliced = append_encoded(resp.content, "jingpai", self._unread_info)
            else:
                member: dict = {"jingpai": plan.info()}
                if "filter_path" in plan.params:  # the engine filtered its members; the same filter applies to ours
                    member = FilterPath.parse(plan.params["filter_path"]).apply(member)
                spliced = append_member(resp.content, "jingpai", member["jingpai"]) if member else resp.content
            if spliced is not None:
                self.metrics.search_answered(plan, plan.reason)
                return Response(spliced, status_code=200, headers=headers)
        finished = await finish(plan, resp.json(), self.bounded_reranker, doc_chars=self.settings.doc_chars)
        self.metrics.search_answered(plan, finished.reason)
        return Response(dumps(finished.data), status_code=200, headers=headers)

    async def _finish_hybrid(self, plan: SearchPlan, data: dict, knn: asyncio.Task[KnnOutcome], headers: dict[str, str]) -> Response:
        """Fuse a hybrid search's kNN hits into its BM25 answer, then finish it (rerank) as any other."""
        assert plan.hybrid is not None
        hybrid = fuse_hits(plan.hybrid, data, await knn)
        finished = await finish(plan, data, self.bounded_reranker, doc_chars=self.settings.doc_chars, hybrid=hybrid)
        self.metrics.search_answered(plan, finished.reason)
        return Response(dumps(finished.data), status_code=200, headers=headers)

    def _forwarded_as_is(self, raw: bytes, mode_param: str | None, fusion_param: FusionParams | None) -> bool:
        """Whether a search is off (``?jingpai=off`` or the gateway's mode) with nothing of the gateway's in
        its body: then its bytes go to the engine unread, the plan is the constant "disabled" one, and the
        gateway spends on it only the hop and the splice (its CPU per search is its latency cost on a busy
        machine). A body that may hold ``ext.jingpai`` (even with ``\\u``-escaped letters) is read and planned."""
        if fusion_param is not None or (mode_param or self.settings.mode) != "off":
            return False
        return b"jingpai" not in raw and _ESCAPED_JINGPAI_LETTER.search(raw) is None

    async def msearch(self, request: Request) -> Response:
        """``_msearch``: each search planned like a ``_search``; unchanged lines are forwarded as the client's
        bytes. Reranking is bounded per request (``msearch_rerank_concurrency``) and gateway-wide
        (``rerank_concurrency``); a search that gets no slot within ``timeout_ms`` is served in the engine's
        order (``reason: reranker_busy``)."""
        index = request.path_params.get("index")
        params = dict(request.query_params.multi_items())
        mode_param, fusion_param = take_mode(params), take_fusion(params)
        raw = await read_body(request)
        check_depth(raw, self.settings.max_body_depth, ndjson=True, request=request)
        check_source_parameter(request, self.settings.max_body_depth, ndjson=True)
        lines = _ndjson_pairs(raw)
        if lines is None:
            return await self.passthrough(request)  # not ours to judge: the engine answers with its own error
        raw_lines, searches = lines
        filters = params.pop("filter_path", None)
        filter_path = FilterPath.parse(filters) if filters is not None else None
        credentials = Credentials.of(request.headers.items())
        plans: list[SearchPlan] = []
        out_lines: list[bytes] = []
        for i in range(0, len(searches), 2):
            header, body = searches[i], searches[i + 1]
            try:
                target = msearch_target(header.get("index", index))
            except NotOursToJudge as exc:
                logger.warning("forwarding _msearch search %d unchanged (the engine judges it): %s", i // 2, exc)
                plan = unchanged_plan(body, {}, mode_param or self.settings.mode)
            else:
                plan = await self.plan(target, body, {}, credentials, mode_param=mode_param, fusion_param=fusion_param, hybrid_allowed=False)
            plans.append(plan)
            out_lines += [raw_lines[i], dumps(plan.body) if plan.rewritten else raw_lines[i + 1]]
        payload = b"\n".join(out_lines) + b"\n"
        path = f"/{path_part(index)}/_msearch" if index else "/_msearch"
        resp = await self._send(request, payload, params, path, wrote_body=any(p.rewritten for p in plans), ndjson=True)
        if resp.status_code != 200:
            return self._relay(resp, filter_path)
        data = await self._finish_msearch(plans, resp.json())
        if filter_path is not None:
            data = filter_path.apply(data)
        return Response(dumps(data), status_code=200, headers=response_headers(resp, body_rewritten=True))

    async def _finish_msearch(self, plans: list[SearchPlan], data: dict) -> dict:
        """Finish each answer of an ``_msearch`` under its per-request bound; log one fail-open summary."""
        responses = data.get("responses") or []
        per_request = asyncio.Semaphore(self.settings.msearch_rerank_concurrency)

        async def finish_one(plan: SearchPlan, item: Any) -> tuple[Any, str | None]:
            if not isinstance(item, dict) or "error" in item:
                return item, plan.reason
            done = await finish(plan, item, self.bounded_reranker, doc_chars=self.settings.doc_chars, slots=(per_request,), log=False)
            self.metrics.search_answered(plan, done.reason)
            return done.data, done.reason

        finished = await asyncio.gather(*(finish_one(p, r) for p, r in zip(plans, responses)))
        data["responses"] = [*(item for item, _ in finished), *responses[len(plans):]]
        fallbacks: dict[str, int] = {}
        for plan, (_, reason) in zip(plans, finished):
            if plan.rerank and reason is not None:
                fallbacks[reason] = fallbacks.get(reason, 0) + 1
        if fallbacks:
            hints = "".join(fail_open_hint(r) for r in sorted(fallbacks))
            logger.warning("_msearch: %d of %d searches served in engine order (fail-open): %s%s",
                           sum(fallbacks.values()), len(plans), fallbacks, hints)
        return data


def _ndjson_pairs(raw: bytes) -> tuple[list[bytes], list[dict]] | None:
    """An ``_msearch`` body's lines, raw and parsed, when it is header/body pairs of JSON objects; ``None`` when
    the engine should judge it (no final newline, bad JSON, an odd line count, a line that is no object)."""
    if not raw.endswith(b"\n"):  # both engines refuse a body without its final newline: theirs to say how
        return None
    try:
        # NDJSON lines end at \n only (a JSON string may hold U+2028, which str.splitlines would cut at)
        raw_lines = [line for line in raw.split(b"\n") if line.strip()]
        lines = [json.loads(line) for line in raw_lines]
    except (ValueError, RecursionError):
        return None
    if len(lines) % 2 or not all(isinstance(x, dict) for x in lines):
        return None
    return raw_lines, lines


__all__ = ["Gateway"]
