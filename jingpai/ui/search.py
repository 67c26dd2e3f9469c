"""``GET /_jingpai/ui/api/search``: one query run twice through the gateway's own ``/{index}/_search`` —
``?jingpai=off`` (engine order) and with augmentation / reranking — shown as two columns of hits with
engine score, model score, fused score, places moved and the query's dictionary keywords.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jingpai.keyword_dict import keyword_spans
from jingpai.ui.context import UiError, UiSettings, api, engine_error, gateway_client, settings_of
from jingpai.ui.schema import Column, SearchParams, SearchResponse, Segment, UiHit

logger = logging.getLogger(__name__)

# Elasticsearch/OpenSearch index names: no whitespace, no \ / * ? " < > | , # and not starting with - _ +
_INDEX_NAME = re.compile(r"^[^\s\\/*?\"<>|,#_+\-][^\s\\/*?\"<>|,#]*$")
#: rerank reasons that are a choice, not a failure: no banner for them
_QUIET_REASONS = frozenset({None, "disabled", "augment_only", "no_hits"})

Mode = Literal["off", "augment", "rerank"]


def segments(text: str, keywords: list[str]) -> list[Segment]:
    """``text`` cut into runs, the keyword occurrences marked (for highlighting without HTML)."""
    out: list[Segment] = []
    pos = 0
    for start, end in keyword_spans(text, keywords):
        if start > pos:
            out.append(Segment(text=text[pos:start]))
        out.append(Segment(text=text[start:end], kw=True))
        pos = end
    if pos < len(text):
        out.append(Segment(text=text[pos:]))
    return out


def snippet(text: str, keywords: list[str], chars: int) -> str:
    """About ``chars`` characters of ``text``, starting a little before its first keyword occurrence."""
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    spans = keyword_spans(text, keywords)
    start = max(0, spans[0][0] - chars // 4) if spans else 0
    start = min(start, len(text) - chars)
    piece = text[start : start + chars]
    return ("…" if start > 0 else "") + piece + ("…" if start + chars < len(text) else "")


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(_as_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _pick(source: dict, names: tuple[str, ...] | list[str]) -> str:
    for name in names:
        value = source.get(name)
        if value not in (None, "", []):
            return _as_text(value)
    return ""


@dataclass(frozen=True)
class _Fields:
    title: tuple[str, ...]
    content: tuple[str, ...]


def _fields_for(ui: UiSettings, text_fields: list[str]) -> _Fields:
    title = tuple(dict.fromkeys([*ui.title_fields, *text_fields[:1]]))
    content = tuple(dict.fromkeys([*ui.content_fields, *text_fields[1:]]))
    return _Fields(title=title, content=content)


def _hit(hit: dict, rank: int, keywords: list[str], ui: UiSettings, fields: _Fields) -> UiHit:
    source = hit.get("_source") or {}
    title = _pick(source, fields.title) or str(hit.get("_id", ""))
    content = _pick(source, fields.content)
    category = _pick(source, ("category", "label", "domain")) or None
    date = _pick(source, ("date", "published", "timestamp", "@timestamp")) or None
    return UiHit(
        id=str(hit.get("_id", "")),
        rank=rank,
        title=segments(title, keywords),
        snippet=segments(snippet(content, keywords, ui.snippet_chars), keywords),
        category=category,
        date=date,
    )


async def _text_fields(client: httpx.AsyncClient, index: str) -> tuple[bool, list[str]]:
    """``(built by jingpai, text fields)`` of an index or alias, from its mapping ``_meta``."""
    resp = await client.get(f"/{quote(index, safe='')}/_mapping")
    if resp.status_code != 200:
        raise engine_error(resp, f"reading the mapping of index {index!r}")
    for _, body in sorted(resp.json().items(), reverse=True):
        meta = ((body.get("mappings") or {}).get("_meta") or {}).get("jingpai")
        if isinstance(meta, dict) and meta.get("text_fields"):
            return True, [str(f) for f in meta["text_fields"]]
    return False, []


def _banner(info: dict, params: SearchParams, index: str) -> str | None:
    reason = info.get("reason")
    if not params.rerank or info.get("reranked") or reason in _QUIET_REASONS:
        if params.augment and not info.get("augmented") and info.get("augment_reason") == "not_a_jingpai_index":
            return f"Index {index} was not built by `jingpai index`: the jingpai column shows the engine order."
        return None
    if reason == "not_a_jingpai_index":
        return f"Index {index} was not built by `jingpai index`: no augmentation or reranking, both columns show the engine order."
    if reason == "no_reranker_configured":
        return "Reranker unavailable (the gateway has no reranker configured): the jingpai column shows the engine order."
    return f"Reranker unavailable ({reason}): the jingpai column shows the engine order (fail-open)."


@api
async def api_search(request: Request) -> Response:
    """Run one query through the gateway twice: engine order (``?jingpai=off``) and jingpai order."""
    ui = settings_of(request)
    params, size, mode = _validated(request, ui)
    async with gateway_client(request) as client:
        is_jingpai, text_fields = await _text_fields(client, params.index)
        engine_data, jingpai_data = await _both_orders(client, params, text_fields, size=size, mode=mode, ui=ui)
    info = jingpai_data.get("jingpai") or {}
    keywords = [str(k) for k in info.get("keywords") or []]
    fields = _fields_for(ui, text_fields)
    reranked = bool(info.get("reranked"))
    engine_column, engine_rank = _engine_column(engine_data, size, keywords, ui, fields)
    jingpai_column, model_scores = _jingpai_column(jingpai_data, mode, engine_rank, reranked, keywords, ui, fields)
    for item in engine_column.hits:
        item.model_score, item.fused_score = model_scores.get(item.id, (None, None))

    banner = " ".join(b for b in (ui.banner, _banner(info, params, params.index)) if b) or None
    response = SearchResponse(
        query=params.q,
        index=params.index,
        keywords=keywords,
        engine=engine_column,
        jingpai=jingpai_column,
        reranked=reranked,
        reason=info.get("reason"),
        augmented=bool(info.get("augmented")),
        model=info.get("model"),
        took_rerank_ms=info.get("took_rerank_ms"),
        fusion=info.get("fusion") if reranked else None,
        banner=banner,
    )
    logger.debug("UI search %r on %s (jingpai index: %s): mode %s, reranked %s", params.q, params.index, is_jingpai, mode, reranked)
    return JSONResponse(response.model_dump())


def _validated(request: Request, ui: UiSettings) -> tuple[SearchParams, int, Mode]:
    """``(parameters, hits per column, the jingpai column's mode)`` of the request (422 when invalid)."""
    params = SearchParams.model_validate(dict(request.query_params))
    if not _INDEX_NAME.match(params.index):
        raise UiError(f"index {params.index!r} is not a valid index name (no spaces, commas, wildcards or \\ / ? \" < > | #)", status=422)
    size = params.size or ui.size
    if size > ui.max_size:
        raise UiError(f"size {size} exceeds the UI's max_size {ui.max_size}", status=422)
    # the gateway always augments before it reranks, so rerank implies augmentation
    mode: Mode = "rerank" if params.rerank else "augment" if params.augment else "off"
    return params, size, mode


async def _both_orders(
    client: httpx.AsyncClient, params: SearchParams, text_fields: list[str], *, size: int, mode: Mode, ui: UiSettings
) -> tuple[dict, dict]:
    """The engine's answer (``?jingpai=off``, ``compare_window`` deep) and jingpai's (``?jingpai=<mode>``)."""
    path = f"/{quote(params.index, safe='')}/_search"
    match: dict[str, Any] = {"query": params.q}
    if text_fields:
        match["fields"] = text_fields
    body = {"query": {"multi_match": match}, "_source": {"excludes": ["jingpai"]}, "track_total_hits": True}
    engine_resp = await client.post(path, params={"jingpai": "off"}, json={**body, "size": max(size, ui.compare_window)})
    if engine_resp.status_code != 200:
        raise engine_error(engine_resp, f"searching index {params.index!r}")
    jingpai_resp = await client.post(path, params={"jingpai": mode}, json={**body, "size": size})
    if jingpai_resp.status_code != 200:
        raise engine_error(jingpai_resp, f"searching index {params.index!r} through jingpai")
    return engine_resp.json(), jingpai_resp.json()


def _engine_column(data: dict, size: int, keywords: list[str], ui: UiSettings, fields: _Fields) -> tuple[Column, dict[str, int]]:
    """The engine-order column and every fetched hit's engine rank (by id)."""
    hits = data["hits"]["hits"]
    engine_rank = {str(h.get("_id")): i for i, h in enumerate(hits, start=1)}
    column = Column(mode="off", total=_total(data), took_ms=data.get("took"))
    for rank, hit in enumerate(hits[:size], start=1):
        item = _hit(hit, rank, keywords, ui, fields)
        item.engine_score, item.engine_rank = hit.get("_score"), rank
        column.hits.append(item)
    return column, engine_rank


def _jingpai_column(
    data: dict, mode: Mode, engine_rank: dict[str, int], reranked: bool, keywords: list[str], ui: UiSettings, fields: _Fields
) -> tuple[Column, dict[str, tuple[float | None, float | None]]]:
    """The jingpai-order column and the ``(model score, fused score)`` of each reranked hit (by id)."""
    column = Column(mode=mode, total=_total(data), took_ms=data.get("took"))
    model_scores: dict[str, tuple[float | None, float | None]] = {}
    for rank, hit in enumerate(data["hits"]["hits"], start=1):
        item = _hit(hit, rank, keywords, ui, fields)
        before = engine_rank.get(item.id)
        scored = hit.get("_jingpai")
        if isinstance(scored, dict) and isinstance(scored.get("sources"), list):
            item.sources = [str(s) for s in scored["sources"]]
        # hits past the rerank window carry no _jingpai: they keep the engine's order and score
        if reranked and isinstance(scored, dict):
            item.fused_score, item.model_score = hit.get("_score"), scored.get("model_score")
            model_scores[item.id] = (item.model_score, item.fused_score)
            item.engine_score = scored.get("engine_score")
        else:
            item.engine_score = hit.get("_score")
        # positions are compared with the plain engine column, which is what the user sees on the left
        item.engine_rank = before
        item.moved = before - rank if before is not None else None
        item.new = before is None
        column.hits.append(item)
    return column, model_scores


def _total(data: dict) -> int | None:
    total = (data.get("hits") or {}).get("total")
    if isinstance(total, dict):
        return total.get("value")
    return total if isinstance(total, int) else None


__all__ = ["api_search", "segments", "snippet"]
