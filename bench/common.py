"""Shared benchmark plumbing: data location, a local engine, a one-line machine description."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path

from jingpai.engine import harness

DATA_DIR = Path(os.environ.get("JINGPAI_DATA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data"))


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (the platform's name where that is unreadable)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The CPU's vector and matrix features that decide inference speed (benchmarks print them: machines differ)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    found = sorted(flags & {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile"})
    return ", ".join(found) or "none of avx2/avx512/amx"


def machine() -> str:
    return f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}"


@contextlib.contextmanager
def local_engine(kind: harness.EngineKind, url: str | None = None, *, plugins: tuple[str, ...] = ()) -> Iterator[str]:
    """Yield an engine URL: ``url`` if given, else a fresh local node (with ``plugins``, e.g. OpenSearch's
    ``knn``) that is stopped afterwards."""
    if url:
        yield url
        return
    settings = harness.EngineSettings(kind=kind, port=harness.free_port(), plugins=plugins)
    node = harness.start(settings)
    try:
        yield node.url
    finally:
        harness.stop(settings, purge=True)


def wait_http(url: str, *, timeout_s: float = 120.0) -> None:
    """Until ``url`` answers below 500 (a server a bench started is up); RuntimeError after ``timeout_s``."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2, trust_env=False).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f}s")
