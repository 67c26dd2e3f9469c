"""Package attributes imported on first use (PEP 562), for packages whose parts load heavy libraries.

``jingpai.keyword_dict`` (numpy, jieba) and ``jingpai.reranker.service`` (torch, FastAPI) export names from
their modules this way, so that importing one light module of theirs (the settings every ``--help``
reads) does not import the rest.

Example:
    >>> import types, sys
    >>> pkg = types.ModuleType("demo_pkg"); sys.modules["demo_pkg"] = pkg
    >>> pkg.__getattr__, pkg.__dir__ = lazy_exports("demo_pkg", {"sqrt": "math"}, prefix="")
    >>> pkg.sqrt(9.0)
    3.0
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], *, prefix: str | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name in ``exports`` (name → module) is imported from
    ``<prefix><module>`` when first read, then kept in the package (``prefix`` defaults to ``package + "."``)."""
    base = f"{package}." if prefix is None else prefix

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(base + module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
