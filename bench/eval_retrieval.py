"""Section 1 — keyword-enhanced retrieval (keyword-attentive BERT paper, Table 3).

LCQMC dev and AFQMC dev: every distinct question is indexed with ``jingpai index`` (text + dictionary
segmentation + keywords); for each positive pair (q1, q2) we search with q1 (its own document
excluded) and look for q2. Three methods on each engine, same index, same queries:

- BM25 on the raw ``text`` field, sent straight to the engine;
- BM25 + dictionary augmentation: the same request through the real ``_search`` gateway, ``?jingpai=augment``
  (rerank off);
- + rerank: through the gateway with ``?jingpai=rerank``: the augmented top ``window`` hits are reranked
  by the real ``jingpai serve`` app holding the best Chinese model trained here.

P@k follows the paper: the share of queries whose reference question is in the top k. It is computed
by :func:`jingpai.reranker.evaluate.evaluate_scores` (ir-measures): each query has exactly one relevant
item, so the paper's P@k = k × trec P@k (a reference outside the retrieved list counts as a miss).
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from typing import Any

from bench.eval_common import (
    ReportError, ReportSettings, Row, Table, base_meta, class_balance_note, data_path, gateway, rerank_service, torch_device,
    zh_dictionary,
)
from bench.eval_models import RECIPES, get_model

logger = logging.getLogger(__name__)

DATASETS = {"lcqmc": ("zh", "lcqmc", "dev.tsv"), "afqmc": ("zh", "afqmc", "dev.tsv")}
CUTOFFS = (1, 3, 5, 10)
#: the Chinese rerankers of the full report: the USE-multilingual v3 models (pretrained backbone, fine-tuned on the
#: training mix) and zh-hcan (from scratch, random word vectors), each reranking the top WINDOW through the gateway
FULL_RERANKERS = ("zh-use-zeroshot", "zh-use-bi", "zh-use-kw", "zh-hcan")
QUICK_RERANKERS = ("zh-use-bi",)
WINDOW = 20
#: engine weights tried for linear fusion on the tuning set (1.0 — the model weighs nothing — is not reranking)
TUNE_WEIGHTS = tuple(round(i / 10, 1) for i in range(10))
PAPER = ("Paper (keyword-attentive BERT, Table 3, their finance QA test set; no rerank row): BM25 baseline P@1/3/5/10 "
         "77.4 / 85.1 / 89.3 / 91.1 %, keyword-enhanced 78.9 / 87.4 / 93.4 / 95.7 %. Our reranker is trained from scratch "
         "(no Chinese pretrained BERT here; the USE models start from USE-multilingual v3).")


def build_corpus(name: str, settings: ReportSettings) -> tuple[Path, dict[str, str], list[tuple[str, str]]]:
    """``(jsonl path, text → id, [(query id, target id)])`` for one data set."""
    from jingpai.reranker.data import read_pairs

    pairs = read_pairs(settings.data_file(f"retrieval.{name}", DATASETS[name]), limit=600 if settings.quick else None)
    ids: dict[str, str] = {}
    for p in pairs:
        for text in (p.query, p.document):
            ids.setdefault(text, f"q{len(ids)}")
    queries = [(ids[p.query], ids[p.document]) for p in pairs if p.label == 1 and p.query != p.document]
    if settings.quick:
        queries = queries[:40]
    path = settings.work_dir / "corpora" / f"{name}_questions.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for t, i in ids.items()), encoding="utf-8")
    return path, ids, queries


def search_body(text: str, own_id: str, size: int) -> dict:
    return {"query": {"bool": {"must": [{"match": {"text": text}}], "must_not": [{"ids": {"values": [own_id]}}]}},
            "size": size, "_source": ["text"]}


def precision(runs: dict[str, list[str]], targets: dict[str, str]) -> dict[str, float]:
    """Paper P@k over ``{query key: ranked ids}`` via the evaluation module."""
    from jingpai.reranker.data import LabeledPair
    from jingpai.reranker.evaluate import evaluate_scores

    pairs, scores = [], []
    for key, ranked in runs.items():
        target = targets[key]
        for rank, doc in enumerate(ranked):
            pairs.append(LabeledPair(key, doc, 1.0 if doc == target else 0.0, qid=key, docid=doc))
            scores.append(-float(rank))
        if target not in ranked:  # not retrieved: ranked below everything
            pairs.append(LabeledPair(key, target, 1.0, qid=key, docid=target))
            scores.append(-1e9)
    m = evaluate_scores(pairs, scores, cutoffs=CUTOFFS)
    return {f"P@{k}": m[f"P@{k}"] * k for k in CUTOFFS}


def model_selection(settings: ReportSettings) -> Table:
    """Dev accuracy of the Chinese reranker candidates (how the rerank model of this section was chosen)."""
    from jingpai.reranker.data import read_pairs
    from jingpai.reranker.evaluate import evaluate_model

    device = torch_device(settings)
    table = Table(
        key="retrieval-models", section="retrieval", title=f"Chinese reranker candidates — matching accuracy on dev ({settings.mode})",
        columns=["model", "held-out AUC", "AFQMC dev acc.", "AFQMC acc. +", "AFQMC acc. −", "AFQMC AUC", "LCQMC dev acc.", "LCQMC acc. +", "LCQMC acc. −",
                 "LCQMC AUC"],
        meta=base_meta(settings, "retrieval", data="trained on AFQMC train + STS-B train (4-5 = match); scored on AFQMC dev (4,316) and "
                       "LCQMC dev (8,802)" + (" — quick: first 300 pairs" if settings.quick else ""),
                       model="zh-use-bi / zh-use-kw: USE-multilingual v3 bi-encoder / keyword-attentive interaction, fine-tuned; "
                             "zh-hcan: HCAN on random word vectors; zh-hcan-use: the same HCAN, word vectors from the USE table", device=device),
        notes=["Report splits, shown for the record: no model was trained or selected on them (selection: 2 % of the training "
               "queries held out, AUC). Accuracy alone hides a collapsed model: see the per-class columns."],
    )
    # zh-hcan-use: the same HCAN with word vectors from the USE table, against zh-hcan's random ones
    keys = QUICK_RERANKERS if settings.quick else (*FULL_RERANKERS, "zh-hcan-use")
    sets = {name: read_pairs(settings.data_file(f"retrieval.{name}", DATASETS[name]), limit=300 if settings.quick else None)
            for name in ("afqmc", "lcqmc")}
    for key in keys:
        model, info = get_model(key, settings, seed=0)
        cells: dict = {"model": key, "held-out AUC": info.get("best_metric") if info.get("metric") == "AUC" else "—"}
        for name, pairs in sets.items():
            m = evaluate_model(model, pairs, batch_size=128)
            up = name.upper()
            cells.update({f"{up} dev acc.": m["accuracy"], f"{up} acc. +": m["accuracy_pos"], f"{up} acc. −": m["accuracy_neg"],
                          f"{up} AUC": m["AUC"]})
            note = class_balance_note(f"{key} on {up} dev", m)
            if note:
                table.notes.append(note)
        table.rows.append(Row(cells=cells, command=settings.command("retrieval", "retrieval.models")))
    return table


def tuning_set(settings: ReportSettings) -> tuple[Path, Path, int]:
    """Fusion tuning data from *training* data only: ``(corpus jsonl, pairs tsv, positive queries)``.

    The queries the zh-use recipes held out for model selection (2 % of the training mix's queries,
    seed 0), minus any query zh-hcan trained on (its own hold-out differs), as retrieval: every distinct
    text of those pairs is indexed, each positive pair searches its query (own document excluded) for
    its document — the shape of the LCQMC/AFQMC rows, never their data.
    """
    from bench.eval_models import read_recipe_data
    from jingpai.reranker.data import LabeledPair, holdout, read_pairs, write_pairs

    limit = RECIPES["zh-use-bi"].quick_limit if settings.quick else None
    mix = [p for parts, mode in RECIPES["zh-use-bi"].train for p in read_pairs(data_path(*parts), label_mode=mode, limit=limit)]
    _, held = holdout(mix, RECIPES["zh-use-bi"].holdout or 0.02, seed=0)
    hcan_train, _ = read_recipe_data(RECIPES["zh-hcan"], settings)
    trained = {p.query for p in hcan_train} | {p.document for p in hcan_train}
    pairs = [p for p in held if p.query not in trained and p.query != p.document]
    ids: dict[str, str] = {}
    for p in pairs:
        for text in (p.query, p.document):
            ids.setdefault(text, f"t{len(ids)}")
    folder = settings.work_dir / "corpora"
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / f"tuning_{settings.mode}.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for t, i in ids.items()), encoding="utf-8")
    labelled = write_pairs([LabeledPair(p.query, p.document, p.label) for p in pairs], folder / f"tuning_{settings.mode}.tsv")
    return corpus, labelled, sum(1 for p in pairs if p.label >= 1)


def tune_weights(settings: ReportSettings, models: dict[str, Any], engine_url: str, dict_dir: Path) -> tuple[dict[str, dict], Table]:
    """Per model, the linear-fusion engine weight that does best on the tuning set (:func:`tuning_set`),
    measured with ``jingpai tune``'s code through the real gateway on one engine."""
    from jingpai.engine.client import connect
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.keyword_dict import Dictionary
    from jingpai.plugin.tune import TuneSettings, never_worse, queries_from_pairs, run_tune

    corpus, pairs_file, positives = tuning_set(settings)
    engine = connect(engine_url)
    alias = f"report-tuning-{settings.mode}"
    index_corpus(engine, [corpus], IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False,
                                                 quarantine_dir=settings.work_dir), dictionary=Dictionary.load(dict_dir))
    engine.refresh(alias)
    queries = queries_from_pairs(engine, alias, pairs_file, text_field="text")
    table = Table(
        key="retrieval-tuning", section="retrieval", title=f"Fusion weights tuned on training data ({settings.mode})",
        columns=["model", "fusion", "engine weight", "P@1", "P@3", "P@5", "P@10", "MRR"],
        meta=base_meta(settings, "retrieval", data=f"held-out training queries (zh-use recipes' 2 % hold-out minus zh-hcan's training "
                                                   f"queries): {positives} positive pairs as queries over their {len(queries)} labelled queries' texts",
                       model=", ".join(models), engine=f"{engine.kind} {engine.version}", device=torch_device(settings)),
        notes=["The weight is the engine's share in linear fusion (min-max normalised per query): fused = w·engine + (1−w)·model. "
               "Chosen by the sum of P@1/3/5/10 among the w < 1 (the model must weigh something) whose every P@k is ≥ augmented BM25 on "
               "this tuning set (`jingpai tune --never-worse`); ties go to the larger model weight. "
               "Same code as `jingpai tune` (jingpai/plugin/tune.py)."],
    )
    chosen: dict[str, dict] = {}
    try:
        for key, model in models.items():
            with rerank_service(model, name=key) as rurl:
                rows = run_tune(TuneSettings(engine_url=engine_url, index=alias, reranker_url=rurl, dict_dirs=(dict_dir,), windows=(WINDOW,),
                                             weights=TUNE_WEIGHTS, rrf_ks=(60,)), queries, text_field="text")
            score = lambda r: sum(r.metrics[f"P@{k}"] * k for k in CUTOFFS)  # noqa: E731 - paper P@k = k × trec P@k
            linear = [r for r in rows if r.fusion == "linear" and r.weight is not None and r.weight < 1.0]
            augmented = next(r for r in rows if r.fusion == "augmented")
            safe = [r for r in linear if never_worse(r, augmented)]  # the gateway's promise, checked on training queries
            if not safe:
                table.notes.append(f"{key}: no engine weight < 1 keeps every P@k ≥ augmented BM25 on the tuning set; the best sum is chosen")
            best = max(safe or linear, key=lambda r: (round(score(r), 9), r.model_weight))
            chosen[key] = {"fusion": "linear", "fusion_weight": best.weight}
            curve = ", ".join(f"{r.weight:g}: {score(r) / len(CUTOFFS):.4f}" for r in sorted(linear, key=lambda r: r.weight or 0.0))
            table.notes.append(f"{key}, linear fusion, mean of P@1/3/5/10 by engine weight w — {curve}")
            shown = [r for r in rows if r.fusion in ("engine", "augmented")] if not table.rows else []
            shown += [r for r in rows if r.fusion == "replace" or r is best or (r.fusion == "rrf" and r.weight == 0.5)]
            for r in shown:
                table.rows.append(Row(cells={"model": key if r.window else "—", "fusion": r.fusion + (" (chosen)" if r is best else ""),
                                             "engine weight": r.weight if r.weight is not None else "—",
                                             **{f"P@{k}": r.metrics[f"P@{k}"] * k for k in CUTOFFS}, "MRR": r.metrics["MRR"]},
                                      command=settings.command("retrieval", f"retrieval.tuning.{key}.{r.fusion}")))
    finally:
        engine.close()
    return chosen, table


