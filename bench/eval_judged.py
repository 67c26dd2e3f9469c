"""Section 1d — judged Chinese search sets (issue 52): A14 stock news, QBQTC and KUAKE-QTR dev.

Three sets whose judgments can see a gain (``../shared/data/README.md``), each read with
:func:`jingpai.reranker.judged.read_judged` (``--data a14=DIR`` / ``qbqtc=DIR`` / ``kuake=DIR`` take a folder in
the same layout). Two protocols, both scored by :mod:`bench.judged_metrics` over judged documents only:

- **engine** (OpenSearch and Elasticsearch): the set's whole corpus is indexed with ``jingpai index``'s pipeline
  and the dictionary of :data:`SETS` (A14, QBQTC: the report's zh dictionary; KUAKE-QTR: a medical one built
  from its train queries and titles); each dev query's search text (A14: the company's short name) is searched,
  top ``window`` hits (:data:`SETS`: about as deep as the set's largest judged pool). Rows: BM25 on the raw field straight to the engine; BM25 + dictionary augmentation
  through the real gateway (``?jingpai=augment``); + rerank through the gateway (``?jingpai=rerank``) with the real
  ``jingpai serve`` holding each model — fused as the gateway fuses by default (``linear``, engine weight 0.5), at
  the engine weight tuned on the held-out *training* queries of the set's recipes (:func:`tune_weights`), and the
  model alone (the same answers re-sorted by ``_jingpai.model_score``: ``?jingpai_fusion=replace``).
  The model reads the query's model text (A14: ``short name（full name）``, sent as ``ext.jingpai.query``).
  ``judged@10``: the share of the top 10 that is judged for the query. Hybrid rows (bge vectors + rerank) plug
  in at :func:`hybrid_methods`.
- **reorder**: no engine; every judged candidate of each dev query, ordered by BM25 (bm25s over jieba tokens),
  by each model, by both fused, and at random (the report's seeds): :func:`reorder_table`.

Rerun one row with its ``--only`` id: ``judged.<set>.reorder.<bm25|random|MODEL[.fused]>`` or
``judged.<set>.<engine>.<direct|augment|rerank.MODEL[.replace|.tuned]>``. A model trained elsewhere with its recipe's
``jingpai train`` line joins with ``python -m bench train KEY --adopt DIR``.

Models: :data:`ZERO_SHOT` (bge-small-zh-v1.5's cosine, untrained) and each set's fine-tuned recipes
(``bench/eval_models.py``); quick mode runs the zero-shot model on a few queries over part of each corpus.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import judged_metrics as jm
from bench.eval_common import (
    AUGMENTED_BM25, RAW_BM25, ZH_DICTIONARY_SOURCES, ReportError, ReportSettings, Row, Table, base_meta, best_weight, data_path, gateway,
    mean_std, rerank_service, save_table, torch_device, zh_dictionary,
)
from bench.eval_models import RECIPES, get_model

logger = logging.getLogger(__name__)

ZERO_SHOT = "zh-bge-zeroshot"
QUICK_QUERIES = 8
QUICK_DOCS = 2000


def medical_dictionary(settings: ReportSettings) -> Path:
    """The KUAKE-QTR rows' dictionary: THUCNews titles (10 news domains) plus KUAKE-QTR *train* queries and the titles
    judged for them as a medical domain (diff-idf, ``jingpai dict build``); no dev text shapes it."""
    from bench.eval_common import _zh_domain_dictionary
    from jingpai.reranker.judged import read_judged

    out = settings.work_dir / "dict-zh-kuake"
    if (out / "meta.json").exists():
        return out
    train = read_judged(data_path("zh", "kuake_qtr"), "train")
    texts = list(dict.fromkeys([*train.queries.values(), *(train.docs[d] for judged in train.qrels.values() for d in judged)]))
    return _zh_domain_dictionary(settings, out, "kuake", texts)


@dataclass(frozen=True)
class JudgedSpec:
    """One judged set: its title, metric columns, fine-tuned recipes, dictionary (builder, what it is built from) and
    ``window``: the hits searched per query and the gateway's rerank window."""

    title: str
    metrics: tuple[str, ...]
    trained: tuple[str, ...]
    dictionary: Callable[[ReportSettings], Path]
    dictionary_sources: str
    window: int


