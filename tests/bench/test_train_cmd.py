"""``python -m bench train``: trains (or reuses) report recipes without evaluating them."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench.__main__ import bench


def test_unknown_recipe_names_the_known_ones(tmp_path: Path) -> None:
    result = CliRunner().invoke(bench, ["train", "zh-nope", "--models-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown recipe(s) zh-nope; expected some of" in result.output and "zh-gpu-kw" in result.output


def test_a_saved_recipe_is_reused_not_retrained(tmp_path: Path) -> None:
    args = ["train", "zh-use-zeroshot", "--device", "cpu", "--models-dir", str(tmp_path / "models"), "--work-dir", str(tmp_path / "work")]
    first = CliRunner().invoke(bench, args)
    assert first.exit_code == 0, first.output
    info = json.loads(first.output.strip().splitlines()[-1])
    assert info["key"] == "zh-use-zeroshot" and info["trained_now"] is True and info["steps"] == 0
    assert (Path(info["folder"]) / "report_recipe.json").exists()
    again = json.loads(CliRunner().invoke(bench, args).output.strip().splitlines()[-1])
    assert again["trained_now"] is False and again["folder"] == info["folder"]
