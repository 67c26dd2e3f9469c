"""Dictionary build speed: MB/s of raw text and growth with corpus size (1×, 2×, 4×), in one run.

    python bench/dict_build.py [--workers N]
    python bench/dict_build.py --spark [--master local[2]] [--chunk-chars N]

Corpus: ../shared/data/zh/cnews_sample (10 domains by label, 2.9 MB); 2× and 4× repeat every document
with a distinct suffix, so counts grow like a larger corpus of the same kind. Goal (issue 3):
>= 3 MB/s on 2 cores and near-linear growth (4× data <= 4.4× time). ``cpu s`` adds up the CPU time of
this process and the build's worker processes (less disturbed by other load than wall time).

``--spark`` (issue 19) times the local build and ``dict build --spark``'s build on the same labelled
file (1× and 4×, each read from the file and built: reading counts on both sides), in this run. The
Spark session's start (JVM) and a first build that starts the Python workers are fixed costs, printed
apart; the rows are warm builds. Goal: Spark on ``local[2]`` within 3× the local time at 1×, closer at
4×, and 4× input ≤ 4.4× the 1× time. The peak RSS of the Spark JVM (driver and executor in one on a
local master) and of the largest Python worker close the run. ``--chunk-chars`` below the domains' size
makes both sides take their path for domains larger than one chunk (local: streaming; Spark: n-gram
tables sharded by key).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DATA_DIR, cpu_flags, machine  # noqa: E402
from jingpai.keyword_dict import BuildSettings, build_dictionary  # noqa: E402
from jingpai.keyword_dict.corpus import read_labelled  # noqa: E402


def _scaled(base: dict[str, list[str]], factor: int) -> dict[str, list[str]]:
    return {name: [f"{doc}{'' if r == 0 else f' 第{r}版'}" for r in range(factor) for doc in docs] for name, docs in base.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--spark", action="store_true", help="compare the local build with the Spark build")
    ap.add_argument("--master", default="local[2]", help="Spark master for --spark")
    ap.add_argument("--chunk-chars", type=int, default=None, help="DiscoverySettings.chunk_chars for --spark (default: its default)")
    args = ap.parse_args()
    base = read_labelled(DATA_DIR / "zh" / "cnews_sample" / "docs.tsv")
    if args.spark:
        from bench.dict_build_spark import compare

        compare(base, _scaled, workers=args.workers, master=args.master, chunk_chars=args.chunk_chars)
        return
    print(f"machine: {machine()}; CPU flags: {cpu_flags()}; workers {args.workers}")
    print(f"{'corpus':<8}{'MB':>8}{'seconds':>10}{'MB/s':>8}{'time ratio':>12}{'cpu s':>8}{'words':>8}")
    first = None
    for factor in (1, 2, 4):
        domains = _scaled(base, factor)
        mb = sum(len(d.encode("utf-8")) for docs in domains.values() for d in docs) / 1e6
        cpu0 = _cpu()
        t0 = time.perf_counter()
        d = build_dictionary(domains, settings=BuildSettings(workers=args.workers))
        secs = time.perf_counter() - t0
        cpu = _cpu() - cpu0
        first = first or secs
        print(f"{factor}x{'':<6}{mb:>8.1f}{secs:>10.2f}{mb / secs:>8.2f}{secs / first:>11.2f}x{cpu:>8.2f}{len(d):>8}")


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the build's worker processes): the
    measure that other load on a shared machine disturbs least."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
