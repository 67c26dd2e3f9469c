"""The package layout the next engineer relies on (docs/architecture.md): checked, not hoped for.

- Imports run one way: commands → jobs / ui → core (keyword_dict, indexer, reranker, plugin, engine);
  nothing below imports upwards, and the core's data flow (corpus → keyword_dict → indexer → engine ←
  plugin → reranker) has no back edges.
- No module over 400 lines and no function over 60 lines, except where a ``# long:`` comment right
  above the ``def`` says why.
- Every exception jingpai defines derives from :class:`jingpai.errors.JingpaiError`.
- No import cycles between jingpai's modules: every ``import`` statement counts, at module level, inside a
  function or under ``if TYPE_CHECKING:`` (a type a module only annotates with still belongs to a module
  below it: settings and result types get modules of their own). A module imported by name at run time
  (the registry's architectures, :data:`jingpai.reranker.base.LOADER`) is no edge.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections import deque
from itertools import pairwise
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


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, dict[str, int]]:
    """module → {module it imports: line of the first such import}, over every import statement of jingpai's
    modules (``from package import module`` is an edge to the module)."""
    paths = {module_name(path): path for path in modules()}
    graph: dict[str, dict[str, int]] = {}
    for name, path in paths.items():
        edges = graph.setdefault(name, {})
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                if target in paths and target != name:
                    edges.setdefault(target, node.lineno)
    return graph


def shortest_cycle(graph: dict[str, dict[str, int]], start: str) -> list[str] | None:
    """The shortest import path from ``start`` back to itself (breadth first, no recursion)."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in graph[node]:
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    return None


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles: dict[frozenset[str], str] = {}
    for name in sorted(graph):
        cycle = shortest_cycle(graph, name)
        if cycle is not None and frozenset(cycle) not in cycles:
            cycles[frozenset(cycle)] = " → ".join(f"{a} (line {graph[a][b]})" for a, b in pairwise(cycle)) + f" → {cycle[-1]}"
    assert sorted(cycles.values()) == []


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
