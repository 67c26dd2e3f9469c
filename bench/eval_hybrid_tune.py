"""The hybrid section's per-data-set tuning: the hybrid first stage and the rerank fusion on top of it, chosen
together on each data set's *training* queries with ``jingpai tune --hybrid``'s code (issues 29 and 32).

One fusion weight for every data set does not fit (docs/results/history.md §1.1: the weight tuned on the training mix
gives most of the model's gain back on BQ and AFQMC), and a rerank weight chosen on BM25's windows is not the one
for hybrid windows. So, per data set:

* **queries** — the training queries of that data set's own training file that the embedder's recipe held out for
  model selection (:data:`bench.eval_hybrid.EMBEDDER`, 2 % of its training queries, seed 0) and that the reranker
  never trained on as queries; at most :data:`MAX_QUERIES` of them with a positive pair (seed 0), each with every
  pair of the file's hold-out (its matches are relevant);
* **corpus** — every text of those pairs, plus other questions of the same training file (seed 0) up to the size of
  the dev corpus the section reports on, so a window is as crowded as the dev split's; indexed with the embedder's
  vectors like the dev corpus;
* **choice** — ``jingpai tune --hybrid`` (:func:`jingpai.plugin.tune.run_tune`, the real gateway) over the hybrid
  fusions ``rrf`` (k 60) and ``linear`` at BM25 weights 0…1 × the rerank fusions ``replace`` and ``linear`` at engine
  weights 0…1, window 20; the best sum of P@1/3/5/10 among the settings at least augmented BM25 at every P@k on
  these queries (ties: the larger model weight, then the larger kNN weight), as the retrieval section chooses.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.eval_common import ReportSettings, data_path

#: each data set's training file and its label mode
TRAIN = {
    "lcqmc": (("zh", "lcqmc", "train.tsv"), "binary"),
    "afqmc": (("zh", "afqmc", "train.tsv"), "raw"),
    "bq": (("zh", "bq", "train.tsv"), "binary"),
}
#: tuning queries (with a positive pair) per data set at most
MAX_QUERIES = 1000
#: BM25's weight in the hybrid fusion and the engine's in the rerank fusion
WEIGHTS = tuple(round(i / 10, 1) for i in range(11))
CUTOFFS = (1, 3, 5, 10)


@dataclass(frozen=True)
class PipelineChoice:
    """The chosen hybrid + rerank settings of one data set, and what they and the alternatives scored.

    Attributes:
        hybrid: the gateway's ``ext.jingpai.hybrid`` fusion (``fusion``, ``weight``, ``rrf_k``) and ``rerank_window``.
        fusion: the rerank fusion (``replace`` or ``linear``) and ``weight`` its engine weight (``None``: replace).
        queries: positive tuning pairs searched; ``distinct`` their distinct query texts.
        rows: label → metrics on the tuning queries (augmented BM25, BM25 + rerank's best, the chosen pipeline).
    """

    hybrid: dict[str, Any]
    fusion: str
    weight: float | None
    queries: int
    distinct: int
    corpus: int
    rows: dict[str, dict[str, float]]

    def label(self) -> str:
        rerank = "replace" if self.weight is None else f"linear w={self.weight:g}"
        k = f", k {self.hybrid['rrf_k']}" if "rrf_k" in self.hybrid else ""
        both = ", both lists' top window" if self.hybrid.get("rerank_window") == "both" else ""
        return f"hybrid {self.hybrid['fusion']} BM25 w={self.hybrid['weight']:g}{k}; rerank {rerank}{both}"

    def params(self) -> dict[str, str]:
        """The rerank fusion as the gateway's URL parameters."""
        if self.weight is None:
            return {"jingpai": "rerank", "jingpai_fusion": "replace"}
        return {"jingpai": "rerank", "jingpai_fusion": "linear", "jingpai_fusion_weight": str(self.weight)}


def tuning_set(name: str, settings: ReportSettings, *, embedder: str, reranker: str, corpus_size: int) -> tuple[Path, Path, int, int]:
    """``(corpus jsonl, pairs tsv, positive pairs, corpus size)`` for data set ``name`` (see the module docstring)."""
    from bench.eval_models import RECIPES, read_recipe_data
    from jingpai.reranker.data import read_pairs, write_pairs

    parts, mode = TRAIN[name]
    domain = read_pairs(data_path(*parts), label_mode=mode)  # type: ignore[arg-type]
    domain_queries = {p.query for p in domain}
    _, held = read_recipe_data(RECIPES[embedder], settings)
    seen = set() if reranker == embedder else {p.query for p in read_recipe_data(RECIPES[reranker], settings)[0]}
    held = [p for p in held or [] if p.query in domain_queries and p.query not in seen and p.query != p.document]
    positive = sorted({p.query for p in held if p.label >= 1})
    chosen = set(random.Random(0).sample(positive, min(MAX_QUERIES, len(positive))))
    pairs = [p for p in held if p.query in chosen]
    texts = list(dict.fromkeys(t for p in pairs for t in (p.query, p.document)))
    others = sorted({t for p in domain for t in (p.query, p.document)} - set(texts) - chosen)
    texts += random.Random(0).sample(others, max(0, min(len(others), corpus_size - len(texts))))
    folder = settings.work_dir / "corpora"
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / f"hybrid_tuning_{name}_{settings.mode}.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"t{i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts)), encoding="utf-8")
    labelled = write_pairs(pairs, folder / f"hybrid_tuning_{name}_{settings.mode}.tsv")
    return corpus, labelled, sum(1 for p in pairs if p.label >= 1), len(texts)


