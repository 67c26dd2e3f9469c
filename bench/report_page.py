"""docs/RESULTS.md as a report of the current best (issue 57), rendered from the saved records alone.

``python -m bench report --page-only`` (fast: no engine, no model, no evaluation) reads ``docs/results/tables/*.json``
(:mod:`bench.report_records`) and writes, next to each other:

- ``docs/RESULTS.md``: the headline table (one row per data set of :data:`DATASETS`: BM25, + dictionary, the best
  rerank, hybrid + rerank, the gain, the paper's figure, the recommended model and its commands), one section per
  question a user asks (:mod:`bench.report_text`), metric definitions and protocols at the end;
- ``docs/results/summary.json``: the headline, machine-readable, each cell with the record it came from;
- ``docs/results/{gain,tradeoff,throughput}.png`` (:mod:`bench.report_plots`);
- README.md's "How well it works" section (between :data:`README_START` and :data:`README_END`), from summary.json.

Numbers in the section texts are placeholders resolved from the records: ``{ID:METRIC}`` (the value), ``{ID - ID2:METRIC}``
(the signed difference; ``|abs``: its size), with ``|pm`` (mean ± std) or ``|pct`` (per cent); an unknown id or
metric is an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.eval_common import REPO
from bench.report_records import TABLES_DIR, RecordError, current, load_records, value

PAGE = REPO / "docs" / "RESULTS.md"
README = REPO / "README.md"
README_START = "<!-- results:start -->"
README_END = "<!-- results:end -->"
RATE_LIMIT = 1.0  # a metric whose values stay within [-1, 1] is a rate: three decimals


@dataclass(frozen=True)
class Dataset:
    """One headline row: the data set's key in the records, its name, report split, headline metric and a size note."""

    key: str
    name: str
    split: str
    metric: str
    size: str


DATASETS: tuple[Dataset, ...] = (
    Dataset("a14", "A14 stock news", "dev", "nDCG@10", "60 companies"),
    Dataset("qbqtc", "QBQTC", "dev", "nDCG@10", "69 queries"),
    Dataset("kuake", "KUAKE-QTR", "dev", "nDCG@3", "600 queries"),
    Dataset("lcqmc", "LCQMC", "dev", "P@1", "4,402 queries"),
    Dataset("bq", "BQ", "dev", "P@10", "2,493 queries"),
    Dataset("afqmc", "AFQMC", "dev", "P@10", "1,338 queries"),
    Dataset("trecqa", "TrecQA", "raw-test", "MAP", "1,517 pairs"),
    Dataset("wikiqa", "WikiQA", "dev", "MAP", "1,130 pairs"),
    Dataset("microblog2011", "TREC Microblog 2011", "test", "MAP", "49 queries"),
    Dataset("microblog2012", "TREC Microblog 2012", "test", "MAP", "59 queries"),
    Dataset("stsb", "STS-B levels", "test", "3-level accuracy", "1,361 pairs"),
)
#: the headline rows README.md's "How well it works" repeats
README_ROWS = ("a14", "qbqtc", "kuake", "lcqmc", "afqmc", "trecqa", "wikiqa")
#: the Chinese search sets of the "which reranker" section
CHINESE = ("a14", "qbqtc", "kuake", "lcqmc", "bq", "afqmc")


# ---------------------------------------------------------------------------------------------- numbers


def fmt(metric: str, number: float, *, signed: bool = False) -> str:
    """A number as the page shows it: rates to three decimals, counts and milliseconds without needless decimals."""
    sign = "+" if signed and number >= 0 else ""
    if abs(number) <= RATE_LIMIT and not any(u in metric for u in ("ms", "/s", "%")):
        return f"{sign}{number:.3f}"
    text = f"{number:,.0f}" if float(number).is_integer() or abs(number) >= 100 else f"{number:,.1f}"
    return sign + text


def _metric(record: dict[str, Any], metric: str) -> Any:
    if metric not in record["metrics"]:
        raise RecordError(f"{record['table']}: record {record['id']!r} has no metric {metric!r} (it has: {', '.join(record['metrics'])})")
    return record["metrics"][metric]


PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.+-]+)(?: - ([A-Za-z0-9_.+-]+))?:([^{}|\n]+)(?:\|(pm|pct|abs))?\}")


