"""Evaluation of scored pairs and TREC runs: accuracy, MAP, MRR, P@k, nDCG@10 — the one module used by
``jingpai eval``, training's early stopping and the benchmark reports.

Ranking metrics come from ``ir-measures`` (trec_eval semantics) over pairs grouped by query id (or by
query text when the data has no ids). As in the TrecQA/WikiQA literature, queries without any relevant
candidate are skipped for the ranking metrics (their count is reported as ``skipped_queries``).

Example:
    >>> from jingpai.reranker.data import read_pairs
    >>> pairs = read_pairs("../shared/data/en/trecqa/raw-test")                   # doctest: +SKIP
    >>> metrics = evaluate_model(model, pairs)                                   # doctest: +SKIP
    >>> print(to_markdown(metrics))                                              # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jingpai.errors import UserError
from jingpai.reranker.data import LabeledPair

if TYPE_CHECKING:
    from jingpai.reranker.base import Reranker

logger = logging.getLogger(__name__)

DEFAULT_CUTOFFS: tuple[int, ...] = (1, 3, 5, 10)
#: metric names in report order (P@k follow the cutoffs used)
RANKING_METRICS = ("MAP", "MRR", "nDCG@10")


class EvaluationError(UserError, ValueError):
    """Inputs to an evaluation do not fit together (lengths, empty data, unreadable TREC files)."""


def _measures(cutoffs: Sequence[int], *, success: bool = False) -> dict[str, object]:
    from ir_measures import AP, RR, P, Success, nDCG

    named: dict[str, object] = {"MAP": AP, "MRR": RR, "nDCG@10": nDCG @ 10}
    for k in cutoffs:
        named[f"P@{k}"] = P @ k
    if success:
        for k in cutoffs:
            named[f"Success@{k}"] = Success @ k
    return named


def _ranking(qrels: list, run: list, cutoffs: Sequence[int], *, success: bool = False) -> dict[str, float]:
    import ir_measures

    named = _measures(cutoffs, success=success)
    agg = ir_measures.calc_aggregate(list(named.values()), qrels, run)
    return {name: float(agg.get(measure, 0.0)) for name, measure in named.items()}


def default_threshold(model: Reranker) -> float:
    """Decision threshold for accuracy: 0 for logit scores, 0.5 for probability-like scores."""
    return 0.0 if model.num_labels == 1 else 0.5


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve: the chance a random positive scores above a random negative (ties ½).

    NaN when one class is absent.

    >>> roc_auc(np.array([0.9, 0.2, 0.6, 0.1]), np.array([True, False, True, False]))
    1.0
    """
    from scipy.stats import rankdata

    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)  # average ranks: ties count ½
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def evaluate_levels(probabilities: np.ndarray, labels: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Metrics of a graded-level model (TITA's 3 levels): the most probable level against integer level labels.

    Returns:
        ``level_accuracy``, ``level_accuracy_<k>`` per level (NaN when level k is absent), ``predicted_<k>``
        (how often level k was predicted) and ``majority_baseline`` (the accuracy of always answering the most
        frequent level), so a model that never predicts a level cannot hide behind its accuracy.

    Raises:
        EvaluationError: shapes that do not fit, or a label that is not a level of the model.

    >>> m = evaluate_levels(np.array([[.8, .1, .1], [.1, .7, .2], [.2, .2, .6], [.5, .4, .1]]), [0, 1, 2, 1])
    >>> m["level_accuracy"], m["level_accuracy_1"], m["predicted_0"], m["majority_baseline"]
    (0.75, 0.5, 2.0, 0.5)
    """
    probs = np.asarray(probabilities, dtype=np.float64)
    gold = np.asarray(labels, dtype=np.float64)
    if probs.ndim != 2 or probs.shape[0] != len(gold) or len(gold) == 0:
        raise EvaluationError(f"expected one row of level probabilities per label, got {probs.shape} for {len(gold)} labels")
    levels = probs.shape[1]
    if not np.all((gold == np.round(gold)) & (gold >= 0) & (gold < levels)):
        raise EvaluationError(f"level labels must be integers 0..{levels - 1}, got {sorted(set(gold.tolist()))[:10]}")
    gold_i, predicted = gold.astype(int), probs.argmax(1)
    result = {"level_accuracy": float((predicted == gold_i).mean())}
    for k in range(levels):
        result[f"level_accuracy_{k}"] = float((predicted[gold_i == k] == k).mean()) if (gold_i == k).any() else float("nan")
    for k in range(levels):
        result[f"predicted_{k}"] = float((predicted == k).sum())
    result["majority_baseline"] = float(np.bincount(gold_i, minlength=levels).max() / len(gold_i))
    return result


def class_balance_warning(metrics: dict[str, float], *, floor: float = 0.10) -> str | None:
    """A warning when a class is (nearly) never predicted: accuracy alone hides a collapsed model."""
    for k in range(10):
        value = metrics.get(f"level_accuracy_{k}", float("nan"))
        if value == value and value < floor:
            return (f"accuracy on level {k} is {value:.3f} (< {floor:.2f}): the model (nearly) never predicts it; level accuracy "
                    f"{metrics.get('level_accuracy', float('nan')):.3f} against {metrics.get('majority_baseline', float('nan')):.3f} for "
                    "always the most frequent level")
    for name, label in (("accuracy_pos", "positive"), ("accuracy_neg", "negative")):
        value = metrics.get(name, float("nan"))
        if value == value and value < floor:  # NaN: class absent
            return (f"per-class accuracy of the {label} class is {value:.3f} (< {floor:.2f}): the model (nearly) never predicts it; "
                    f"accuracy {metrics.get('accuracy', float('nan')):.3f} is not a sign of quality")
    return None


def evaluate_scores(
    pairs: Sequence[LabeledPair],
    scores: Sequence[float] | np.ndarray,
    *,
    threshold: float = 0.5,
    relevant_min: float = 1.0,
    cutoffs: Sequence[int] = DEFAULT_CUTOFFS,
) -> dict[str, float]:
    """Metrics of ``scores`` (one per pair) against the pairs' labels.

    Args:
        pairs: labelled pairs; ``qid`` groups them into queries (query text when ``qid`` is None).
        scores: model scores, higher = more relevant.
        threshold: a pair is predicted positive when its score is above this (accuracy only).
        relevant_min: labels ``>= relevant_min`` count as positive/relevant (graded labels are passed to
            nDCG as integer gains).
        cutoffs: k for P@k.

    Returns:
        ``accuracy``, ``accuracy_pos``, ``accuracy_neg`` (per class), ``F1``, ``AUC``, ``MAP``, ``MRR``, ``nDCG@10``, ``P@k``…,
        ``pairs``, ``queries`` (with a relevant item) and ``skipped_queries`` (without).

    Raises:
        EvaluationError: no pairs, or the number of scores differs from the number of pairs.
    """
    values = np.asarray(scores, dtype=np.float64)
    if len(pairs) == 0:
        raise EvaluationError("nothing to evaluate: the data has no pairs")
    if values.shape != (len(pairs),):
        raise EvaluationError(f"got {values.shape[0] if values.ndim else 0} scores for {len(pairs)} pairs; expected one per pair")
    labels = np.array([p.label for p in pairs], dtype=np.float64)
    gold = labels >= relevant_min
    result = _pair_metrics(values, gold, threshold)
    ranking, queries, skipped = _query_metrics(pairs, values, labels, gold, cutoffs)
    result.update(ranking)
    result.update({"pairs": float(len(pairs)), "queries": float(queries), "skipped_queries": float(skipped)})
    return result


def _pair_metrics(values: np.ndarray, gold: np.ndarray, threshold: float) -> dict[str, float]:
    """Per-pair metrics: accuracy (overall and per class), F1 and AUC of thresholded ``values``."""
    predicted = values > threshold
    result: dict[str, float] = {"accuracy": float((predicted == gold).mean())}
    result["accuracy_pos"] = float(predicted[gold].mean()) if gold.any() else float("nan")
    result["accuracy_neg"] = float((~predicted[~gold]).mean()) if (~gold).any() else float("nan")
    true_pos = float((predicted & gold).sum())
    result["F1"] = 2 * true_pos / float(predicted.sum() + gold.sum()) if (predicted.sum() + gold.sum()) else float("nan")
    result["AUC"] = roc_auc(values, gold)
    return result


def _query_metrics(
    pairs: Sequence[LabeledPair], values: np.ndarray, labels: np.ndarray, gold: np.ndarray, cutoffs: Sequence[int]
) -> tuple[dict[str, float], int, int]:
    """Ranking metrics over the pairs grouped by query, the number of queries ranked and of those skipped."""
    from ir_measures import Qrel, ScoredDoc

    groups: dict[str, list[int]] = defaultdict(list)
    for i, pair in enumerate(pairs):
        groups[pair.qid if pair.qid is not None else pair.query].append(i)
    qrels, run = [], []
    skipped = 0
    for n, (key, idx) in enumerate(groups.items()):
        if not gold[idx].any():
            skipped += 1
            continue
        qid = f"q{n}"  # query text may hold spaces/tabs; ids never do
        seen: set[str] = set()
        for i in idx:
            doc = pairs[i].docid or str(i)
            if doc in seen:  # the same candidate listed twice: keep both, distinctly
                doc = f"{doc}#{i}"
            seen.add(doc)
            gain = max(1, int(round(labels[i]))) if gold[i] else 0
            qrels.append(Qrel(qid, doc, gain))
            run.append(ScoredDoc(qid, doc, float(values[i])))
    if skipped:
        logger.info("skipped %d of %d queries without a relevant candidate for ranking metrics", skipped, len(groups))
    if qrels:
        ranking = _ranking(qrels, run, cutoffs)
    else:
        logger.warning("no query has a relevant candidate: ranking metrics are NaN")
        ranking = {name: float("nan") for name in _measures(cutoffs)}
    return ranking, len(groups) - skipped, skipped


def evaluate_model(
    model: Reranker,
    pairs: Sequence[LabeledPair],
    *,
    batch_size: int = 32,
    threshold: float | None = None,
    relevant_min: float = 1.0,
    cutoffs: Sequence[int] = DEFAULT_CUTOFFS,
) -> dict[str, float]:
    """Score ``pairs`` with ``model`` and compute :func:`evaluate_scores` (threshold from the model's head); for a
    graded-level model (one with ``probabilities``, e.g. TITA) on integer level labels, :func:`evaluate_levels` too."""
    texts = [(p.query, p.document) for p in pairs]
    scores = model.predict(texts, batch_size=batch_size)
    metrics = evaluate_scores(
        pairs, scores, threshold=default_threshold(model) if threshold is None else threshold,
        relevant_min=relevant_min, cutoffs=cutoffs,
    )
    probabilities = getattr(model, "probabilities", None)
    labels = np.array([p.label for p in pairs], dtype=np.float64)
    if callable(probabilities) and np.all((labels == np.round(labels)) & (labels >= 0) & (labels < model.num_labels)):
        metrics.update(evaluate_levels(probabilities(texts, batch_size=batch_size), labels))
    return metrics


def evaluate_rankings(
    rankings: dict[str, Sequence[str]],
    relevant: dict[str, dict[str, int]],
    *,
    cutoffs: Sequence[int] = DEFAULT_CUTOFFS,
) -> dict[str, float]:
    """Ranking metrics of ranked document ids per query against graded relevance (trec_eval semantics).

    Args:
        rankings: query id → document ids, best first (a relevant document missing from it is a miss).
        relevant: query id → {document id: gain > 0}; queries without a relevant document are skipped.
        cutoffs: k for P@k and Success@k.

    Returns:
        ``MAP``, ``MRR``, ``nDCG@10``, ``P@k``…, ``Success@k``… (the share of queries with at least one
        relevant document in the top k: the paper-style "P@k" of question retrieval when a query may have
        several relevant documents), ``queries`` and ``skipped_queries``.

    Raises:
        EvaluationError: no query of ``rankings`` has a relevant document.

    Example:
        >>> m = evaluate_rankings({"q1": ["a", "b"], "q2": ["c", "d"]}, {"q1": {"b": 1}, "q2": {"c": 1}})
        >>> round(m["MRR"], 3), m["P@1"]
        (0.75, 0.5)
        >>> evaluate_rankings({"q1": [], "q2": ["c"]}, {"q1": {"b": 1}, "q2": {"c": 1}})["P@1"]
        0.5
        >>> m = evaluate_rankings({"q1": ["a", "b", "c"]}, {"q1": {"b": 1, "c": 1}})
        >>> round(m["P@3"], 3), m["Success@1"], m["Success@3"]
        (0.667, 0.0, 1.0)
    """
    from ir_measures import Qrel, ScoredDoc

    judged = {q for q, docs in relevant.items() if any(g > 0 for g in docs.values())}
    queries = [q for q in rankings if q in judged]
    if not queries:
        raise EvaluationError(f"none of the {len(rankings)} ranked queries has a relevant document")
    qrels = [Qrel(q, doc, int(gain)) for q in queries for doc, gain in relevant[q].items()]
    run = [ScoredDoc(q, doc, float(-rank)) for q in queries for rank, doc in enumerate(rankings[q])]
    # a query that retrieved nothing still counts (as all zeros): ir-measures averages over the run's queries
    run += [ScoredDoc(q, "\x00nothing-retrieved", 0.0) for q in queries if not rankings[q]]
    result = _ranking(qrels, run, cutoffs, success=True)
    result.update({"queries": float(len(queries)), "skipped_queries": float(len(rankings) - len(queries))})
    return result


def evaluate_run(qrels_path: str | Path, run_path: str | Path, *, cutoffs: Sequence[int] = DEFAULT_CUTOFFS) -> dict[str, float]:
    """Ranking metrics of a TREC run file against a TREC qrels file (the files search engineers have).

    Queries of the run without a relevant document in the qrels are skipped, as for pairs.

    Raises:
        EvaluationError: a file is missing or not in TREC format (the message names it).
    """
    import ir_measures

    loaded = {}
    for kind, path, reader in (("qrels", qrels_path, ir_measures.read_trec_qrels), ("run", run_path, ir_measures.read_trec_run)):
        p = Path(path)
        if not p.is_file():
            raise EvaluationError(f"TREC {kind} file {p} does not exist")
        try:
            loaded[kind] = list(reader(str(p)))
        except (ValueError, IndexError) as exc:
            raise EvaluationError(f"{p} is not a TREC {kind} file: {exc}") from exc
    relevant = {q.query_id for q in loaded["qrels"] if q.relevance > 0}
    run = [d for d in loaded["run"] if d.query_id in relevant]
    queries = {d.query_id for d in loaded["run"]}
    if not run:
        raise EvaluationError(f"no query of {run_path} has a relevant document in {qrels_path}")
    result = _ranking([q for q in loaded["qrels"] if q.query_id in relevant], run, cutoffs)
    result.update({"queries": float(len(queries & relevant)), "skipped_queries": float(len(queries - relevant))})
    return result


def to_markdown(metrics: dict[str, float], *, title: str | None = None) -> str:
    """A two-column Markdown table of ``metrics`` (counts as integers, rates to 4 decimals)."""
    lines = [f"### {title}", ""] if title else []
    lines += ["| metric | value |", "|---|---|"]
    for name, value in metrics.items():
        shown = f"{int(value)}" if name in ("pairs", "queries", "skipped_queries") or name.startswith("predicted_") else f"{value:.4f}"
        lines.append(f"| {name} | {shown} |")
    return "\n".join(lines) + "\n"


__all__ = [
    "EvaluationError", "class_balance_warning", "default_threshold", "evaluate_levels", "evaluate_model", "evaluate_rankings", "evaluate_run",
    "evaluate_scores", "roc_auc", "to_markdown",
]