def run(settings: ReportSettings) -> list[Table]:
    import httpx

    from jingpai.engine.client import connect
    from jingpai.indexer.mapping import engine_encodings
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.keyword_dict import Dictionary

    tables = [model_selection(settings)] if settings.wants("retrieval.models") else []
    if settings.only is not None and all(p.startswith("retrieval.models") for p in settings.only):
        return tables
    if not settings.engines:
        raise ReportError("retrieval needs engines: pass --opensearch/--elasticsearch or allow --start-engines")
    dict_dir = zh_dictionary(settings)
    dictionary = Dictionary.load(dict_dir)
    keys = tuple(k for k in (QUICK_RERANKERS if settings.quick else FULL_RERANKERS)
                 if settings.wants(f"retrieval.tuning.{k}")
                 or any(settings.wants(f"retrieval.{name}.{kind}.rerank.{k}") for name in DATASETS for kind in settings.engines))
    if not keys:
        raise ReportError(f"--only {' '.join(settings.only or ())} selects no retrieval row")
    loaded = {key: get_model(key, settings, seed=0) for key in keys}
    models = {key: model for key, (model, _) in loaded.items()}
    fusions, tuning = tune_weights(settings, models, next(iter(settings.engines.values())), dict_dir)
    tables.append(tuning)
    for name in DATASETS:
        corpus, ids, queries = build_corpus(name, settings)
        text_of = {i: t for t, i in ids.items()}
        targets = {f"{q}>{t}": t for q, t in queries}
        for kind, url in settings.engines.items():
            prefix = f"retrieval.{name}.{kind}"
            if not settings.wants(prefix):
                continue
            engine = connect(url)
            alias = f"report-{name}-{settings.mode}"
            report = index_corpus(engine, [corpus], IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False,
                                                                quarantine_dir=settings.work_dir), dictionary=dictionary)
            engine.refresh(alias)
            table = Table(
                key=f"retrieval-{name}-{kind}", section="retrieval",
                title=f"Question retrieval — {name.upper()} dev, {kind} ({settings.mode})",
                columns=["method", "queries", *[f"P@{k}" for k in CUTOFFS]],
                meta=base_meta(settings, "retrieval",
                               data=settings.data_description(
                                   f"retrieval.{name}", f"{name.upper()} dev: {len(ids)} distinct questions indexed, {len(queries)} positive pairs "
                                   "as queries" + (" (quick: first 600 pairs, 40 queries)" if settings.quick else "")),
                               engine=f"{engine.kind} {engine.version}", device=torch_device(settings),
                               model="; ".join(f"{key}: {RECIPES[key].describe()}" for key in (QUICK_RERANKERS if settings.quick else FULL_RERANKERS))
                                     + f"; dictionary {dictionary.version} (jingpai dict build: THUCNews titles 10 domains + AFQMC train questions)"),
                notes=[PAPER, f"index: {report.indexed} docs into {report.physical_index}; gateway window {WINDOW}; keyword weights "
                              f"encoded as {engine_encodings(engine)[0]} (rank_features needs the engine's mapper-extras module).",
                       "Rerank rows go through the real gateway and `jingpai serve`: `linear` rows with the engine weight tuned on "
                       "training data (table 'Fusion weights tuned on training data'); each `replace` row (model score alone) is the "
                       "same responses re-sorted by `_jingpai.model_score`, i.e. what `?jingpai_fusion=replace` returns."],
            )
            methods: list[tuple[str, str, str | None, dict]] = [
                ("BM25, raw field (engine direct)", "direct", None, {}),
                ("BM25 + dictionary augmentation (gateway, rerank off)", "augment", None, {}),
            ]
            for key in keys:
                w = fusions[key]["fusion_weight"]
                methods.append((f"+ rerank top {WINDOW}, {key}, linear fusion w={w:g}", "rerank", key,
                                {"jingpai_fusion": "linear", "jingpai_fusion_weight": str(w)}))
            with httpx.Client(timeout=600) as client:
                for label, method, key, extra in methods:
                    row_id = f"{prefix}.{method}" + (f".{key}" if key else "")
                    if not settings.wants(row_id):
                        continue
                    runs, replaced, failures = rerank_runs(client, settings, url, alias, method, key and models[key], key, dict_dir,
                                                           extra, queries, text_of)
                    if failures:
                        table.notes.append(f"{label}: {len(failures)} queries were not reranked ({sorted(set(failures))})")
                    if replaced is not None:
                        table.rows.append(Row(cells={"method": f"+ rerank top {WINDOW}, {key}, replace (model score alone)",
                                                     "queries": len(replaced), **precision(replaced, targets)},
                                              command=settings.command("retrieval", f"{row_id}.replace")))
                    table.rows.append(Row(cells={"method": label, "queries": len(runs), **precision(runs, targets)},
                                          command=settings.command("retrieval", row_id)))
            engine.close()
            tables.append(table)
    return tables


