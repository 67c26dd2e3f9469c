"""The training loop on real pairs with tiny models: learning, early stopping, accumulation, logs, seeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.data import LabeledPair, read_pairs
from jingpai.reranker.evaluate import evaluate_model
from jingpai.reranker.train import TrainSettings, TrainingError, seed_everything, train


@pytest.fixture(scope="module")
def balanced_afqmc(shared_data: Path) -> list[LabeledPair]:
    """100 positive + 100 negative real AFQMC training pairs (chance accuracy = 0.5)."""
    pairs = read_pairs(shared_data / "zh/afqmc/train.tsv", limit=800)
    pos = [p for p in pairs if p.label == 1][:100]
    neg = [p for p in pairs if p.label == 0][:100]
    assert len(pos) == len(neg) == 100
    return [p for both in zip(pos, neg, strict=True) for p in both]


def cross(tiny_bert_dir: Path, **config: object) -> Reranker:
    return registry.create("cross", base=str(tiny_bert_dir), max_length=64, device="cpu", **config)


def read_log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def test_short_cross_run_beats_chance_on_its_training_slice(tiny_bert_dir: Path, balanced_afqmc: list[LabeledPair], tmp_path: Path) -> None:
    model = cross(tiny_bert_dir)
    before = evaluate_model(model, balanced_afqmc)["accuracy"]
    settings = TrainSettings(epochs=12, batch_size=16, lr=2e-3, warmup_ratio=0.05, metric="accuracy", patience=None, progress=False, seed=0)
    result = train(model, balanced_afqmc, balanced_afqmc, settings, out_dir=tmp_path / "run")
    after = evaluate_model(result.model, balanced_afqmc)
    assert after["accuracy"] >= 0.75, (before, after)
    assert after["accuracy"] == pytest.approx(result.best_metric)
    log = read_log(tmp_path / "run")
    assert log[0]["event"] == "start" and log[0]["train_pairs"] == 200 and log[-1]["event"] == "end"
    losses = [r["loss"] for r in log if r["event"] == "train"]
    assert losses[-1] < losses[0]
    evals = [r for r in log if r["event"] == "eval"]
    assert len(evals) == 12 and max(e["metrics"]["accuracy"] for e in evals) == result.best_metric
    assert json.loads((tmp_path / "run" / "train_settings.json").read_text())["lr"] == 2e-3


def test_early_stopping_keeps_the_first_best(tiny_bert_dir: Path, balanced_afqmc: list[LabeledPair], tmp_path: Path) -> None:
    # every dev candidate is relevant, so MAP is 1.0 at every evaluation and never strictly improves
    dev = [LabeledPair(p.query, p.document, 1.0) for p in balanced_afqmc[:20]]
    settings = TrainSettings(epochs=5, batch_size=20, lr=1e-3, eval_every=1, patience=2, metric="MAP", progress=False)
    result = train(cross(tiny_bert_dir), balanced_afqmc[:100], dev, settings, out_dir=tmp_path / "es")
    assert (result.best_step, result.steps, result.best_metric) == (1, 3, 1.0)
    assert [h["improved"] for h in result.history] == [True, False, False]
    assert [r for r in read_log(tmp_path / "es") if r["event"] == "early_stop"] == [{"event": "early_stop", "step": 3, "best_step": 1}]


def test_best_model_is_what_was_saved_at_best_step(tiny_bert_dir: Path, balanced_afqmc: list[LabeledPair], tmp_path: Path) -> None:
    settings = TrainSettings(epochs=4, batch_size=25, lr=3e-3, metric="loss", patience=None, progress=False, bf16=True)
    result = train(cross(tiny_bert_dir), balanced_afqmc[:100], balanced_afqmc[100:140], settings, out_dir=tmp_path / "b")
    losses = [h["metrics"]["loss"] for h in result.history]
    assert result.best_metric == min(losses)
    assert result.best_step == result.history[int(np.argmin(losses))]["step"]
    reloaded = Reranker.load(tmp_path / "b", device="cpu")
    pairs = [(p.query, p.document) for p in balanced_afqmc[100:110]]
    np.testing.assert_array_equal(reloaded.predict(pairs), result.model.predict(pairs))


def test_gradient_accumulation_counts_optimizer_steps(tiny_bert_dir: Path, balanced_afqmc: list[LabeledPair], tmp_path: Path) -> None:
    settings = TrainSettings(epochs=2, batch_size=8, grad_accum=3, lr=1e-3, log_every=1, progress=False)
    result = train(cross(tiny_bert_dir), balanced_afqmc[:40], None, settings, out_dir=tmp_path / "acc")
    # 40 pairs / 8 = 5 batches → steps after batches 3 and 5 → 2 per epoch
    assert result.steps == 4 and result.best_metric is None and result.best_step == 4
    assert [r["step"] for r in read_log(tmp_path / "acc") if r["event"] == "train"] == [1, 2, 3, 4]


def test_same_seed_same_model(tiny_bert_dir: Path, balanced_afqmc: list[LabeledPair], tmp_path: Path) -> None:
    settings = TrainSettings(epochs=1, batch_size=10, lr=1e-3, progress=False, seed=7)
    pairs = [(p.query, p.document) for p in balanced_afqmc[:10]]
    runs = []
    for name in ("a", "b"):
        seed_everything(7)  # the fresh classifier head is drawn from the global generator
        model = cross(tiny_bert_dir)
        runs.append(train(model, balanced_afqmc[:30], None, settings, out_dir=tmp_path / name).model.predict(pairs))
    np.testing.assert_array_equal(runs[0], runs[1])


def test_settings_and_data_errors(tiny_bert_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="grad_accum must be >= 1, got 0"):
        TrainSettings(grad_accum=0)
    with pytest.raises(ValueError, match="unknown dev metric 'ROC'; expected one of auto, AUC, F1, accuracy, level_accuracy, MAP, MRR, nDCG@10, P@1, loss"):
        TrainSettings(metric="ROC")  # type: ignore[arg-type]
    with pytest.raises(TrainingError, match="no training pairs"):
        train(cross(tiny_bert_dir), [], None, TrainSettings(progress=False), out_dir=tmp_path)


def test_auto_metric_is_auc_on_pair_data_and_map_on_ranking_data() -> None:
    from jingpai.reranker.train import pick_metric

    pair_data = [LabeledPair(f"q{i}", f"d{i}", float(i % 2)) for i in range(20)]
    ranking = [LabeledPair(f"q{i // 5}", f"d{i}", float(i % 5 == 0)) for i in range(20)]
    assert pick_metric(pair_data) == "AUC"
    assert pick_metric(ranking) == "MAP"


class FakeClock:
    """Seconds that advance only when the training loop reads them: one second per read."""

    def __init__(self) -> None:
        self.now = 0.0
        self.jump_at: tuple[float, float] | None = None  # (time, extra seconds) to add once

    def __call__(self) -> float:
        self.now += 1.0
        if self.jump_at is not None and self.now >= self.jump_at[0]:
            self.now += self.jump_at[1]
            self.jump_at = None
        return self.now


def test_time_budget_shrinks_the_run_and_its_schedule(tiny_bert_dir: Path, balanced_afqmc: list[LabeledPair], tmp_path: Path) -> None:
    # 200 pairs / 2 per batch × 10 epochs = 1,000 planned steps; one clock read (≈ 1 s) per step, so at the
    # calibration step (50) the run measures ~1 s/step and fits nine tenths of 120 s: ~108 steps
    settings = TrainSettings(epochs=10, batch_size=2, lr=1e-3, max_minutes=2.0, log_every=1, progress=False)
    result = train(cross(tiny_bert_dir), balanced_afqmc, None, settings, out_dir=tmp_path / "budget", clock=FakeClock())
    log = read_log(tmp_path / "budget")
    fitted = [r for r in log if r["event"] == "time_budget"]
    assert len(fitted) == 1 and fitted[0]["step"] == 50 and fitted[0]["planned_steps"] == 1000
    assert 100 <= fitted[0]["total_steps"] <= 110 and result.steps == fitted[0]["total_steps"]
    lrs = [r["lr"] for r in log if r["event"] == "train"]
    # the schedule decays to 0 at the fitted end instead of being cut at a high learning rate
    assert lrs[-1] == 0.0 and max(lrs) == pytest.approx(1e-3, rel=0.05)


class SlowStartClock(FakeClock):
    """3 s per clock read for the first ``slow_reads`` reads (cold caches), then 1 s."""

    def __init__(self, slow_reads: int) -> None:
        super().__init__()
        self.reads, self.slow_reads = 0, slow_reads

    def __call__(self) -> float:
        self.reads += 1
        if self.reads <= self.slow_reads:
            self.now += 2.0
        return super().__call__()


def test_time_budget_grows_back_when_the_first_steps_were_slow(tiny_bert_dir: Path, balanced_afqmc: list[LabeledPair],
                                                               tmp_path: Path) -> None:
    # the steps up to the calibration (50) take 3 s, the rest 1 s: the first fit (~3 s/step) is too short, and the
    # next estimate, timed from the steps since, grows the run back to what the budget really fits
    settings = TrainSettings(epochs=10, batch_size=2, lr=1e-3, max_minutes=5.0, log_every=1, progress=False)
    result = train(cross(tiny_bert_dir), balanced_afqmc, None, settings, out_dir=tmp_path / "grow", clock=SlowStartClock(52))
    fitted = [r for r in read_log(tmp_path / "grow") if r["event"] == "time_budget"]
    assert fitted[0]["step"] == 50 and fitted[0]["total_steps"] < 100
    assert len(fitted) >= 2 and fitted[1]["total_steps"] > 1.5 * fitted[0]["total_steps"]
    assert result.steps == fitted[-1]["total_steps"] <= 1000
    # the whole run (1 s per step after the slow start) still ends inside the budget
    assert 52 * 3 + (result.steps - 52) <= 5 * 60


def test_time_budget_stops_at_the_budget_and_still_evaluates(tiny_bert_dir: Path, balanced_afqmc: list[LabeledPair], tmp_path: Path) -> None:
    clock = FakeClock()
    clock.jump_at = (80.0, 1000.0)  # the machine stalls after the fitted plan was made: the budget runs out early
    settings = TrainSettings(epochs=10, batch_size=2, lr=1e-3, max_minutes=2.0, eval_every=500, metric="accuracy", progress=False)
    result = train(cross(tiny_bert_dir), balanced_afqmc, balanced_afqmc[:40], settings, out_dir=tmp_path / "stop", clock=clock)
    log = read_log(tmp_path / "stop")
    assert [r["stopped"] for r in log if r["event"] == "time_budget" and "stopped" in r] == [True]
    assert result.steps < 100
    assert result.history and result.history[-1]["step"] == result.steps  # the final evaluation still ran


def test_time_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_minutes must be > 0 or None, got 0"):
        TrainSettings(max_minutes=0)
