"""Section "hybrid" — the semantic first stage (issue 32): document vectors indexed next to the text, BM25 and kNN
fused in the gateway before the rerank.

Per data set (LCQMC, AFQMC and BQ dev, as in the retrieval section: every distinct question indexed, one search per
distinct q1, its own document excluded) and engine, the corpus is indexed with ``jingpai index --vectors`` (the
bi-encoder :data:`EMBEDDER` (trained for retrieval) embeds every question; OpenSearch needs its k-NN plugin: the report starts
it with ``--plugins knn``). Rows, all from the same index:

* ``BM25 + dictionary`` — the gateway's augmented query, rerank off: the first stage every earlier row reranks;
* ``kNN`` — the engine's own kNN search with the query's vector (:data:`EMBEDDER`), no text query;
* ``hybrid`` — the gateway with hybrid search on: BM25 and kNN lists fused into one window, rerank off;
* ``hybrid + rerank`` — the same window reranked by :data:`RERANKER` through ``jingpai serve`` (linear fusion, the
  weight tuned on training queries as in the retrieval section);
* ``hybrid + rerank, both lists`` — the gateway's ``rerank_window: both``: every hit in the top 20 of the BM25 list or
  of the kNN list is reranked (20 to 40 hits), a superset of what BM25 + rerank reranks;
* ``tuned`` — the hybrid first stage alone and hybrid + rerank with the hybrid fusion and the rerank fusion chosen
  together on *this data set's training queries* (:mod:`bench.eval_hybrid_tune`, ``jingpai tune --hybrid``'s code),
  what an operator runs per index; the tuning queries' scores are in the table's notes.

Columns: the paper's P@k and the every-paraphrase P@k / MRR of the retrieval section, plus first-stage recall:
``hit@20`` (the pair's q2 in the top 20: what a reranker of the top 20 can reach) and ``R@20 (all)`` (the share of
every known paraphrase of q1 in the top 20).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.eval_common import (
    ReportError, ReportSettings, Row, Table, base_meta, gateway, rerank_service, save_table, torch_device, zh_dictionary,
)
from bench.eval_hybrid_tune import PipelineChoice, tune_pipeline
from bench.eval_models import RECIPES, get_model
from bench.eval_retrieval import (
    CUTOFFS, DATASETS, DICTIONARIES, PAPER, PROTOCOLS, UNJUDGED_COLUMN, RetrievalSet, both_protocols, build_corpus, search_body, tune_weights,
)

logger = logging.getLogger(__name__)

#: the bi-encoder that embeds documents (at index time) and queries (in the gateway and the kNN row): zh-emb, the
#: in-batch-negatives embedder trained on the 2-core CPU (~15 min), so the section reruns without a GPU; the environment
#: variable JINGPAI_REPORT_HYBRID_EMBEDDER names another recipe (e.g. zh-gpu-emb, the same recipe on a GPU)
EMBEDDER = os.environ.get("JINGPAI_REPORT_HYBRID_EMBEDDER", "zh-emb")
#: the reranker of the ``hybrid + rerank`` rows: zh-esim, token alignment over USE's features (the best Chinese
#: pair classifier; JINGPAI_REPORT_HYBRID_RERANKER names another recipe)
RERANKER = os.environ.get("JINGPAI_REPORT_HYBRID_RERANKER", "zh-esim")
#: the first stage's depth: the window the gateway reranks
DEPTH = 20
#: the data sets in the order they run: AFQMC first (the recall-bound set the hybrid goal is about), LCQMC last (the
#: largest); each table is saved as soon as it is complete, so a long run that is stopped keeps what it finished
ORDER = ("afqmc", "bq", "lcqmc")
#: HNSW candidates per kNN search (both engines)
KNN_CANDIDATES = 200
RECALL_COLUMNS = (f"hit@{DEPTH}", f"R@{DEPTH} (all)")
#: the gateway's fusion of the BM25 and kNN lists (its defaults: RRF, the BM25 list weighted 0.5)
FUSION = "rrf"
HYBRID_WEIGHT = 0.5


def recall(runs: dict[str, list[str]], rset: RetrievalSet) -> dict[str, float]:
    """``hit@20`` over the positive pairs (q2 in the top 20) and ``R@20 (all)`` (share of every known
    paraphrase of q1 in the top 20, averaged over the distinct q1)."""
    hits = [t in runs[q][:DEPTH] for q, t in rset.pairs]
    shares = [len(set(runs[q][:DEPTH]) & set(rel)) / len(rel) for q, rel in rset.relevant.items() if rel]
    return {RECALL_COLUMNS[0]: sum(hits) / len(hits), RECALL_COLUMNS[1]: sum(shares) / len(shares)}


def hybrid_body(text: str, own_id: str, *, hybrid: bool | dict) -> dict:
    """A client's ``_search`` body for one query: its text, its own document excluded, ``DEPTH`` hits, and the
    gateway's per-request hybrid switch (``ext.jingpai.hybrid``; kNN fetches ``DEPTH`` too; a dict: its fusion,
    ``weight`` and ``rrf_k`` too)."""
    body = search_body(text, own_id, DEPTH)
    spec = {"enabled": True, "k": DEPTH, **(hybrid if isinstance(hybrid, dict) else {})}
    body["ext"] = {"jingpai": {"hybrid": spec if hybrid else False}}
    return body


@contextmanager
def hybrid_gateway(engine_url: str, *, embedder_url: str, reranker_url: str | None, dict_dir: Path) -> Iterator[str]:
    """The real gateway with the embedding service for hybrid search (and the rerank service when given)."""
    with gateway(engine_url, reranker_url=reranker_url, dict_dirs=(dict_dir,), window=DEPTH, embed_url=embedder_url,
                 hybrid_fusion=FUSION, hybrid_weight=HYBRID_WEIGHT) as url:
        yield url


def gateway_runs(client: Any, base: str, alias: str, params: dict, queries: list[str], text_of: dict[str, str],
                 *, hybrid: bool | dict) -> tuple[dict[str, list[str]], list[str]]:
    """``({q1 id: ranked ids}, flags)``: one gateway search per distinct q1; ``flags`` collects the fallbacks the
    gateway reported (hybrid that fell back to BM25, rerank that was skipped)."""
    flags: list[str] = []

    def one(qid: str) -> tuple[str, list[str]]:
        resp = client.post(f"{base}/{alias}/_search", params=params, json=hybrid_body(text_of[qid], qid, hybrid=hybrid))
        resp.raise_for_status()
        data = resp.json()
        info = data.get("jingpai", {})
        if hybrid and not info.get("hybrid", {}).get("applied"):
            flags.append(f"hybrid fell back: {info.get('hybrid', {}).get('reason')}")
        if params.get("jingpai") == "rerank" and not info.get("reranked"):
            flags.append(f"not reranked: {info.get('reason')}")
        return qid, [h["_id"] for h in data["hits"]["hits"]]

    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(one, queries)), flags


def knn_runs(engine: Any, alias: str, field: str, vectors: Any, queries: list[str]) -> dict[str, list[str]]:
    """The engine's own kNN top ``DEPTH`` per q1 (its own document filtered out during the graph search)."""
    runs = {}
    for qid, vec in zip(queries, vectors, strict=True):
        resp = engine.knn_search(alias, vec, field=field, k=DEPTH, num_candidates=KNN_CANDIDATES,
                                 filter={"bool": {"must_not": [{"ids": {"values": [qid]}}]}})
        runs[qid] = [h["_id"] for h in resp["hits"]["hits"]]
    return runs