SETS: dict[str, JudgedSpec] = {
    "a14": JudgedSpec("A14 stock news", ("nDCG@10", "MAP"), ("a14-bge-cross", "a14-bge-bertca", "a14-bge-kwbert", "a14-bge-cross-mark"), zh_dictionary, ZH_DICTIONARY_SOURCES, 100),
    "qbqtc": JudgedSpec("QBQTC", ("nDCG@10",), ("qbqtc-bge-cross", "qbqtc-bge-bi"), zh_dictionary, ZH_DICTIONARY_SOURCES, 50),
    "kuake": JudgedSpec("KUAKE-QTR", ("nDCG@3", "nDCG@10", jm.TOP_GRADE_MRR), ("kuake-bge-cross", "kuake-bge-bi"), medical_dictionary,
                        "jingpai dict build: THUCNews titles 10 domains + KUAKE-QTR train queries and their judged titles", 30),
}
#: the sets' judged pools hold at most 100 (A14), 20 (QBQTC) and 14 (KUAKE-QTR) documents a query


def load_set(settings: ReportSettings, name: str, extra_docs: Any = ()):
    """Dev split of set ``name`` (quick: its first :data:`QUICK_QUERIES` queries, and as corpus their judged documents,
    ``extra_docs`` (the tuning queries') and the first :data:`QUICK_DOCS` of the corpus)."""
    from jingpai.reranker.judged import JudgedDataError, read_judged

    try:
        jset = read_judged(settings.data_file(name), "dev")
    except JudgedDataError as exc:
        raise ReportError(f"judged set {name}: {exc}") from exc
    if not settings.quick:
        return jset
    keep = list(jset.qrels)[:QUICK_QUERIES]
    wanted = {d for q in keep for d in jset.qrels[q]} | set(list(jset.docs)[:QUICK_DOCS]) | set(extra_docs)
    return replace(jset, queries={q: jset.queries[q] for q in keep}, model_text={q: jset.model_text[q] for q in keep},
                   docs={d: t for d, t in jset.docs.items() if d in wanted}, qrels={q: jset.qrels[q] for q in keep})


def tuning_set(settings: ReportSettings, name: str):
    """The training queries set ``name``'s fine-tuned recipes hold out for model selection (10 %, seed 0; quick: the
    first :data:`QUICK_QUERIES`), with their judgments: the rerank rows' fusion weight is tuned on these, never on dev.
    ``None`` when the set has no trained recipe."""
    from bench.eval_models import read_recipe_data
    from jingpai.reranker.judged import read_judged

    if not SETS[name].trained:
        return None
    recipe = RECIPES[SETS[name].trained[0]]  # a set's recipes share their data and hold-out
    texts = {p.query for p in read_recipe_data(recipe, settings)[1] or ()}
    train = read_judged(data_path(*recipe.train[0][0][:-1]), "train")
    keep = [q for q in train.qrels if train.model_text[q] in texts][: QUICK_QUERIES if settings.quick else None]
    return replace(train, queries={q: train.queries[q] for q in keep}, model_text={q: train.model_text[q] for q in keep},
                   docs={d: train.docs[d] for q in keep for d in train.qrels[q]}, qrels={q: train.qrels[q] for q in keep})


def tune_weights(settings: ReportSettings, name: str, url: str, alias: str, dictionary_dir: Path, models: dict[str, Any],
                 tuning) -> tuple[dict[str, float], list[str]]:
    """Per model, the engine weight of ``linear`` fusion with the best first metric of set ``name`` over the tuning
    queries' judged documents (:func:`bench.eval_common.best_weight`: w < 1), from one gateway pass per model (the
    reranked windows' engine and model scores, re-fused offline as the gateway fuses); and the table notes saying so."""
    spec, weights, notes = SETS[name], {}, []
    metric = spec.metrics[0]
    for key, model in models.items():
        with rerank_service(model, name=key) as rurl, gateway(url, reranker_url=rurl, dict_dirs=(dictionary_dir,), window=spec.window) as gurl:
            _, windows, _ = search_runs(gurl, alias, {"jingpai": "rerank", "jingpai_fusion": "replace"}, tuning, spec.window)
        windows = {q: w for q, w in windows.items() if w}
        if not any(g > 0 for q in windows for g in tuning.qrels[q].values()):
            notes.append(f"{key}: no tuning query was reranked with a relevant document: no tuned row")
            continue
        curve = jm.weight_curve(windows, tuning.qrels, metric, top_grade=tuning.max_grade)
        weights[key] = best_weight(curve)
        notes.append(f"{key}: engine weight {weights[key]:g} chosen by {metric} over judged documents of {len(windows)} held-out training "
                     f"queries ({tuning.name} train), linear fusion by engine weight — " + ", ".join(f"{w:g}: {v:.4f}" for w, v in curve.items()))
    return weights, notes


