"""``jingpai dict build|show|diff`` through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from jingpai.cli import cli


def test_build_show_diff(tmp_path: Path, shared_data: Path) -> None:
    base = shared_data / "zh/thucnews_titles"
    runner = CliRunner()
    args = ["--label-column", "1", "--text-column", "0", "--label-names", str(base / "classes.txt")]
    r1 = runner.invoke(cli, ["dict", "build", "--labelled", str(base / "part1.tsv"), *args, "--out", str(tmp_path / "d1")])
    assert r1.exit_code == 0, r1.output
    meta = json.loads((tmp_path / "d1/meta.json").read_text())
    assert meta["params"]["discovery"]["max_n"] == 6 and meta["params"]["smoothing"] == 1.0
    assert f"dictionary {meta['version']}" in r1.output
    r2 = runner.invoke(cli, ["dict", "build", "--labelled", str(base / "part1.tsv"), *args, "--min-score", "2.0", "--out", str(tmp_path / "d2")])
    assert r2.exit_code == 0, r2.output
    shown = runner.invoke(cli, ["dict", "show", str(tmp_path / "d1"), "--domain", "sports", "--top", "3"])
    assert shown.exit_code == 0 and "[sports]" in shown.output and len(shown.output.splitlines()) == 6
    d = runner.invoke(cli, ["dict", "diff", str(tmp_path / "d1"), str(tmp_path / "d2"), "--top", "2"])
    assert d.exit_code == 0
    assert "+0 added" in d.output and "removed" in d.output


def test_domain_files_and_errors(tmp_path: Path) -> None:
    fin = tmp_path / "fin.jsonl"
    fin.write_text("\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in ["基金净值上涨", "基金经理调仓", "基金大涨"] * 2), encoding="utf-8")
    spo = tmp_path / "sports.txt"
    spo.write_text("\n".join(["球队客场取胜", "球队主场失利", "球队训练"] * 2), encoding="utf-8")
    runner = CliRunner()
    ok = runner.invoke(cli, ["dict", "build", "--domain", f"finance={fin}", "--domain", f"sports={spo}", "--out", str(tmp_path / "d")])
    assert ok.exit_code == 0, ok.output
    assert "基金" in (tmp_path / "d/keywords/finance.txt").read_text(encoding="utf-8")
    bad = runner.invoke(cli, ["dict", "build", "--domain", "finance", "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "expected NAME=PATH, got 'finance'" in bad.output
    none = runner.invoke(cli, ["dict", "show", str(tmp_path)])
    assert none.exit_code == 1 and "dictionary.tsv is missing" in none.output
    unknown = runner.invoke(cli, ["dict", "show", str(tmp_path / "d"), "--domain", "x"])
    assert unknown.exit_code == 1 and "unknown domain 'x'; expected one of finance, sports" in unknown.output
