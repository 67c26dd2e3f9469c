"""Whether a tuning run's choice is more than chance: ``jingpai tune`` compares dozens of settings on the same
held-out queries, and on a few hundred of them the best is often best by luck (on AFQMC, 205 held-out training
queries chose a hybrid weight that cost 0.05 P@10 on the report split, docs/results/history.md §1c).
"""

from __future__ import annotations

import math

from jingpai.plugin.tune import TuneError, TuneRow


def noise_margin(n_queries: int) -> float:
    """Two standard errors of a per-query metric in [0, 1] averaged over ``n_queries`` at its largest variance
    (0.25): differences between settings smaller than this are not distinguishable from which queries were drawn.

    Why the bound and not each row's own variance: a tuning run compares dozens of settings on the same queries, so
    the warning should not depend on which of them happened to score near 0 or 1.

    >>> round(noise_margin(205), 3), round(noise_margin(1000), 3)
    (0.07, 0.032)
    """
    if n_queries < 1:
        raise TuneError(f"n_queries must be >= 1, got {n_queries}")
    return 1.0 / n_queries ** 0.5


def noise_warning(chosen: TuneRow, baseline: TuneRow, metric: str, n_queries: int) -> str | None:
    """A warning when ``chosen`` beats ``baseline`` on ``metric`` by less than :func:`noise_margin` (``None``:
    the gain is larger, or there is none to doubt)."""
    gain = chosen.metrics[metric] - baseline.metrics[metric]
    margin = noise_margin(n_queries)
    if gain <= 0 or gain >= margin:
        return None
    return (f"{chosen.label()} beats {baseline.label()} by {gain:.4f} {metric} on {n_queries} queries, less than two standard "
            f"errors ({margin:.4f}): the choice may not carry over to other queries; tune on more held-out queries "
            f"(about {math.ceil(round((1 / gain) ** 2, 6))} would resolve a gain this size)")


__all__ = ["noise_margin", "noise_warning"]
