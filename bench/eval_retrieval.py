"""Section 1 — keyword-enhanced retrieval (keyword-attentive BERT paper, Table 3).

LCQMC dev, AFQMC dev and BQ dev: every distinct question is indexed with ``jingpai index`` (text +
dictionary segmentation + keywords, with the dictionary of the data set's domain: :data:`DICTIONARIES`);
each distinct q1 of a positive pair is searched once (its own document excluded). Three methods on each
engine, same index, same queries:

- BM25 on the raw ``text`` field, sent straight to the engine;
- BM25 + dictionary augmentation: the same request through the real ``_search`` gateway, ``?jingpai=augment``
  (rerank off);
- + rerank: through the gateway with ``?jingpai=rerank``: the augmented top ``window`` hits are reranked
  by the real ``jingpai serve`` app holding the best Chinese model trained here.

Two protocols are scored from the same searches:

- **P@k (paper)**: each positive pair (q1, q2) is a query whose one relevant item is q2; P@k is the share
  of queries whose q2 is in the top k, computed by :func:`jingpai.reranker.evaluate.evaluate_scores`
  (ir-measures): with one relevant item the paper's P@k = k × trec P@k (a q2 outside the list is a miss).
  It caps itself where q1 has several known paraphrases (:func:`one_relevant_ceiling`).
- **P@k (all), MRR (all)**: one query per distinct q1, every known paraphrase of q1 relevant
  (:func:`paraphrase_qrels`); P@k (all) is the share of queries with at least one relevant question in the
  top k (ir-measures ``Success@k``, via :func:`jingpai.reranker.evaluate.evaluate_rankings`), MRR (all) the
  mean reciprocal rank of the first one.

Both protocols count a hit nobody judged as wrong, and these splits judge few of the questions a query
retrieves: **unjudged@1** (:func:`unjudged_at_1`) is the share of queries whose first hit was never paired
with the query in the split, match or not. P@1 (all) is a lower bound of the true P@1 and P@1 (all) +
unjudged@1 an upper one; a ranker that moves a paraphrase nobody labelled above a labelled one loses P@1
(all) without being worse.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.eval_common import (
    AUGMENTED_BM25, RAW_BM25, TUNE_WEIGHTS, ZH_BQ_DICTIONARY_SOURCES, ZH_DICTIONARY_SOURCES, ReportError, ReportSettings, Row, Table, base_meta, class_balance_note, data_path,
    gateway, rerank_service, save_table, torch_device, zh_bq_dictionary, zh_dictionary,
)
from bench.eval_models import RECIPES, get_model

logger = logging.getLogger(__name__)

DATASETS = {"lcqmc": ("zh", "lcqmc", "dev.tsv"), "afqmc": ("zh", "afqmc", "dev.tsv"), "bq": ("zh", "bq", "dev.tsv")}
#: the dictionary each data set is indexed and augmented with (its gateway and rerank rows too), and what it is
#: built from: its own domain's training questions (BQ: bank questions; LCQMC and AFQMC keep the AFQMC one)
DICTIONARIES: dict[str, tuple[Callable[[ReportSettings], Path], str]] = {
    "lcqmc": (zh_dictionary, ZH_DICTIONARY_SOURCES),
    "afqmc": (zh_dictionary, ZH_DICTIONARY_SOURCES),
    "bq": (zh_bq_dictionary, ZH_BQ_DICTIONARY_SOURCES),
}
CUTOFFS = (1, 3, 5, 10)
#: the columns of the every-paraphrase protocol, after the paper's P@k
ALL_COLUMNS = (*(f"P@{k} (all)" for k in CUTOFFS), "MRR (all)")
#: the label coverage of a row's first hits (:func:`unjudged_at_1`), after the every-paraphrase columns
UNJUDGED_COLUMN = "unjudged@1"
#: the Chinese rerankers of the full report: the USE-multilingual v3 models (pretrained backbone, fine-tuned on the
#: training mix) and zh-hcan (from scratch, random word vectors), each reranking the top WINDOW through the gateway
FULL_RERANKERS = ("zh-use-zeroshot", "zh-use-bi", "zh-use-kw", "zh-hcan", "zh-use-rank", "zh-use-winbi", "zh-use-winkw", "zh-gpu-bi", "zh-gpu-kw",
                  "zh-gpu-pkw", "zh-gpu-pwkw", "zh-gpu-emb", "zh-esim", "zh-esim-win",
                  "zh-lcqmc-hcan", "zh-lcqmc-iasm", "zh-lcqmc-cosine-hcan", "zh-lcqmc-win-hcan")
QUICK_RERANKERS = ("zh-use-bi",)
WINDOW = 20
PAPER = ("Paper (keyword-attentive BERT, Table 3, their finance QA test set; no rerank row): BM25 baseline P@1/3/5/10 "
         "77.4 / 85.1 / 89.3 / 91.1 %, keyword-enhanced 78.9 / 87.4 / 93.4 / 95.7 %. Our rerankers of these sets start from "
         "USE-multilingual v3 or are trained from scratch; the pretrained Chinese BERT (bge-small-zh-v1.5) serves here as the "
         "hybrid section's zero-shot embedder.")
PROTOCOLS = ("Two protocols, scored from the same searches (one per distinct q1, its own question excluded). P@k: the paper's — "
             "each positive pair (q1, q2) is a query whose one relevant item is q2 (queries column). P@k (all) and MRR (all): one "
             "query per distinct q1, every question paired with q1 with label 1 anywhere in the split (either column) relevant; "
             "P@k (all) is the share of queries with at least one of them in the top k (ir-measures Success@k), MRR (all) the "
             "reciprocal rank of the first one in the top 10 served (0 when none). unjudged@1: the share of those queries whose first "
             "hit was never paired with q1 in the split (match or not); both protocols count it wrong, so the true P@1 lies between "
             "P@1 (all) and P@1 (all) + unjudged@1, and a ranker that puts a paraphrase nobody labelled above a labelled one loses "
             "P@1 (all) without being worse.")


def paraphrase_qrels(pairs: Iterable[tuple[str, str, float]], queries: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
    """Relevance with every known paraphrase relevant: for each query text ``t``, every other text paired with
    ``t`` with label ≥ 1 anywhere in ``pairs`` (in either column) has gain 1.

    Args:
        pairs: ``(q1, q2, label)`` of the whole split.
        queries: the query texts to judge (``None``: every distinct q1 of a positive pair, in file order).

    Returns:
        ``{query: {paraphrase: 1}}``; a query without a known paraphrase maps to ``{}``.

    Example:
        >>> pairs = [("a", "b", 1), ("c", "a", 1), ("a", "d", 0), ("b", "e", 1), ("f", "f", 1)]
        >>> paraphrase_qrels(pairs)
        {'a': {'b': 1, 'c': 1}, 'c': {'a': 1}, 'b': {'a': 1, 'e': 1}}
        >>> paraphrase_qrels(pairs, ["d", "e"])
        {'d': {}, 'e': {'b': 1}}
    """
    known: dict[str, dict[str, int]] = defaultdict(dict)
    firsts: list[str] = []
    for q1, q2, label in pairs:
        if label < 1 or q1 == q2:  # a text is not its own paraphrase (its own document is excluded from its results)
            continue
        known[q1][q2] = 1
        known[q2][q1] = 1
        firsts.append(q1)
    wanted = dict.fromkeys(firsts) if queries is None else dict.fromkeys(queries)
    return {q: dict(known.get(q, {})) for q in wanted}


def judged_texts(pairs: Iterable[tuple[str, str, float]], queries: Iterable[str]) -> dict[str, set[str]]:
    """For each query text, every text paired with it anywhere in ``pairs`` (either column, any label).

    Example:
        >>> {q: sorted(t) for q, t in judged_texts([("a", "b", 1), ("c", "a", 0), ("b", "d", 1)], ["a", "d"]).items()}
        {'a': ['b', 'c'], 'd': ['b']}
    """
    paired: dict[str, set[str]] = defaultdict(set)
    for q1, q2, _ in pairs:
        paired[q1].add(q2)
        paired[q2].add(q1)
    return {q: set(paired.get(q, ())) for q in queries}


def unjudged_at_1(runs: dict[str, list[str]], judged: dict[str, set[str]]) -> float:
    """Share of the queries of ``judged`` whose first hit in ``runs`` was never judged against the query
    (a query with no hit counts as judged: there is no unknown to be right about).

    Example:
        >>> unjudged_at_1({"q1": ["x", "a"], "q2": ["b"], "q3": []}, {"q1": {"a"}, "q2": {"b"}, "q3": {"c"}})
        0.3333333333333333
    """
    if not judged:
        return float("nan")
    return sum(1 for q, known in judged.items() if runs.get(q) and runs[q][0] not in known) / len(judged)


def one_relevant_ceiling(pairs: Sequence[tuple[str, str, float]]) -> tuple[float, float]:
    """How far the paper's one-relevant P@1 can go on ``pairs`` (the q1 of every positive pair searched once):
    ``(P@1 of a perfect paraphrase ranker, best possible P@1)``. A perfect ranker puts every known paraphrase
    of q1 first, in an order that knows nothing of which pair is scored: it scores ``1 / paraphrases(q1)``
    per pair. No single ranking per q1 can score more than one of q1's pairs at rank 1.

    Example:
        >>> one_relevant_ceiling([("a", "b", 1), ("a", "c", 1), ("d", "e", 1), ("d", "f", 0)])
        (0.6666666666666666, 0.6666666666666666)
        >>> one_relevant_ceiling([("a", "b", 1), ("c", "a", 1)])
        (0.75, 1.0)
    """
    positives = [(q1, q2) for q1, q2, label in pairs if label >= 1 and q1 != q2]
    if not positives:
        return float("nan"), float("nan")
    qrels = paraphrase_qrels(pairs)
    perfect = sum(1 / len(qrels[q1]) for q1, _ in positives) / len(positives)
    return perfect, len({q1 for q1, _ in positives}) / len(positives)


@dataclass(frozen=True)
class RetrievalSet:
    """One data set as retrieval: the indexed corpus and both protocols' queries.

    Attributes:
        corpus: JSONL of every distinct question (``id``, ``text``).
        ids: question text → document id.
        pairs: ``(q1 id, q2 id)`` per positive pair: the paper protocol's queries.
        relevant: q1 id → ``{paraphrase id: 1}`` for each distinct q1 of ``pairs``: the every-paraphrase protocol.
        ceiling: :func:`one_relevant_ceiling` of the pairs read.
        judged: q1 id → ids of every question paired with it in the split, match or not (:func:`judged_texts`).
    """

    corpus: Path
    ids: dict[str, str]
    pairs: list[tuple[str, str]]
    relevant: dict[str, dict[str, int]]
    ceiling: tuple[float, float]
    judged: dict[str, set[str]] = field(default_factory=dict)

    @property
    def queries(self) -> list[str]:
        """The distinct q1 ids, each searched once (both protocols are scored from these searches)."""
        return list(self.relevant)


def build_corpus(name: str, settings: ReportSettings) -> RetrievalSet:
    """One data set as retrieval (quick: its first 600 pairs indexed, the first 40 positive pairs as queries)."""
    from jingpai.reranker.data import read_pairs

    pairs = read_pairs(settings.data_file(f"retrieval.{name}", DATASETS[name]), limit=600 if settings.quick else None)
    ids: dict[str, str] = {}
    for p in pairs:
        for text in (p.query, p.document):
            ids.setdefault(text, f"q{len(ids)}")
    queries = [(ids[p.query], ids[p.document]) for p in pairs if p.label == 1 and p.query != p.document]
    if settings.quick:
        queries = queries[:40]
    text_of = {i: t for t, i in ids.items()}
    triples = [(p.query, p.document, p.label) for p in pairs]
    # judged from every pair read (the whole split in full mode), not only the pairs used as queries
    qrels = paraphrase_qrels(triples, [text_of[q] for q, _ in queries])
    relevant = {ids[q]: {ids[d]: gain for d, gain in docs.items()} for q, docs in qrels.items()}
    judged = {ids[q]: {ids[d] for d in docs} for q, docs in judged_texts(triples, qrels).items()}
    path = settings.work_dir / "corpora" / f"{name}_questions.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for t, i in ids.items()), encoding="utf-8")
    return RetrievalSet(path, ids, queries, relevant, one_relevant_ceiling(triples), judged)


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


def all_paraphrases(runs: dict[str, list[str]], relevant: dict[str, dict[str, int]]) -> dict[str, float]:
    """P@k (all) and MRR (all) over ``{query id: ranked ids}`` with every known paraphrase relevant, via the
    evaluation module (ir-measures Success@k and RR)."""
    from jingpai.reranker.evaluate import evaluate_rankings

    m = evaluate_rankings(runs, relevant, cutoffs=CUTOFFS)
    return {**{f"P@{k} (all)": m[f"Success@{k}"] for k in CUTOFFS}, "MRR (all)": m["MRR"]}


def both_protocols(runs: dict[str, list[str]], rset: RetrievalSet) -> dict[str, Any]:
    """A row's metric cells from the searches of the distinct q1 (``{q1 id: ranked ids}``): the paper's P@k
    over the positive pairs, then P@k (all), MRR (all) and unjudged@1."""
    paper = {f"{q}>{t}": runs[q] for q, t in rset.pairs}
    return {"queries": len(paper), **precision(paper, {f"{q}>{t}": t for q, t in rset.pairs}), **all_paraphrases(runs, rset.relevant),
            UNJUDGED_COLUMN: unjudged_at_1(runs, rset.judged)}


#: quoted, not measured: published TEST-split accuracies of the pair-classification sets, each with its source
#: ("not confirmed here": the number could not be checked against its source in this environment, so none is given)
PUBLISHED_ACCURACY = (
    "Quoted, not measured — published accuracies on the official TEST splits (our rows are dev splits; BQ dev here is 5,000 of "
    "the official 10,000 dev pairs, the rest held back). LCQMC, its own paper (Liu et al., COLING 2018, baselines up to BiMPM): "
    "not confirmed here. BQ, its own paper (Chen et al., EMNLP 2018, baselines up to BiMPM): not confirmed here. "
    "BERT-base (Google's Chinese BERT, fine-tuned), as reported by Cui et al., \"Pre-Training with Whole Word Masking for Chinese "
    "BERT\" (2019; results table of github.com/ymcui/Chinese-BERT-wwm), best of 10 runs (mean): LCQMC test 86.9 % (86.4), dev "
    "89.4 % (88.4); BQ test 84.8 % (84.6), dev 86.0 % (85.5); same table, ERNIE: LCQMC test 87.2 %, BQ test 85.0 %. "
    "AFQMC: no published number quoted here."
)
#: the pair-classification sets: each data set's dev split as pairs (report splits: shown, never trained or selected on)
PAIR_SETS = ("lcqmc", "bq", "afqmc")


def model_selection(settings: ReportSettings) -> Table:
    """Pair classification on the dev splits (LCQMC, BQ, AFQMC): accuracy, per-class accuracy, F1 and AUC of
    each Chinese reranker candidate, beside published test accuracies (quoted in a note, not measured)."""
    from jingpai.reranker.data import read_pairs
    from jingpai.reranker.evaluate import evaluate_model

    device = torch_device(settings)
    sizes = ", ".join(f"{name.upper()} dev" for name in PAIR_SETS)
    table = Table(
        key="retrieval-models", section="retrieval", title=f"Pair classification on dev — Chinese reranker candidates ({settings.mode})",
        columns=["model", "data", "pairs", "accuracy", "acc. +", "acc. −", "F1", "AUC", "held-out AUC"],
        meta=base_meta(settings, "retrieval", data=f"{sizes}: every pair, label 1 = match" + (" — quick: first 300 pairs" if settings.quick else ""),
                       model="; ".join(f"{key}: {RECIPES[key].describe()}" for key in (QUICK_RERANKERS if settings.quick else
                                                                                      (*FULL_RERANKERS, "zh-hcan-use"))),
                       device=device),
        notes=["Report splits, shown for the record: no model was trained or selected on them (selection: 2 % of the training "
               "queries held out, AUC: the held-out AUC column). Accuracy thresholds the model's score at its head's default (0 for "
               "logits, 0.5 for probabilities); acc. + / acc. − are the accuracies on the match / no-match pairs — accuracy alone "
               "hides a collapsed model. F1 of the match class; AUC threshold-free.",
               PUBLISHED_ACCURACY],
    )
    # zh-hcan-use: the same HCAN with word vectors from the USE table, against zh-hcan's random ones
    keys = QUICK_RERANKERS if settings.quick else (*FULL_RERANKERS, "zh-hcan-use")
    keys = tuple(k for k in keys if settings.wants(f"retrieval.models.{k}"))
    sets = {name: read_pairs(settings.data_file(f"retrieval.{name}", DATASETS[name]), limit=300 if settings.quick else None)
            for name in PAIR_SETS if any(settings.wants(f"retrieval.models.{k}.{name}") for k in keys)}
    for key in keys:
        model, info = get_model(key, settings, seed=0)
        held_out = info["best_metric"] if info.get("metric") == "AUC" and info.get("best_metric") is not None else "—"
        for name, pairs in sets.items():
            row_id = f"retrieval.models.{key}.{name}"
            if not settings.wants(row_id):
                continue
            m = evaluate_model(model, pairs, batch_size=128)
            table.rows.append(Row(cells={"model": key, "data": f"{name.upper()} dev", "pairs": len(pairs), "accuracy": m["accuracy"],
                                         "acc. +": m["accuracy_pos"], "acc. −": m["accuracy_neg"], "F1": m["F1"], "AUC": m["AUC"],
                                         "held-out AUC": held_out},
                                  # one command per row: save_table merges rows by their command
                                  command=settings.command("retrieval", row_id)))
            note = class_balance_note(f"{key} on {name.upper()} dev", m)
            if note:
                table.notes.append(note)
    return table


def tuning_set(settings: ReportSettings) -> tuple[Path, Path, int, dict[str, dict[str, int]]]:
    """Fusion tuning data from *training* data only: ``(corpus jsonl, pairs tsv, positive queries, every-paraphrase
    relevance)`` — the last maps each distinct query text to ``{paraphrase document id: 1}`` (:func:`paraphrase_qrels`
    over the tuning pairs).

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
    qrels = paraphrase_qrels([(p.query, p.document, p.label) for p in pairs])
    relevant = {text: {ids[d]: gain for d, gain in docs.items()} for text, docs in qrels.items()}
    return corpus, labelled, sum(1 for p in pairs if p.label >= 1), relevant


