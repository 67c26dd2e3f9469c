"""Loopback networking helpers shared by the engine harness and the in-process servers."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the OS picks it; another process may take it before you)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


__all__ = ["free_port"]
