"""What ``jingpai tune`` writes: the best settings as a ``jingpai gateway --config`` file, and a plot of
the chosen metric against the engine weight (the measuring itself is :mod:`jingpai.plugin.tune`)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jingpai.plugin.tune import METRICS, TuneRow, TuneSettings


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string


def settings_file(settings: TuneSettings, row: TuneRow, *, queries: int, hybrid: TuneRow | None = None,
                  pipeline: TuneRow | None = None) -> str:
    """A ``jingpai gateway --config`` file: the base settings with the best window and fusion.

    With ``pipeline`` (the best hybrid + rerank row, :func:`~jingpai.plugin.tune_hybrid.best_pipeline`): when it is
    at least ``row`` (the best rerank of BM25's window) on the metric, its hybrid fusion, BM25 weight and rerank fusion
    are written with ``hybrid = true`` — the rerank fusion is the one chosen on hybrid windows, which is what an index
    with vectors reranks; otherwise ``row``'s with ``hybrid = false`` (on these queries kNN does not pay for itself).
    ``hybrid`` (the best first stage alone) is written only without ``pipeline``.
    """
    from jingpai.plugin.tune_hybrid import settings_lines

    metric = settings.metric
    use_pipeline = pipeline is not None and round(pipeline.metrics[metric], 12) >= round(row.metrics[metric], 12)
    chosen = pipeline if use_pipeline and pipeline is not None else row
    values: dict[str, Any] = {k: v for k, v in settings.base.items() if k != "indices"}
    values.update({"engine_url": settings.engine_url, "reranker_url": settings.reranker_url})
    if settings.dict_dirs:
        values["dict_dirs"] = [str(d) for d in settings.dict_dirs]
    values.update({"window": chosen.window, "fusion": chosen.fusion})
    if chosen.weight is not None:
        values["fusion_weight"] = chosen.weight
    if chosen.rrf_k is not None:
        values["rrf_k"] = chosen.rrf_k
    if chosen.window is not None and chosen.window > int(values.get("max_window", 500)):
        values["max_window"] = chosen.window
    if settings.embed_url:
        values["embed_url"] = settings.embed_url

    def scores(r: TuneRow) -> str:
        return ", ".join(f"{m} {r.metrics[m]:.4f}" for m in METRICS)

    lines = [
        f"# written by `jingpai tune` on index {settings.index}: best {metric} over {queries} queries",
        f"# {chosen.label()}: {scores(chosen)}",
    ]
    if pipeline is not None:
        values["hybrid"] = use_pipeline
        if use_pipeline:
            values.update(settings_lines(pipeline))
            lines.append(f"# BM25 + rerank's best, {row.label()}: {scores(row)}")
        else:
            lines.append(f"# hybrid off: hybrid + rerank's best {metric} is below BM25 + rerank's; {pipeline.label()}: {scores(pipeline)}")
    elif hybrid is not None:
        values.update(settings_lines(hybrid))
        lines.append(f"# first stage {hybrid.label()}: {scores(hybrid)}")
    lines.append("[gateway]")
    lines += [f"{key} = {_toml_value(value)}" for key, value in values.items() if value is not None]
    for name, overrides in (settings.base.get("indices") or {}).items():  # kept: they still win for their indices
        lines += ["", f"[gateway.indices.{_toml_value(name)}]"] + [f"{k} = {_toml_value(v)}" for k, v in overrides.items()]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[TuneRow], path: str | Path, *, metric: str) -> Path:
    """``metric`` against the engine weight, one line per window (and k for RRF), baselines dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    baselines = {r.fusion: r.metrics[metric] for r in rows if r.window is None}
    largest = max(r.window for r in rows if r.window is not None)
    replace = next((r.metrics[metric] for r in rows if r.fusion == "replace" and r.window == largest and r.first_stage is None), None)
    for ax, mode in zip(axes, ("linear", "rrf")):
        lines: dict[tuple[int, int | None], list[tuple[float, float]]] = defaultdict(list)
        for r in rows:
            if r.fusion == mode and r.window is not None and r.weight is not None and r.first_stage is None:
                lines[(r.window, r.rrf_k)].append((r.weight, r.metrics[metric]))
        for (window, k), points in sorted(lines.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            points.sort()
            label = f"window {window}" + (f", k {k}" if k is not None else "")
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=label)
        for (name, value), style in zip(baselines.items(), ("--", ":")):
            ax.axhline(value, linestyle=style, color="grey", label=name)
        if replace is not None:
            ax.axhline(replace, linestyle="-.", color="black", label=f"replace, window {largest}")
        ax.set_title(f"{mode} fusion")
        ax.set_xlabel("engine weight w (model weight 1 − w)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


__all__ = ["plot", "settings_file"]
