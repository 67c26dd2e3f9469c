"""The gateway's own request and response vocabulary: ``?jingpai…`` URL parameters, the body section
``ext.jingpai`` (:class:`JingpaiExt`) and the ``jingpai`` object added to every answer (:class:`JingpaiInfo`).

The ``take_*`` functions remove the gateway's parameters from a request's (copied) parameters or body, so
the engine never sees them, and raise :class:`~jingpai.plugin.gateway.errors.BadGatewayRequest` naming
the bad value and the valid ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from jingpai.plugin.gateway.errors import BadGatewayRequest
from jingpai.plugin.settings import GATEWAY_MODES, MAX_KNN_CANDIDATES, GatewayConfigError, HybridSpec
from jingpai.reranker.fusion import FusionSpec


def _not_boolean(value: Any) -> Any:
    # pydantic's lax mode reads true as 1: a window or weight of `true` is a client's mistake, not a number
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    return value


class FusionParams(BaseModel):
    """A request's fusion overrides (``ext.jingpai`` keys, or ``?jingpai_<key>=`` URL parameters)."""

    model_config = ConfigDict(extra="forbid")

    fusion: Literal["replace", "linear", "rrf"] | None = None
    fusion_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    rrf_k: int | None = Field(default=None, ge=1)

    @field_validator("fusion_weight", "rrf_k", mode="before")
    @classmethod
    def _no_boolean(cls, value: Any) -> Any:
        return _not_boolean(value)

    def over(self, base: FusionSpec) -> FusionSpec:
        """These overrides on top of ``base`` (the index's or the gateway's fusion)."""
        return base.override(**self.model_dump(include=set(FusionParams.model_fields)))


#: URL parameter -> FusionParams field
FUSION_URL_PARAMS: dict[str, str] = {f"jingpai_{name}": name for name in FusionParams.model_fields}


class HybridParams(BaseModel):
    """``ext.jingpai.hybrid``: a search's hybrid first stage (on an index with vectors); ``None`` keeps the
    index's or the gateway's value. ``weight`` is BM25's in [0, 1], ``k`` the neighbours the kNN search asks
    for, ``rrf_k`` the RRF constant, ``num_candidates`` the HNSW search breadth, ``rerank_window`` which hits
    are reranked (:class:`~jingpai.plugin.settings.HybridSpec`)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None
    fusion: Literal["rrf", "linear"] | None = None
    weight: float | None = Field(default=None, ge=0.0, le=1.0)
    k: int | None = Field(default=None, ge=1, le=MAX_KNN_CANDIDATES)
    num_candidates: int | None = Field(default=None, ge=1, le=MAX_KNN_CANDIDATES)
    rrf_k: int | None = Field(default=None, ge=1)
    rerank_window: Literal["fused", "both"] | None = None

    def over(self, base: HybridSpec) -> HybridSpec:
        """These values on top of ``base`` (the index's or the gateway's hybrid spec).

        Raises:
            BadGatewayRequest: ``num_candidates`` below ``k``.
        """
        try:
            return base.override(**self.model_dump())
        except GatewayConfigError as exc:
            raise BadGatewayRequest(f"invalid ext.jingpai.hybrid: {exc}") from exc


class JingpaiExt(FusionParams):
    """The ``ext.jingpai`` section of a search body (removed before forwarding)."""

    mode: Literal["off", "augment", "rerank"] | None = None
    window: int | None = Field(default=None, ge=1)
    fields: list[str] | None = Field(default=None, min_length=1)
    model: str | None = None
    query: str | None = Field(default=None, min_length=1)
    #: ``true`` / ``false`` is ``{"enabled": …}``
    hybrid: HybridParams | None = None

    @field_validator("window", mode="before")
    @classmethod
    def _window_not_boolean(cls, value: Any) -> Any:
        return _not_boolean(value)

    @field_validator("hybrid", mode="before")
    @classmethod
    def _enabled_shorthand(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value


class JingpaiInfo(BaseModel):
    """The top-level ``jingpai`` object added to every search response."""

    mode: Literal["off", "augment", "rerank"]
    reranked: bool
    reason: str | None = None
    augmented: bool = False
    augment_reason: str | None = None
    keywords: list[str] = Field(default_factory=list)
    model: str | None = None
    window: int | None = None
    took_rerank_ms: float | None = None
    fusion: dict[str, Any] | None = None
    #: the hybrid first stage on an index with vectors (``None``: the index has none):
    #: ``{applied, reason, fusion, k, bm25_hits, knn_hits, took_embed_ms, took_knn_ms}``
    hybrid: dict[str, Any] | None = None


def validation_problems(exc: ValidationError, where: Callable[[tuple], str]) -> str:
    """``field: message (got value)`` for each error; ``where(loc)`` names the field as the client wrote it."""
    return "; ".join(f"{where(err['loc'])}: {err['msg']} (got {err.get('input')!r})" for err in exc.errors())


def take_mode(params: dict[str, str]) -> str | None:
    """Pop and check ``?jingpai=off|augment|rerank``.

    Raises:
        BadGatewayRequest: an unknown mode (the valid ones are named).
    """
    mode = params.pop("jingpai", None)
    if mode is not None and mode not in GATEWAY_MODES:
        raise BadGatewayRequest(f"unknown ?jingpai={mode!r}; expected one of {', '.join(GATEWAY_MODES)}")
    return mode


def take_fusion(params: dict[str, str]) -> FusionParams | None:
    """Pop and validate the ``?jingpai_fusion…`` URL parameters (they never reach the engine); ``None`` when
    there are none (the common case: no model to validate per request).

    Raises:
        BadGatewayRequest: a bad value; the message names the parameter and the valid values.
    """
    given = {field: params.pop(name) for name, field in FUSION_URL_PARAMS.items() if name in params}
    if not given:
        return None
    try:
        return FusionParams.model_validate(given)
    except ValidationError as exc:
        problems = validation_problems(exc, lambda loc: f"?jingpai_{'.'.join(str(p) for p in loc)}")
        raise BadGatewayRequest(f"invalid fusion parameter: {problems}") from exc


def take_ext(body: dict) -> JingpaiExt:
    """Pop and validate ``ext.jingpai`` from ``body`` (an ``ext`` left empty goes too).

    Raises:
        BadGatewayRequest: an invalid section; the message names the key and the valid keys.
    """
    ext = body.get("ext")
    if not isinstance(ext, dict) or "jingpai" not in ext:
        return JingpaiExt()
    raw = ext.pop("jingpai")
    if not ext:
        body.pop("ext")
    try:
        return JingpaiExt.model_validate(raw)
    except ValidationError as exc:
        problems = validation_problems(exc, lambda loc: ".".join(str(p) for p in loc) or "ext.jingpai")
        nested = any(err["loc"][:1] == ("hybrid",) for err in exc.errors())
        hybrid_keys = f"; hybrid takes: {', '.join(HybridParams.model_fields)}" if nested else ""
        raise BadGatewayRequest(f"invalid ext.jingpai: {problems}; valid keys: {', '.join(JingpaiExt.model_fields)}{hybrid_keys}") from exc


__all__ = [
    "FUSION_URL_PARAMS", "FusionParams", "HybridParams", "JingpaiExt", "JingpaiInfo", "take_ext", "take_fusion", "take_mode", "validation_problems",
]
