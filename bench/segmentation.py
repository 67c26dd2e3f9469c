"""Segmentation speed: the Segmenter's rjieba and jieba backends on the same text with the same learned
dictionary, HMM off and on, with the token agreement rate, in one run.

    python bench/segmentation.py [--docs 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DATA_DIR, machine  # noqa: E402
from bench.dict_fixture import thucnews_dictionary  # noqa: E402
from jingpai.keyword_dict import Segmenter  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1000)
    args = ap.parse_args()
    docs = [line.split("\t", 1)[1] for line in (DATA_DIR / "zh/cnews_sample/docs.tsv").read_text(encoding="utf-8").splitlines()[: args.docs]]
    chars = sum(map(len, docs))
    mb = sum(len(doc.encode("utf-8")) for doc in docs) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        d = thucnews_dictionary(Path(tmp) / "d")
    print(f"machine: {machine()}; {len(docs)} docs, {chars / 1e6:.2f} M chars ({mb:.1f} MB), dictionary {d.version} ({len(d)} words)")
    results = {}
    for backend in ("jieba", "rjieba"):
        for hmm in (False, True):
            seg = Segmenter(d, backend=backend, hmm=hmm)
            t0 = time.perf_counter()
            tokens = [seg.cut(doc) for doc in docs]
            results[backend, hmm] = (time.perf_counter() - t0, tokens)
    for (backend, hmm), (secs, _) in results.items():
        print(f"{backend:<7} HMM {'on ' if hmm else 'off'}: {secs:7.2f} s  {mb / secs:6.2f} MB/s")
    for hmm in (False, True):
        speed = results["jieba", hmm][0] / results["rjieba", hmm][0]
        same = sum(a == b for a, b in zip(results["jieba", hmm][1], results["rjieba", hmm][1]))
        print(f"HMM {'on ' if hmm else 'off'}: rjieba/jieba speed-up {speed:.1f}x, identical token lists {same}/{len(docs)}")


if __name__ == "__main__":
    main()