def model_keys(settings: ReportSettings, name: str) -> tuple[str, ...]:
    """The models of set ``name``'s rows in this mode that ``--only`` selects."""
    keys = (ZERO_SHOT,) if settings.quick else (ZERO_SHOT, *SETS[name].trained)
    return tuple(k for k in keys if settings.wants(f"judged.{name}.reorder.{k}")
                 or any(settings.wants(f"judged.{name}.{kind}.rerank.{k}") for kind in settings.engines))


def meta(settings: ReportSettings, name: str, jset, protocol: str, *, engine: str = "none", kind: str = "none", model: str) -> dict[str, str]:
    """A judged table's meta: the report's, plus ``dataset``, ``split``, ``protocol`` and ``engine_kind`` (summary.json)."""
    docs = f"{len(jset.docs):,} documents" + (" (quick: the judged ones of the first queries and part of the corpus)" if settings.quick else "")
    data = settings.data_description(name, f"{SETS[name].title} dev: {len(jset.qrels)} queries, "
                                           f"{sum(map(len, jset.qrels.values())):,} judgments (grades 0–{jset.max_grade}); {docs}")
    return {**base_meta(settings, "judged", data=data, model=model, engine=engine, device=torch_device(settings)),
            "dataset": name, "split": jset.split, "protocol": protocol, "engine_kind": kind}


def describe_models(models: dict[str, Any]) -> str:
    """Each model's recipe description (a model that is no report recipe: its architecture)."""
    return "; ".join(f"{k}: {RECIPES[k].describe() if k in RECIPES else f'{type(m).__name__} (not a report recipe)'}" for k, m in models.items())


def cells(runs: dict[str, list[str]], jset, metrics: tuple[str, ...], *, share: bool) -> dict[str, Any]:
    """A row's metric cells: :func:`bench.judged_metrics.judged_metrics` (and ``judged@10`` for engine rows)."""
    out = jm.judged_metrics(runs, jset.qrels, metrics, top_grade=jset.max_grade)
    return {**out, jm.JUDGED_SHARE: jm.judged_share(runs, jset.qrels)} if share else out


def reorder_table(settings: ReportSettings, name: str, jset, models: dict[str, Any]) -> Table:
    """The engine-free protocol: every judged candidate of each dev query, reordered."""
    spec = SETS[name]
    table = Table(key=f"judged-{name}-reorder", section="judged", title=f"{spec.title} dev — reordering the judged list ({settings.mode})",
                  columns=["method", "queries", *spec.metrics], meta=meta(settings, name, jset, "reorder", model=describe_models(models)),
                  notes=[f"Every judged candidate of each dev query (grade 0 too), ordered by each method; metrics over the queries with a "
                         f"document of grade > 0 (MRR (top grade): the first document of grade {jset.max_grade}, over the queries with one). "
                         f"BM25: bm25s (k1 {jm.K1}, b {jm.B}, Lucene) over jieba tokens with the statistics of the whole corpus; the model "
                         f"reads the query's model text{' (short name（full name）)' if name == 'a14' else ''}; fused: the gateway's linear "
                         f"fusion at engine weight {jm.FUSION_WEIGHT} (min-max per query); random: mean ± std over seeds {list(settings.seeds)}."])
    prefix = f"judged.{name}.reorder"
    bm25 = jm.bm25_candidates(jset)
    if settings.wants(f"{prefix}.bm25"):
        table.rows.append(Row({"method": "BM25 (bm25s, jieba tokens)", **cells(jm.by_score(bm25), jset, spec.metrics, share=False)},
                              settings.command("judged", f"{prefix}.bm25")))
    for key, model in models.items():
        if not settings.wants(f"{prefix}.{key}"):
            continue
        scores = jm.model_candidates(model, jset)
        table.rows.append(Row({"method": f"{key} (model score alone)", **cells(jm.by_score(scores), jset, spec.metrics, share=False)},
                              settings.command("judged", f"{prefix}.{key}")))
        table.rows.append(Row({"method": f"BM25 + {key}, linear fusion w={jm.FUSION_WEIGHT:g}",
                               **cells(jm.by_score(jm.fused(bm25, scores)), jset, spec.metrics, share=False)},
                              settings.command("judged", f"{prefix}.{key}.fused")))
    if settings.wants(f"{prefix}.random"):
        seeded = [cells(jm.random_rankings(jset.qrels, seed), jset, spec.metrics, share=False) for seed in settings.seeds]
        table.rows.append(Row({"method": f"random order (seeds {','.join(map(str, settings.seeds))})", "queries": seeded[0]["queries"],
                               **{m: mean_std([c[m] for c in seeded]) for m in spec.metrics}},
                              settings.command("judged", f"{prefix}.random")))
    return table


