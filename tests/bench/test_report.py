"""The evaluation report entry point (``python -m bench report``) end to end on a tiny configuration:
real engine, real ``jingpai dict build``/``jingpai index``, real gateway and rerank service, a word model
trained for a few steps, and the metrics from the one evaluation module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import eval_common
from bench.__main__ import bench
from bench.eval_common import Row, Table, load_tables, save_table
from bench.eval_import import parse_printed
from jingpai.engine.client import Engine


@pytest.fixture(scope="session")
def report_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Work and model folders shared by both engines' runs (the dictionary and model are built once)."""
    root = tmp_path_factory.mktemp("report")
    return {"work": root / "work", "models": root / "models"}


@pytest.mark.engine
def test_quick_retrieval_report_writes_tables(engine: Engine, shared_data: Path, report_dirs, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(eval_common, "DATA_DIR", shared_data)
    results, out = tmp_path / "results", tmp_path / "RESULTS.md"
    args = ["report", "--quick", "--sections", "retrieval", "--only", f"retrieval.afqmc.{engine.kind}", f"--{engine.kind}", engine.url,
            "--no-start-engines", "--device", "cpu", "--results-dir", str(results), "--work-dir", str(report_dirs["work"]),
            "--models-dir", str(report_dirs["models"]), "--out", str(out), "--no-plots"]
    result = CliRunner().invoke(bench, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output

    saved = json.loads((results / f"retrieval-afqmc-{engine.kind}.json").read_text(encoding="utf-8"))
    assert saved["meta"]["engine"] == f"{engine.kind} {engine.version}"
    assert [r["cells"]["method"].split(" ")[0] for r in saved["rows"]] == ["BM25,", "BM25", "+", "+"]
    assert "replace" in saved["rows"][2]["cells"]["method"] and "linear fusion" in saved["rows"][3]["cells"]["method"]
    tuning = json.loads((results / "retrieval-tuning.json").read_text(encoding="utf-8"))
    assert any("(chosen)" in r["cells"]["fusion"] for r in tuning["rows"])
    for row in saved["rows"]:
        assert row["cells"]["queries"] == 40
        ps = [row["cells"][f"P@{k}"] for k in (1, 3, 5, 10)]
        assert all(0.0 <= p <= 1.0 for p in ps)
        assert ps == sorted(ps), f"P@k must not fall as k grows: {ps}"
        assert row["command"].startswith("python -m bench report --sections retrieval --quick --only retrieval.afqmc.")
    # raw BM25 finds the paraphrase of some queries in the top 10 (a broken pipeline finds none)
    assert saved["rows"][0]["cells"]["P@10"] > 0.2
    text = out.read_text(encoding="utf-8")
    assert f"Question retrieval — AFQMC dev, {engine.kind} (quick)" in text
    assert f"--only retrieval.afqmc.{engine.kind}.rerank" in text
    assert "_Not run yet: `python -m bench report --sections qa`._" in text


def test_unknown_section_is_rejected() -> None:
    result = CliRunner().invoke(bench, ["report", "--sections", "retrieval,nope", "--render-only"])
    assert result.exit_code == 2
    assert "unknown section(s) ['nope']; expected some of retrieval, microblog, qa, negatives, speed" in result.output


def test_saving_a_rerun_row_replaces_only_that_row(tmp_path: Path) -> None:
    def table(rows: list[Row]) -> Table:
        return Table(key="qa-x", section="qa", title="t", columns=["model", "MAP"], rows=rows, meta={"command": "c"})

    save_table(table([Row({"model": "a", "MAP": 0.1}, "cmd a"), Row({"model": "b", "MAP": 0.2}, "cmd b")]), tmp_path)
    save_table(table([Row({"model": "b", "MAP": 0.3}, "cmd b"), Row({"model": "c", "MAP": 0.4}, "cmd c")]), tmp_path)
    [loaded] = load_tables(tmp_path)
    assert [(r.cells["model"], r.cells["MAP"]) for r in loaded.rows] == [("a", 0.1), ("b", 0.3), ("c", 0.4)]


def test_printed_rows_are_imported_with_their_table_and_stats() -> None:
    printed = "\n".join([
        "- **hardware**: Xeon, 16 cores; GPU NVIDIA H100",
        "| model | seeds | MAP | rerun |",
        "|---|---|---|---|",
        "| hcan | 3 | 0.6156 ± 0.0013 (n=3) | `python -m bench report --sections qa --only qa.trecqa.hcan --device cuda` |",
    ])
    [table] = parse_printed(printed)
    assert table.key == "qa-trecqa"
    assert table.meta["hardware"] == "Xeon, 16 cores; GPU NVIDIA H100"
    assert table.rows[0].cells["MAP"] == {"mean": 0.6156, "std": 0.0013, "n": 3}
    assert table.rows[0].cells["seeds"] == 3