def tune_pipeline(name: str, settings: ReportSettings, *, engine_url: str, dict_dir: Path, dictionary: Any, embedder: Any, embed_info: dict,
                  embed_url: str, rerank_url: str, names: tuple[str, str], corpus_size: int, depth: int) -> PipelineChoice:
    """Index the tuning corpus with vectors, run ``jingpai tune --hybrid``'s measurement and choose (module docstring)."""
    from jingpai.engine.client import connect
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.plugin.tune import TuneSettings, never_worse, queries_from_pairs, run_tune

    corpus, pairs, positives, size = tuning_set(name, settings, embedder=names[0], reranker=names[1], corpus_size=corpus_size)
    engine = connect(engine_url)
    alias = f"report-hybrid-tuning-{name}-{settings.mode}"
    index_corpus(engine, [corpus], IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False, quarantine_dir=settings.work_dir,
                                                 vectors=Path(embed_info["folder"]), vector_chunking="first"),
                 dictionary=dictionary, embedder=embedder)
    engine.refresh(alias)
    queries = queries_from_pairs(engine, alias, pairs, text_field="text")
    engine.close()
    tune = TuneSettings(engine_url=engine_url, index=alias, reranker_url=rerank_url, dict_dirs=(dict_dir,), windows=(depth,), weights=WEIGHTS,
                        rrf_ks=(60,), hybrid=True, embed_url=embed_url, concurrency=4)
    rows = run_tune(tune, queries, text_field="text")
    dump = settings.work_dir / f"hybrid_tuning_{name}_{settings.mode}.rows.json"  # every row, for a closer look
    dump.write_text(json.dumps([{"fusion": r.fusion, "window": r.window, "weight": r.weight, "rrf_k": r.rrf_k,
                                 "first_stage": r.first_stage.describe() if r.first_stage else None, "rerank_window": r.rerank_window,
                                 **r.metrics} for r in rows], indent=0),
                    encoding="utf-8")

    def score(r: Any) -> float:
        return sum(r.metrics[f"P@{k}"] * k for k in CUTOFFS)  # one relevant item per query: the paper's P@k = k × trec P@k

    augmented = next(r for r in rows if r.fusion == "augmented")

    def best(candidates: list) -> Any:
        safe = [r for r in candidates if never_worse(r, augmented)] or candidates
        return max(safe, key=lambda r: (round(score(r), 9), r.rerank_window != "both", r.model_weight,
                                        -(r.first_stage.weight if r.first_stage else 0.0)))

    bm25 = best([r for r in rows if r.first_stage is None and r.window is not None and r.fusion in ("replace", "linear")])
    chosen = best([r for r in rows if r.first_stage is not None])
    first = chosen.first_stage
    hybrid = {"fusion": first.mode, "weight": first.weight, **({"rrf_k": first.rrf_k} if first.mode == "rrf" else {}),
              "rerank_window": chosen.rerank_window or "fused"}
    shown = {"augmented BM25": augmented, f"BM25 + rerank ({bm25.label()})": bm25, f"hybrid + rerank ({chosen.label()})": chosen}
    return PipelineChoice(hybrid=hybrid, fusion=chosen.fusion, weight=chosen.weight, queries=positives, distinct=len({q.text for q in queries}),
                          corpus=size, rows={label: {f"P@{k}": r.metrics[f"P@{k}"] * k for k in CUTOFFS} for label, r in shown.items()})
