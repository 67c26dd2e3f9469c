"""The package layout the next engineer relies on (docs/architecture.md): checked, not hoped for.

- Imports run one way: commands → jobs / ui → core (keyword_dict, indexer, reranker, plugin, engine);
  nothing below imports upwards, and the core's data flow (corpus → keyword_dict → indexer → engine ←
  plugin → reranker) has no back edges.
- No module over 400 lines and no function over 60 lines, except where a ``# long:`` comment right
  above the ``def`` says why.
- Every exception jingpai defines derives from :class:`jingpai.errors.JingpaiError`.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import jingpai
from jingpai.errors import JingpaiError

ROOT = Path(jingpai.__file__).parent
CORE = ("keyword_dict", "indexer", "reranker", "plugin", "engine")
UPPER = ("commands", "jobs", "ui", "cli")
#: core package → core packages it must not import (the data flow's back edges)
BACK_EDGES = {
    "keyword_dict": {"indexer", "reranker", "plugin", "engine"},
    "engine": {"keyword_dict", "indexer", "reranker", "plugin"},
    "indexer": {"reranker", "plugin"},
    "reranker": {"indexer", "plugin", "engine"},
}
#: control-flow signals that never leave their module's caller, so they are no JingpaiError on purpose
INTERNAL_SIGNALS = {"jingpai.plugin.gateway.errors.NotOursToJudge"}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def package_of(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    return rel[0].removesuffix(".py") if len(rel) > 1 or rel[0] == "cli.py" else ""


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, name) for line, name in out if name == "jingpai" or name.startswith("jingpai.")]


def test_imports_run_one_way() -> None:
    bad = []
    for path in modules():
        own = package_of(path)
        for line, name in imported(ast.parse(path.read_text(encoding="utf-8"))):
            target = name.split(".")[1] if "." in name else ""
            where = f"{path.relative_to(ROOT.parent)}:{line} imports {name}"
            if target == "commands" and own not in ("cli", "commands"):
                bad.append(where)
            elif own in CORE and target in UPPER:
                bad.append(where)
            elif own in ("jobs", "ui") and target in ("commands", "cli"):
                bad.append(where)
            elif target in BACK_EDGES.get(own, ()):
                bad.append(where)
    assert bad == []


def long_allowed(lines: list[str], node: ast.AST) -> bool:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return any("# long:" in lines[i] for i in range(max(0, first - 3), first))


def test_modules_and_functions_stay_small() -> None:
    too_long = []
    for path in modules():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        rel = path.relative_to(ROOT.parent)
        if len(lines) > MAX_MODULE_LINES and "# long:" not in "\n".join(lines[:40]):
            too_long.append(f"{rel}: {len(lines)} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and not long_allowed(lines, node):
                    too_long.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []


def all_exceptions() -> list[type]:
    found = {}
    for info in pkgutil.walk_packages(jingpai.__path__, "jingpai."):
        if info.name.startswith(("jingpai.ui.static", "jingpai.__main__")):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:  # an optional extra that is not installed
            pytest.skip(f"{info.name}: {exc}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("jingpai"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_exception_derives_from_jingpai_error() -> None:
    exceptions = all_exceptions()
    assert len(exceptions) > 20
    names = {f"{e.__module__}.{e.__qualname__}": e for e in exceptions}
    assert INTERNAL_SIGNALS <= set(names)
    assert [n for n, e in names.items() if not issubclass(e, JingpaiError) and n not in INTERNAL_SIGNALS] == []
