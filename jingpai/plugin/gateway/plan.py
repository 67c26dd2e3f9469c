"""Planning one search: what the gateway does to it before forwarding, decided without I/O.

:func:`parse_search` reads the client's search (body, URL parameters) and removes the gateway's own
parameters; :func:`plan_search` decides augmentation and reranking from it and the index's meta and
returns a frozen :class:`SearchPlan`: the body and parameters to forward and everything the finishing step
needs. Neither touches HTTP: the caller looks the index meta up (with the client's credentials,
:mod:`jingpai.plugin.gateway.meta`) between the two, so both are unit-testable on plain data::

    >>> settings = GatewaySettings(engine_url="http://e:9200", reranker_url="http://r:8081")
    >>> search = parse_search("docs", {"query": {"match": {"title": "GDP"}}, "size": 5}, {}, settings=settings)
    >>> plan = plan_search(search, IndexMeta(("title",), None, "term_frequency", "nested"), Planner(settings))
    >>> plan.rerank, plan.window, plan.body["size"]
    (True, 20, 20)

The reasons a search is not reranked (``plan.reason``) are the ``jingpai.reason`` values of docs/gateway.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from jingpai.indexer.mapping import IndexMeta
from jingpai.indexer.rerank_keywords import RerankKeywords
from jingpai.plugin.augment import QueryRewriter, RewriteResult, find_full_text
from jingpai.plugin.filter_path import FilterPath
from jingpai.plugin.gateway.errors import BadGatewayRequest, NotOursToJudge
from jingpai.plugin.gateway.hybrid import HybridPlan, exclude_vector, not_applied, plan_hybrid
from jingpai.plugin.gateway.models import FusionParams, HybridParams, JingpaiExt, JingpaiInfo, take_ext
from jingpai.plugin.gateway.source import SourceFold, fold_source, fold_url_source
from jingpai.plugin.settings import GatewaySettings, HybridSpec
from jingpai.reranker.fusion import FusionError, FusionSpec


@dataclass(frozen=True)
class SearchRequest:
    """A client's search as the gateway read it (:func:`parse_search`): its own parameters taken off."""

    index: str | None
    #: a copy of the client's body without ``ext.jingpai``
    body: dict
    params: Mapping[str, str]
    ext: JingpaiExt
    mode: str
    fusion: FusionSpec
    #: whether ``body`` already differs from what the client sent (``ext.jingpai`` was removed)
    rewritten: bool = False
    #: the hybrid first stage asked for (applied only on an index with vectors)
    hybrid: HybridSpec = field(default_factory=HybridSpec)


@dataclass(frozen=True)
class SearchPlan:
    """What the gateway decided for one search before forwarding it (built once, never changed)."""

    #: the body to forward (the planner's own copy; not to be modified)
    body: dict
    params: Mapping[str, str]
    mode: str
    reason: str | None = None
    augment_reason: str | None = None
    rewrite: RewriteResult | None = None
    rerank: bool = False
    query_text: str = ""
    from_: int = 0
    size: int = 10
    window: int = 0
    fusion: FusionSpec | None = None
    #: the rerank fields and what ``_source`` folding added for them
    source: SourceFold = field(default_factory=lambda: SourceFold(()))
    #: the client's ``filter_path``, taken off the engine request and applied to the reranked answer
    filter_path: FilterPath | None = None
    #: whether ``body`` differs from what the client sent (else the client's bytes are forwarded as they came)
    rewritten: bool = False
    #: the index's stored rerank keywords, fetched with the window (``None``: none stored, or ``_source`` hides them)
    rerank_keywords: RerankKeywords | None = None
    #: the kNN half of a hybrid search (``None``: BM25 alone)
    hybrid: HybridPlan | None = None
    #: the response's ``jingpai.hybrid`` as planned (``None``: the index has no vectors)
    hybrid_info: dict | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def fields(self) -> tuple[str, ...]:
        """The document fields sent to the reranker."""
        return self.source.fields

    def info(self, **overrides: Any) -> dict:
        """The response's ``jingpai`` object (:class:`JingpaiInfo`); ``overrides`` are the finishing step's
        (``reason``, ``reranked``, ``model``, ``took_rerank_ms``, ``fusion``)."""
        augmented = bool(self.rewrite and self.rewrite.augmented)
        data = {
            "mode": self.mode,
            "reranked": False,
            "reason": self.reason,
            "augmented": augmented,
            "augment_reason": None if augmented else self.augment_reason,
            "keywords": [w for w, _ in self.rewrite.keywords] if self.rewrite else [],
            "window": self.window or None,
            "hybrid": self.hybrid_info,
            **overrides,
        }
        # no ``hybrid`` member on an index without vectors: the answer is as it was before hybrid search
        return JingpaiInfo(**data).model_dump(exclude=None if data.get("hybrid") is not None else {"hybrid"})