def tune_weights(settings: ReportSettings, models: dict[str, Any], engine_url: str, dict_dir: Path) -> tuple[dict[str, dict], Table]:
    """Per model, the linear-fusion engine weight that does best on the tuning set (:func:`tuning_set`),
    measured with ``jingpai tune``'s code through the real gateway on one engine.

    The gateway is asked once per distinct query text (``jingpai tune``'s :func:`~jingpai.plugin.tune.fetch_runs`);
    its answers are scored with the paper protocol (one relevant item per positive pair, as ``jingpai tune``
    does, which chooses the weight) and with every known paraphrase relevant (the "(all)" columns, shown).
    """
    from jingpai.engine.client import connect
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.keyword_dict import Dictionary
    from jingpai.plugin.tune import LabelledQuery, QueryRuns, TuneSettings, fetch_runs, measure, never_worse, queries_from_pairs

    corpus, pairs_file, positives, relevant = tuning_set(settings)
    engine = connect(engine_url)
    alias = f"report-tuning-{settings.mode}"
    index_corpus(engine, [corpus], IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False,
                                                 quarantine_dir=settings.work_dir), dictionary=Dictionary.load(dict_dir))
    engine.refresh(alias)
    queries = queries_from_pairs(engine, alias, pairs_file, text_field="text")
    # one search per distinct query text: its positive pairs' queries differ only in which document is relevant
    distinct = {q.text: LabelledQuery(f"a{n}", q.text, relevant[q.text], exclude=q.exclude)
                for n, q in enumerate({q.text: q for q in queries}.values())}
    table = Table(
        key="retrieval-tuning", section="retrieval", title=f"Fusion weights tuned on training data ({settings.mode})",
        columns=["model", "fusion", "engine weight", "P@1", "P@3", "P@5", "P@10", "MRR", *ALL_COLUMNS],
        meta=base_meta(settings, "retrieval", data=f"held-out training queries (zh-use recipes' 2 % hold-out minus zh-hcan's training "
                                                   f"queries): {positives} positive pairs as queries over their {len(queries)} labelled queries' "
                                                   f"texts; {len(distinct)} distinct query texts with every known paraphrase relevant (all)",
                       model=", ".join(models), engine=f"{engine.kind} {engine.version}", device=torch_device(settings)),
        notes=["The weight is the engine's share in linear fusion (min-max normalised per query): fused = w·engine + (1−w)·model. "
               "Chosen by the sum of P@1/3/5/10 among the w < 1 (the model must weigh something) whose every P@k is ≥ augmented BM25 on "
               "this tuning set (`jingpai tune --never-worse`); ties go to the larger model weight. "
               "Same code as `jingpai tune` (jingpai/plugin/tune.py).",
               "P@k and MRR: one query per positive pair, its one relevant item the pair's document (what the weight is chosen on). "
               "P@k (all) and MRR (all): one query per distinct query text, every document paired with it with label 1 relevant "
               "(ir-measures Success@k and RR), from the same gateway answers."],
    )
    chosen: dict[str, dict] = {}
    try:
        for key, model in models.items():
            with rerank_service(model, name=key) as rurl, gateway(engine_url, reranker_url=rurl, dict_dirs=(dict_dir,), window=WINDOW) as gurl:
                tune = TuneSettings(engine_url=engine_url, index=alias, reranker_url=rurl, dict_dirs=(dict_dir,), windows=(WINDOW,),
                                    weights=TUNE_WEIGHTS, rrf_ks=(60,))
                fetched = {r.query.text: r for r in fetch_runs(gurl, tune, list(distinct.values()), text_field="text")}
            rows = measure(tune, [QueryRuns(q, fetched[q.text].engine, fetched[q.text].augmented, fetched[q.text].window) for q in queries])
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
                                             **{f"P@{k}": r.metrics[f"P@{k}"] * k for k in CUTOFFS}, "MRR": r.metrics["MRR"],
                                             **all_paraphrases(tuned_rankings(r, list(fetched.values()), tune.depth),
                                                               {q.qid: q.relevant for q in distinct.values()})},
                                      command=settings.command("retrieval", f"retrieval.tuning.{key}.{r.fusion}")))
    finally:
        engine.close()
    return chosen, table


