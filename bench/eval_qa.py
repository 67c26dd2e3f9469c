"""Section 3 — answer selection (HCAN Table 2 / BERTCA Table 2): TrecQA raw-test and WikiQA dev MAP/MRR
for every model that fits the task, each trained on the set's own training split, mean ± std over seeds."""

from __future__ import annotations

import logging
import time

from bench.eval_common import (
    ReportError, ReportSettings, Row, Table, base_meta, class_balance_note, gpu_recipe_skip, gpu_skip_note, mean_std, short_hardware,
    torch_device,
)
from bench.eval_models import RECIPES, get_model

logger = logging.getLogger(__name__)

DATASETS = {
    "trecqa": (("en", "trecqa", "raw-test"), "TrecQA raw-test (1,517 pairs; 6 queries without a correct answer are skipped)"),
    "wikiqa": (("en", "wikiqa", "dev"), "WikiQA dev (1,130 pairs; queries without a correct answer are skipped)"),
}
#: a row per recipe ``{data set}-{arch}``; ``use-``: the word model with USE-multilingual word vectors (issue 31)
ARCHS = ("cross", "kwbert", "bertca", "joint-bertca", "hcan", "iasm", "use-hcan", "use-iasm", "cosine-hcan", "cosine-sum-hcan")
PAPER = {
    "trecqa": "Paper (HCAN, Table 2, TrecQA raw): HCAN MAP 0.774 / MRR 0.843 (RM 0.756 / 0.812, SM 0.663 / 0.725). BERTCA's "
              "Table 2 covers ETSR, STS-B, QQP and MRPC, none of which is shared here, so bertca has no paper number on these sets.",
    "wikiqa": "Neither paper reports WikiQA; it is included as a second answer-selection set (dev split; its test split is not shared).",
}
NOT_FITTING = ("tita: a 3-level topic-aware classifier over a GSM bag-of-words of long documents; answer selection "
               "has binary labels and one-sentence candidates, so it is evaluated on STS-B levels in issue 5, not here.")


def run(settings: ReportSettings) -> list[Table]:
    from jingpai.reranker.data import read_pairs
    from jingpai.reranker.evaluate import evaluate_model

    device = torch_device(settings)
    tables = []
    for name, (parts, desc) in DATASETS.items():
        if not settings.wants(f"qa.{name}"):
            continue
        test = read_pairs(settings.data_file(f"qa.{name}", parts), limit=300 if settings.quick else None)
        table = Table(
            key=f"qa-{name}", section="qa", title=f"Answer selection — {name} ({'quick slice' if settings.quick else 'full'})",
            columns=["model", "base", "seeds", "MAP", "MRR", "P@1", "accuracy", "acc. +", "acc. −", "train s/seed", "run on"],
            meta=base_meta(settings, "qa", data=settings.data_description(f"qa.{name}", desc) + (" — first 300 pairs" if settings.quick else ""),
                           model="see rows; each trained on the set's train split (report_recipe.json in out/models)", device=device),
            notes=[PAPER[name], NOT_FITTING],
        )
        for arch in ARCHS:
            row_id = f"qa.{name}.{arch}"
            if not settings.wants(row_id):
                continue
            recipe = RECIPES[f"{name}-{arch}"]
            if gpu_recipe_skip(settings, device, gpu_sized=recipe.base is not None):
                table.notes.append(gpu_skip_note(settings, "qa", row_id, f"{arch} (fine-tuning a BERT-family model on the full training set)"))
                continue
            seeds = settings.seeds[:1] if settings.quick else settings.seeds
            metrics: dict[str, list[float]] = {"MAP": [], "MRR": [], "P@1": [], "accuracy": [], "accuracy_pos": [], "accuracy_neg": []}
            seconds = []
            try:
                for seed in seeds:
                    started = time.perf_counter()
                    model, info = get_model(f"{name}-{arch}", settings, seed=seed)
                    seconds.append(time.perf_counter() - started if info["trained_now"] else float("nan"))
                    m = evaluate_model(model, test, batch_size=64)
                    for k in metrics:
                        metrics[k].append(m[k])
                    # per-class accuracy beside accuracy: a model that never predicts one class is flagged
                    note = class_balance_note(f"{arch} seed {seed} on {name}", m)
                    if note:
                        table.notes.append(note)
                    del model
            except (ReportError, ValueError, RuntimeError) as exc:
                logger.exception("row %s failed", row_id)
                table.notes.append(f"{arch}: failed — {type(exc).__name__}: {str(exc)[:300]}")
                continue
            table.rows.append(Row(
                cells={"model": arch, "base": recipe.describe().split(";")[0].split(" on ", 1)[1], "seeds": len(seeds),
                       **{k: mean_std(metrics[k]) for k in ("MAP", "MRR", "P@1", "accuracy")},
                       "acc. +": mean_std(metrics["accuracy_pos"]), "acc. −": mean_std(metrics["accuracy_neg"]),
                       "train s/seed": f"{sum(seconds) / len(seconds):.0f}" if all(s == s for s in seconds) else "reused",
                       "run on": short_hardware(device)},
                command=settings.command("qa", row_id),
            ))
        tables.append(table)
    return tables
