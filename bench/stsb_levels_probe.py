"""The frozen-backbone baseline of the STS-B 3-level rows (docs/results/history.md §6): a logistic regression on USE-m3
sentence-pair features, the regularisation chosen on dev, reported on test.

    python bench/stsb_levels_probe.py

Features of a pair (u, v = USE-multilingual v3 unit sentence vectors, frozen): ``[u ⊙ v; |u − v|; cos]``. Levels are
``jingpai.reranker.data``'s ``levels3`` buckets (0-1 / 2-3 / 4-5). It says how much of a trained model's 3-level
accuracy the pretrained sentence vectors already give: what ``use-tita`` adds over its backbone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DATA_DIR, machine  # noqa: E402


def main() -> None:
    from sklearn.linear_model import LogisticRegression

    from jingpai.reranker.data import read_pairs
    from jingpai.reranker.evaluate import evaluate_levels
    from jingpai.reranker.use_backbone import UseSentenceEncoder

    print(f"# STS-B zh 3 levels: logistic regression on frozen USE-m3 pair features — {machine()}")
    encoder = UseSentenceEncoder()
    data = {}
    for split in ("train", "dev", "test"):
        pairs = read_pairs(DATA_DIR / "zh/stsb" / f"{split}.tsv", format="stsb", label_mode="levels3")
        u, v = encoder.encode([p.query for p in pairs]), encoder.encode([p.document for p in pairs])
        data[split] = (np.hstack([u * v, np.abs(u - v), (u * v).sum(1, keepdims=True)]), np.array([p.label for p in pairs]))
    fits = {c: LogisticRegression(C=c, max_iter=2000).fit(*data["train"]) for c in (0.1, 1.0, 10.0)}
    dev = {c: evaluate_levels(m.predict_proba(data["dev"][0]), data["dev"][1])["level_accuracy"] for c, m in fits.items()}
    best = max(dev, key=dev.get)
    print("dev level accuracy by C: " + ", ".join(f"{c:g}: {a:.3f}" for c, a in dev.items()) + f" → C = {best:g}")
    test = evaluate_levels(fits[best].predict_proba(data["test"][0]), data["test"][1])
    print("test: " + ", ".join(f"{k} {v:.3f}" if not k.startswith("predicted") else f"{k} {int(v)}" for k, v in test.items()))


if __name__ == "__main__":
    main()