def search_body(text: str, model_text: str | None, size: int) -> dict:
    """The search of one query: ``match`` on the text field, top ``size``; through the gateway the model's text
    rides along as ``ext.jingpai.query`` (the engine never sees it)."""
    body: dict = {"query": {"match": {"text": text}}, "size": size, "_source": ["text"]}
    if model_text is not None:
        body["ext"] = {"jingpai": {"query": model_text}}
    return body


Window = list[tuple[str, float | None, float]]


def search_runs(base: str, alias: str, params: dict, jset, size: int) -> tuple[dict[str, list[str]], dict[str, Window], list[str]]:
    """``(ranked ids, reranked windows, failure reasons)`` per query of ``jset``, one search each; a window is the
    reranked hits' ``(id, engine score, model score)`` in engine order (empty unless reranked)."""
    import httpx

    rerank = params.get("jingpai") == "rerank"
    failures: list[str] = []

    def one(qid: str) -> tuple[str, list[str], Window]:
        body = search_body(jset.queries[qid], jset.model_text[qid] if params else None, size)
        resp = client.post(f"{base}/{alias}/_search", params=params, json=body)
        resp.raise_for_status()
        data = resp.json()
        hits = data["hits"]["hits"]
        if rerank and not data.get("jingpai", {}).get("reranked"):
            failures.append(str(data.get("jingpai", {}).get("reason")))
        scored = sorted((h for h in hits if "model_score" in h.get("_jingpai", {})), key=lambda h: h["_jingpai"]["engine_rank"])
        return qid, [h["_id"] for h in hits], [(h["_id"], h["_jingpai"].get("engine_score"), h["_jingpai"]["model_score"]) for h in scored]

    with httpx.Client(timeout=600) as client, ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, list(jset.qrels)))
    return {q: ids for q, ids, _ in results}, {q: window for q, _, window in results}, failures


def by_model(windows: dict[str, Window]) -> dict[str, list[str]]:
    """Each reranked window by model score alone (ties by engine rank): what ``?jingpai_fusion=replace`` serves."""
    return {q: [h[0] for _, h in sorted(enumerate(w), key=lambda x: (-x[1][2], x[0]))] for q, w in windows.items()}


@dataclass(frozen=True)
class Method:
    """One engine row: its label and id, the gateway mode (``direct``: straight to the engine), the model it serves,
    the search parameters and extra gateway settings (``embed_url``, ``hybrid_*``: the hybrid hook)."""

    label: str
    row: str
    mode: str
    model: str | None = None
    params: tuple[tuple[str, str], ...] = ()
    gateway: tuple[tuple[str, Any], ...] = ()


