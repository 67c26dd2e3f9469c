"""Helpers for the docker/ tests: read docker/.env and docker/compose.yaml the way Compose does.

No Docker engine runs here, so the tests check the files themselves, Debian's ``docker-compose config``
(validates a compose file without an engine; ``.ci/run`` installs it), and the CLI commands the
containers run, started as real processes with the containers' command lines and environments.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"
ENV_FILE = DOCKER / ".env"
DOCKERFILE = DOCKER / "Dockerfile"

#: ${NAME}, ${NAME:-default}, ${NAME-default}; "$$" is a literal "$"
_VAR = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}")


def read_env_file(path: Path = ENV_FILE) -> dict[str, str]:
    """``KEY=VALUE`` lines of a Compose ``.env`` file (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"{path}:{lineno}: expected KEY=VALUE, got {line!r}")
        if key in values:
            raise ValueError(f"{path}:{lineno}: {key} is set twice")
        values[key] = value
    return values


def compose_defaults(text: str) -> dict[str, list[str]]:
    """Every ``${NAME:-default}`` in a compose file: name -> the defaults written for it."""
    found: dict[str, list[str]] = {}
    for m in _VAR.finditer(text):
        if m.group("name"):
            found.setdefault(m.group("name"), []).append(m.group("default") if m.group("op") else None)
    return found


def interpolate(node: Any, env: dict[str, str]) -> Any:
    """Compose's variable substitution applied to every string of a loaded compose file."""
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, env) for v in node]
    if not isinstance(node, str):
        return node

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, default = m.group("name"), m.group("op"), m.group("default")
        value = env.get(name)
        if op == ":-" and not value:
            return default
        if op == "-" and value is None:
            return default
        return value or ""

    return _VAR.sub(sub, node)


@dataclass(frozen=True)
class Compose:
    """docker/compose.yaml with docker/.env substituted (what ``docker compose`` sees)."""

    env: dict[str, str]
    data: dict[str, Any]

    @property
    def services(self) -> dict[str, dict[str, Any]]:
        return self.data["services"]

    def profiles(self) -> set[str]:
        return {p for s in self.services.values() for p in s.get("profiles", [])}

    def active(self, profile: str) -> dict[str, dict[str, Any]]:
        """The services ``--profile PROFILE`` starts."""
        return {n: s for n, s in self.services.items() if not s.get("profiles") or profile in s["profiles"]}

    def with_alias(self, alias: str, services: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
        services = self.services if services is None else services
        return {
            n: s for n, s in services.items()
            if alias in ((s.get("networks") or {}).get("default") or {}).get("aliases", [])
        }


def load_compose() -> Compose:
    env = read_env_file()
    return Compose(env=env, data=interpolate(yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8")), env))


@pytest.fixture(scope="session")
def compose() -> Compose:
    return load_compose()


def compose_env() -> dict[str, str]:
    """The process environment for ``docker-compose``, minus anything that would override docker/.env."""
    names = set(read_env_file())
    return {k: v for k, v in os.environ.items() if k not in names and not k.startswith(("COMPOSE_", "DOCKER_"))}


def docker_compose(*args: str, compose_file: Path = COMPOSE_FILE) -> subprocess.CompletedProcess[str]:
    """Run Debian's ``docker-compose -f FILE ARGS…`` (v1.29; parses and validates without an engine)."""
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose; .ci/run installs it)")
    return subprocess.run(
        [exe, "-f", str(compose_file), *args],
        capture_output=True, text=True, env=compose_env(), timeout=60, check=False,
    )
