"""The settings of :func:`jingpai.reranker.train.train` and its error, without importing torch
(``jingpai train --help`` builds its options from :class:`TrainSettings`).

>>> TrainSettings(epochs=2).batch_size
16
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from jingpai.errors import UserError

DevMetric = Literal["auto", "AUC", "F1", "accuracy", "level_accuracy", "MAP", "MRR", "nDCG@10", "P@1", "loss"]
DEV_METRICS: tuple[str, ...] = get_args(DevMetric)
Batching = Literal["pairs", "queries", "lengths"]
BATCHINGS: tuple[str, ...] = get_args(Batching)
LOG_FILE = "train_log.jsonl"
SETTINGS_FILE = "train_settings.json"


class TrainingError(UserError, RuntimeError):
    """Training cannot start or continue (bad settings, no data, a non-finite loss)."""


@dataclass(frozen=True)
class TrainSettings:
    """All training options (built once from the CLI and passed to :func:`train`).

    Attributes:
        epochs: passes over the training pairs.
        batch_size: pairs per forward pass.
        grad_accum: forward passes per optimizer step (effective batch = batch_size × grad_accum).
        lr: peak learning rate of AdamW.
        weight_decay: AdamW weight decay (not applied to biases and LayerNorm weights).
        warmup_ratio: fraction of optimizer steps with linear warmup; linear decay to 0 after.
        max_grad_norm: gradient clipping norm (``None``: no clipping).
        bf16: run forward passes under bf16 autocast (CPU AMX or GPU).
        seed: seed for python, numpy and torch, and for batch shuffling.
        max_steps: stop after this many optimizer steps (``None``: run all epochs).
        max_minutes: wall-clock budget of the training loop. After a few steps the run measures its speed
            and shrinks its step count (and so its learning-rate schedule, which still decays to 0) to fit the
            budget, keeping a tenth for evaluations; it stops at the budget whatever happens (``None``: no
            budget). The same recipe then runs whole on a fast machine and a shortened one on a slow one.
        eval_every: evaluate on dev every this many optimizer steps (``None``: after each epoch).
        metric: dev metric to select the best model on (``loss`` is minimised, the rest maximised).
            ``auto`` picks by the dev data's shape (:func:`pick_metric`): MAP where queries have several
            candidates, AUC on pair data (one candidate per query), where MAP is ~1 for any model.
        patience: stop after this many evaluations without improvement (``None``: never stop early).
        relevant_min: labels ``>=`` this count as relevant in dev metrics.
        eval_batch_size: batch size for dev scoring.
        log_every: write a loss line to the log every this many optimizer steps.
        progress: show a tqdm progress bar.
        batching: ``pairs`` shuffles pairs one by one; ``queries`` shuffles queries and fills each batch
            with whole queries (every pair of a query in one batch, up to ``batch_size`` pairs unless one
            query alone has more), which in-window (listwise) losses need; ``lengths`` shuffles pairs and
            batches pairs of similar length together within pools of 50 batches (less padding per step).
    """

    epochs: int = 3
    batch_size: int = 16
    grad_accum: int = 1
    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float | None = 1.0
    bf16: bool = False
    seed: int = 0
    max_steps: int | None = None
    max_minutes: float | None = None
    eval_every: int | None = None
    metric: DevMetric = "auto"
    patience: int | None = 2
    relevant_min: float = 1.0
    eval_batch_size: int = 64
    log_every: int = 10
    progress: bool = True
    batching: Batching = "pairs"

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "grad_accum", "eval_batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_steps", "eval_every", "patience"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"max_minutes must be > 0 or None, got {self.max_minutes}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.batching not in BATCHINGS:
            raise ValueError(f"unknown batching {self.batching!r}; expected one of {', '.join(BATCHINGS)}")
        if self.metric not in DEV_METRICS:
            raise ValueError(f"unknown dev metric {self.metric!r}; expected one of {', '.join(DEV_METRICS)}")


__all__ = ["BATCHINGS", "Batching", "DEV_METRICS", "LOG_FILE", "SETTINGS_FILE", "DevMetric", "TrainSettings", "TrainingError"]
