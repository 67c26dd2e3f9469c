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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import torch
from tqdm.auto import tqdm

from jingpai.reranker.base import Reranker
from jingpai.reranker.data import LabeledPair
from jingpai.reranker.evaluate import class_balance_warning, evaluate_model

logger = logging.getLogger(__name__)

DevMetric = Literal["auto", "AUC", "F1", "accuracy", "MAP", "MRR", "nDCG@10", "P@1", "loss"]
DEV_METRICS: tuple[str, ...] = get_args(DevMetric)
LOG_FILE = "train_log.jsonl"
SETTINGS_FILE = "train_settings.json"


class TrainingError(RuntimeError):
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
        eval_every: evaluate on dev every this many optimizer steps (``None``: after each epoch).
        metric: dev metric to select the best model on (``loss`` is minimised, the rest maximised).
            ``auto`` picks by the dev data's shape (:func:`pick_metric`): MAP where queries have several
            candidates, AUC on pair data (one candidate per query), where MAP is ~1 for any model.
        patience: stop after this many evaluations without improvement (``None``: never stop early).
        relevant_min: labels ``>=`` this count as relevant in dev metrics.
        eval_batch_size: batch size for dev scoring.
        log_every: write a loss line to the log every this many optimizer steps.
        progress: show a tqdm progress bar.
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
    eval_every: int | None = None
    metric: DevMetric = "auto"
    patience: int | None = 2
    relevant_min: float = 1.0
    eval_batch_size: int = 64
    log_every: int = 10
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "grad_accum", "eval_batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_steps", "eval_every", "patience"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.metric not in DEV_METRICS:
            raise ValueError(f"unknown dev metric {self.metric!r}; expected one of {', '.join(DEV_METRICS)}")


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


