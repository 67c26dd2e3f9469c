"""Who jingpai is to the engine (:class:`EngineAuth`: a user and password or an API key, and the CA of an
``https://`` engine), and the one translation of the engines' refusals into errors naming the fix
(:func:`access_error`): 401 (credentials missing or rejected), an untrusted certificate, 403 (a missing
permission). No message, ``repr`` or log line carries a password or key.

:mod:`jingpai.engine.client` uses both and re-exports them.
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from jingpai.engine.defaults import AUTH_ENV
from jingpai.errors import UserError


class EngineAccessError(UserError, PermissionError):
    """The engine refused jingpai's credentials (HTTP 401), its certificate is not trusted, or the user lacks a
    permission (HTTP 403): the message names the user (never a password or key) and what to fix."""


class EngineAuthError(EngineAccessError):
    """HTTP 401: no credentials, or credentials the engine does not accept."""


class EngineTLSError(EngineAccessError):
    """The engine's TLS certificate is not trusted by the CA file given (or the system's CAs), or it speaks TLS
    to a client that asked for plain HTTP."""


class EnginePermissionError(EngineAccessError):
    """HTTP 403: the user is known but lacks the permission for the action the engine names."""




@dataclass(frozen=True)
class EngineAuth:
    """Who jingpai is to the engine, and which CA it trusts for ``https://`` engines.

    Args:
        user: HTTP basic user (with ``password``); OpenSearch's security plugin, Elasticsearch's x-pack.
        password: its password (never shown: not in ``repr``, messages or logs).
        api_key: an Elasticsearch API key, sent as ``Authorization: ApiKey …`` (the encoded ``id:key`` form);
            OpenSearch 2.19's security plugin has no API keys and answers it with 401.
        ca_file: PEM file of the CA that signed the engine's certificate (default: the system's CAs).
    """

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    ca_file: Path | None = None

    def __post_init__(self) -> None:
        if self.api_key and (self.user or self.password):
            raise EngineAuthError("give either a user and password (--engine-user/--engine-password) or an API key "
                                  "(--engine-api-key), not both")
        if bool(self.user) != bool(self.password):
            missing = "--engine-password (JINGPAI_ENGINE_PASSWORD)" if self.user else "--engine-user (JINGPAI_ENGINE_USER)"
            raise EngineAuthError(f"a user and a password go together: {missing} is missing")
        if self.ca_file is not None:
            object.__setattr__(self, "ca_file", Path(self.ca_file))
            if not self.ca_file.is_file():
                raise EngineTLSError(f"the engine CA file {self.ca_file} does not exist; pass the PEM file of the CA that "
                                     "signed the engine's certificate with --engine-ca-file (JINGPAI_ENGINE_CA_FILE)")

    @property
    def who(self) -> str:
        """The identity for messages: ``user 'alice'``, ``an API key`` or ``no credentials``."""
        if self.user:
            return f"user {self.user!r}"
        return "an API key" if self.api_key else "no credentials"

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header these credentials send (empty without any)."""
        if self.user and self.password:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {token}"}
        if self.api_key:
            return {"Authorization": f"ApiKey {self.api_key}"}
        return {}

    def ssl_context(self) -> ssl.SSLContext | None:
        """A TLS context trusting :attr:`ca_file` (``None``: the client's default, the system's CAs)."""
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file is not None else None


NO_AUTH = EngineAuth()


def access_error(exc: BaseException, *, url: str, auth: EngineAuth | None = None, action: str | None = None) -> EngineAccessError | None:
    """``exc`` (an official client's or httpx's error) as an :class:`EngineAccessError` naming the fix, or ``None``
    when it is no authentication, permission or certificate failure."""
    auth = auth or NO_AUTH
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        origin = f"the CA file {auth.ca_file}" if auth.ca_file else "the system's CAs"
        return EngineTLSError(f"the TLS certificate of the engine at {url} is not trusted by {origin}; pass the PEM file of "
                              "the CA that signed it with --engine-ca-file (JINGPAI_ENGINE_CA_FILE); a `jingpai engine up "
                              "--plugins security` node prints its CA file")
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        status = getattr(getattr(exc, "meta", None), "status", None)
    if not isinstance(status, int) and isinstance(getattr(exc, "response", None), httpx.Response):
        status = exc.response.status_code  # type: ignore[attr-defined]
    if status == 401:
        if not auth.headers():
            return EngineAuthError(f"the engine at {url} requires authentication (HTTP 401); pass --engine-user and "
                                   "--engine-password (JINGPAI_ENGINE_USER / JINGPAI_ENGINE_PASSWORD) or --engine-api-key")
        return EngineAuthError(f"the engine at {url} rejected the credentials of {auth.who} (HTTP 401); check "
                               "--engine-user / --engine-password (JINGPAI_ENGINE_USER / JINGPAI_ENGINE_PASSWORD) or --engine-api-key")
    if status == 403:
        reason = _reason(exc)
        doing = f" to {action}" if action else ""
        return EnginePermissionError(f"the engine at {url} refused {auth.who} the permission{doing} (HTTP 403: {reason}); "
                                     "grant the user a role with that permission (docs/security.md lists what each jingpai part needs)")
    return None


def _reason(exc: BaseException) -> str:
    """The engine's reason of an error answer, as short as the engine put it."""
    info = getattr(exc, "info", None) if not hasattr(exc, "body") else getattr(exc, "body", None)
    if isinstance(info, dict):
        error = info.get("error")
        if isinstance(error, dict):
            return str(error.get("reason") or error.get("type") or error)[:300]
        if error:
            return str(error)[:300]
    response = getattr(exc, "response", None)
    if isinstance(response, httpx.Response):
        try:
            error = response.json().get("error")
            return str(error.get("reason") if isinstance(error, dict) else error)[:300]
        except ValueError:
            return response.text[:300]
    error = getattr(exc, "error", None)
    if isinstance(error, str) and error and error != "None":
        return error[:300]
    return "the engine gave no reason (an answer without a body, as to HEAD)" if getattr(exc, "status_code", None) else str(exc)[:300]


__all__ = [
    "AUTH_ENV", "NO_AUTH", "EngineAccessError", "EngineAuth", "EngineAuthError", "EnginePermissionError", "EngineTLSError", "access_error",
]
