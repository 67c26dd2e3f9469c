"""Run an ASGI app (the rerank service, the gateway) under uvicorn in a background thread.

Used by ``jingpai demo``, the tests and the benchmarks, which start real servers in-process on a
loopback port. uvicorn installs no signal handlers off the main thread, so the caller keeps Ctrl-C.

Example:
    >>> with serve(create_app(settings)) as server:      # doctest: +SKIP
    ...     httpx.get(f"{server.url}/health")
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jingpai.errors import UnavailableError
from jingpai.net import free_port

logger = logging.getLogger(__name__)


class ServerStartError(UnavailableError, RuntimeError):
    """The server did not come up (typically: the port is taken)."""


class ServerThread:
    """One ASGI app served by uvicorn in a daemon thread.

    Args:
        app: the ASGI application.
        port: TCP port (``None`` or 0: a free one).
        host: interface to bind.
        name: used in the thread name and in errors (``reranker``, ``gateway`` …).
    """

    def __init__(self, app: Any, port: int | None = None, *, host: str = "127.0.0.1", name: str = "server") -> None:
        self.app = app
        self.host = host
        self.port = port or free_port()
        self.name = name
        self._server: Any = None
        self._thread: threading.Thread | None = None
        #: what ended the server's thread when it ended by itself (``None``: it did not, or uvicorn gave no reason)
        self.failure: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        """Whether the server still serves: started, not stopped, and its thread has not ended by itself."""
        return self._thread is not None and self._thread.is_alive() and not self._server.should_exit

    def _run(self) -> None:
        try:
            self._server.run()
        except BaseException as exc:  # noqa: BLE001 - kept for whoever watches the server (alive, failure)
            self.failure = exc
            # uvicorn exits with SystemExit when it cannot bind (start() says so); anything else is a bug to show
            logger.error("the %s on %s stopped: %s: %s", self.name, self.url, type(exc).__name__, exc,
                         exc_info=not isinstance(exc, SystemExit))

    def start(self, *, timeout_s: float = 60.0) -> ServerThread:
        """Start serving and wait until the socket listens.

        Raises:
            ServerStartError: the server did not come up within ``timeout_s``.
        """
        import uvicorn

        # an app may name its HTTP protocol class (the gateway's accepts raw UTF-8 request targets)
        http = getattr(getattr(self.app, "state", None), "http_protocol", None) or "auto"
        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning", lifespan="on", http=http)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name=f"jingpai-{self.name}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(
                    f"the {self.name} did not start on {self.url}; is port {self.port} already in use? choose another port"
                )
            time.sleep(0.02)
        return self

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Ask uvicorn to exit and wait for the thread (idempotent)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            if self._thread.is_alive():
                logger.warning("the %s thread did not stop within %.0f s", self.name, timeout_s)
        self._server = self._thread = None


@contextmanager
def serve(app: Any, port: int | None = None, *, host: str = "127.0.0.1", name: str = "server") -> Iterator[ServerThread]:
    """Serve ``app`` for the duration of the ``with`` block."""
    server = ServerThread(app, port, host=host, name=name).start()
    try:
        yield server
    finally:
        server.stop()


__all__ = ["ServerStartError", "ServerThread", "serve"]
