"""The running demo's parts, watched: when one dies, the demo says which and where its log is, and ends.

:func:`watch` is what :func:`jingpai.jobs.demo.run_demo` waits in once the demo is up. Every
:data:`CHECK_EVERY_S` it checks each part the demo started — the engine node (its process, through the
harness's record of it), the reranker service and the gateway (their server threads) — and raises
:class:`~jingpai.jobs.demo_settings.DemoError` naming the first one found dead and its log; the demo then
stops the others, and ``jingpai demo`` exits with status 1 instead of serving 502s. An engine given with
``--engine-url`` is not the demo's: it is not watched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jingpai.jobs.demo_settings import DemoError

if TYPE_CHECKING:
    from jingpai.engine.settings import EngineSettings
    from jingpai.serving import ServerThread

#: seconds between two checks of the parts
CHECK_EVERY_S = 1.0
#: where the reranker's and the gateway's log lines go: they run in the demo's own process
OWN_LOG = "the demo's own output above (`jingpai -v demo` adds jingpai's log lines)"


@dataclass(frozen=True)
class Part:
    """One watched part: its name for people, whether it still runs, and what to say when it does not."""

    name: str
    alive: Callable[[], bool]
    death: Callable[[], str]


def parts(engine: EngineSettings | None, engine_url: str, servers: list[ServerThread | None]) -> list[Part]:
    """The parts the demo started, engine first: the node of ``engine`` (``None``: the demo was given a
    running engine) on ``engine_url``, and each server that runs."""
    found = [_engine(engine, engine_url)] if engine is not None else []
    return found + [_server(server) for server in servers if server is not None]


def _engine(settings: EngineSettings, url: str) -> Part:
    from jingpai.engine import harness

    def node() -> harness.NodeInfo | None:
        return next((n for n in harness.status(settings.cache_dir) if n.instance_dir == settings.instance_dir), None)

    def alive() -> bool:
        found = node()
        return found is not None and found.alive

    def death() -> str:
        found = node()
        pid = f" (pid {found.pid})" if found is not None else ""
        log = found.log_file if found is not None else settings.instance_dir / "engine.log"
        return f"the {settings.kind} engine on {url}{pid} died; its log: {log}"

    return Part(f"{settings.kind} engine", alive, death)


def _server(server: ServerThread) -> Part:
    def death() -> str:
        why = f" ({type(server.failure).__name__}: {server.failure})" if server.failure is not None else ""
        return f"the {server.name} on {server.url} stopped{why}; its log: {OWN_LOG}"

    return Part(server.name, lambda: server.alive, death)


def watch(watched: list[Part], stop: threading.Event, *, every_s: float = CHECK_EVERY_S) -> None:
    """Return when ``stop`` is set; raise when one of the ``watched`` parts (:func:`parts`) dies first.

    Raises:
        DemoError: a watched part died; the message names it and its log, and says the demo stops.
    """
    while not stop.wait(every_s):
        for part in watched:
            if not part.alive():
                raise DemoError(f"{part.death()}. The demo stops: run `jingpai demo` again to start it afresh")


__all__ = ["CHECK_EVERY_S", "Part", "parts", "watch"]