def tuned_rankings(row: Any, runs: Sequence[Any], depth: int) -> dict[str, list[str]]:
    """``{query id: ranked ids}`` that a tuning row (:class:`~jingpai.plugin.tune.TuneRow`) stands for, rebuilt from
    the gateway's answers (:class:`~jingpai.plugin.tune.QueryRuns`) as :func:`jingpai.plugin.tune.measure` builds them."""
    from jingpai.plugin.tune import fused_ranking
    from jingpai.reranker.fusion import FusionSpec

    if row.window is None:  # a baseline: the engine's or the augmented order
        return {r.query.qid: (r.engine if row.fusion == "engine" else r.augmented)[:depth] for r in runs}
    spec = FusionSpec(mode="replace") if row.fusion == "replace" else \
        FusionSpec(mode=row.fusion, weight=row.weight, **({"rrf_k": row.rrf_k} if row.rrf_k is not None else {}))
    return {r.query.qid: fused_ranking(r, spec, row.window, depth) for r in runs}


def run(settings: ReportSettings) -> list[Table]:
    import httpx

    from jingpai.engine.client import connect
    from jingpai.indexer.mapping import engine_encodings
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.keyword_dict import Dictionary

    # each table is saved as soon as it is complete (and again with the others at the section's end): a long run that
    # is stopped keeps what it finished
    tables = [save_and_keep(model_selection(settings), settings)] if settings.wants("retrieval.models") else []
    if settings.only is not None and all(p.startswith("retrieval.models") for p in settings.only):
        return tables
    if not settings.engines:
        raise ReportError("retrieval needs engines: pass --opensearch/--elasticsearch or allow --start-engines")
    keys = tuple(k for k in (QUICK_RERANKERS if settings.quick else FULL_RERANKERS)
                 if settings.wants(f"retrieval.tuning.{k}")
                 or any(settings.wants(f"retrieval.{name}.{kind}.rerank.{k}") for name in DATASETS for kind in settings.engines))
    if not keys:
        raise ReportError(f"--only {' '.join(settings.only or ())} selects no retrieval row")
    loaded = {key: get_model(key, settings, seed=0) for key in keys}
    models = {key: model for key, (model, _) in loaded.items()}
    # the fusion weights are tuned once, on training queries with the zh dictionary, and used on every data set
    fusions, tuning = tune_weights(settings, models, next(iter(settings.engines.values())), zh_dictionary(settings))
    tables.append(save_and_keep(tuning, settings))
    for name in DATASETS:
        if not settings.wants(f"retrieval.{name}"):
            continue
        rset = build_corpus(name, settings)
        text_of = {i: t for t, i in rset.ids.items()}
        build_dictionary, sources = DICTIONARIES[name]
        dict_dir = build_dictionary(settings)
        dictionary = Dictionary.load(dict_dir)
        perfect, best = rset.ceiling
        for kind, url in settings.engines.items():
            prefix = f"retrieval.{name}.{kind}"
            if not settings.wants(prefix):
                continue
            engine = connect(url)
            alias = f"report-{name}-{settings.mode}"
            report = index_corpus(engine, [rset.corpus], IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False,
                                                                     quarantine_dir=settings.work_dir), dictionary=dictionary)
            engine.refresh(alias)
            notes = [PAPER, PROTOCOLS,
                     f"Ceiling of the one-relevant protocol on the pairs read: a perfect ranker (every known paraphrase of q1 first, in "
                     f"no particular order) scores P@1 {perfect:.3f}; no one ranking per q1 can pass {best:.3f} (q1 with several "
                     f"paraphrases: only one of its pairs can have its q2 first).",
                     f"index: {report.indexed} docs into {report.physical_index}; gateway window {WINDOW}; keyword weights "
                     f"encoded as {engine_encodings(engine)[0]} (rank_features needs the engine's mapper-extras module).",
                     "Rerank rows go through the real gateway and `jingpai serve`: `linear` rows with the engine weight tuned on "
                     "training data (table 'Fusion weights tuned on training data'); each `replace` row (model score alone) is the "
                     "same responses re-sorted by `_jingpai.model_score`, i.e. what `?jingpai_fusion=replace` returns."]
            if build_dictionary is not zh_dictionary and any(RECIPES[k].dictionary == "zh" for k in keys):
                notes.append(f"The index, the augmentation and the gateway of every row use this data set's dictionary ({sources}); "
                             + ", ".join(k for k in keys if RECIPES[k].dictionary == "zh")
                             + " keeps, inside the model, the keyword dictionary it was trained with (THUCNews + AFQMC train).")
            table = Table(
                key=f"retrieval-{name}-{kind}", section="retrieval",
                title=f"Question retrieval — {name.upper()} dev, {kind} ({settings.mode})",
                columns=["method", "queries", *[f"P@{k}" for k in CUTOFFS], *ALL_COLUMNS, UNJUDGED_COLUMN],
                meta=base_meta(settings, "retrieval",
                               data=settings.data_description(
                                   f"retrieval.{name}", f"{name.upper()} dev: {len(rset.ids)} distinct questions indexed, {len(rset.pairs)} "
                                   f"positive pairs as queries (P@k), {len(rset.queries)} distinct q1 with every known paraphrase relevant "
                                   "(all)" + (" (quick: first 600 pairs, 40 positive pairs)" if settings.quick else "")),
                               engine=f"{engine.kind} {engine.version}", device=torch_device(settings),
                               model="; ".join(f"{key}: {RECIPES[key].describe()}" for key in (QUICK_RERANKERS if settings.quick else FULL_RERANKERS))
                                     + f"; dictionary {dictionary.version} ({sources})"),
                notes=notes,
            )
            methods: list[tuple[str, str, str | None, dict]] = [
                (RAW_BM25, "direct", None, {}),
                (AUGMENTED_BM25, "augment", None, {}),
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
                                                           extra, rset.queries, text_of)
                    if failures:
                        table.notes.append(f"{label}: {len(failures)} queries were not reranked ({sorted(set(failures))})")
                    if replaced is not None:
                        table.rows.append(Row(cells={"method": f"+ rerank top {WINDOW}, {key}, replace (model score alone)",
                                                     **both_protocols(replaced, rset)},
                                              command=settings.command("retrieval", f"{row_id}.replace")))
                    table.rows.append(Row(cells={"method": label, **both_protocols(runs, rset)}, command=settings.command("retrieval", row_id)))
            engine.close()
            tables.append(save_and_keep(table, settings))
    return tables


