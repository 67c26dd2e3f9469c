"""Training loop shared by every architecture: AdamW, linear warmup/decay, optional bf16 autocast,
gradient accumulation, early stopping on a dev metric, seeds, a progress bar and a JSON-lines log.

The best model (by the dev metric; the last one when there is no dev set) is saved to ``out_dir`` and
returned, reloaded from there, so what you get is exactly what is on disk.

Example:
    >>> model = registry.create("cross", base="/models/minilm")                                # doctest: +SKIP
    >>> result = train(model, train_pairs, dev_pairs, TrainSettings(epochs=2), out_dir="runs/x")  # doctest: +SKIP
    >>> result.best_metric, result.model.rank("query", ["doc a", "doc b"])                     # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from jingpai.reranker.base import Reranker
from jingpai.reranker.batching import length_batches, pack_groups, query_groups
from jingpai.reranker.optim import LinearSchedule, TimeBudget, adamw
from jingpai.reranker.data import LabeledPair
from jingpai.reranker.evaluate import class_balance_warning, evaluate_model
from jingpai.reranker.train_settings import DEV_METRICS, LOG_FILE, SETTINGS_FILE, DevMetric, TrainingError, TrainSettings

logger = logging.getLogger(__name__)

#: batches per pool of ``batching="lengths"``: sorted by length only within a pool, so batches stay random slices
LENGTH_POOL = 50


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        model: the best model, loaded back from ``out_dir``.
        out_dir: where it is saved (with ``train_log.jsonl`` and ``train_settings.json``).
        best_metric: its dev metric value (``None`` without dev data).
        best_step: the optimizer step it was saved at.
        steps: optimizer steps run.
        history: the dev evaluations, in order.
    """

    model: Reranker
    out_dir: Path
    best_metric: float | None
    best_step: int
    steps: int
    history: list[dict[str, Any]] = field(default_factory=list)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) so runs repeat."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@torch.no_grad()
def pick_metric(pairs: Sequence[LabeledPair], *, relevant_min: float = 1.0) -> str:
    """The dev metric that fits ``pairs``: ``MAP`` when the queries with a relevant candidate have on
    average at least two candidates (a ranking set), else ``AUC`` (pair data: each query's one candidate
    is trivially ranked first, so MAP would reward calling every pair a match)."""
    from collections import Counter

    counts = Counter(p.qid if p.qid is not None else p.query for p in pairs)
    relevant = {p.qid if p.qid is not None else p.query for p in pairs if p.label >= relevant_min}
    sizes = [counts[q] for q in relevant]
    return "MAP" if sizes and sum(sizes) / len(sizes) >= 2 else "AUC"


def dev_loss(model: Reranker, pairs: Sequence[LabeledPair], *, batch_size: int, bf16: bool) -> float:
    """Mean training loss over ``pairs`` in eval mode."""
    model.net.eval()
    total, count = 0.0, 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        batch = model.to_device(model.featurize([(p.query, p.document) for p in chunk]))
        labels = torch.tensor([p.label for p in chunk], dtype=torch.float32, device=model.device)
        with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=bf16):
            total += float(model.loss(batch, labels)) * len(chunk)
        count += len(chunk)
    return total / count


def build_model(
    name: str,
    config: dict[str, Any],
    train_pairs: Sequence[LabeledPair],
    *,
    device: str | None = None,
    vectors: str | Path | dict[str, np.ndarray] | None = None,
) -> Reranker:
    """A new, untrained model of architecture ``name`` ready for :func:`train`.

    Models that learn a vocabulary from data (``hcan``/``iasm`` words, ``tita`` topics) expose a
    ``build(texts, config, …)`` classmethod and get the training texts; the others are built from their
    config alone.

    Args:
        name: registered architecture name.
        config: config fields of that architecture (e.g. ``{"base": "/models/minilm", "max_length": 128}``).
        train_pairs: the training pairs (their texts feed ``build``).
        device: torch device.
        vectors: pre-trained word vectors for word-level models.

    Raises:
        ValueError: a config field is unknown to the architecture, or ``vectors`` is given to a model
            that takes none.
    """
    import inspect

    from jingpai.reranker import registry

    cls = registry.get(name)
    fields = set(cls.config_class.__dataclass_fields__)
    unknown = sorted(set(config) - fields)
    if unknown:
        raise ValueError(f"unknown {name} config field(s) {unknown}; expected some of {sorted(fields)}")
    cfg = cls.config_class(**config)
    build = getattr(cls, "build", None)
    if not callable(build):
        if vectors is not None:
            raise ValueError(f"{name} takes no word vectors; --vectors is for word-level models (hcan, iasm)")
        return cls(cfg, device=device)
    params = list(inspect.signature(build).parameters)
    texts_only_docs = params and params[0] == "documents"
    texts = [p.document for p in train_pairs] if texts_only_docs else [t for p in train_pairs for t in (p.query, p.document)]
    kwargs: dict[str, Any] = {"device": device}
    if vectors is not None:
        if "vectors" not in params:
            raise ValueError(f"{name} takes no word vectors; --vectors is for word-level models (hcan, iasm)")
        kwargs["vectors"] = vectors
    return build(texts, cfg, **kwargs)


