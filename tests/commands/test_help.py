"""``jingpai <command> --help`` loads no heavy library, so it answers at once (issue #20: under 0.5 s).

Checked by what a fresh interpreter imported, not by a clock: torch, numpy, httpx (which pulls in
rich), jieba and the web frameworks cost 0.1–8 s each to import and are needed only when a command runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jingpai.cli import COMMANDS

HEAVY = ("torch", "numpy", "httpx", "jieba", "starlette", "fastapi", "transformers", "elasticsearch", "opensearchpy", "aiohttp")

PROBE = """
import json, sys
from jingpai.cli import cli
try:
    cli(sys.argv[1:], prog_name="jingpai")
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def help_imports(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args, "--help"], capture_output=True, text=True, check=True,
    ).stdout
    assert "Usage:" in out
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_loads_no_heavy_library(command: str) -> None:
    assert help_imports(command) == []


@pytest.mark.parametrize("args", [("index", "run"), ("dict", "build"), ("engine", "up"), ("plugin", "es-inference")])
def test_sub_command_help_loads_no_heavy_library(args: tuple[str, ...]) -> None:
    assert help_imports(*args) == []


def test_the_probe_sees_a_heavy_import() -> None:
    # the check can fail: running a command that needs numpy is seen
    out = subprocess.run(
        [sys.executable, "-c", "import sys, json; import jingpai.keyword_dict.build; "
         f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "numpy" in json.loads(out)
