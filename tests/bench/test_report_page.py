"""The results page as a report of the current best (issue 57): docs/RESULTS.md, docs/results/summary.json and
README.md's "How well it works" rendered from the saved records of docs/results/tables; the rounds' history kept
unchanged in docs/results/history.md. No evaluation runs here: the page renders from the records alone."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import report_page
from bench.__main__ import bench
from bench.eval_common import AUGMENTED_BM25, RAW_BM25, REPO, Row, Table
from bench.report_records import IMPORTED_FILE, TABLES_DIR, RecordError, current, load_records, records_from_tables, save_imported

HISTORY = REPO / "docs" / "results" / "history.md"
SUMMARY = REPO / "docs" / "results" / "summary.json"
#: the commit whose docs/RESULTS.md (the lab notebook, 2,397 lines) moved to history.md
OLD_PAGE_COMMIT = "6b2f904"
#: sha256 of that page's table lines (every line starting with "|"), in order: 677 lines
OLD_TABLE_LINES_SHA256 = "437bdf306c080fc11f425d24082e172e17e2e84e20303036f4da820ea2036f7d"


def table_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith("|")]


def record(rid: str, role: str, value: float, **extra) -> dict:
    base = {"id": rid, "dataset": "a14", "split": "dev", "role": role, "system": rid, "metrics": {"nDCG@10": value},
            "date": "2026-12-01", "issue": 52, "source": "a test", "command": f"python -m bench report --only {rid}"}
    return {**base, **extra}


def write_tables(folder: Path, records: list[dict], name: str = "t.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({"title": "test", "records": records}), encoding="utf-8")
    return folder


# ---------------------------------------------------------------------------------------------- the published files


def test_published_page_summary_and_readme_are_what_the_records_give() -> None:
    files = report_page.outputs()
    assert report_page.stale(files) == [], "run `python -m bench report --page-only` and commit what it writes"
    assert json.loads(SUMMARY.read_text(encoding="utf-8")) == report_page.summary(load_records())


def test_page_is_short_and_opens_with_the_headline() -> None:
    text = report_page.PAGE.read_text(encoding="utf-8")
    lines = text.split("\n")
    assert len(lines) <= 400
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[0] == "## Headline"
    first = lines.index("## Headline") + 1
    assert next(line for line in lines[first:] if line.strip()).startswith("| data set (split, size) | metric | BM25 | + dictionary | best rerank")
    # one row per data set, in the order of DATASETS
    rows = [line for line in lines[first:] if line.startswith("| ")][1:1 + len(report_page.DATASETS)]
    assert [r.split(" | ")[0].lstrip("| ").split(" (")[0] for r in rows] == [d.name for d in report_page.DATASETS]
    for heading in ("## 1. Which reranker for Chinese search?", "## 2. What does the keyword dictionary add?",
                    "## 3. What does hybrid (BM25 + kNN) add?", "## 4. The papers' models against their claims",
                    "## 5. Speed and cost on CPU and GPU", "## 6. What the labels can and cannot show", "## Metrics and protocols"):
        assert heading in headings
    assert headings.index("## Metrics and protocols") > headings.index("## 6. What the labels can and cannot show")
    for png in ("gain", "tradeoff", "throughput"):
        assert f"](results/{png}.png)" in text and (report_page.PAGE.parent / "results" / f"{png}.png").is_file()


def test_readme_numbers_are_summary_json_numbers() -> None:
    """Read back from README.md's text, not regenerated: every number of its section equals summary.json's."""
    readme = report_page.README.read_text(encoding="utf-8")
    section = readme.split(report_page.README_START, 1)[1].split(report_page.README_END, 1)[0]
    assert "## How well it works" in section and "(docs/RESULTS.md)" in section
    headline = {r["name"]: r for r in json.loads(SUMMARY.read_text(encoding="utf-8"))["headline"]}
    rows = [line for line in section.split("\n") if line.startswith("| ") and not line.startswith("| data set")]
    assert len(rows) == len(report_page.README_ROWS)
    for line in rows:
        name, metric, bm25, best, gain, model = [c.strip() for c in line.strip("|").split("|")]
        row = headline[re.sub(r" \([^)]*\)$", "", name)]
        top = max((c for c in (row["best_rerank"], row["hybrid_rerank"]) if c), key=lambda c: c["value"])
        assert metric == row["metric"]
        assert float(bm25) == pytest.approx(row["bm25"]["value"], abs=5e-4)
        assert float(best.strip("*")) == pytest.approx(top["value"], abs=5e-4)
        assert float(gain) == pytest.approx(row["gain"], abs=5e-4)
        assert model.strip("`") == row["recommended"]["model"]


def test_history_keeps_every_table_of_the_old_page() -> None:
    history = HISTORY.read_text(encoding="utf-8")
    lines = table_lines(history)
    assert len(lines) == 677
    assert hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest() == OLD_TABLE_LINES_SHA256
    assert "[../RESULTS.md](../RESULTS.md)" in history
    old = subprocess.run(["git", "show", f"{OLD_PAGE_COMMIT}:docs/RESULTS.md"], cwd=REPO, capture_output=True, text=True)
    if old.returncode == 0:  # where the clone holds the commit, compare with the page itself
        assert set(table_lines(old.stdout)) <= set(lines)
        assert old.stdout.count("\n### ") + old.stdout.count("\n#### ") == history.count("\n### ") + history.count("\n#### ")


# ---------------------------------------------------------------------------------------------- headline and records


def test_headline_takes_the_best_current_rerank_and_honours_supersedes(tmp_path: Path) -> None:
    folder = write_tables(tmp_path / "tables", [
        record("bm25", "bm25", 0.6), record("old-bm25", "bm25", 0.9, date="2026-11-01"),
        record("zero", "rerank", 0.7, model="zero"), record("cross", "rerank", 0.88, model="cross", use="jingpai train …"),
        record("gone", "rerank", 0.99, current=False), record("paper", "paper", 0.95, dataset="a14"),
    ])
    row = next(r for r in report_page.headline(load_records(folder)) if r["dataset"] == "a14")
    assert row["bm25"]["id"] == "bm25"  # the most recent BM25 record
    assert row["best_rerank"]["id"] == "cross" and row["gain"] == pytest.approx(0.28)
    assert row["recommended"] == {"id": "cross", "model": "cross", "system": "cross", "use": "jingpai train …",
                                  "command": "python -m bench report --only cross", "table": "t.json"}
    assert row["paper"]["value"] == 0.95 and row["hybrid_rerank"] is None

    # three seeds replace the one-seed row even though their mean is lower
    write_tables(folder, [record("cross-3", "rerank", 0.86, model="cross", seeds=3, supersedes="cross",
                                 metrics={"nDCG@10": {"mean": 0.86, "std": 0.01, "n": 3}})], name="u.json")
    records = load_records(folder)
    assert "cross" not in {r["id"] for r in current(records)}
    row = next(r for r in report_page.headline(records) if r["dataset"] == "a14")
    assert row["best_rerank"]["id"] == "cross-3" and row["best_rerank"]["value"] == 0.86 and row["best_rerank"]["seeds"] == 3


@pytest.mark.parametrize(("change", "message"), [
    ({"split": "train"}, "t.json: record 0 ('x'): split 'train' is not a report split of a14 (expected dev; training or selection splits"),
    ({"role": "best"}, "t.json: record 0 ('x'): unknown role 'best' (known: bm25, augmented,"),
    ({"dataset": "msmarco"}, "t.json: record 0 ('x'): unknown dataset 'msmarco' (known: a14, qbqtc,"),
    ({"metrics": {"nDCG@10": "0.9"}}, "t.json: record 0 ('x'): metric 'nDCG@10' must be a number or {\"mean\", \"std\", \"n\"}, got '0.9'"),
    ({"command": " "}, "t.json: record 0 ('x'): 'command' is empty (every number needs the command that reruns it)"),
    ({"command": None}, "t.json: record 0 ('x'): field 'command' must be str, got None"),
    ({"seed": 1}, "t.json: record 0 ('x'): unknown field 'seed' (known: id, dataset,"),
    ({"supersedes": "nosuch"}, "t.json: record 'x' refers to 'nosuch', which no saved table holds"),
])
def test_bad_records_are_refused_naming_file_record_and_field(tmp_path: Path, change: dict, message: str) -> None:
    folder = write_tables(tmp_path, [{**record("x", "rerank", 0.5), **change}])
    with pytest.raises(RecordError) as info:
        load_records(folder)
    assert str(info.value).startswith(message)


def test_an_id_used_twice_names_both_files(tmp_path: Path) -> None:
    write_tables(tmp_path, [record("x", "rerank", 0.5)], name="a.json")
    write_tables(tmp_path, [record("x", "rerank", 0.6)], name="b.json")
    with pytest.raises(RecordError, match=r"^b.json: record 0: id 'x' is used twice \(also in a.json\)$"):
        load_records(tmp_path)


def test_placeholders_quote_values_differences_and_spreads() -> None:
    by_id = {"a": {"id": "a", "table": "t.json", "metrics": {"MAP": {"mean": 0.8415, "std": 0.0141, "n": 3}, "p50 ms": 650}},
             "b": {"id": "b", "table": "t.json", "metrics": {"MAP": 0.7637, "p50 ms": 42.1}}}
    text = "{a:MAP} {a:MAP|pm} {a - b:MAP} {b - a:MAP} {b - a:MAP|abs} {a:p50 ms} {b:p50 ms} {b:MAP|pct} {\"id\": 1}"
    assert report_page.resolve(text, by_id) == "0.842 0.842 ± 0.014 +0.078 -0.078 0.078 650 42.1 76.4 % {\"id\": 1}"
    with pytest.raises(RecordError, match="the page quotes record 'c', which no saved table holds"):
        report_page.resolve("{c:MAP}", by_id)
    with pytest.raises(RecordError, match=r"t.json: record 'b' has no metric 'MRR' \(it has: MAP, p50 ms\)"):
        report_page.resolve("{b:MRR}", by_id)


# ---------------------------------------------------------------------------------------------- the command


def test_page_only_renders_a_new_record_and_check_sees_drift(tmp_path: Path) -> None:
    """What the lead does to add the 3-seed A14 row: one record in a tables file, then ``--page-only``."""
    tables = tmp_path / "tables"
    # the hand-kept records only: a full run's imported engine rows (another BM25 baseline) would change the numbers below
    shutil.copytree(TABLES_DIR, tables, ignore=shutil.ignore_patterns(IMPORTED_FILE))
    # ... with their engine rows kept off the headline (the page's text still quotes them): else A14 is headlined
    # through the engines, and the reorder-protocol record below would not be compared there
    for path in tables.glob("*.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["records"] = [{**r, "headline": False} if r.get("protocol") == "engine" else r for r in data["records"]]
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nintro\n\n## Quick start\n\nrun it\n", encoding="utf-8")
    page = tmp_path / "docs" / "RESULTS.md"
    # the new record replaces the A14 cross row that is current now (the head of a14.bge-cross's supersedes chain)
    successor = {r["supersedes"]: r["id"] for r in load_records(tables) if r.get("supersedes")}
    head = "a14.bge-cross"
    while head in successor:
        head = successor[head]
    three = record("a14.bge-cross.3seeds", "rerank", 0.0, model="a14-bge-cross", seeds=3, supersedes=head,
                   system="cross on bge-small-zh, 3 seeds", metrics={"nDCG@10": {"mean": 0.9012, "std": 0.004, "n": 3}, "MAP": 0.87},
                   command="python -m bench report --sections judged --only judged.a14.reorder.a14-bge-cross")
    write_tables(tables, [three], name="judged-3seeds.json")
    args = ["report", "--page-only", "--tables-dir", str(tables), "--out", str(page), "--readme", str(readme), "--no-plots"]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    a14 = next(line for line in text.split("\n") if line.startswith("| A14 stock news"))
    assert "| **0.901** |" in a14 and "| +0.220 |" in a14 and "![gain]" not in text  # no plots: no image links
    assert "record `a14.bge-cross.3seeds` in tables/judged-3seeds.json" in text
    assert "lifts nDCG@10 by +0.220" in text  # the reading quotes the record that superseded the one it names
    summary = json.loads((page.parent / "results" / "summary.json").read_text(encoding="utf-8"))
    assert summary["headline"][0]["best_rerank"]["id"] == "a14.bge-cross.3seeds"
    readme_text = readme.read_text(encoding="utf-8")
    assert readme_text.index(report_page.README_START) < readme_text.index("## Quick start")
    assert "| A14 stock news (dev) | nDCG@10 | 0.681 | **0.901** | +0.220 | `a14-bge-cross` |" in readme_text

    check = [*args, "--check"]
    assert CliRunner().invoke(bench, check).exit_code == 0
    # rendering twice gives the same files; README keeps one section
    assert CliRunner().invoke(bench, args).exit_code == 0 and readme.read_text(encoding="utf-8") == readme_text
    three["metrics"]["nDCG@10"]["mean"] = 0.91
    write_tables(tables, [three], name="judged-3seeds.json")
    result = CliRunner().invoke(bench, check)
    assert result.exit_code != 0 and f"stale: {page}, {page.parent / 'results' / 'summary.json'}, {readme}" in result.output


def test_page_only_names_a_bad_record_and_writes_nothing(tmp_path: Path) -> None:
    tables = write_tables(tmp_path / "tables", [record("x", "rerank", 0.5, split="train")])
    page = tmp_path / "RESULTS.md"
    result = CliRunner().invoke(bench, ["report", "--page-only", "--tables-dir", str(tables), "--out", str(page), "--no-plots"])
    assert result.exit_code != 0 and "split 'train' is not a report split of a14" in result.output
    assert not page.exists()
    assert "--check goes with --page-only" in CliRunner().invoke(bench, ["report", "--check"]).output


def test_plots_are_drawn_from_the_records(tmp_path: Path) -> None:
    from bench.report_plots import gain_points, throughput_points, tradeoff_points, write_plots

    records = load_records()
    written = write_plots(records, tmp_path)
    assert [p.name for p in written] == ["gain.png", "tradeoff.png", "throughput.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)
    gains = dict((label, gain) for label, gain, _ in gain_points(records))
    a14 = next(row for row in report_page.headline(records) if row["dataset"] == "a14")  # the gain the headline prints
    assert gains["A14 stock news (nDCG@10)"] == pytest.approx(a14["gain"], abs=1e-6)
    trade = {label.split(" — ")[0]: (ms, gain) for label, ms, gain in tradeoff_points(records)}
    assert trade["cross on bge-small-zh"][0] == 650.0 and 0.1 < trade["cross on bge-small-zh"][1] < a14["gain"] + 1e-9
    series = throughput_points(records)
    gpu = next(v for k, v in series.items() if k.startswith("cuda"))
    assert [p for p, _ in gpu] == sorted(p for p, _ in gpu) and gpu[-1] == (1600, 3233.0)


# ---------------------------------------------------------------------------------------------- a report run's judged tables


def test_a_report_runs_judged_tables_join_the_records(tmp_path: Path) -> None:
    table = Table(key="judged-a14-opensearch", section="judged", title="A14 stock news dev — OpenSearch (full)",
                  columns=["method", "queries", "nDCG@10", "MAP", "judged@10"],
                  meta={"dataset": "a14", "split": "dev", "engine_kind": "opensearch", "protocol": "engine", "mode": "full",
                        "date": "2099-01-02 10:00 UTC (commit abc)"},  # newer than every saved record
                  rows=[Row({"method": RAW_BM25, "queries": 60, "nDCG@10": 0.66, "MAP": 0.6, "judged@10": 0.9}, "cmd direct"),
                        Row({"method": AUGMENTED_BM25, "queries": 60, "nDCG@10": 0.67, "MAP": 0.61, "judged@10": 0.9}, "cmd augment"),
                        Row({"method": "+ rerank top 10, a14-bge-cross, linear fusion w=0.3 (tuned on held-out train queries)", "queries": 60,
                             "nDCG@10": 0.95, "MAP": 0.9, "judged@10": 0.9}, "cmd rerank"),
                        Row({"method": "random order (seeds 0,1,2)", "queries": 60, "nDCG@10": {"mean": 0.6, "std": 0.02, "n": 3},
                             "MAP": {"mean": 0.6, "std": 0.02, "n": 3}}, "cmd random")])
    records = records_from_tables([table])
    assert [(r["role"], r.get("model")) for r in records] == [("bm25", None), ("augmented", None), ("rerank", "a14-bge-cross"), ("baseline", None)]
    assert records[2]["command"] == "cmd rerank" and records[2]["engine"] == "opensearch" and records[2]["queries"] == 60
    tables = tmp_path / "tables"
    shutil.copytree(TABLES_DIR, tables)
    path = save_imported([table], tables)
    assert path == tables / "report-judged.json"
    row = report_page.headline(load_records(tables))[0]
    assert row["best_rerank"]["value"] == 0.95 and row["augmented"]["value"] == 0.67
    assert row["bm25"]["id"] == "report.a14.opensearch.bm25-raw-field-engine-direct"  # the more recent BM25 row


def test_a_published_render_imports_the_judged_tables_and_keeps_the_full_tables_beside_them(tmp_path: Path, monkeypatch) -> None:
    """``--render-only`` onto the published page: the saved judged table's rows become records, the page quotes them,
    and every saved table is still rendered in full, next to the results folder (not on the page)."""
    from bench.eval_common import save_table

    results, tables = tmp_path / "out-report", tmp_path / "tables"
    shutil.copytree(TABLES_DIR, tables)
    page, readme = tmp_path / "docs" / "RESULTS.md", tmp_path / "README.md"
    readme.write_text("# x\n\n## Quick start\n", encoding="utf-8")
    monkeypatch.setattr(report_page, "PAGE", page)
    table = Table(key="judged-kuake-reorder", section="judged", title="KUAKE-QTR dev — reordering the judged list (full)",
                  columns=["method", "queries", "nDCG@3"], meta={"dataset": "kuake", "split": "dev", "protocol": "reorder", "mode": "full",
                                                                  "date": "2026-12-03 09:00 UTC (commit def)"},
                  rows=[Row({"method": "kuake-bge-cross (model score alone)", "queries": 600, "nDCG@3": 0.9351}, "python -m bench report --sections judged --only judged.kuake.reorder.kuake-bge-cross")])
    save_table(table, results)
    args = ["report", "--render-only", "--results-dir", str(results), "--out", str(page), "--tables-dir", str(tables),
            "--readme", str(readme), "--no-plots"]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output
    assert (tables / "report-judged.json").is_file()
    kuake = next(line for line in page.read_text(encoding="utf-8").split("\n") if line.startswith("| KUAKE-QTR"))
    assert "| **0.935** |" in kuake and "`kuake-bge-cross` (3)" in kuake
    assert "| KUAKE-QTR (dev) | nDCG@3 | 0.873 | **0.935** | +0.062 | `kuake-bge-cross` |" in readme.read_text(encoding="utf-8")
    assert "### KUAKE-QTR dev — reordering the judged list (full)" in (results / "RESULTS-tables.md").read_text(encoding="utf-8")
