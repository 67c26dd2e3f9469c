"""AdamW with its parameter groups, the learning-rate schedule of a training run, and the wall-clock budget
that may shorten it.

A recipe has to finish in its time on whatever machine runs it (the 2-core CPU, a lent GPU). Cutting a run off
at the budget would stop it at a high learning rate, mid-schedule; instead :class:`TimeBudget` times a few warm
steps, works out how many steps fit, and :class:`LinearSchedule` shrinks to end there, still decaying to 0. The
first steps are often slower than the rest (cold caches: a model's per-text features, CUDA kernels), so the
estimate is made again every tenth of the steps left (at least 10) from all steps since the first one, and the run grows back
(never past its plan) or shrinks further to what the measured speed fits.

    >>> schedule = LinearSchedule(1000, warmup_ratio=0.1)
    >>> schedule(100), schedule(550), schedule(1000)
    (1.0, 0.5, 0.0)
    >>> schedule.resize(200, at_step=50)   # mid-warmup: the warmup ends at step 50, the decay at 200
    >>> round(schedule(50), 3), round(schedule(125), 3), schedule(200)
    (1.0, 0.5, 0.0)
    >>> ticks = iter(range(0, 10_000, 2))   # a clock at 2 s per step
    >>> budget = TimeBudget(10.0, total_steps=1000, clock=lambda: float(next(ticks)))
    >>> [budget.check(step) for step in range(1, 51)][-1]   # step 50: 100 s gone, 440 s of 0.9 × 600 s left
    270
    >>> ticks = iter([*range(0, 100, 2), *range(100, 10_000)])   # 2 s per step for 50 steps, then 1 s
    >>> budget = TimeBudget(10.0, total_steps=1000, clock=lambda: float(next(ticks)))
    >>> [d for d in (budget.check(step) for step in range(1, 200)) if d is not None]   # at 1 s/step since, it grows back
    [270, 490]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch

if TYPE_CHECKING:
    from jingpai.reranker.base import Reranker

#: share of a time budget kept for the evaluations and the final save
RESERVE = 0.1
#: a new estimate changes the step count only when it differs by more than this share
REFIT_TOLERANCE = 0.02


def param_groups(model: Reranker, weight_decay: float, lr: float) -> list[dict[str, Any]]:
    """AdamW groups: no decay on biases and norms; a model with a pretrained part (``lr_scale(name)``,
    e.g. the USE encoder under new layers) gets that part at a scaled learning rate."""
    lr_scale = getattr(model, "lr_scale", None)
    groups: dict[tuple[bool, float], list[torch.nn.Parameter]] = {}
    for name, param in model.net.named_parameters():
        if not param.requires_grad:
            continue
        no_decay = param.ndim < 2 or "LayerNorm" in name or name.endswith(".bias")
        scale = float(lr_scale(name)) if lr_scale is not None else 1.0
        groups.setdefault((no_decay, scale), []).append(param)
    return [{"params": params, "weight_decay": 0.0 if no_decay else weight_decay, "lr": lr * scale}
            for (no_decay, scale), params in groups.items()]


def adamw(model: Reranker, *, lr: float, weight_decay: float, schedule: LinearSchedule) -> tuple[Any, Any]:
    """AdamW over :func:`param_groups` and a ``LambdaLR`` following ``schedule``."""
    optimizer = torch.optim.AdamW(param_groups(model, weight_decay, lr), lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


class LinearSchedule:
    """Linear warmup over ``warmup_ratio`` of the steps, then linear decay to 0 at the last step: a callable
    for ``torch.optim.lr_scheduler.LambdaLR`` whose length can still shrink while it runs."""

    def __init__(self, total_steps: int, *, warmup_ratio: float) -> None:
        self.warmup_ratio = warmup_ratio
        self.total, self.warmup = total_steps, int(total_steps * warmup_ratio)

    def resize(self, total_steps: int, *, at_step: int) -> None:
        """End at ``total_steps`` instead; a warmup still under way at ``at_step`` ends there at the latest
        (or at the shorter run's own warmup share, if later), so the peak learning rate is still reached."""
        self.total = total_steps
        self.warmup = min(self.warmup, max(at_step, int(total_steps * self.warmup_ratio)))

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))


class TimeBudget:
    """A training run's wall-clock budget.

    Call :meth:`check` after every optimizer step. At the calibration step (the 50th, or a 20th of a short run)
    it returns how many steps fit, timed from the warm steps only (the first fifth is left out: CUDA kernels
    and allocator caches make the first steps slow) with :data:`RESERVE` kept for evaluations. Every tenth of
    the steps left after that (at least 10) it measures the steps since its first estimate and returns a new step count when
    that differs by more than :data:`REFIT_TOLERANCE` (never more than the plan). Once the budget is spent it
    returns ``"stop"``; else ``None``. Evaluation time (:meth:`add_eval`) is not step time.

    Args:
        minutes: the budget.
        total_steps: the run's planned steps (a plan already short enough is left alone).
        clock: seconds (injectable: tests drive time themselves).
    """

    def __init__(self, minutes: float, *, total_steps: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds, self.planned, self.total_steps, self.clock = minutes * 60, total_steps, total_steps, clock
        self.calibrate_at = max(2, min(50, total_steps // 20))
        self.warm_at = max(1, self.calibrate_at // 5)
        self.started = clock()
        self.eval_seconds = 0.0
        self.per_step: float | None = None
        self.per_step_first: float | None = None  # the calibration's estimate (warm steps only)
        self._mark: tuple[int, float, float] | None = None  # (step, clock, evaluation seconds) the next estimate times from
        self._next_fit = self.calibrate_at

    def add_eval(self, seconds: float) -> None:
        self.eval_seconds += seconds

    def check(self, step: int) -> int | Literal["stop"] | None:
        now = self.clock()
        if now - self.started >= self.seconds:
            return "stop"
        if step == self.warm_at:
            self._mark = (step, now, self.eval_seconds)
        elif step >= self._next_fit and self._mark is not None:
            mark_step, mark_clock, mark_evals = self._mark
            self.per_step = max(1e-9, (now - mark_clock - (self.eval_seconds - mark_evals)) / (step - mark_step))
            fits = step + int((self.seconds * (1 - RESERVE) - (now - self.started)) / self.per_step)
            fits = min(self.planned, max(step + 1, fits))
            first = self.per_step_first is None
            if first:  # later estimates time every step since this one: steadier than a short window
                self.per_step_first = self.per_step
                self._mark = (step, now, self.eval_seconds)
            self._next_fit = step + max(self.warm_at, 10, (fits - step) // 10)
            if fits != self.total_steps and (first or abs(fits - self.total_steps) > REFIT_TOLERANCE * self.total_steps):
                self.total_steps = fits
                return fits
        return None


__all__ = ["REFIT_TOLERANCE", "RESERVE", "LinearSchedule", "TimeBudget", "adamw", "param_groups"]