@dataclass(frozen=True)
class Planner:
    """What planning needs from the gateway besides the request: its settings (a search is reranked only when
    ``reranker_url`` is set) and the query rewriter of an index (``None``: its dictionary is not loaded)."""

    settings: GatewaySettings
    rewriter_for: Callable[[IndexMeta], QueryRewriter | None] = lambda meta: None


# ---------------------------------------------------------------------------------------------- parsing


def int_param(value: Any, name: str) -> int:
    """A non-negative ``from`` / ``size``; anything else is the engine's to judge."""
    if isinstance(value, bool):
        raise NotOursToJudge(f"[{name}] is a boolean: {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise NotOursToJudge(f"[{name}] is not an integer: {value!r}") from exc
    if number < 0:
        raise NotOursToJudge(f"[{name}] is negative: {number}")
    return number


def msearch_target(value: Any) -> str | None:
    """An ``_msearch`` header's ``index`` (a name, comma list or list of names) as one expression."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise NotOursToJudge(f"_msearch header [index] is neither a string nor a list of strings: {value!r}")


def sorts_by_other_fields(sort: Any) -> bool:
    """Whether a ``sort`` value orders by anything other than descending ``_score``."""
    if sort in (None, [], ""):
        return False
    items = sort if isinstance(sort, list) else [sort]
    for item in items:
        if isinstance(item, str):
            for part in item.split(","):
                name, _, order = part.partition(":")
                if name != "_score" or order not in ("", "desc"):
                    return True
        elif isinstance(item, dict):
            for name, spec in item.items():
                order = spec.get("order", "desc") if isinstance(spec, dict) else spec
                if name != "_score" or order != "desc":
                    return True
        else:
            return True
    return False


def parse_search(index: str | None, body: dict, params: Mapping[str, str], *, settings: GatewaySettings,
                 mode_param: str | None = None, fusion_param: FusionParams | None = None) -> SearchRequest:
    """Read one search: take ``ext.jingpai`` off a copy of ``body`` and resolve its mode and fusion.

    Args:
        params: the request's URL parameters, the gateway's own (``?jingpai…``) already taken off.
        mode_param / fusion_param: those URL parameters; they win over ``ext.jingpai``, which wins over
            the index's ``indices`` entry, which wins over the gateway's settings.

    Raises:
        BadGatewayRequest: a bad ``ext.jingpai`` or fusion (the gateway's own input).
    """
    # planning sets only top-level members of its body (and pops ext.jingpai from its own ext): a shallow
    # copy leaves the caller's body as it came, at a fraction of a deep copy's cost per search
    body = dict(body)
    had_ext = isinstance(body.get("ext"), dict) and "jingpai" in body["ext"]
    if had_ext:
        body["ext"] = dict(body["ext"])
    ext = take_ext(body)
    try:
        if had_ext or fusion_param is not None:
            requested = FusionParams.model_validate({
                **ext.model_dump(include=set(FusionParams.model_fields), exclude_none=True),
                **(fusion_param.model_dump(exclude_none=True) if fusion_param else {}),
            })
            fusion = requested.over(settings.fusion_for(index))
        else:
            fusion = settings.fusion_for(index)
    except FusionError as exc:
        raise BadGatewayRequest(f"invalid fusion for this request: {exc}") from exc
    mode = mode_param or ext.mode or settings.mode
    hybrid = settings.hybrid_for(index)
    if ext.hybrid is not None:
        hybrid = ext.hybrid.over(hybrid)
    return SearchRequest(index=index, body=body, params=dict(params), ext=ext, mode=mode, fusion=fusion, rewritten=had_ext, hybrid=hybrid)


def unchanged_plan(body: dict, params: Mapping[str, str], mode: str) -> SearchPlan:
    """The client's search as it came (only ``ext.jingpai`` removed): not augmented, not reranked."""
    ext = body.get("ext")
    rewritten = isinstance(ext, dict) and "jingpai" in ext
    if rewritten:
        rest = {k: v for k, v in ext.items() if k != "jingpai"}
        body = {k: v for k, v in body.items() if k != "ext"} | ({"ext": rest} if rest else {})
    return SearchPlan(body=body, params=params, mode=mode, reason="unsupported_request", augment_reason="unsupported_request",
                      rewritten=rewritten)


# ---------------------------------------------------------------------------------------------- planning


def shape_reason(body: dict, params: Mapping[str, str], planner: Planner, *, need_reranker: bool = True) -> str | None:
    """Why a search is not reranked because of its shape (``None``: it may be); needs no index lookup.
    ``need_reranker=False``: whether its shape allows a hybrid first stage (which needs no reranker)."""
    if need_reranker and planner.settings.reranker_url is None:
        return "no_reranker_configured"
    if "scroll" in params:
        return "scroll"
    if "pit" in body:
        return "pit"
    if "search_after" in body:
        return "search_after"
    if sorts_by_other_fields(body.get("sort")) or sorts_by_other_fields(params.get("sort")):
        return "sort"
    size = int_param(params.get("size", body.get("size", 10)), "size")
    if size == 0:
        return "aggregations_only" if ("aggs" in body or "aggregations" in body) else "size_0"
    from_ = int_param(params.get("from", body.get("from", 0)), "from")
    if from_ + size > planner.settings.max_window:
        return "window_exceeded"
    return None


def _augment(body: dict, meta: IndexMeta, planner: Planner) -> tuple[RewriteResult, str | None]:
    """The query's rewrite (set into ``body`` when augmented) and why it was not augmented (``None``: it was, or
    nothing was left to add)."""
    query = body.get("query")
    rewrite = RewriteResult(query=query, clauses=find_full_text(query, meta.text_fields) if query is not None else [])
    if not rewrite.clauses:
        return rewrite, "no_full_text_query"
    rewriter = planner.rewriter_for(meta)
    if rewriter is None:
        return rewrite, "dictionary_not_loaded"
    rewrite = rewriter(query)
    if rewrite.augmented:
        body["query"] = rewrite.query
    return rewrite, None


def plan_search(search: SearchRequest, meta: IndexMeta | None, planner: Planner, *, hybrid_allowed: bool = True) -> SearchPlan:
    """Decide augmentation, reranking and the hybrid first stage for ``search`` on an index with ``meta``
    (``None``: not a jingpai index, or no index). ``search`` is not changed: the plan holds its own body and
    parameters. ``hybrid_allowed=False``: never hybrid (an ``_msearch``'s searches: ``reason: msearch``).

    Raises:
        NotOursToJudge: a part of the search the gateway cannot interpret (the caller forwards it unchanged).
        BadGatewayRequest: ``ext.jingpai.window`` over the gateway's ``max_window``.
    """
    # top-level copies: planning only ever sets top-level keys
    body, params = dict(search.body), dict(search.params)
    base: dict[str, Any] = {"body": body, "params": params, "mode": search.mode, "fusion": search.fusion, "rewritten": search.rewritten}
    if search.mode == "off":
        return SearchPlan(**base, reason="disabled")
    reason = "augment_only" if search.mode == "augment" else shape_reason(body, params, planner)
    if meta is None:
        missing = "not_a_jingpai_index" if search.index else "no_target_index"
        return SearchPlan(**base, reason=reason or missing, augment_reason=missing)
    rewrite, augment_reason = _augment(body, meta, planner)
    base.update(rewrite=rewrite, augment_reason=augment_reason, rewritten=search.rewritten or bool(rewrite.augmented))
    if meta.vector_field is not None:
        # a hit carries its document, not its 512 floats (the URL's source filter folded in first: one place decides)
        fold_url_source(body, params)
        exclude_vector(body, meta.vector_field)
        base["rewritten"] = True
    if reason is None and not (search.ext.query or rewrite.query_text or params.get("q")):
        reason = "no_full_text_query"
    plan = SearchPlan(**base, reason=reason) if reason is not None else _rerank_plan(base, search, meta, planner.settings)
    return _with_hybrid(plan, search, meta, planner, allowed=hybrid_allowed)


#: the reasons a search is not reranked that still leave it a hybrid first stage
_HYBRID_WITHOUT_RERANK = frozenset({"augment_only", "no_reranker_configured"})


def _hybrid_reason(plan: SearchPlan, search: SearchRequest, planner: Planner, *, allowed: bool) -> str | None:
    """Why a search on an index with vectors does not run hybrid (``None``: it does)."""
    if not search.hybrid.enabled:
        return "disabled"
    if not allowed:
        return "msearch"
    if planner.settings.embedder_url is None:
        return "no_embedder_configured"
    if plan.rerank:
        return None
    if plan.reason not in _HYBRID_WITHOUT_RERANK:
        return plan.reason or "not_planned"
    return shape_reason(plan.body, plan.params, planner, need_reranker=False) or (
        None if (search.ext.query or (plan.rewrite and plan.rewrite.query_text) or plan.params.get("q")) else "no_full_text_query"
    )


def _with_hybrid(plan: SearchPlan, search: SearchRequest, meta: IndexMeta, planner: Planner, *, allowed: bool) -> SearchPlan:
    """``plan`` with its hybrid first stage, or with the reason it has none (on an index with vectors)."""
    if meta.vector_field is None or not search.index:
        return plan
    why = _hybrid_reason(plan, search, planner, allowed=allowed)
    if why is not None:
        return replace(plan, hybrid_info=not_applied(why))
    body, params, changes = plan.body, dict(plan.params), {}
    if not plan.rerank:
        # BM25 fetches the whole of from + size from 0, so the page is cut from the fused list
        from_ = int_param(params.pop("from", body.get("from", 0)), "from")
        size = int_param(params.pop("size", body.get("size", 10)), "size")
        body["from"], body["size"] = 0, from_ + size
        query_text = search.ext.query or (plan.rewrite.query_text if plan.rewrite else "") or params.get("q", "")
        filter_path = FilterPath.parse(params.pop("filter_path")) if "filter_path" in params else None
        changes = {"from_": from_, "size": size, "query_text": query_text, "filter_path": filter_path, "params": params, "rewritten": True}
    hybrid = plan_hybrid(search.index, body, search.body.get("query"), changes.get("query_text", plan.query_text), search.hybrid,
                         meta.vector_field, meta.vector_dims, int(body["size"]), model=meta.vector_model, vector_index=meta.vector_index)
    return replace(plan, hybrid=hybrid, hybrid_info=hybrid.info(), **changes)


def _rerank_plan(base: dict[str, Any], search: SearchRequest, meta: IndexMeta, settings: GatewaySettings) -> SearchPlan:
    """The plan of a search that is reranked: the engine is asked for the whole window."""
    body, params, ext = base["body"], base["params"], search.ext
    from_ = int_param(params.get("from", body.get("from", 0)), "from")
    size = int_param(params.get("size", body.get("size", 10)), "size")
    if ext.window is not None and ext.window > settings.max_window:
        raise BadGatewayRequest(f"ext.jingpai.window {ext.window} exceeds the gateway's max_window {settings.max_window}")
    # The window is the engine's top W whatever the page: it does not grow with from + size, else each
    # page would rerank a different set and paging would repeat and skip hits. Reranking permutes
    # engine ranks 1..W among themselves, so positions >= W are the engine's own positions.
    window = min(ext.window or settings.window, settings.max_window)
    base.update(from_=from_, size=size, window=window)
    # a hybrid search that reranks both lists' top W reranks up to 2W hits: pages within them are reranked too
    both = meta.vector_field is not None and search.hybrid.enabled and search.hybrid.rerank_window == "both"
    if from_ >= (2 * window if both else window):
        return SearchPlan(**base, reason="beyond_window")  # the engine answers this page as asked
    params.pop("from", None)
    params.pop("size", None)
    body["from"], body["size"] = 0, max(window, from_ + size)
    filter_path = None
    if "filter_path" in params:
        # the engine would filter away what reranking reads (_source, _score): applied to the answer instead
        filter_path = FilterPath.parse(params.pop("filter_path"))
    query_text = ext.query or base["rewrite"].query_text or params.get("q", "")
    fields = tuple(ext.fields or settings.rerank_fields or meta.text_fields)
    # URL source filters are folded into the body so one place decides what the window must return
    stored = meta.rerank_keywords
    source = fold_source(body, params, fields if stored is None or stored.field in fields else (*fields, stored.field))
    if stored is not None and stored.field not in fields:
        # fetched for the reranker's request, never reranked on as text
        fetched = stored.field in source.fields
        source = replace(source, fields=tuple(f for f in source.fields if f != stored.field))
        stored = stored if fetched else None
    base["rewritten"] = True
    return SearchPlan(**base, rerank=True, filter_path=filter_path, query_text=query_text, source=source, rerank_keywords=stored)


__all__ = [
    "HybridParams", "Planner", "SearchPlan", "SearchRequest", "int_param", "msearch_target", "parse_search", "plan_search", "shape_reason",
    "sorts_by_other_fields", "unchanged_plan",
]