def train(
    model: Reranker,
    train_pairs: Sequence[LabeledPair],
    dev_pairs: Sequence[LabeledPair] | None,
    settings: TrainSettings,
    *,
    out_dir: str | Path,
    clock: Callable[[], float] = time.perf_counter,
) -> TrainResult:
    """Train ``model`` and save the best checkpoint to ``out_dir``.

    Args:
        model: a freshly created (or loaded) model.
        train_pairs: training pairs (labels as the model's loss expects: 0/1, graded, or levels).
        dev_pairs: dev pairs for model selection and early stopping (``None``: keep the last model).
        settings: :class:`TrainSettings`.
        out_dir: output folder (model files, ``train_log.jsonl``, ``train_settings.json``).
        clock: seconds for :attr:`TrainSettings.max_minutes` (injectable so tests control time).

    Returns:
        :class:`TrainResult` with the best model reloaded from ``out_dir``.

    Raises:
        TrainingError: no training pairs, or the loss became NaN/inf (the message names the step).
    """
    if not train_pairs:
        raise TrainingError("no training pairs: check --train files and --format")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(settings.seed)
    (out / SETTINGS_FILE).write_text(json.dumps(asdict(settings), indent=2))
    run = _TrainRun(model, train_pairs, dev_pairs, settings, out, clock=clock)
    try:
        run.fit()
    finally:
        run.close()
    best_model = Reranker.load(out, device=str(model.device))
    return TrainResult(best_model, out, run.best, run.best_step, run.step, run.history)


def _select_metric(settings: TrainSettings, dev_pairs: Sequence[LabeledPair] | None) -> str:
    """The dev metric to select on: ``settings.metric``, or for ``auto`` one fitting the dev data."""
    metric = settings.metric
    if metric == "auto":
        metric = pick_metric(dev_pairs, relevant_min=settings.relevant_min) if dev_pairs else "loss"
        logger.info("dev metric: %s (picked from the dev data's shape; --metric overrides)", metric)
    return metric


