"""``bench/dict_build.py --spark``: the local build and the Spark build on the same file, 1× and 4×.

Both sides read the same labelled TSV (``domain<TAB>text``) and build with the same settings; the
dictionaries are checked equal, so the times compare the same work.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import cpu_flags, machine
from jingpai.keyword_dict import BuildSettings, DiscoverySettings, build_dictionary
from jingpai.keyword_dict.corpus import read_labelled


def _write(domains: dict[str, list[str]], path: Path) -> float:
    """Write ``domain<TAB>text`` rows; the file's size in MB."""
    path.write_text("".join(f"{name}\t{doc}\n" for name, docs in domains.items() for doc in docs), encoding="utf-8")
    return path.stat().st_size / 1e6


def _peak_rss_mb(root: int) -> dict[str, float]:
    """Peak RSS (VmHWM) in MB of ``root``'s Java descendant and of its largest Python descendant."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    peak = {"spark JVM": 0.0, "python worker": 0.0}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            exe = Path(f"/proc/{pid}/exe").resolve().name
        except OSError:
            continue
        hwm = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM")), 0.0)
        kind = "spark JVM" if exe == "java" else "python worker" if exe.startswith("python") else None
        if kind:
            peak[kind] = max(peak[kind], hwm)
    return peak


def compare(base: dict[str, list[str]], scaled: Callable, *, workers: int, master: str, chunk_chars: int | None = None) -> None:
    """Print the local and Spark build times on the same file, 1× and 4×, and the Spark processes' peak RSS."""
    from jingpai.keyword_dict.spark_build import build_dictionary_spark
    from jingpai.keyword_dict.spark_corpus import Source
    from jingpai.spark import spark_session

    discovery = DiscoverySettings() if chunk_chars is None else DiscoverySettings(chunk_chars=chunk_chars)
    settings = BuildSettings(workers=workers, discovery=discovery)
    print(f"machine: {machine()}; CPU flags: {cpu_flags()}; local workers {workers}; spark master {master}; "
          f"chunk_chars {discovery.chunk_chars:,}")
    t0 = time.perf_counter()
    session = spark_session(app_name="bench dict build", master=master, conf={"spark.ui.showConsoleProgress": "false"})
    print(f"spark session start (JVM): {time.perf_counter() - t0:.2f} s (fixed cost, not in the rows)")
    with tempfile.TemporaryDirectory() as tmp:
        files = {factor: Path(tmp) / f"corpus-{factor}x.tsv" for factor in (1, 4)}
        mbs = {factor: _write(scaled(base, factor), path) for factor, path in files.items()}
        t0 = time.perf_counter()
        build_dictionary_spark(session, [Source("labelled", str(files[1]))], settings=settings)
        print(f"first spark build at 1x (starts the Python workers, loads the segmenter): {time.perf_counter() - t0:.2f} s (fixed cost)")
        print(f"{'corpus':<8}{'MB':>7}{'local s':>9}{'MB/s':>7}{'spark s':>9}{'MB/s':>7}{'spark/local':>13}{'words':>8}")
        times: dict[str, dict[int, float]] = {"local": {}, "spark": {}}
        for factor, path in files.items():
            t0 = time.perf_counter()
            local = build_dictionary(read_labelled(path), settings=settings)
            times["local"][factor] = time.perf_counter() - t0
            t0 = time.perf_counter()
            spark = build_dictionary_spark(session, [Source("labelled", str(path))], settings=settings)
            times["spark"][factor] = time.perf_counter() - t0
            assert spark.to_tsv() == local.to_tsv(), f"{factor}x: the Spark dictionary differs from the local one"
            lt, st = times["local"][factor], times["spark"][factor]
            print(f"{factor}x{'':<6}{mbs[factor]:>7.1f}{lt:>9.2f}{mbs[factor] / lt:>7.2f}{st:>9.2f}{mbs[factor] / st:>7.2f}"
                  f"{st / lt:>12.2f}x{len(local):>8}")
        for side, t in times.items():
            print(f"{side}: 4x input takes {t[4] / t[1]:.2f}x the 1x time")
    peak = _peak_rss_mb(os.getpid())
    print("peak RSS: " + ", ".join(f"{k} {v:.0f} MB" for k, v in peak.items()))
    session.stop()
