"""The results page's plots (matplotlib, headless), drawn from the saved records only (issue 57).

- ``gain.png``: per data set of the headline, the gain of the best rerank (or hybrid + rerank) over BM25 and of the
  keyword dictionary alone, in the data set's headline metric;
- ``tradeoff.png``: per timed model, its best quality gain over BM25 against its rerank latency (20 documents,
  one client, the 2-core CPU);
- ``throughput.png``: rerank throughput against the pairs in flight (documents per request × concurrent clients),
  CPU and GPU.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bench.report_records import current, value

logger = logging.getLogger(__name__)

PLOTS = ("gain", "tradeoff", "throughput")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def gain_points(records: list[dict[str, Any]]) -> list[tuple[str, float, float | None]]:
    """``(label, rerank gain, dictionary gain or None)`` per headline data set with a gain."""
    from bench.report_page import headline

    points = []
    for row in headline(records):
        if row["gain"] is None:
            continue
        dictionary = row["augmented"]["value"] - row["bm25"]["value"] if row["augmented"] and row["bm25"] else None
        points.append((f"{row['name']} ({row['metric']})", row["gain"], dictionary))
    return points


def tradeoff_points(records: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """``(label, p50 ms, best gain)`` per latency record whose models have a rerank record with a gain over BM25."""
    from bench.report_page import DATASETS

    now = current(records)
    by_id = {r["id"]: r for r in records}
    metric = {d.key: d.metric for d in DATASETS}
    points = []
    for lat in (r for r in now if r["role"] == "latency" and "p50 ms" in r["metrics"]):
        best: tuple[float, str] | None = None
        for r in now:
            m = metric.get(r["dataset"])
            if r["role"] not in ("rerank", "hybrid+rerank") or r.get("model") not in lat.get("models", []) or m not in r["metrics"]:
                continue
            base = by_id.get(r["over"]) if "over" in r else next((b for b in now if b["dataset"] == r["dataset"] and b["role"] == "bm25"
                                                                   and m in b["metrics"]), None)
            if base is None or m not in base["metrics"]:
                continue
            gain = value(r["metrics"][m]) - value(base["metrics"][m])
            if best is None or gain > best[0]:
                best = (gain, f"{r['dataset']} {m}")
        if best is not None:
            points.append((f"{lat['system'].split(' (')[0].split(',')[0]} — {best[1]}", value(lat["metrics"]["p50 ms"]), best[0]))
    return points


def throughput_points(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """``{series: [(pairs in flight, pairs/s), …]}`` from the throughput records, one series per device and model."""
    series: dict[str, list[tuple[int, float]]] = {}
    for r in current(records):
        params = r.get("params", {})
        if r["role"] != "throughput" or "pairs/s" not in r["metrics"] or not {"docs", "clients"} <= set(params):
            continue
        name = f"{r.get('device', '?')}: {r['system'].split(',')[0]}, {r['hardware'].split(' (')[0]}"
        series.setdefault(name, []).append((int(params["docs"]) * int(params["clients"]), value(r["metrics"]["pairs/s"])))
    return {k: sorted(v) for k, v in series.items()}


def write_plots(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Draw :data:`PLOTS` into ``out_dir``; returns the files written (a plot with no points is skipped, logged)."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    gains = gain_points(records)
    if gains:
        fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(gains) + 1.4))
        y = list(range(len(gains)))
        ax.barh([i + 0.2 for i in y], [g for _, g, _ in gains], 0.4, label="best rerank / hybrid + rerank")
        ax.barh([i - 0.2 for i in y], [d or 0.0 for _, _, d in gains], 0.4, label="keyword dictionary alone")
        ax.set_yticks(y, [label for label, _, _ in gains], fontsize=8)
        ax.invert_yaxis()
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_xlabel("gain over BM25 (each data set's headline metric; STS-B: over the majority class, Microblog: over the QL run)", fontsize=7)
        ax.legend(fontsize=7, loc="center right")
        written.append(_save(fig, plt, out_dir / "gain.png"))
    else:
        logger.warning("gain.png skipped: no headline row has a gain")

    trade = tradeoff_points(records)
    if trade:
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        for label, ms, gain in trade:
            ax.scatter([ms], [gain])
            ax.annotate(label, (ms, gain), fontsize=7, xytext=(4, 4), textcoords="offset points")
        ax.set_xscale("log")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xlabel("rerank p50, ms (20 documents, one client, 2-core CPU; log scale)", fontsize=8)
        ax.set_ylabel("best gain over BM25 (its data set's metric)", fontsize=8)
        written.append(_save(fig, plt, out_dir / "tradeoff.png"))
    else:
        logger.warning("tradeoff.png skipped: no latency record names a model with a measured gain")

    series = throughput_points(records)
    if series:
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        for name, pts in series.items():
            ax.plot([p for p, _ in pts], [t for _, t in pts], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("pairs in flight (documents per request × concurrent clients)", fontsize=8)
        ax.set_ylabel("pairs/s over HTTP", fontsize=8)
        ax.legend(fontsize=7)
        written.append(_save(fig, plt, out_dir / "throughput.png"))
    else:
        logger.warning("throughput.png skipped: no throughput record with docs and clients")
    return written


def _save(fig, plt, path: Path) -> Path:
    fig.tight_layout()
    # no timestamp in the PNG's metadata: a re-render of unchanged records gives the same file
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path