def rerank_runs(client: Any, settings: ReportSettings, url: str, alias: str, method: str, model: Any, key: str | None, dict_dir: Path,
                extra: dict, queries: list[tuple[str, str]], text_of: dict[str, str]):
    """``(runs, replace runs or None, failures)`` of one method: ``{query key: ranked ids}`` through the gateway."""
    from contextlib import ExitStack

    failures: list[str] = []
    replaced: dict[str, list[str]] | None = {} if method == "rerank" else None
    with ExitStack() as stack:
        base = url
        if method != "direct":
            rurl = stack.enter_context(rerank_service(model, name=key)) if model is not None else None
            base = stack.enter_context(gateway(url, reranker_url=rurl, dict_dirs=(dict_dir,), window=WINDOW))
        params = {} if method == "direct" else {"jingpai": method, **extra}

        def one(q: tuple[str, str]) -> tuple[str, list[str], list[str] | None]:
            qid, tid = q
            resp = client.post(f"{base}/{alias}/_search", params=params, json=search_body(text_of[qid], qid, 10 if method != "rerank" else WINDOW))
            resp.raise_for_status()
            data = resp.json()
            hits = data["hits"]["hits"]
            by_model = None
            if method == "rerank":
                if not data.get("jingpai", {}).get("reranked"):
                    failures.append(str(data.get("jingpai", {}).get("reason")))
                scored = [h for h in hits if "model_score" in h.get("_jingpai", {})]
                by_model = [h["_id"] for h in sorted(scored, key=lambda h: (-h["_jingpai"]["model_score"], h["_jingpai"]["engine_rank"]))][:10]
            return f"{qid}>{tid}", [h["_id"] for h in hits][:10], by_model

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(one, queries))
    runs = {k: ids for k, ids, _ in results}
    if replaced is not None:
        replaced = {k: by_model for k, _, by_model in results if by_model is not None}
    return runs, replaced, failures
