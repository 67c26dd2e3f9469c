"""What a question-retrieval split's labels can score: BM25's first hits against every pair the split judged.

    python bench/label_coverage.py [--split zh/bq/dev.tsv] [--sample 40] [--seed 0]

For each distinct q1 of a positive pair (the report's "(all)" protocol), BM25 (bm25s, Lucene's formula, jingpai's
segmenter without a dictionary) ranks every other distinct question of the split, and its first hit is counted as
a known paraphrase of q1, a known non-match, or **unjudged** (never paired with q1 in the split). Then a seeded
sample of the unjudged first hits is printed, query and hit side by side, for a person to read: how many of them are
paraphrases says how far the one-relevant P@k (and P@k (all)) of that split can measure a better ranker.

A diagnosis of the labels, not an evaluation: it reads a report split, so nothing is trained, selected or tuned on
what it prints (docs/results/history.md §1.0c used it on BQ dev; §1.1 read LCQMC dev the same way).
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DATA_DIR, machine  # noqa: E402


def read_pairs(path: Path) -> list[tuple[str, str, int]]:
    """``(q1, q2, label)`` of a pairs file, read by jingpai's own reader (a malformed line names its file:line)."""
    from jingpai.reranker.data import read_pairs as read_labelled

    return [(p.query, p.document, int(p.label)) for p in read_labelled(path, label_mode="binary")]


def first_hits(pairs: list[tuple[str, str, int]]) -> dict[str, str]:
    """BM25's first hit (other than itself) for each distinct q1 of a positive pair, over every distinct text."""
    import bm25s

    from jingpai.keyword_dict import Segmenter

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    texts = sorted({t for q1, q2, _ in pairs for t in (q1, q2)})
    segmenter = Segmenter()
    retriever = bm25s.BM25(k1=1.2, b=0.75)
    retriever.index([segmenter.cut(t) for t in texts], show_progress=False)
    queries = list(dict.fromkeys(q1 for q1, _, label in pairs if label == 1))
    ids, _ = retriever.retrieve([segmenter.cut(q) for q in queries], k=2, show_progress=False)
    return {q: next(texts[i] for i in row if texts[i] != q) for q, row in zip(queries, ids, strict=True)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="zh/bq/dev.tsv", help="pairs file under the data folder")
    ap.add_argument("--sample", type=int, default=40, help="unjudged first hits to print")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from bench.eval_retrieval import judged_texts, paraphrase_qrels

    pairs = read_pairs(DATA_DIR / args.split)
    hits = first_hits(pairs)
    known = paraphrase_qrels(pairs, hits)
    judged = judged_texts(pairs, hits)
    kinds = {q: "paraphrase" if hit in known[q] else "non-match" if hit in judged[q] else "unjudged" for q, hit in hits.items()}
    n = len(kinds)
    print(f"machine: {machine()}; {args.split}: {len(pairs)} pairs, {n} distinct q1 of a positive pair")
    for kind in ("paraphrase", "non-match", "unjudged"):
        print(f"BM25 first hit is a known {kind:<10}: {sum(k == kind for k in kinds.values()) / n:.3f}")
    unjudged = [q for q, k in kinds.items() if k == "unjudged"]
    print(f"\n{min(args.sample, len(unjudged))} unjudged first hits (seed {args.seed}), query || first hit:")
    for i, q in enumerate(random.Random(args.seed).sample(unjudged, min(args.sample, len(unjudged))), 1):
        print(f"{i:>3}. {q} || {hits[q]}")


if __name__ == "__main__":
    main()