def engine_methods(settings: ReportSettings, name: str, keys: tuple[str, ...], tuned: dict[str, float]) -> list[Method]:
    """The engine rows of set ``name``: raw BM25, augmented BM25, + rerank per model at the gateway's default fusion and
    (where ``tuned`` has one) at the engine weight tuned on held-out training queries, then :func:`hybrid_methods`."""
    def fusion(w: float) -> tuple[tuple[str, str], ...]:
        return ("jingpai_fusion", "linear"), ("jingpai_fusion_weight", str(w))

    top = f"+ rerank top {SETS[name].window}"
    methods = [Method(RAW_BM25, "direct", "direct"), Method(AUGMENTED_BM25, "augment", "augment")]
    for k in keys:
        methods.append(Method(f"{top}, {k}, linear fusion w={jm.FUSION_WEIGHT:g}", f"rerank.{k}", "rerank", k, fusion(jm.FUSION_WEIGHT)))
        if k in tuned:
            methods.append(Method(f"{top}, {k}, linear fusion w={tuned[k]:g} (tuned on held-out train queries)", f"rerank.{k}.tuned", "rerank", k,
                                  fusion(tuned[k])))
    return methods + hybrid_methods(settings, name, keys)


def hybrid_methods(settings: ReportSettings, name: str, keys: tuple[str, ...]) -> list[Method]:
    """The hook for hybrid rows (BM25 + kNN over bge vectors, then rerank): none yet. A hybrid row needs the corpus
    indexed with vectors (``jingpai index --vectors``, OpenSearch's k-NN plugin) and a :class:`Method` whose
    ``gateway`` carries ``embed_url``/``hybrid_*`` for :func:`bench.eval_common.gateway`."""
    return []


def index_set(url: str, alias: str, jset, dictionary_dir: Path, settings: ReportSettings):
    """Index the set's corpus (``id``, ``text``) into ``alias`` with jingpai's indexer and the set's dictionary."""
    from jingpai.engine.client import connect
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.keyword_dict import Dictionary

    corpus = settings.work_dir / "corpora" / f"judged_{jset.name}_{settings.mode}.jsonl"
    corpus.parent.mkdir(parents=True, exist_ok=True)
    corpus.write_text("".join(json.dumps({"id": d, "text": t}, ensure_ascii=False) + "\n" for d, t in jset.docs.items()), encoding="utf-8")
    engine = connect(url)
    try:
        report = index_corpus(engine, [corpus], IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False,
                                                              quarantine_dir=settings.work_dir), dictionary=Dictionary.load(dictionary_dir))
        engine.refresh(alias)
        return report, f"{engine.kind} {engine.version}"
    finally:
        engine.close()


