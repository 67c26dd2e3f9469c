"""Section 3's lexical rows: BM25 over each question's candidate answers, and a model's scores fused with it
the way the gateway fuses the engine's BM25 with the reranker's (:mod:`jingpai.reranker.fusion`, ``linear``).

Answer selection has no first stage: every question comes with its candidates. The gateway's pipeline on
such data would index the candidates, search the question with BM25 and rerank that window, so BM25 here
is the engine's function over an index of the split's candidate answers (bm25s, Lucene's formula at the
engines' defaults ``k1 = 1.2``, ``b = 0.75``; lower-cased, tokens without a letter or digit dropped, as a
standard analyser drops punctuation). The engine's weight of the fusion is chosen on the recipe's
selection split (TrecQA raw-dev), never on the reported one.

Example:
    >>> from jingpai.reranker.data import LabeledPair
    >>> pairs = [LabeledPair("who founded ibm ?", d, 0.0, qid="1", docid=str(i))
    ...          for i, d in enumerate(["ibm was founded by flint .", "the weather is fine .", "who knows ?"])]
    >>> [round(float(s), 3) for s in bm25_scores(pairs)]
    [0.776, 0.0, 0.548]
    >>> fuse_by_query(pairs, [2.0, 0.0, 1.0], [0.1, 0.5, 0.9], weight=0.5).round(3).tolist()
    [0.5, 0.25, 0.75]
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench.eval_common import TUNE_WEIGHTS

if TYPE_CHECKING:
    import numpy as np

    from jingpai.reranker.data import LabeledPair

K1, B = 1.2, 0.75


def _tokens(text: str) -> list[str]:
    return [t for t in text.lower().split() if any(c.isalnum() for c in t)]


def bm25_scores(pairs: Sequence[LabeledPair], *, k1: float = K1, b: float = B) -> np.ndarray:
    """BM25 of each pair's answer for its question, over an index of the distinct answers of ``pairs``."""
    import bm25s
    import numpy as np

    # bm25s sets its own logger to DEBUG, which would print a line per index into the report's log
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    docs = sorted({p.document for p in pairs})
    position = {d: i for i, d in enumerate(docs)}
    index = bm25s.BM25(k1=k1, b=b, method="lucene")
    index.index([_tokens(d) for d in docs], show_progress=False)
    by_query: dict[str, np.ndarray] = {}
    out = np.empty(len(pairs), dtype=np.float64)
    for i, pair in enumerate(pairs):
        if pair.query not in by_query:
            by_query[pair.query] = index.get_scores(_tokens(pair.query))
        out[i] = by_query[pair.query][position[pair.document]]
    return out


def fuse_by_query(pairs: Sequence[LabeledPair], engine: Sequence[float], model: Sequence[float], *, weight: float) -> np.ndarray:
    """Per question (``qid``, else the question's text), ``linear`` fusion of ``engine`` and ``model`` scores at the
    engine's ``weight``: each question's candidates are one window, min-max normalised as in the gateway."""
    import numpy as np

    from jingpai.reranker.fusion import FusionSpec

    spec = FusionSpec(mode="linear", weight=weight)
    engine_a, model_a = np.asarray(engine, dtype=np.float64), np.asarray(model, dtype=np.float64)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, pair in enumerate(pairs):
        groups[pair.qid if pair.qid is not None else pair.query].append(i)
    out = np.empty(len(pairs), dtype=np.float64)
    for idx in groups.values():
        out[idx] = spec.fuse(engine_a[idx], model_a[idx])
    return out


def weight_curve(pairs: Sequence[LabeledPair], engine: Sequence[float], model: Sequence[float]) -> dict[float, float]:
    """MAP of the fusion at every weight of :data:`TUNE_WEIGHTS` on ``pairs`` (the selection split)."""
    from jingpai.reranker.evaluate import evaluate_scores

    return {w: evaluate_scores(pairs, fuse_by_query(pairs, engine, model, weight=w))["MAP"] for w in TUNE_WEIGHTS}