def _param_groups(model: Reranker, weight_decay: float, lr: float) -> list[dict[str, Any]]:
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
) -> TrainResult:
    """Train ``model`` and save the best checkpoint to ``out_dir``.

    Args:
        model: a freshly created (or loaded) model.
        train_pairs: training pairs (labels as the model's loss expects: 0/1, graded, or levels).
        dev_pairs: dev pairs for model selection and early stopping (``None``: keep the last model).
        settings: :class:`TrainSettings`.
        out_dir: output folder (model files, ``train_log.jsonl``, ``train_settings.json``).

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
    log_path = out / LOG_FILE
    log = log_path.open("w", encoding="utf-8")

    def emit(record: dict[str, Any]) -> None:
        log.write(json.dumps(record, ensure_ascii=False) + "\n")
        log.flush()

    batches_per_epoch = math.ceil(len(train_pairs) / settings.batch_size)
    steps_per_epoch = math.ceil(batches_per_epoch / settings.grad_accum)
    total_steps = steps_per_epoch * settings.epochs
    if settings.max_steps is not None:
        total_steps = min(total_steps, settings.max_steps)
    warmup = int(total_steps * settings.warmup_ratio)

    optimizer = torch.optim.AdamW(_param_groups(model, settings.weight_decay, settings.lr), lr=settings.lr)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    if dev_pairs is None:
        logger.warning("no dev data: early stopping is off and the last model is kept")
    metric = settings.metric
    if metric == "auto":
        metric = pick_metric(dev_pairs, relevant_min=settings.relevant_min) if dev_pairs else "loss"
        logger.info("dev metric: %s (picked from the dev data's shape; --metric overrides)", metric)
    maximise = metric != "loss"
    best: float | None = None
    best_step = 0
    history: list[dict[str, Any]] = []
    bad_rounds = 0
    step = 0
    stop = False
    rng = np.random.default_rng(settings.seed)
    bar = tqdm(total=total_steps, desc=f"train {model.name}", disable=not settings.progress, unit="step")
    emit({"event": "start", "architecture": model.name, "train_pairs": len(train_pairs),
          "dev_pairs": len(dev_pairs) if dev_pairs else 0, "total_steps": total_steps, "device": str(model.device)})

    def evaluate_now(epoch: int) -> None:
        nonlocal best, best_step, bad_rounds, stop
        if dev_pairs is None:
            return
        started = time.perf_counter()
        if metric == "loss":
            metrics = {"loss": dev_loss(model, dev_pairs, batch_size=settings.eval_batch_size, bf16=settings.bf16)}
        else:
            metrics = evaluate_model(model, dev_pairs, batch_size=settings.eval_batch_size, relevant_min=settings.relevant_min)
            warning = class_balance_warning(metrics)
            if warning:
                # selecting on a pair metric, a collapsed class is the failure to flag; on a ranking metric the
                # 0.5 threshold is not what is optimised, so it is only noted
                logger.log(logging.WARNING if metric in ("AUC", "F1", "accuracy") else logging.INFO, "step %d: %s", step, warning)
        value = metrics[metric]
        if math.isnan(value):
            logger.warning("dev %s is NaN at step %d (e.g. no query with a relevant item); treating it as worst", metric, step)
            value = -math.inf if maximise else math.inf
        improved = best is None or (value > best if maximise else value < best)
        record = {"event": "eval", "step": step, "epoch": epoch, "metric": metric, "metrics": metrics, "improved": improved,
                  "seconds": round(time.perf_counter() - started, 3)}
        history.append(record)
        emit(record)
        if improved:
            best, best_step, bad_rounds = value, step, 0
            model.save(out)
        else:
            bad_rounds += 1
            if settings.patience is not None and bad_rounds >= settings.patience:
                logger.info("early stop at step %d: dev %s did not improve for %d evaluations", step, metric, bad_rounds)
                emit({"event": "early_stop", "step": step, "best_step": best_step})
                stop = True
        bar.set_postfix({metric: f"{value:.4f}"})

    try:
        for epoch in range(settings.epochs):
            order = rng.permutation(len(train_pairs))
            model.net.train()
            running, running_n = 0.0, 0
            for b in range(batches_per_epoch):
                idx = order[b * settings.batch_size : (b + 1) * settings.batch_size]
                chunk = [train_pairs[i] for i in idx]
                batch = model.to_device(model.featurize([(p.query, p.document) for p in chunk]))
                labels = torch.tensor([p.label for p in chunk], dtype=torch.float32, device=model.device)
                with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=settings.bf16):
                    loss = model.loss(batch, labels)
                if not torch.isfinite(loss):
                    raise TrainingError(f"loss is {float(loss)} at step {step} (epoch {epoch}, batch {b}); lower --lr or check labels")
                (loss.float() / settings.grad_accum).backward()
                running += float(loss.detach())
                running_n += 1
                last_of_epoch = b == batches_per_epoch - 1
                if (b + 1) % settings.grad_accum and not last_of_epoch:
                    continue
                if settings.max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(model.net.parameters(), settings.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                bar.update(1)
                if step % settings.log_every == 0:
                    emit({"event": "train", "step": step, "epoch": epoch, "loss": running / running_n,
                          "lr": scheduler.get_last_lr()[0]})
                    bar.set_postfix({"loss": f"{running / running_n:.4f}"})
                    running, running_n = 0.0, 0
                if settings.eval_every is not None and step % settings.eval_every == 0:
                    evaluate_now(epoch)
                    model.net.train()
                if stop or step >= total_steps:
                    break
            if running_n:
                emit({"event": "train", "step": step, "epoch": epoch, "loss": running / running_n, "lr": scheduler.get_last_lr()[0]})
            if settings.eval_every is None and not stop:
                evaluate_now(epoch)
            if stop or step >= total_steps:
                break
        if settings.eval_every is not None and (not history or history[-1]["step"] != step) and not stop:
            evaluate_now(epoch)
        if dev_pairs is None:
            model.save(out)
            best_step = step
        emit({"event": "end", "steps": step, "best_step": best_step, "best_metric": best})
    finally:
        bar.close()
        log.close()
    best_model = Reranker.load(out, device=str(model.device))
    return TrainResult(best_model, out, best, best_step, step, history)


__all__ = ["DEV_METRICS", "TrainResult", "TrainSettings", "TrainingError", "build_model", "pick_metric", "seed_everything", "train"]
