"""Import result tables measured on another machine into the results folder.

A report run elsewhere (the GPU leg) saves JSON tables like any run; copy them into ``out/report`` with
:func:`import_json`. When only its printed output came back, :func:`import_printed` rebuilds the rows
from the Markdown tables the run printed (same cells, same rerun commands) and takes the table facts
(data, model, hardware, date) from the printed header.

    python -m bench.eval_import LOG_OR_JSON… [--results-dir out/report]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from bench.eval_common import REPO, Row, Table, save_table

_STAT = re.compile(r"^(-?[0-9.]+) ± ([0-9.]+) \(n=(\d+)\)$")


def _cell(text: str):
    text = text.strip()
    m = _STAT.match(text)
    if m:
        return {"mean": float(m.group(1)), "std": float(m.group(2)), "n": int(m.group(3))}
    try:
        return int(text) if text.isdigit() else float(text)
    except ValueError:
        return text


def _table_for(command: str, meta: dict[str, str]) -> Table:
    """An empty table of the kind ``command`` reruns, with the facts of the run that printed it."""
    from bench import eval_negatives, eval_qa

    m = re.search(r"--only (qa\.(\w+)|negatives)\.", command)
    if m is None:
        raise ValueError(f"cannot tell which table the row with command {command!r} belongs to")
    device = " --device cuda" if "--device cuda" in command else ""
    if m.group(2):
        name = m.group(2)
        return Table(key=f"qa-{name}", section="qa", title=f"Answer selection — {name} (full)", columns=[],
                     meta={**meta, "command": f"python -m bench report --sections qa{device}", "data": eval_qa.DATASETS[name][1],
                           "engine": "none", "model": "see rows; each trained on the set's train split (report_recipe.json in out/models)"},
                     notes=[eval_qa.PAPER[name], eval_qa.NOT_FITTING])
    return Table(key="negatives-pawsx", section="negatives", title="Negative sampling — PAWS-X zh dev (full)", columns=[],
                 meta={**meta, "command": f"python -m bench report --sections negatives{device}", "engine": "OpenSearch (sampling only)",
                       "data": "train: LCQMC dev + OPPO dev positives + sampled negatives; test: PAWS-X zh dev (2,000 pairs)",
                       "model": "kwbert on a random-init 4-layer BERT (from scratch), hcan on random word vectors"},
                 notes=[eval_negatives.PAPER])


def parse_printed(text: str) -> list[Table]:
    """Rows of the tables printed by ``python -m bench report`` in ``text`` (a log, possibly only its
    tail): each row goes to the table its rerun command names; the facts come from the printed header."""
    tables: dict[str, Table] = {}
    meta: dict[str, str] = {}
    columns: list[str] = []
    notes: list[str] = []
    for line in text.splitlines():
        m = re.match(r"- \*\*(hardware|date|mode)\*\*: (.*)$", line)
        if m:
            meta[m.group(1)] = m.group(2)
        elif line.startswith("| ") and line.rstrip().endswith("| rerun |"):
            columns = [c.strip() for c in line.strip().strip("|").split("|")][:-1]
        elif line.startswith("| ") and columns:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            command = cells[-1].strip("`")
            key_table = _table_for(command, meta)
            table = tables.setdefault(key_table.key, key_table)
            table.columns = columns
            table.meta.update(meta)
            table.rows.append(Row(cells={c: _cell(v) for c, v in zip(columns, cells[:-1], strict=False)}, command=command))
        elif line.startswith("> ") and "positives" in line and "negatives per strategy" in line:
            notes.append(line[2:])
    for table in tables.values():
        if table.section == "negatives":
            table.notes += notes[:1]
    return list(tables.values())


def import_printed(path: Path, results_dir: Path) -> list[Path]:
    """Save the rows printed in ``path`` (merged into same-key tables already saved)."""
    return [save_table(t, results_dir) for t in parse_printed(path.read_text(encoding="utf-8"))]


def import_json(path: Path, results_dir: Path) -> Path:
    return save_table(Table.from_json(json.loads(path.read_text(encoding="utf-8"))), results_dir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--results-dir", type=Path, default=REPO / "out" / "report")
    args = ap.parse_args()
    for path in args.paths:
        saved = [import_json(path, args.results_dir)] if path.suffix == ".json" else import_printed(path, args.results_dir)
        print(f"{path}: {', '.join(map(str, saved)) or 'no table'}")


if __name__ == "__main__":
    main()