def resolve(text: str, by_id: dict[str, dict[str, Any]]) -> str:
    """``text`` with every ``{ID:METRIC}`` / ``{ID - ID2:METRIC}`` placeholder replaced by the records' numbers."""

    def record(rid: str) -> dict[str, Any]:
        if rid not in by_id:
            raise RecordError(f"the page quotes record {rid!r}, which no saved table holds (docs/results/tables/*.json)")
        return by_id[rid]

    def one(match: re.Match) -> str:
        first, second, metric, flag = match.groups()
        cell = _metric(record(first), metric)
        number = value(cell) or 0.0
        if second:
            number -= value(_metric(record(second), metric)) or 0.0
            return fmt(metric, abs(number)) if flag == "abs" else fmt(metric, number, signed=True)
        if flag == "pct":
            return f"{number * 100:.1f} %"
        if flag == "pm" and isinstance(cell, dict) and cell.get("n", 1) > 1:
            return f"{fmt(metric, number)} ± {fmt(metric, float(cell['std']))}"
        return fmt(metric, number)

    return PLACEHOLDER.sub(one, text)


# ---------------------------------------------------------------------------------------------- headline


def _latest(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The most recent of ``records`` (file order breaks ties)."""
    return max(reversed(records), key=lambda r: r["date"]) if records else None


def _best(records: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """The record with the highest ``metric`` (the more recent on a tie)."""
    return max(reversed(records), key=lambda r: (value(r["metrics"][metric]), r["date"])) if records else None


def _cell(record: dict[str, Any] | None, metric: str) -> dict[str, Any] | None:
    if record is None:
        return None
    return {"value": value(record["metrics"][metric]), "id": record["id"], "table": record["table"], "system": record["system"],
            "command": record["command"], "date": record["date"], "seeds": record.get("seeds"), "comparable": record.get("comparable", True)}


def headline(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per data set of :data:`DATASETS` from the current records: BM25 and + dictionary (the most recent
    current record of that role), the best rerank and hybrid + rerank (the highest headline metric), the paper's
    figure, the gain of the better of the two over BM25 (or over the first stage the row names in ``over``) and the
    recommended model (that row's)."""
    by_id = {r["id"]: r for r in records}
    rows = []
    for ds in DATASETS:
        mine = [r for r in current(records) if r["dataset"] == ds.key and ds.metric in r["metrics"] and r.get("headline", True)]
        pick = {role: [r for r in mine if r["role"] == role] for role in ("bm25", "augmented", "rerank", "hybrid+rerank", "paper", "baseline")}
        # a judged set measured through the engines is headlined there: BM25, + dictionary and the reranks all from the
        # engine protocol, never an engine BM25 beside a reorder-protocol rerank (their first stages differ)
        through = [r for r in pick["bm25"] if r.get("protocol") == "engine"]
        if through:
            pick = {role: [r for r in rs if role in ("paper", "baseline") or r.get("protocol") == "engine"] for role, rs in pick.items()}
        bm25, augmented = _latest(pick["bm25"]), _latest(pick["augmented"])
        rerank, hybrid = _best(pick["rerank"], ds.metric), _best(pick["hybrid+rerank"], ds.metric)
        paper = pick["paper"][0] if pick["paper"] else None
        top = _best([r for r in (rerank, hybrid) if r], ds.metric)
        base = by_id[top["over"]] if top and "over" in top else bm25
        row = {"dataset": ds.key, "name": ds.name, "split": ds.split, "size": ds.size, "metric": ds.metric,
               "bm25": _cell(bm25, ds.metric), "augmented": _cell(augmented, ds.metric), "best_rerank": _cell(rerank, ds.metric),
               "hybrid_rerank": _cell(hybrid, ds.metric), "paper": _cell(paper, ds.metric),
               "gain": None, "gain_over": None, "recommended": None}
        if top and base and ds.metric in base["metrics"]:
            row["gain"] = round(value(top["metrics"][ds.metric]) - value(base["metrics"][ds.metric]), 6)
            row["gain_over"] = {"id": base["id"], "system": base["system"], "role": base["role"]}
        if top:
            row["recommended"] = {"id": top["id"], "model": top.get("model") or top["system"], "system": top["system"],
                                  "use": top.get("use") or top["command"], "command": top["command"], "table": top["table"]}
        rows.append(row)
    return rows


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """docs/results/summary.json's content: the headline rows, each cell naming its record and rerun command."""
    return {"about": "The headline of docs/RESULTS.md, written by `python -m bench report --page-only` from docs/results/tables/*.json "
                     "(report splits only: dev / test as ../shared/data/README.md defines them). Each cell names its record (id, table) "
                     "and the command that reruns it.",
            "headline": headline(records)}


def _num(cell: dict[str, Any] | None, metric: str, *, bold: bool = False) -> str:
    if cell is None:
        return "—"
    text = fmt(metric, cell["value"])
    if not cell.get("comparable", True):
        text += " (other data)"
    return f"**{text}**" if bold else text


def headline_markdown(rows: list[dict[str, Any]]) -> str:
    """The headline table and the numbered commands below it."""
    out = ["| data set (split, size) | metric | BM25 | + dictionary | best rerank | hybrid + rerank | gain | paper | recommended |",
           "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for i, row in enumerate(rows, 1):
        m = row["metric"]
        best = max((c for c in (row["best_rerank"], row["hybrid_rerank"]) if c), key=lambda c: c["value"], default=None)
        gain = "—" if row["gain"] is None else fmt(m, row["gain"], signed=True) + ("‡" if row["gain_over"]["role"] not in ("bm25",) else "")
        rec = row["recommended"]
        out.append(f"| {row['name']} ({row['split']}, {row['size']}) | {m} | {_num(row['bm25'], m)} | {_num(row['augmented'], m)} | "
                   f"{_num(row['best_rerank'], m, bold=best is row['best_rerank'])} | {_num(row['hybrid_rerank'], m, bold=best is row['hybrid_rerank'])} | "
                   f"{gain} | {_num(row['paper'], m)} | " + (f"`{rec['model']}` ({i})" if rec else "—") + " |")
        if rec:
            use = f"use: `{rec['use']}`; " if rec["use"] != rec["command"] else ""
            notes.append(f"{i}. {row['name']}: {rec['system']} — {use}rerun: `{rec['command']}` (record `{rec['id']}` in tables/{rec['table']})")
    return "\n".join(out) + "\n\n" + "\n".join(notes) + "\n"


# ---------------------------------------------------------------------------------------------- which reranker (computed)


def rerankers_markdown(records: list[dict[str, Any]]) -> str:
    """Per Chinese data set: its first stage (+ dictionary where measured, else BM25) and every current rerank row,
    best first — new records join this table by themselves."""
    now = current(records)
    metric_of = {ds.key: ds for ds in DATASETS}
    out = ["| data set | metric | ranker | value | vs first stage (same protocol) | seeds | record |", "|---|---|---|---|---|---|---|"]
    for key in CHINESE:
        ds = metric_of[key]
        mine = [r for r in now if r["dataset"] == key and ds.metric in r["metrics"]]
        # each protocol's first stage (+ dictionary where measured, else BM25; the engine's first): a rerank row is compared
        # with the first stage of its own protocol only — a reordered judged pool and an engine's hits start differently.
        # A rerank row kept out of the headline (``"headline": false``) still shows here.
        bases: dict[Any, dict[str, Any]] = {}
        for protocol in sorted({r.get("protocol") for r in mine}, key=lambda p: (p != "engine", str(p))):
            of = [r for r in mine if r.get("protocol") == protocol and r.get("headline", True)]
            first = _latest([r for r in of if r["role"] == "augmented"]) or _latest([r for r in of if r["role"] == "bm25"])
            if first is not None:
                bases[protocol] = first
        ranked = sorted((r for r in mine if r["role"] in ("rerank", "hybrid+rerank")), key=lambda r: -value(r["metrics"][ds.metric]))
        firsts = list(bases.values())
        for j, r in enumerate([*firsts, *ranked]):
            v = value(r["metrics"][ds.metric])
            base = bases.get(r.get("protocol"))
            diff = "" if r in firsts or base is None else fmt(ds.metric, v - value(base["metrics"][ds.metric]), signed=True)
            seeds = str(r.get("seeds", "")) if r not in firsts else ""
            out.append(f"| {ds.name if j == 0 else ''} | {ds.metric if j == 0 else ''} | {r['system']} | {fmt(ds.metric, v)} | {diff} | {seeds} | "
                       f"`{r['id']}` |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------- page, README


def render_page(records: list[dict[str, Any]], *, plots: list[str] | None = None) -> str:
    """The whole docs/RESULTS.md text for ``records`` (``plots``: the PNG names written next to it, under results/)."""
    from bench import report_text

    by_id = {r["id"]: r for r in records}
    # the texts quote the current record: one superseded (three seeds for one, say) is read through its successor
    successor = {old: r["id"] for r in records for old in ([r["supersedes"]] if isinstance(r.get("supersedes"), str) else r.get("supersedes", []))}
    for old in successor:
        new = old
        for _ in range(len(successor) + 1):
            new = successor.get(new, new)
        by_id[old] = by_id[new]
    rows = headline(records)
    images = {Path(p).stem: f"![{Path(p).stem}](results/{Path(p).name})" for p in (plots or [])}
    text = "\n".join(p.strip("\n") + "\n" for p in (report_text.INTRO, headline_markdown(rows), report_text.HEADLINE_NOTES,
                                                      *report_text.SECTIONS, report_text.PROTOCOLS))
    text = text.replace("{{rerankers}}", rerankers_markdown(records).rstrip("\n"))
    for stem, link in images.items():
        text = text.replace("{{plot:" + stem + "}}", link)
    text = re.sub(r"\{\{plot:[a-z]+\}\}\n\n?", "", text)  # a plot not written (--no-plots): no broken image link
    return resolve(text, by_id)


def readme_section(summary_data: dict[str, Any]) -> str:
    """README.md's "How well it works", from summary.json's headline (:data:`README_ROWS`), between the markers."""
    rows = {r["dataset"]: r for r in summary_data["headline"]}
    lines = [README_START, "## How well it works", "",
             "jingpai's best rerank against plain BM25 on report splits (dev / test sets no model was trained or selected on): A14,",
             "QBQTC and KUAKE-QTR reorder each query's judged pool, LCQMC and AFQMC go through the gateway and a real engine, TrecQA",
             "and WikiQA rank given answer candidates. Caveats (seeds, what the labels can and cannot show), costs on",
             "CPU and GPU, every data set and the commands that rerun each number: [docs/RESULTS.md](docs/RESULTS.md). Generated from",
             "[docs/results/summary.json](docs/results/summary.json) by `python -m bench report --page-only`; a test fails when they differ.", "",
             "| data set | metric | BM25 | jingpai | gain | model |", "|---|---|---|---|---|---|"]
    for key in README_ROWS:
        row = rows[key]
        best = max((c for c in (row["best_rerank"], row["hybrid_rerank"]) if c), key=lambda c: c["value"])
        m = row["metric"]
        lines.append(f"| {row['name']} ({row['split']}) | {m} | {_num(row['bm25'], m)} | **{fmt(m, best['value'])}** | "
                     f"{fmt(m, row['gain'], signed=True)} | `{row['recommended']['model']}` |")
    lines.append(README_END)
    return "\n".join(lines) + "\n"


def splice_readme(readme: str, section: str) -> str:
    """``readme`` with its marked section replaced by ``section``; inserted before "## Quick start" when absent."""
    if README_START in readme and README_END in readme:
        head, rest = readme.split(README_START, 1)
        tail = rest.split(README_END, 1)[1].lstrip("\n")
        return head + section + "\n" + tail
    if "\n## Quick start" not in readme:
        raise RecordError("README.md has neither the results markers nor a '## Quick start' heading to put the section before")
    head, tail = readme.split("\n## Quick start", 1)
    return head + "\n" + section + "\n## Quick start" + tail


# ---------------------------------------------------------------------------------------------- write / check


def outputs(*, tables_dir: Path = TABLES_DIR, page: Path = PAGE, readme: Path | None = README, plots: bool = True,
            plots_dir: Path | None = None) -> dict[Path, str | None]:
    """What ``--page-only`` writes: ``{path: text}`` for the page, summary.json and the README (``None``: a plot to
    draw, when ``plots``). Reads the records; writes nothing."""
    from bench.report_plots import PLOTS

    records = load_records(tables_dir)
    results = page.parent / "results"
    # without drawing (--no-plots, --check) the page still links the plots already beside it
    names = [f"{name}.png" for name in PLOTS if plots or ((plots_dir or results) / f"{name}.png").exists()]
    data = summary(records)
    out: dict[Path, str | None] = {page: render_page(records, plots=names),
                                   results / "summary.json": json.dumps(data, ensure_ascii=False, indent=1) + "\n"}
    if readme is not None:
        out[readme] = splice_readme(readme.read_text(encoding="utf-8"), readme_section(data))
    for name in names if plots else ():
        out[(plots_dir or results) / name] = None
    return out


def write(files: dict[Path, str | None], *, tables_dir: Path = TABLES_DIR) -> list[Path]:
    """Write :func:`outputs`' texts and draw its plots; returns the paths written."""
    written = []
    plot_paths = [p for p, text in files.items() if text is None]
    for path, text in files.items():
        if text is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    if plot_paths:
        from bench.report_plots import write_plots

        written += write_plots(load_records(tables_dir), plot_paths[0].parent)
    return written


def stale(files: dict[Path, str | None]) -> list[Path]:
    """The text outputs whose file on disk differs from what the records give (plots are not compared)."""
    return [p for p, text in files.items() if text is not None and (not p.exists() or p.read_text(encoding="utf-8") != text)]
