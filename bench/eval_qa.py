"""Section 3 — answer selection (HCAN Table 2 / BERTCA Table 2): TrecQA raw-test and WikiQA dev MAP/MRR
for every model that fits the task, each trained on the set's own training split, mean ± std over seeds;
beside them BM25 over the candidates and each model fused with it as the gateway fuses (bench/qa_fusion.py)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from bench.eval_common import (
    ReportError, ReportSettings, Row, Table, base_meta, best_weight, class_balance_note, gpu_recipe_skip, gpu_skip_note, mean_std,
    short_hardware, torch_device,
)
from bench.eval_models import RECIPES, get_model, read_recipe_data
from bench.qa_fusion import bm25_scores, fuse_by_query, weight_curve

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
FUSION = {
    "trecqa": "BM25: the engine's function over an index of the reported split's candidate answers (bench/qa_fusion.py). `X + BM25`: X's "
              "score fused with it per question as the gateway fuses (linear, per-question min-max), the engine's weight w chosen "
              "per seed on raw-dev MAP (the split that selected the model), never on raw-test.",
    "wikiqa": "No `+ BM25` rows: WikiQA's recipes have no selection split (its dev is the reported split), so there is nothing "
              "to choose the fusion weight on.",
}
RANKING = ("MAP", "MRR", "P@1")
BM25_ROW = "BM25 over the candidates (bm25s, Lucene's formula, k1 1.2, b 0.75; no model)"
NOT_FITTING = ("tita: a 3-level topic-aware classifier over a GSM bag-of-words of long documents; answer selection "
               "has binary labels and one-sentence candidates, so it is evaluated on STS-B levels in issue 5, not here.")


def run(settings: ReportSettings) -> list[Table]:
    from jingpai.reranker.data import read_pairs
    from jingpai.reranker.evaluate import evaluate_scores

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
            notes=[PAPER[name], NOT_FITTING, FUSION[name]],
        )
        engine = bm25_scores(test)
        if settings.wants(f"qa.{name}.bm25"):
            m = evaluate_scores(test, engine)
            table.rows.append(Row(cells={"model": BM25_ROW, "base": "no training", "seeds": "—", **{k: m[k] for k in RANKING},
                                         "accuracy": "—", "acc. +": "—", "acc. −": "—", "train s/seed": "—", "run on": "CPU"},
                                  command=settings.command("qa", f"qa.{name}.bm25")))
        for arch in ARCHS:
            _arch_rows(settings, table, name, arch, test, engine, device)
        tables.append(table)
    return tables


def _fused(model, dev: list, dev_engine, test: list, engine, scores) -> tuple[float, dict[float, float], dict[str, float]]:
    """The engine weight chosen on ``dev`` (the recipe's selection split), the MAP-by-weight curve on ``dev`` that
    chose it, and the fused ranking metrics on ``test`` at that weight."""
    from jingpai.reranker.evaluate import evaluate_scores

    curve = weight_curve(dev, dev_engine, model.predict([(p.query, p.document) for p in dev], batch_size=64))
    weight = best_weight(curve)
    return weight, curve, evaluate_scores(test, fuse_by_query(test, engine, scores, weight=weight))


def _arch_rows(settings: ReportSettings, table: Table, name: str, arch: str, test: list, engine, device: str) -> None:
    """The row of ``arch`` alone (``qa.{name}.{arch}``) and, where its recipe has a selection split, the row of it
    fused with BM25 (``qa.{name}.{arch}+bm25``); both from the same trained seeds."""
    from jingpai.reranker.evaluate import default_threshold, evaluate_scores

    row_id = f"qa.{name}.{arch}"
    recipe = RECIPES[f"{name}-{arch}"]
    alone, fused = settings.wants(row_id), recipe.dev is not None and settings.wants(f"{row_id}+bm25")
    if not (alone or fused):
        return
    if gpu_recipe_skip(settings, device, gpu_sized=recipe.base is not None):
        table.notes.append(gpu_skip_note(settings, "qa", row_id, f"{arch} (fine-tuning a BERT-family model on the full training set)"))
        return
    seeds = settings.seeds[:1] if settings.quick else settings.seeds
    metrics: dict[str, list[float]] = defaultdict(list)
    fused_metrics: dict[str, list[float]] = defaultdict(list)
    seconds, weights = [], []
    dev: list = []
    try:
        if fused:
            dev = read_recipe_data(recipe, settings)[1]
        dev_engine = bm25_scores(dev) if dev else None
        for seed in seeds:
            started = time.perf_counter()
            model, info = get_model(f"{name}-{arch}", settings, seed=seed)
            seconds.append(time.perf_counter() - started if info["trained_now"] else float("nan"))
            scores = model.predict([(p.query, p.document) for p in test], batch_size=64)
            m = evaluate_scores(test, scores, threshold=default_threshold(model))
            for k in (*RANKING, "accuracy", "accuracy_pos", "accuracy_neg"):
                metrics[k].append(m[k])
            # per-class accuracy beside accuracy: a model that never predicts one class is flagged
            note = class_balance_note(f"{arch} seed {seed} on {name}", m)
            if note and alone:
                table.notes.append(note)
            if fused:
                weight, curve, f = _fused(model, dev, dev_engine, test, engine, scores)
                weights.append(weight)
                for k in RANKING:
                    fused_metrics[k].append(f[k])
                table.notes.append(f"{arch} + BM25 seed {seed}: engine weight w chosen on the selection split (MAP by w: "
                                   + ", ".join(f"{w:g}: {v:.4f}" for w, v in curve.items()) + f"); chosen w = {weight:g}")
            del model
    except (ReportError, ValueError, RuntimeError) as exc:
        logger.exception("row %s failed", row_id)
        table.notes.append(f"{arch}: failed — {type(exc).__name__}: {str(exc)[:300]}")
        return
    base = recipe.describe().split(";")[0].split(" on ", 1)[1]
    trained = f"{sum(seconds) / len(seconds):.0f}" if all(s == s for s in seconds) else "reused"
    if alone:
        table.rows.append(Row(
            cells={"model": arch, "base": base, "seeds": len(seeds), **{k: mean_std(metrics[k]) for k in (*RANKING, "accuracy")},
                   "acc. +": mean_std(metrics["accuracy_pos"]), "acc. −": mean_std(metrics["accuracy_neg"]),
                   "train s/seed": trained, "run on": short_hardware(device)},
            command=settings.command("qa", row_id),
        ))
    if fused:
        table.rows.append(Row(
            cells={"model": f"{arch} + BM25 (linear, w = {'/'.join(f'{w:g}' for w in weights)} on {recipe.dev[0][-1]})", "base": base,
                   "seeds": len(seeds), **{k: mean_std(fused_metrics[k]) for k in RANKING},
                   "accuracy": "—", "acc. +": "—", "acc. −": "—", "train s/seed": trained, "run on": short_hardware(device)},
            command=settings.command("qa", f"{row_id}+bm25"),
        ))
