"""Segmentation speed: rjieba (jingpai's Segmenter) vs jieba on the same text with the same dictionary,
HMM off, tokens checked identical, in one run.

    python bench/segmentation.py [--docs 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jieba  # noqa: E402

from bench.common import DATA_DIR, machine  # noqa: E402
from bench.dict_fixture import thucnews_dictionary  # noqa: E402
from jingpai.keyword_dict import Segmenter  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1000)
    args = ap.parse_args()
    docs = [line.split("\t", 1)[1] for line in (DATA_DIR / "zh/cnews_sample/docs.tsv").read_text(encoding="utf-8").splitlines()[: args.docs]]
    chars = sum(map(len, docs))
    with tempfile.TemporaryDirectory() as tmp:
        d = thucnews_dictionary(Path(tmp) / "d")
        tok = jieba.Tokenizer()
        tok.load_userdict(str(Path(tmp) / "d" / "userdict.txt"))
        tok.initialize()
        seg = Segmenter(d)
        t0 = time.perf_counter()
        ours = [seg.cut(doc) for doc in docs]
        t_r = time.perf_counter() - t0
        t0 = time.perf_counter()
        theirs = [[t for t in tok.lcut(doc, HMM=False) if t.strip()] for doc in docs]
        t_j = time.perf_counter() - t0
        plain = jieba.Tokenizer()
        same_plain = sum(Segmenter().cut(doc) == [t for t in plain.lcut(doc, HMM=False) if t.strip()] for doc in docs)
    same = sum(a == b for a, b in zip(ours, theirs))
    print(f"machine: {machine()}; {len(docs)} docs, {chars / 1e6:.2f} M chars, dictionary {d.version} ({len(d)} words)")
    print(f"jieba  (HMM off): {t_j:7.2f} s  {chars / t_j / 1e6:6.2f} M chars/s")
    print(f"rjieba (HMM off): {t_r:7.2f} s  {chars / t_r / 1e6:6.2f} M chars/s")
    print(f"speed-up rjieba/jieba: {t_j / t_r:.1f}x")
    print(f"identical token lists: {same_plain}/{len(docs)} with the default dictionary, {same}/{len(docs)} with the user "
          "dictionary (jieba adds user-word frequencies to its total, which shifts some close calls)")


if __name__ == "__main__":
    main()