class _TrainRun:
    """The state of one :func:`train` call: optimizer and schedule, the JSON-lines log, the progress bar
    and the best-so-far bookkeeping of model selection and early stopping."""

    def __init__(
        self,
        model: Reranker,
        train_pairs: Sequence[LabeledPair],
        dev_pairs: Sequence[LabeledPair] | None,
        settings: TrainSettings,
        out: Path,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.model, self.train_pairs, self.dev_pairs, self.settings, self.out = model, train_pairs, dev_pairs, settings, out
        self.log = (out / LOG_FILE).open("w", encoding="utf-8")
        self.rng = np.random.default_rng(settings.seed)
        self.groups = query_groups(train_pairs) if settings.batching == "queries" else None
        # characters: a proxy for the pieces a batch pads to, known without tokenizing
        self.lengths = [max(len(p.query), len(p.document)) for p in train_pairs] if settings.batching == "lengths" else None
        self.batches_per_epoch = len(self.epoch_batches()) if self.groups is not None else math.ceil(len(train_pairs) / settings.batch_size)
        if self.groups is None and getattr(model.config, "listwise_weight", 0.0) > 0:
            logger.warning("%s has listwise_weight > 0 but batching is %r: a query's window is split across batches "
                           "(use --batching queries)", model.name, settings.batching)
        steps_per_epoch = math.ceil(self.batches_per_epoch / settings.grad_accum)
        self.total_steps = steps_per_epoch * settings.epochs
        if settings.max_steps is not None:
            self.total_steps = min(self.total_steps, settings.max_steps)
        self.schedule = LinearSchedule(self.total_steps, warmup_ratio=settings.warmup_ratio)
        self.optimizer, self.scheduler = adamw(model, lr=settings.lr, weight_decay=settings.weight_decay, schedule=self.schedule)
        self.budget = None if settings.max_minutes is None else TimeBudget(settings.max_minutes, total_steps=self.total_steps, clock=clock)
        if dev_pairs is None:
            logger.warning("no dev data: early stopping is off and the last model is kept")
        self.metric = _select_metric(settings, dev_pairs)
        self.maximise = self.metric != "loss"
        self.best: float | None = None
        self.best_step = 0
        self.history: list[dict[str, Any]] = []
        self.bad_rounds = 0
        self.step = 0
        self.stop = False
        self.out_of_time = False
        self.running, self.running_n = 0.0, 0
        self.bar = tqdm(total=self.total_steps, desc=f"train {model.name}", disable=not settings.progress, unit="step")
        self.emit({"event": "start", "architecture": model.name, "train_pairs": len(train_pairs),
                   "dev_pairs": len(dev_pairs) if dev_pairs else 0, "total_steps": self.total_steps, "device": str(model.device)})

    def emit(self, record: dict[str, Any]) -> None:
        self.log.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.log.flush()

    def close(self) -> None:
        self.bar.close()
        self.log.close()

    def done(self) -> bool:
        return self.stop or self.out_of_time or self.step >= self.total_steps

    def fit_budget(self) -> None:
        """With ``max_minutes``: shrink the run (and its schedule) to what fits, or stop at the budget."""
        decision = None if self.budget is None else self.budget.check(self.step)
        if decision == "stop":
            logger.info("time budget of %.1f min reached at step %d of %d: stopping", self.settings.max_minutes, self.step, self.total_steps)
            self.emit({"event": "time_budget", "step": self.step, "total_steps": self.total_steps, "stopped": True})
            self.out_of_time = True  # unlike an early stop, the run still ends with an evaluation
        elif decision is not None and self.budget is not None:
            logger.info("time budget %.1f min at %.3f s/step: %d steps instead of %d (the schedule follows)",
                        self.settings.max_minutes, self.budget.per_step, decision, self.total_steps)
            self.emit({"event": "time_budget", "step": self.step, "seconds_per_step": round(self.budget.per_step or 0.0, 4),
                       "total_steps": decision, "planned_steps": self.total_steps})
            self.total_steps = decision
            self.schedule.resize(decision, at_step=self.step)
            self.bar.total = decision

    def fit(self) -> None:
        """All epochs (until early stop or ``max_steps``); the final evaluation; the last model without dev data."""
        settings = self.settings
        for epoch in range(settings.epochs):
            self.run_epoch(epoch)
            if settings.eval_every is None and not self.stop:
                self.evaluate(epoch)
            if self.done():
                break
        if settings.eval_every is not None and (not self.history or self.history[-1]["step"] != self.step) and not self.stop:
            self.evaluate(epoch)
        if self.dev_pairs is None:
            self.model.save(self.out)
            self.best_step = self.step
        self.emit({"event": "end", "steps": self.step, "best_step": self.best_step, "best_metric": self.best})

    def epoch_batches(self) -> list[np.ndarray]:
        """This epoch's batches of pair indices, in a fresh shuffled order (whole queries with ``batching='queries'``)."""
        size = self.settings.batch_size
        if self.groups is None:
            order = self.rng.permutation(len(self.train_pairs))
            if self.lengths is not None:
                count = math.ceil(len(order) / size)
                return [np.array(b) for b in length_batches(
                    self.lengths, order=order.tolist(), size=size, pool=LENGTH_POOL, rng_order=self.rng.permutation(count).tolist())]
            return [order[b * size : (b + 1) * size] for b in range(math.ceil(len(order) / size))]
        return [np.array(b) for b in pack_groups(self.groups, order=self.rng.permutation(len(self.groups)), size=size)]

    def run_epoch(self, epoch: int) -> None:
        """One pass over the training pairs in this epoch's shuffled order (may stop early)."""
        batches = self.epoch_batches()
        self.model.net.train()
        self.running, self.running_n = 0.0, 0
        for b, idx in enumerate(batches):
            self.backward(idx, epoch, b)
            last_of_epoch = b == len(batches) - 1
            if (b + 1) % self.settings.grad_accum and not last_of_epoch:
                continue
            self.optimizer_step(epoch)
            if self.done():
                break
        if self.running_n:
            self.emit({"event": "train", "step": self.step, "epoch": epoch, "loss": self.running / self.running_n,
                       "lr": self.scheduler.get_last_lr()[0]})

    def backward(self, idx: np.ndarray, epoch: int, b: int) -> None:
        """Forward and backward pass of one batch (gradients accumulate until :meth:`optimizer_step`)."""
        model = self.model
        chunk = [self.train_pairs[i] for i in idx]
        batch = model.to_device(model.featurize([(p.query, p.document) for p in chunk]))
        labels = torch.tensor([p.label for p in chunk], dtype=torch.float32, device=model.device)
        with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=self.settings.bf16):
            loss = model.loss(batch, labels)
        if not torch.isfinite(loss):
            raise TrainingError(f"loss is {float(loss)} at step {self.step} (epoch {epoch}, batch {b}); lower --lr or check labels")
        (loss.float() / self.settings.grad_accum).backward()
        self.running += float(loss.detach())
        self.running_n += 1

    def optimizer_step(self, epoch: int) -> None:
        """Clip, step the optimizer and schedule; log the running loss and evaluate when due."""
        settings = self.settings
        if settings.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.net.parameters(), settings.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.bar.update(1)
        if self.step % settings.log_every == 0:
            self.emit({"event": "train", "step": self.step, "epoch": epoch, "loss": self.running / self.running_n,
                       "lr": self.scheduler.get_last_lr()[0]})
            self.bar.set_postfix({"loss": f"{self.running / self.running_n:.4f}"})
            self.running, self.running_n = 0.0, 0
        if settings.eval_every is not None and self.step % settings.eval_every == 0:
            self.evaluate(epoch)
            self.model.net.train()
        self.fit_budget()

    def dev_metrics(self) -> dict[str, float]:
        """The dev metrics now (only the loss when selecting on it)."""
        settings, metric = self.settings, self.metric
        if metric == "loss":
            return {"loss": dev_loss(self.model, self.dev_pairs, batch_size=settings.eval_batch_size, bf16=settings.bf16)}
        metrics = evaluate_model(self.model, self.dev_pairs, batch_size=settings.eval_batch_size, relevant_min=settings.relevant_min)
        warning = class_balance_warning(metrics)
        if warning:
            # selecting on a pair metric, a collapsed class is the failure to flag; on a ranking metric the
            # 0.5 threshold is not what is optimised, so it is only noted
            logger.log(logging.WARNING if metric in ("AUC", "F1", "accuracy", "level_accuracy") else logging.INFO, "step %d: %s", self.step, warning)
        return metrics

    def evaluate(self, epoch: int) -> None:
        """Evaluate on dev; save the model when it improved, count a bad round (maybe stop) when not."""
        if self.dev_pairs is None:
            return
        started = time.perf_counter()
        metrics = self.dev_metrics()
        metric, step = self.metric, self.step
        value = metrics[metric]
        if math.isnan(value):
            logger.warning("dev %s is NaN at step %d (e.g. no query with a relevant item); treating it as worst", metric, step)
            value = -math.inf if self.maximise else math.inf
        improved = self.best is None or (value > self.best if self.maximise else value < self.best)
        record = {"event": "eval", "step": step, "epoch": epoch, "metric": metric, "metrics": metrics, "improved": improved,
                  "seconds": round(time.perf_counter() - started, 3)}
        self.history.append(record)
        self.emit(record)
        if improved:
            self.best, self.best_step, self.bad_rounds = value, step, 0
            self.model.save(self.out)
        else:
            self.bad_rounds += 1
            if self.settings.patience is not None and self.bad_rounds >= self.settings.patience:
                logger.info("early stop at step %d: dev %s did not improve for %d evaluations", step, metric, self.bad_rounds)
                self.emit({"event": "early_stop", "step": step, "best_step": self.best_step})
                self.stop = True
        self.bar.set_postfix({metric: f"{value:.4f}"})
        if self.budget is not None:
            self.budget.add_eval(time.perf_counter() - started)


__all__ = ["DEV_METRICS", "LOG_FILE", "SETTINGS_FILE", "DevMetric", "TrainResult", "TrainSettings", "TrainingError", "build_model", "pick_metric", "seed_everything", "train"]
