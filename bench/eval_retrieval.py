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

from bench.eval_common import (
    ReportError, ReportSettings, Row, Table, base_meta, data_path, gateway, rerank_service, torch_device, zh_dictionary,
)
from bench.eval_models import get_model

logger = logging.getLogger(__name__)

DATASETS = {"lcqmc": ("zh", "lcqmc", "dev.tsv"), "afqmc": ("zh", "afqmc", "dev.tsv")}
CUTOFFS = (1, 3, 5, 10)
#: the reranker used in full mode: zh-hcan (AFQMC dev acc. 0.685, LCQMC dev 0.620); the from-scratch tiny BERT
#: cross-encoder (zh-cross) collapsed to "no match" for every pair (AFQMC dev 0.690 = majority class, LCQMC 0.500)
FULL_RERANKER = "zh-hcan"
QUICK_RERANKER = "zh-hcan"
PAPER = ("Paper (keyword-attentive BERT, Table 3, their finance QA test set; no rerank row): BM25 baseline P@1/3/5/10 "
         "77.4 / 85.1 / 89.3 / 91.1 %, keyword-enhanced 78.9 / 87.4 / 93.4 / 95.7 %. Our reranker is trained from scratch "
         "(no Chinese pretrained weights here).")


def build_corpus(name: str, settings: ReportSettings) -> tuple[Path, dict[str, str], list[tuple[str, str]]]:
    """``(jsonl path, text → id, [(query id, target id)])`` for one data set."""
    from jingpai.reranker.data import read_pairs

    pairs = read_pairs(data_path(*DATASETS[name]), limit=600 if settings.quick else None)
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
        columns=["model", "AFQMC dev acc.", "AFQMC acc. +", "AFQMC acc. −", "LCQMC dev acc.", "LCQMC acc. +", "LCQMC acc. −"],
        meta=base_meta(settings, "retrieval", data="trained on AFQMC train + STS-B train (4-5 = match); scored on AFQMC dev (4,316) and "
                       "LCQMC dev (8,802)" + (" — quick: first 300 pairs" if settings.quick else ""),
                       model="zh-cross: random-init 4-layer BERT from scratch; zh-hcan: HCAN on random word vectors", device=device),
        notes=["The candidate with the better LCQMC/AFQMC behaviour is the reranker of the retrieval tables (FULL_RERANKER in "
               "bench/eval_retrieval.py). Accuracy alone hides a collapsed model: see the per-class columns."],
    )
    keys = (QUICK_RERANKER,) if settings.quick else ("zh-cross", "zh-hcan")
    sets = {name: read_pairs(data_path(*DATASETS[name]), limit=300 if settings.quick else None) for name in ("afqmc", "lcqmc")}
    for key in keys:
        model, _ = get_model(key, settings, seed=0)
        cells: dict = {"model": key}
        for name, pairs in sets.items():
            m = evaluate_model(model, pairs, batch_size=128)
            up = name.upper()
            cells.update({f"{up} dev acc.": m["accuracy"], f"{up} acc. +": m["accuracy_pos"], f"{up} acc. −": m["accuracy_neg"]})
        table.rows.append(Row(cells=cells, command=settings.command("retrieval", "retrieval.models")))
    return table


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
    key = QUICK_RERANKER if settings.quick else FULL_RERANKER
    model, info = get_model(key, settings, seed=0)
    window = 20
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
                               data=f"{name.upper()} dev: {len(ids)} distinct questions indexed, {len(queries)} positive pairs as queries"
                                    + (" (quick: first 600 pairs, 40 queries)" if settings.quick else ""),
                               engine=f"{engine.kind} {engine.version}", device=torch_device(settings),
                               model=f"rerank: {key} ({info.get('folder')}); dictionary {dictionary.version} "
                                     f"(jingpai dict build: THUCNews titles 10 domains + AFQMC train questions)"),
                notes=[PAPER, f"index: {report.indexed} docs into {report.physical_index}; gateway window {window}; keyword weights "
                              f"encoded as {engine_encodings(engine)[0]} (rank_features needs the engine's mapper-extras module)."],
            )
            methods = [("BM25, raw field (engine direct)", "direct"), ("BM25 + dictionary augmentation (gateway, rerank off)", "augment"),
                       (f"+ rerank top {window} ({key}, gateway)", "rerank")]
            with rerank_service(model, name=key) as rurl, gateway(url, reranker_url=rurl, dict_dirs=(dict_dir,), window=window) as gurl, \
                    httpx.Client(timeout=300) as client:
                for label, method in methods:
                    row_id = f"{prefix}.{method}"
                    if not settings.wants(row_id):
                        continue
                    base = url if method == "direct" else gurl
                    params = {} if method == "direct" else {"jingpai": method}
                    failures: list[str] = []

                    def one(q: tuple[str, str], base=base, params=params, failures=failures) -> tuple[str, list[str]]:
                        qid, tid = q
                        resp = client.post(f"{base}/{alias}/_search", params=params, json=search_body(text_of[qid], qid, 10))
                        resp.raise_for_status()
                        data = resp.json()
                        if method == "rerank" and not data.get("jingpai", {}).get("reranked"):
                            failures.append(str(data.get("jingpai", {}).get("reason")))
                        return f"{qid}>{tid}", [h["_id"] for h in data["hits"]["hits"]]

                    with ThreadPoolExecutor(4) as pool:
                        runs = dict(pool.map(one, queries))
                    if failures:
                        table.notes.append(f"{label}: {len(failures)} queries were not reranked ({sorted(set(failures))})")
                    table.rows.append(Row(cells={"method": label, "queries": len(runs), **precision(runs, targets)},
                                          command=settings.command("retrieval", row_id)))
            engine.close()
            tables.append(table)
    return tables