def save_and_keep(table: Table, settings: ReportSettings) -> Table:
    """Save ``table`` into the results folder now and return it."""
    save_table(table, settings.results_dir)
    return table


def rerank_runs(client: Any, settings: ReportSettings, url: str, alias: str, method: str, model: Any, key: str | None, dict_dir: Path,
                extra: dict, queries: list[str], text_of: dict[str, str]):
    """``(runs, replace runs or None, failures)`` of one method: ``{query id: ranked ids}`` through the gateway,
    one search per query id (a distinct q1; its own document excluded)."""
    from contextlib import ExitStack

    failures: list[str] = []
    replaced: dict[str, list[str]] | None = {} if method == "rerank" else None
    with ExitStack() as stack:
        base = url
        if method != "direct":
            rurl = stack.enter_context(rerank_service(model, name=key)) if model is not None else None
            base = stack.enter_context(gateway(url, reranker_url=rurl, dict_dirs=(dict_dir,), window=WINDOW))
        params = {} if method == "direct" else {"jingpai": method, **extra}

        def one(qid: str) -> tuple[str, list[str], list[str] | None]:
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
            return qid, [h["_id"] for h in hits][:10], by_model

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(one, queries))
    runs = {k: ids for k, ids, _ in results}
    if replaced is not None:
        replaced = {k: by_model for k, _, by_model in results if by_model is not None}
    return runs, replaced, failures
