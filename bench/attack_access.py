"""How ``bench/attack.py`` reaches its engine: plain HTTP, or a secured OpenSearch node over TLS as its admin
(``--kind secured``), the same way for its own requests, the ``jingpai index`` / ``gateway`` it runs and the searches
it sends through the gateway (which forwards the client's credentials: it holds none). And the ports it binds
(``--ports``: a range of its own on a shared machine, else the OS's choice)."""

from __future__ import annotations

import base64
import os
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import httpx


@dataclass(frozen=True)
class EngineAccess:
    """Credentials and CA for the engine (none: plain HTTP, as the unsecured kinds run)."""

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: Path | None = None

    @classmethod
    def admin_of(cls, instance: Path) -> EngineAccess:
        """The admin of a harness node with the security plugin (its instance directory holds the CA and password)."""
        from jingpai.engine import security

        return cls(user="admin", password=security.admin_password(instance), ca_file=security.ca_file(instance))

    @property
    def headers(self) -> dict[str, str]:
        if not self.user:
            return {}
        return {"Authorization": "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()}

    def client(self, **kwargs) -> httpx.Client:
        """An httpx client to the engine (or to the gateway: the same credentials go through it)."""
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else True
        return httpx.Client(headers=self.headers, verify=verify, trust_env=False, **kwargs)

    def get(self, url: str, **kwargs) -> httpx.Response:
        with self.client() as client:
            return client.get(url, **kwargs)

    def post(self, url: str, **kwargs) -> httpx.Response:
        with self.client() as client:
            return client.post(url, **kwargs)

    def env(self) -> dict[str, str]:
        """The environment of a ``jingpai`` subprocess: the credential variables every engine command reads
        (docs/security.md), so the password is on no command line."""
        env = dict(os.environ)
        if self.user:
            env.update(JINGPAI_ENGINE_USER=self.user, JINGPAI_ENGINE_PASSWORD=str(self.password))
        if self.ca_file:
            env["JINGPAI_ENGINE_CA_FILE"] = str(self.ca_file)
        return env

    def gateway_args(self) -> list[str]:
        """``jingpai gateway``'s one security option: the CA it trusts (clients bring their own credentials)."""
        return ["--engine-ca-file", str(self.ca_file)] if self.ca_file else []


class Ports:
    """Free loopback ports: the first free one of ``--ports START-END``, else one the OS picks."""

    def __init__(self, spec: str | None) -> None:
        if spec:
            start, _, end = spec.partition("-")
            self.range: range | None = range(int(start), int(end or start) + 1)
        else:
            self.range = None
        self.given: set[int] = set()

    def free(self) -> int:
        from jingpai.net import free_port

        if self.range is None:
            return free_port()
        for port in self.range:
            if port in self.given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            self.given.add(port)
            return port
        raise SystemExit(f"no free port left in --ports {self.range.start}-{self.range.stop - 1}")


__all__ = ["EngineAccess", "Ports"]
