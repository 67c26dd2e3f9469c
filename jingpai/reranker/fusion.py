"""Fusion of a first-stage (engine) ranking with a reranker's scores: the one module used by the gateway,
``jingpai serve`` (``POST /rerank`` with ``scores``) and ``jingpai tune``.

Three modes, over one window of candidates:

- ``replace``: the model's score alone (the engine only chose the window).
- ``linear``: per-window min-max normalised engine and model scores, ``w·engine + (1−w)·model``; ``w`` is
  the *engine's* weight. A window whose scores are all equal normalises to all 1 (no NaN), so it leaves
  the order to the other signal; a window of one document fuses to 1.
- ``rrf``: reciprocal rank fusion over 1-based ranks, ``2w/(k+engine_rank) + 2(1−w)/(k+model_rank)``;
  at ``w = 0.5`` this is exactly the classic ``1/(k+engine_rank) + 1/(k+model_rank)``.

Ties of the fused score keep the engine's order (:func:`fused_order`). Pure numpy: importing it does not
import torch, so the gateway can use it.

:class:`ListFusion` fuses two *candidate lists* instead (the gateway's hybrid first stage: BM25's hits and
the kNN search's hits, each ranked by its own score): ``rrf`` or ``linear`` over the union of the two, a
document missing from one list getting nothing from it (:meth:`ListFusion.fuse`).

Example:
    >>> import numpy as np
    >>> spec = FusionSpec(mode="linear", weight=0.5)
    >>> engine = [9.0, 5.0, 1.0]        # BM25, in the engine's order
    >>> model = [0.1, 0.9, 0.5]
    >>> spec.fuse(engine, model).round(3).tolist()
    [0.5, 0.75, 0.25]
    >>> fused_order(spec.fuse(engine, model)).tolist()
    [1, 0, 2]
    >>> FusionSpec(mode="rrf", rrf_k=60).fuse(engine, model).round(5).tolist()
    [0.03227, 0.03252, 0.032]
    >>> FusionSpec(mode="replace").fuse(engine, model).tolist()
    [0.1, 0.9, 0.5]
    >>> FusionSpec(mode="sum")
    Traceback (most recent call last):
    ...
    jingpai.reranker.fusion.FusionError: fusion must be one of replace, linear, rrf, got 'sum'
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

from jingpai.errors import UserError

logger = logging.getLogger(__name__)

FusionMode = Literal["replace", "linear", "rrf"]
FUSION_MODES: tuple[str, ...] = ("replace", "linear", "rrf")
ListFusionMode = Literal["rrf", "linear"]
LIST_FUSION_MODES: tuple[str, ...] = ("rrf", "linear")


class FusionError(UserError, ValueError):
    """A fusion parameter or input is invalid (the message names the value and what was expected)."""


@dataclass(frozen=True)
class FusionSpec:
    """Which fusion to run and its parameters; the defaults are the gateway's defaults.

    Args:
        mode: ``replace``, ``linear`` or ``rrf``.
        weight: the engine's weight in [0, 1] (the model's is ``1 - weight``); used by ``linear`` and ``rrf``.
        rrf_k: the RRF constant (>= 1); used by ``rrf``.

    Raises:
        FusionError: a value out of range or an unknown mode.
    """

    mode: FusionMode = "linear"
    weight: float = 0.5
    rrf_k: int = 60

    def __post_init__(self) -> None:
        if self.mode not in FUSION_MODES:
            raise FusionError(f"fusion must be one of {', '.join(FUSION_MODES)}, got {self.mode!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not 0.0 <= self.weight <= 1.0:
            raise FusionError(f"fusion_weight must be a number in [0, 1] (the engine's weight), got {self.weight!r}")
        if isinstance(self.rrf_k, bool) or not isinstance(self.rrf_k, int) or self.rrf_k < 1:
            raise FusionError(f"rrf_k must be an integer >= 1, got {self.rrf_k!r}")
        object.__setattr__(self, "weight", float(self.weight))

    def override(self, *, fusion: str | None = None, fusion_weight: float | None = None, rrf_k: int | None = None) -> FusionSpec:
        """This spec with the given settings replaced (``None`` keeps this one's); the names are the settings'.

        >>> FusionSpec().override(fusion="rrf", rrf_k=10)
        FusionSpec(mode='rrf', weight=0.5, rrf_k=10)

        Raises:
            FusionError: a given value is invalid.
        """
        return FusionSpec(
            mode=self.mode if fusion is None else fusion,  # type: ignore[arg-type]
            weight=self.weight if fusion_weight is None else fusion_weight,
            rrf_k=self.rrf_k if rrf_k is None else rrf_k,
        )

    def describe(self) -> dict[str, Any]:
        """The mode and the parameters it uses, e.g. ``{"mode": "linear", "weight": 0.5}``."""
        if self.mode == "linear":
            return {"mode": self.mode, "weight": self.weight}
        if self.mode == "rrf":
            return {"mode": self.mode, "weight": self.weight, "rrf_k": self.rrf_k}
        return {"mode": self.mode}

    def fuse(
        self,
        engine_scores: Sequence[float | None] | np.ndarray | None,
        model_scores: Sequence[float] | np.ndarray,
        *,
        engine_ranks: Sequence[int] | np.ndarray | None = None,
    ) -> np.ndarray:
        """Fused scores of one window, parallel to the inputs (higher is better).

        Args:
            engine_scores: first-stage scores; ``None`` (or any missing/NaN entry, e.g. a search sorted by
                a field) makes ``linear`` use the engine *ranks* instead, scaled to [0, 1].
            model_scores: the reranker's scores (finite).
            engine_ranks: 1-based engine ranks; default: ranked by ``engine_scores`` (ties keep the input
                order), or the input order itself when scores are missing.

        Raises:
            FusionError: lengths differ or a model score is not finite.
        """
        import numpy as np  # lazy: the gateway's settings (and so every --help) import this module
        model = np.asarray(model_scores, dtype=np.float64)
        n = model.shape[0]
        if model.ndim != 1 or not np.isfinite(model).all():
            raise FusionError(f"model scores must be a flat list of finite numbers, got {model_scores!r}")
        engine = _engine_array(engine_scores, n)
        ranks = _engine_ranks(engine, engine_ranks, n)
        if self.mode == "replace":
            return model.copy()
        if engine is None:
            # no first-stage scores: the engine's ranks stand in for them (rank 1 → 1.0, last → 0.0)
            engine = 1.0 - (ranks - 1.0) / max(n - 1, 1)
        if self.mode == "linear":
            return self.weight * min_max(engine) + (1.0 - self.weight) * min_max(model)
        model_ranks = np.empty(n, dtype=np.float64)
        model_ranks[fused_order(model, ranks)] = np.arange(1, n + 1)  # model ties: the engine's better rank first
        k = float(self.rrf_k)
        return 2.0 * self.weight / (k + ranks) + 2.0 * (1.0 - self.weight) / (k + model_ranks)


@dataclass(frozen=True)
class FusedCandidate:
    """One document of two fused lists: its fused score and its 1-based rank and score in each list
    (``None``: not in that list)."""

    id: str
    score: float
    ranks: tuple[int | None, int | None]
    scores: tuple[float | None, float | None]


@dataclass(frozen=True)
class ListFusion:
    """Fusion of two ranked candidate lists (e.g. BM25's and kNN's) into one ranking of their union.

    - ``rrf``: ``2w/(k + rank_1) + 2(1−w)/(k + rank_2)``; a list the document is missing from adds 0.
    - ``linear``: ``w·minmax(score_1) + (1−w)·minmax(score_2)``, min-max over each list's own scores (a list
      whose scores are all equal, or missing, normalises by rank: first 1, last 0); missing adds 0.

    ``weight`` is the *first* list's weight in [0, 1]. Ties keep the first list's order, then the second's.

    >>> bm25 = [("a", 12.0), ("b", 7.0), ("c", 1.0)]
    >>> knn = [("d", 0.95), ("a", 0.90)]
    >>> [(c.id, round(c.score, 5), c.ranks) for c in ListFusion(mode="rrf", rrf_k=60).fuse(bm25, knn)]
    [('a', 0.03252, (1, 2)), ('d', 0.01639, (None, 1)), ('b', 0.01613, (2, None)), ('c', 0.01587, (3, None))]
    >>> [(c.id, round(c.score, 3)) for c in ListFusion(mode="linear", weight=0.5).fuse(bm25, knn)]
    [('a', 0.5), ('d', 0.5), ('b', 0.273), ('c', 0.0)]
    >>> [c.id for c in ListFusion(mode="linear", weight=0.0).fuse(bm25, knn)]
    ['d', 'a', 'b', 'c']
    >>> ListFusion(mode="replace")
    Traceback (most recent call last):
    ...
    jingpai.reranker.fusion.FusionError: hybrid fusion must be one of rrf, linear, got 'replace'

    Raises:
        FusionError: an unknown mode, a weight outside [0, 1] or ``rrf_k`` < 1.
    """

    mode: ListFusionMode = "rrf"
    weight: float = 0.5
    rrf_k: int = 60

    def __post_init__(self) -> None:
        if self.mode not in LIST_FUSION_MODES:
            raise FusionError(f"hybrid fusion must be one of {', '.join(LIST_FUSION_MODES)}, got {self.mode!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not 0.0 <= self.weight <= 1.0:
            raise FusionError(f"hybrid weight must be a number in [0, 1] (the first list's, BM25's, weight), got {self.weight!r}")
        if isinstance(self.rrf_k, bool) or not isinstance(self.rrf_k, int) or self.rrf_k < 1:
            raise FusionError(f"hybrid rrf_k must be an integer >= 1, got {self.rrf_k!r}")
        object.__setattr__(self, "weight", float(self.weight))

    def describe(self) -> dict[str, Any]:
        """The mode and the parameters it uses, e.g. ``{"mode": "rrf", "weight": 0.5, "rrf_k": 60}``."""
        return {"mode": self.mode, "weight": self.weight, **({"rrf_k": self.rrf_k} if self.mode == "rrf" else {})}

    def label(self) -> str:
        """A short name for tables and logs.

        >>> ListFusion(mode="rrf", weight=0.3, rrf_k=10).label(), ListFusion(mode="linear", weight=1).label()
        ('rrf w 0.3 k 10', 'linear w 1')
        """
        return f"{self.mode} w {self.weight:g}" + (f" k {self.rrf_k}" if self.mode == "rrf" else "")

    def fuse(self, first: Sequence[tuple[str, float | None]], second: Sequence[tuple[str, float | None]]) -> list[FusedCandidate]:
        """The union of two ranked lists of ``(id, score)`` (best first), best fused first.

        A document listed twice in one list counts at its first (best) place.
        """
        lists = [_dedup(first), _dedup(second)]
        parts = [self._contributions(items, w) for items, w in zip(lists, (self.weight, 1.0 - self.weight))]
        ids = list(dict.fromkeys([doc for doc, _ in lists[0]] + [doc for doc, _ in lists[1]]))
        ranks = [{doc: r for r, (doc, _) in enumerate(items, start=1)} for items in lists]
        scores = [dict(items) for items in lists]
        fused = [
            FusedCandidate(doc, parts[0].get(doc, 0.0) + parts[1].get(doc, 0.0), (ranks[0].get(doc), ranks[1].get(doc)),
                           (scores[0].get(doc), scores[1].get(doc)))
            for doc in ids
        ]
        far = len(ids) + 1
        return sorted(fused, key=lambda c: (-c.score, c.ranks[0] or far, c.ranks[1] or far))

    def _contributions(self, items: list[tuple[str, float | None]], weight: float) -> dict[str, float]:
        if not items:
            return {}
        if self.mode == "rrf":
            return {doc: 2.0 * weight / (self.rrf_k + r) for r, (doc, _) in enumerate(items, start=1)}
        values = [s for _, s in items]
        if any(s is None or not math.isfinite(s) for s in values) or max(values) == min(values):  # type: ignore[type-var]
            n = len(items)
            normalised = [1.0 - r / max(n - 1, 1) for r in range(n)] if n > 1 else [1.0]
        else:
            normalised = min_max(values).tolist()  # type: ignore[arg-type]
        return {doc: weight * x for (doc, _), x in zip(items, normalised)}


def _dedup(items: Sequence[tuple[str, float | None]]) -> list[tuple[str, float | None]]:
    seen: dict[str, float | None] = {}
    for doc, score in items:
        seen.setdefault(doc, score)
    return list(seen.items())


def min_max(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``(x - min) / (max - min)``; all 1.0 when every value is equal (including a single value).

    >>> min_max([2.0, 4.0, 3.0]).tolist()
    [0.0, 1.0, 0.5]
    >>> min_max([7.0, 7.0]).tolist()
    [1.0, 1.0]
    """
    import numpy as np  # lazy: the gateway's settings (and so every --help) import this module
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return x
    low, high = float(x.min()), float(x.max())
    if high - low <= 0.0 or not math.isfinite(high - low):
        return np.ones_like(x)
    return (x - low) / (high - low)