def tuning_note(name: str, choice: PipelineChoice) -> str:
    """The table note that says what the tuned rows were chosen on, what the choice scored there, and how large a
    difference on that many queries is more than chance."""
    from jingpai.plugin.tune_noise import noise_margin

    scores = "; ".join(f"{label}: " + " / ".join(f"{v:.3f}" for v in metrics.values()) for label, metrics in choice.rows.items())
    return (f"tuned rows: chosen on {choice.queries} positive pairs ({choice.distinct} distinct queries) of {name.upper()} *train* held out "
            f"from {EMBEDDER}'s training and unseen by {RERANKER}, searched in {choice.corpus} training questions with vectors "
            f"(bench/eval_hybrid_tune.py); P@1 / P@3 / P@5 / P@10 there — {scores}; differences below "
            f"{noise_margin(choice.queries):.3f} (two standard errors on {choice.queries} queries: jingpai tune's noise warning) are within noise")


def run(settings: ReportSettings) -> list[Table]:
    from jingpai.engine.client import connect
    from jingpai.indexer.mapping import VECTOR_FIELD
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.jobs.document_vectors import load_embedder
    from jingpai.keyword_dict import Dictionary

    if not settings.wants("hybrid"):
        return []
    if not settings.engines:
        raise ReportError("hybrid needs engines: pass --opensearch/--elasticsearch (OpenSearch with its k-NN plugin) or allow --start-engines")
    embed_model, embed_info = get_model(EMBEDDER, settings, seed=0)
    embedder = load_embedder(embed_info["folder"], device=torch_device(settings))
    rerank_model, weight = None, 0.0
    choices: dict[str, PipelineChoice] = {}
    wanted = {row for name in DATASETS for kind in settings.engines for row in ("rerank", "tuned") if settings.wants(f"hybrid.{name}.{kind}.{row}")}
    if wanted:
        rerank_model, _ = get_model(RERANKER, settings, seed=0)
    if "rerank" in wanted:  # the untuned row's weight: the retrieval section's, chosen on BM25 windows of the training mix
        fusions, _ = tune_weights(settings, {RERANKER: rerank_model}, next(iter(settings.engines.values())), zh_dictionary(settings))
        weight = fusions[RERANKER]["fusion_weight"]
    tables = []
    import httpx

    for name in sorted(DATASETS, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
        if not settings.wants(f"hybrid.{name}"):
            continue
        rset = build_corpus(name, settings)
        text_of = {i: t for t, i in rset.ids.items()}
        build_dictionary, sources = DICTIONARIES[name]
        dict_dir = build_dictionary(settings)
        dictionary = Dictionary.load(dict_dir)
        query_vectors = embedder.encode([text_of[q] for q in rset.queries])
        for kind, url in settings.engines.items():
            prefix = f"hybrid.{name}.{kind}"
            if not settings.wants(prefix):
                continue
            engine = connect(url)
            alias = f"report-hybrid-{name}-{settings.mode}"
            report = index_corpus(engine, [rset.corpus], IndexSettings(
                index=alias, text_fields=("text",), id_field="id", progress=False, quarantine_dir=settings.work_dir,
                vectors=Path(embed_info["folder"]), vector_chunking="first"), dictionary=dictionary, embedder=embedder)
            engine.refresh(alias)
            table = Table(
                key=f"hybrid-{name}-{kind}", section="hybrid",
                title=f"Hybrid first stage — {name.upper()} dev, {kind} ({settings.mode})",
                columns=["method", "queries", *[f"P@{k}" for k in CUTOFFS], "P@1 (all)", "P@10 (all)", "MRR (all)", UNJUDGED_COLUMN, *RECALL_COLUMNS],
                meta=base_meta(settings, "hybrid", data=f"{name.upper()} dev: {len(rset.ids)} distinct questions indexed with vectors, "
                               f"{len(rset.pairs)} positive pairs (P@k, hit@{DEPTH}), {len(rset.queries)} distinct q1 (all)",
                               engine=f"{engine.kind} {engine.version}", device=torch_device(settings),
                               model=f"embedder {EMBEDDER}: {RECIPES[EMBEDDER].describe()}; reranker {RERANKER}: {RECIPES[RERANKER].describe()}; "
                                     f"dictionary {dictionary.version} ({sources})"),
                notes=[PAPER, PROTOCOLS, f"index: {report.indexed} docs with {embedder.dims}-d vectors of {embedder.model_id} into "
                       f"{report.physical_index}; kNN: {KNN_CANDIDATES} HNSW candidates; gateway window {DEPTH}"
                       + (f"; the rerank row's linear fusion weight {weight:g} was tuned on training queries (retrieval section)."
                          if settings.wants(f"hybrid.{name}.{kind}.rerank") else ".")],
            )
            with ExitStack() as stack, httpx.Client(timeout=600) as client:
                embed_url = stack.enter_context(rerank_service(embed_model, name=EMBEDDER))
                rows: list[tuple[str, str, dict[str, list[str]]]] = []
                plain = stack.enter_context(hybrid_gateway(url, embedder_url=embed_url, reranker_url=None, dict_dir=dict_dir))
                if settings.wants(f"{prefix}.bm25"):
                    runs, flags = gateway_runs(client, plain, alias, {"jingpai": "augment"}, rset.queries, text_of, hybrid=False)
                    rows.append(("BM25 + dictionary (gateway, rerank off)", "bm25", runs))
                if settings.wants(f"{prefix}.knn"):
                    rows.append((f"kNN ({EMBEDDER} query vector, engine)", "knn", knn_runs(engine, alias, VECTOR_FIELD, query_vectors, rset.queries)))
                if settings.wants(f"{prefix}.hybrid"):
                    runs, flags = gateway_runs(client, plain, alias, {"jingpai": "augment"}, rset.queries, text_of, hybrid=True)
                    if flags:
                        table.notes.append(f"hybrid: {len(flags)} fallbacks ({sorted(set(flags))[:3]})")
                    rows.append(("hybrid BM25 + kNN (gateway, rerank off)", "hybrid", runs))
                reranking = None
                if settings.wants(f"{prefix}.rerank") or settings.wants(f"{prefix}.tuned"):
                    rurl = stack.enter_context(rerank_service(rerank_model, name=RERANKER))
                    reranking = stack.enter_context(hybrid_gateway(url, embedder_url=embed_url, reranker_url=rurl, dict_dir=dict_dir))
                if settings.wants(f"{prefix}.rerank"):
                    params = {"jingpai": "rerank", "jingpai_fusion": "linear", "jingpai_fusion_weight": str(weight)}
                    runs, flags = gateway_runs(client, reranking, alias, params, rset.queries, text_of, hybrid=True)
                    if flags:
                        table.notes.append(f"hybrid + rerank: {len(flags)} fallbacks ({sorted(set(flags))[:3]})")
                    rows.append((f"hybrid + rerank top {DEPTH}, {RERANKER}, linear fusion w={weight:g}", "rerank", runs))
                if settings.wants(f"{prefix}.rerank.both"):  # the same, reranking every hit in either list's top DEPTH
                    runs, flags = gateway_runs(client, reranking, alias, params, rset.queries, text_of, hybrid={"rerank_window": "both"})
                    if flags:
                        table.notes.append(f"hybrid + rerank, both lists: {len(flags)} fallbacks ({sorted(set(flags))[:3]})")
                    rows.append((f"hybrid + rerank of both lists' top {DEPTH} (rerank_window both), {RERANKER}, linear fusion w={weight:g}",
                                 "rerank.both", runs))
                if settings.wants(f"{prefix}.tuned"):
                    if name not in choices:
                        choices[name] = tune_pipeline(name, settings, engine_url=url, dict_dir=dict_dir, dictionary=dictionary, embedder=embedder,
                                                      embed_info=embed_info, embed_url=embed_url, rerank_url=rurl, names=(EMBEDDER, RERANKER),
                                                      corpus_size=len(rset.ids), depth=DEPTH)
                    choice = choices[name]
                    table.notes.append(tuning_note(name, choice))
                    runs, flags = gateway_runs(client, plain, alias, {"jingpai": "augment"}, rset.queries, text_of, hybrid=choice.hybrid)
                    rows.append((f"hybrid BM25 + kNN, tuned ({choice.label().split(';')[0]})", "tuned.hybrid", runs))
                    runs, flags = gateway_runs(client, reranking, alias, choice.params(), rset.queries, text_of, hybrid=choice.hybrid)
                    if flags:
                        table.notes.append(f"tuned hybrid + rerank: {len(flags)} fallbacks ({sorted(set(flags))[:3]})")
                    rows.append((f"hybrid + rerank top {DEPTH}, {RERANKER}, tuned ({choice.label()})", "tuned.rerank", runs))
            for label, method, runs in rows:
                cells = both_protocols({q: r[:10] for q, r in runs.items()}, rset)
                keep = {k: cells[k] for k in ("queries", *[f"P@{k}" for k in CUTOFFS], "P@1 (all)", "P@10 (all)", "MRR (all)", UNJUDGED_COLUMN)}
                table.rows.append(Row(cells={"method": label, **keep, **recall(runs, rset)}, command=settings.command("hybrid", f"{prefix}.{method}")))
            engine.close()
            save_table(table, settings.results_dir)
            tables.append(table)
    return tables