def engine_table(settings: ReportSettings, name: str, kind: str, url: str, jset, models: dict[str, Any], *,
                 tuned: dict[str, float] | None = None, tuning=None) -> Table:
    """The engine protocol of set ``name`` on one engine: index, tune the fusion weight of each model missing from
    ``tuned`` on ``tuning`` (:func:`tune_weights`; ``tuned`` is filled in, for the next engine), then every
    :func:`engine_methods` row."""
    spec, prefix = SETS[name], f"judged.{name}.{kind}"
    dictionary_dir = spec.dictionary(settings)
    alias = f"report-judged-{name}-{settings.mode}"
    report, version = index_set(url, alias, jset, dictionary_dir, settings)
    table = Table(key=f"judged-{name}-{kind}", section="judged", title=f"{spec.title} dev — search through {kind} ({settings.mode})",
                  columns=["method", "queries", *spec.metrics, jm.JUDGED_SHARE],
                  meta=meta(settings, name, jset, "engine", engine=version, kind=kind,
                            model=describe_models(models) + f"; dictionary: {spec.dictionary_sources}"),
                  notes=[f"index: {report.indexed:,} documents into {report.physical_index}; each dev query's search text "
                         f"({'the short name' if name == 'a14' else 'the query'}) as a `match` on `text`, top {spec.window}. Metrics over judged "
                         f"documents only (unjudged hits dropped, the rest keep their order); {jm.JUDGED_SHARE}: the share of the top 10 "
                         "judged for the query. Rerank rows: the real gateway and `jingpai serve`, the model reading "
                         f"{'short name（full name）' if name == 'a14' else 'the query'} (`ext.jingpai.query`); `replace` rows are the same "
                         "answers re-sorted by `_jingpai.model_score`."])
    tuned = {} if tuned is None else tuned
    missing = {k: m for k, m in models.items() if k not in tuned}
    if tuning is not None and tuning.qrels and missing:
        weights, notes = tune_weights(settings, name, url, alias, dictionary_dir, missing, tuning)
        tuned.update(weights)
        table.notes += [f"Tuned on {kind}: {n}" for n in notes]
    for method in engine_methods(settings, name, tuple(models), tuned):
        row_id = f"{prefix}.{method.row}"
        if not settings.wants(row_id) and not settings.wants(f"{row_id}.replace"):
            continue
        with ExitStack() as stack:
            base = url
            if method.mode != "direct":
                model = models.get(method.model) if method.model else None
                rurl = stack.enter_context(rerank_service(model, name=method.model)) if model is not None else None
                base = stack.enter_context(gateway(url, reranker_url=rurl, dict_dirs=(dictionary_dir,), window=spec.window,
                                                     **dict(method.gateway)))
            params = {} if method.mode == "direct" else {"jingpai": method.mode, **dict(method.params)}
            runs, windows, failures = search_runs(base, alias, params, jset, spec.window)
        if failures:
            table.notes.append(f"{method.label}: {len(failures)} queries were not reranked ({sorted(set(failures))})")
        if method.mode == "rerank" and not row_id.endswith(".tuned") and settings.wants(f"{row_id}.replace"):
            table.rows.append(Row({"method": f"+ rerank top {spec.window}, {method.model}, replace (model score alone)",
                                   **cells(by_model(windows), jset, spec.metrics, share=True)}, settings.command("judged", f"{row_id}.replace")))
        if settings.wants(row_id):
            table.rows.append(Row({"method": method.label, **cells(runs, jset, spec.metrics, share=True)}, settings.command("judged", row_id)))
    return table


def run(settings: ReportSettings) -> list[Table]:
    """Every judged set's tables: reorder (no engine), then the engine protocol on each engine; each saved when done."""
    tables: list[Table] = []
    loaded: dict[str, Any] = {}
    for name in SETS:
        if not settings.wants(f"judged.{name}"):
            continue
        keys = model_keys(settings, name)
        tuning = tuning_set(settings, name) if keys and settings.engines else None
        jset = load_set(settings, name, tuning.docs if tuning is not None else ())
        tuned: dict[str, float] = {}
        for key in keys:
            if key not in loaded:
                # the first of --seeds picks the trained run (``<key>-s<seed>``), so another seed's models can go
                # through the engines; the rows' commands then carry --seeds and never replace seed 0's rows
                loaded[key] = get_model(key, settings, seed=settings.seeds[0])[0]
        models = {k: loaded[k] for k in keys}
        if settings.wants(f"judged.{name}.reorder"):
            tables.append(reorder_table(settings, name, jset, models))
            save_table(tables[-1], settings.results_dir)
        for kind, url in settings.engines.items():
            if settings.wants(f"judged.{name}.{kind}"):
                tables.append(engine_table(settings, name, kind, url, jset, models, tuned=tuned, tuning=tuning))
                save_table(tables[-1], settings.results_dir)
        if not settings.engines:
            logger.warning("judged %s: no engine given, only the reorder protocol ran", name)
    if not tables:
        raise ReportError(f"--only {' '.join(settings.only or ())} selects no judged row")
    return tables


def summary_lines(table: Table) -> list[str]:
    """The report summary's line for one judged table: the first metric of each row beside the baseline's (augmented
    BM25 in an engine table — the row every fused row must not fall below — else the first row)."""
    if not table.rows:
        return []
    first = table.columns[2]
    base = next((r.cells for r in table.rows if r.cells["method"] == AUGMENTED_BM25), table.rows[0].cells)
    value = lambda c: c["mean"] if isinstance(c, dict) else c  # noqa: E731 - a random row's cell is mean ± std
    parts = [f"{r.cells['method']} {value(r.cells[first]):.3f} ({value(r.cells[first]) - value(base[first]):+.3f})"
             for r in table.rows if r.cells is not base]
    return [f"{table.title}: {first} of {base['method']} {value(base[first]):.3f}; " + "; ".join(parts) + "."]