def ranks_of(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks of ``scores``, best first; ties keep the input order.

    >>> ranks_of([0.2, 0.9, 0.2]).tolist()
    [2.0, 1.0, 3.0]
    """
    import numpy as np  # lazy: the gateway's settings (and so every --help) import this module
    order = fused_order(scores)
    ranks = np.empty(len(order), dtype=np.float64)
    ranks[order] = np.arange(1, len(order) + 1)
    return ranks


def fused_order(fused: Sequence[float] | np.ndarray, engine_ranks: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """Indices of ``fused`` best first; ties by engine rank (default: input order).

    >>> fused_order([0.5, 0.9, 0.5], [3, 2, 1]).tolist()
    [1, 2, 0]
    """
    import numpy as np  # lazy: the gateway's settings (and so every --help) import this module
    scores = np.asarray(fused, dtype=np.float64)
    ranks = np.arange(scores.shape[0]) if engine_ranks is None else np.asarray(engine_ranks)
    return np.lexsort((ranks, -scores))


def _engine_array(engine_scores: Sequence[float | None] | np.ndarray | None, n: int) -> np.ndarray | None:
    import numpy as np  # lazy: the gateway's settings (and so every --help) import this module
    if engine_scores is None:
        return None
    values = list(engine_scores)
    if len(values) != n:
        raise FusionError(f"got {len(values)} engine scores for {n} model scores; expected one per document")
    if any(v is None for v in values):
        logger.info("some engine scores are missing: fusing with the engine's ranks instead")
        return None
    engine = np.asarray(values, dtype=np.float64)
    if not np.isfinite(engine).all():
        logger.info("some engine scores are not finite: fusing with the engine's ranks instead")
        return None
    return engine


def _engine_ranks(engine: np.ndarray | None, given: Sequence[int] | np.ndarray | None, n: int) -> np.ndarray:
    import numpy as np  # lazy: the gateway's settings (and so every --help) import this module
    if given is not None:
        ranks = np.asarray(given, dtype=np.float64)
        if ranks.shape != (n,):
            raise FusionError(f"got {ranks.shape[0] if ranks.ndim else 0} engine ranks for {n} documents; expected one per document")
        return ranks
    return np.arange(1, n + 1, dtype=np.float64) if engine is None else ranks_of(engine)


__all__ = [
    "FUSION_MODES", "LIST_FUSION_MODES", "FusedCandidate", "FusionError", "FusionMode", "FusionSpec", "ListFusion", "ListFusionMode",
    "fused_order", "min_max", "ranks_of",
]
