"""PNG plots of the report's tables (matplotlib, headless): one grouped bar chart per section."""

from __future__ import annotations

import logging
from pathlib import Path

from bench.eval_common import Table

logger = logging.getLogger(__name__)

#: per section: the row label columns and the metric columns to plot
PLOTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "retrieval": (("method",), ("P@1", "P@3", "P@5", "P@10")),
    "microblog": (("run",), ("MAP", "P@30")),
    "qa": (("model",), ("MAP", "MRR")),
    "negatives": (("model", "negatives"), ("accuracy", "acc. positive", "acc. negative")),
}


def _value(cell) -> float | None:
    if isinstance(cell, dict) and "mean" in cell:
        return float(cell["mean"])
    if isinstance(cell, (int, float)):
        return float(cell)
    return None


def plot_section(section: str, tables: list[Table], out_dir: Path) -> Path | None:
    """One PNG with a subplot per table of ``section`` (``None`` when nothing is plottable)."""
    if section not in PLOTS:
        return None
    labels_cols, metrics = PLOTS[section]
    tables = [t for t in tables if t.rows and all(m in t.columns for m in metrics)]
    if not tables:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(tables), figsize=(max(5.0, 4.6 * len(tables)), 5.0), squeeze=False)
    for ax, table in zip(axes[0], tables, strict=True):
        rows = table.rows
        x = np.arange(len(metrics))
        width = 0.8 / max(1, len(rows))
        for i, row in enumerate(rows):
            vals = [_value(row.cells.get(m)) for m in metrics]
            label = " / ".join(str(row.cells.get(c, "")) for c in labels_cols)[:60]
            ax.bar(x + i * width - 0.4 + width / 2, [v if v is not None else 0.0 for v in vals], width, label=label)
        ax.set_xticks(x, metrics)
        ax.set_ylim(0, 1)
        ax.set_title(table.title.split("—", 1)[-1].strip()[:60], fontsize=9)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=1, frameon=False)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{section}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
