"""Section 4 — negative sampling (keyword-attentive paper, Table 6): accuracy overall / positive /
negative on PAWS-X zh dev for a model trained with random negatives vs one trained with keyword-overlap
+ entity-replacement negatives (:mod:`jingpai.reranker.negatives`), same positives, same negative count.

Positives: the label-1 pairs of the first 12,000 pairs of LCQMC *train* and of OPPO dev, both training files
(general-domain Chinese questions; no PAWS-X data, and no report split, is used for training: until issue 29 this
section drew its positives from LCQMC dev, a report split). Candidate pool: every distinct sentence of those
pairs, indexed in a real engine for the keyword strategy.

Models: ``kwbert`` (a BERT from scratch: GPU-sized), ``hcan``, and the USE-multilingual models ``use-bi`` and
``use-kw`` (the keyword claim on the pretrained Chinese-capable backbone), each against the always-"no" floor.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

from bench.eval_common import (
    ReportError, ReportSettings, Row, Table, base_meta, class_balance_note, data_path, gpu_recipe_skip, gpu_skip_note, mean_std, short_hardware,
    torch_device, zh_dictionary,
)
from bench.eval_models import Recipe, get_model

logger = logging.getLogger(__name__)

STRATEGIES = ("random", "keyword")
#: LCQMC train pairs read for positives (about as many positives as LCQMC dev's, which this section used before)
LCQMC_TRAIN_PAIRS = 12_000
ARCHS = {
    "kwbert": Recipe("kwbert", base="tiny-zh", dictionary="zh", config={"max_length": 96},
                     train_settings={"epochs": 4, "batch_size": 64, "lr": 2e-4, "warmup_ratio": 0.06, "patience": None},
                     quick_settings={"epochs": 1, "max_steps": 20, "batch_size": 16}),
    "use-bi": Recipe("use-bi", base="use", train_settings={"epochs": 2, "batch_size": 64, "lr": 1e-4, "patience": None, "bf16": True},
                     quick_settings={"epochs": 1, "max_steps": 20, "batch_size": 16}),
    "use-kw": Recipe("use-kw", base="use", dictionary="zh", config={"layers": 2, "max_length": 40},
                     train_settings={"epochs": 2, "batch_size": 64, "lr": 5e-4, "patience": None, "bf16": True},
                     quick_settings={"epochs": 1, "max_steps": 20, "batch_size": 16}),
    "hcan": Recipe("hcan", config={"encoder": "deep", "max_doc_words": 40, "max_query_words": 30, "embedding_dim": 100, "vocab_max_size": 30000},
                   train_settings={"epochs": 3, "batch_size": 64, "lr": 1e-3, "weight_decay": 0.0, "patience": None},
                   quick_settings={"epochs": 1, "max_steps": 30, "batch_size": 32}),
}
PAPER = ("Paper (keyword-attentive BERT, Table 6, their test set, pretrained Chinese BERT): random negatives 77.5 % overall / "
         "98.5 % positive / 56.5 % negative class; keyword-overlap + entity-replacement negatives 93.9 / 96.2 / 91.6 %.")


def sample_files(settings: ReportSettings) -> dict[str, Path]:
    # "-train": sampled from training files only (the older "negatives" folder held LCQMC dev positives)
    folder = settings.work_dir / ("negatives-train-quick" if settings.quick else "negatives-train")
    return {s: folder / f"train_{s}.tsv" for s in STRATEGIES}


def prepare(settings: ReportSettings, engine_url: str) -> dict[str, Path]:
    """Sample both training sets with a real engine (reused when already written)."""
    from jingpai.engine.client import connect
    from jingpai.keyword_dict import Dictionary
    from jingpai.reranker.data import LabeledPair, read_pairs, write_pairs
    from jingpai.jobs.negatives import index_texts, sample_negatives
    from jingpai.reranker.negatives import NegativeSettings

    files = sample_files(settings)
    if all(p.exists() for p in files.values()):
        return files
    limit = 300 if settings.quick else None
    raw = read_pairs(data_path("zh", "lcqmc", "train.tsv"), limit=LCQMC_TRAIN_PAIRS) + read_pairs(data_path("zh", "oppo", "dev.tsv"))
    pool = list(dict.fromkeys(t for p in raw for t in (p.query, p.document)))
    positives = [p for p in raw if p.label == 1][:limit]
    known: dict[str, set[str]] = {}
    for p in positives:
        known.setdefault(p.query, set()).add(p.document)
    queries = list(dict.fromkeys(p.query for p in positives))
    dictionary = Dictionary.load(zh_dictionary(settings))
    engine = connect(engine_url)
    index = f"report-negatives-{'quick' if settings.quick else 'full'}"
    try:
        engine.delete_index(index)
        index_texts(engine, index, pool)
        kw = sample_negatives(queries, engine=engine, index=index, dictionary=dictionary, positives=known,
                              settings=NegativeSettings(strategy="keyword", per_query=1, replace_ratio=0.5, seed=0))
    finally:
        engine.delete_index(index)
        engine.close()
    rnd = sample_negatives(queries, settings=NegativeSettings(strategy="random", per_query=2, seed=0), positives=known, pool=pool)
    # same number of negatives for both strategies, so only their kind differs
    n = min(len(kw.pairs), len(rnd.pairs))
    rng = random.Random(0)
    chosen = {"keyword": rng.sample(kw.pairs, n), "random": rng.sample(rnd.pairs, n)}
    for strategy, negs in chosen.items():
        pairs = [LabeledPair(p.query, p.document, 1.0) for p in positives] + [LabeledPair(p.query, p.document, 0.0) for p in negs]
        write_pairs(pairs, files[strategy])
    stats = {k: v for k, v in kw.stats.items()}
    (files["keyword"].parent / "stats.txt").write_text(
        f"positives {len(positives)}; negatives per strategy {n}; keyword stats {stats}; "
        f"keyword sources {sorted({r.source for r in kw.records})}\n", encoding="utf-8")
    return files


def run(settings: ReportSettings) -> list[Table]:
    from jingpai.reranker.data import read_pairs
    from jingpai.reranker.evaluate import evaluate_model

    if not settings.wants("negatives"):
        return []
    device = torch_device(settings)
    files = sample_files(settings)
    if not all(p.exists() for p in files.values()):
        url = settings.engines.get("opensearch") or settings.engines.get("elasticsearch")
        if url is None:
            raise ReportError("negative sampling needs an engine (--opensearch/--elasticsearch URL) or sampled files in " + str(files["keyword"].parent))
        prepare(settings, url)
    test = read_pairs(settings.data_file("negatives.pawsx"), limit=300 if settings.quick else None)
    stats = (files["keyword"].parent / "stats.txt")
    table = Table(
        key="negatives-pawsx", section="negatives", title=f"Negative sampling — PAWS-X zh dev ({settings.mode})",
        columns=["model", "negatives", "seeds", "accuracy", "acc. positive", "acc. negative", "train pairs", "run on"],
        meta=base_meta(settings, "negatives", data=f"train: LCQMC train (first {LCQMC_TRAIN_PAIRS:,} pairs) + OPPO dev positives + sampled negatives; test: "
                       + settings.data_description("negatives.pawsx", "PAWS-X zh dev" + ("" if settings.quick else " (2,000 pairs)"))
                       + (" (first 300)" if settings.quick else ""),
                       model="kwbert on a random-init 4-layer BERT (from scratch), hcan on random word vectors, use-bi / use-kw on "
                             "pretrained USE-multilingual v3", device=device,
                       engine="OpenSearch (sampling only)"),
        notes=[PAPER, stats.read_text().strip() if stats.exists() else ""],
    )
    seeds = settings.seeds[:1] if settings.quick else settings.seeds
    negative_share = sum(p.label == 0 for p in test) / len(test)
    table.rows.append(Row(cells={"model": "always \"no\" (floor)", "negatives": "—", "seeds": "—", "accuracy": round(negative_share, 4),
                                 "acc. positive": 0.0, "acc. negative": 1.0, "train pairs": 0, "run on": "—"},
                          command=settings.command("negatives", "negatives.floor")))
    for arch, recipe in ARCHS.items():
        for strategy in STRATEGIES:
            row_id = f"negatives.{arch}.{strategy}"
            if not settings.wants(row_id):
                continue
            train_pairs = read_pairs(files[strategy])
            if gpu_recipe_skip(settings, device, gpu_sized=recipe.base not in (None, "use")):
                steps = recipe.train_settings["epochs"] * -(-len(train_pairs) // recipe.train_settings["batch_size"])
                table.notes.append(gpu_skip_note(settings, "negatives", row_id, f"{arch}/{strategy} (training a BERT from scratch)", steps=steps))
                continue
            vals: dict[str, list[float]] = {"accuracy": [], "accuracy_pos": [], "accuracy_neg": []}
            for seed in seeds:
                model, _ = get_model(f"neg-{arch}-{strategy}", settings, seed=seed, recipe=recipe, train_pairs=lambda: train_pairs)
                m = evaluate_model(model, test, batch_size=64)
                for k in vals:
                    vals[k].append(m[k])
                note = class_balance_note(f"{arch}/{strategy} seed {seed}", m)
                if note:
                    table.notes.append(note)
            table.rows.append(Row(
                cells={"model": arch, "negatives": strategy if strategy == "random" else "keyword-overlap + entity replacement",
                       "seeds": len(seeds), "accuracy": mean_std(vals["accuracy"]), "acc. positive": mean_std(vals["accuracy_pos"]),
                       "acc. negative": mean_std(vals["accuracy_neg"]), "train pairs": len(train_pairs),
                       "run on": short_hardware(device)},
                command=settings.command("negatives", row_id),
            ))
    return [table]
