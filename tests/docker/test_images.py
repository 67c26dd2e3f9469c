"""docker/Dockerfile and docker/healthcheck.py.

The images cannot be built here (no Docker engine), so: the Dockerfile installs the package with the
same uv command as scripts/bootstrap (dependencies come from pyproject.toml only), its defaults match
the CLI, and the containers' command lines and environments — taken from compose.yaml — start the real
``jingpai serve`` / ``jingpai gateway`` processes, which the containers' health checks then find healthy.
"""

from __future__ import annotations

import http.server
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from jingpai.commands.gateway import gateway
from jingpai.commands.serve import serve

from .conftest import DOCKER, DOCKERFILE, REPO, Compose

HEALTHCHECK = DOCKER / "healthcheck.py"
#: where the Dockerfile puts healthcheck.py in the image
IMAGE_HEALTHCHECK = "/opt/jingpai/healthcheck.py"


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instr, _, rest = line.partition(" ")
            out.append((instr.upper(), rest.strip()))
    return out


def stages() -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its instructions (``FROM x AS name``)."""
    result: dict[str, list[tuple[str, str]]] = {}
    current = None
    for instr, rest in dockerfile_instructions():
        if instr == "FROM":
            current = rest.split()[-1]
            result[current] = []
        elif current is not None:
            result[current].append((instr, rest))
    return result


def pip_installs(commands: str) -> list[list[str]]:
    """The argument lists of every ``pip install`` in a shell command line."""
    found = []
    for part in re.split(r"&&|;|\|\|", commands):
        words = shlex.split(part)
        for i in range(len(words) - 1):
            if words[i : i + 2] == ["pip", "install"]:
                found.append(words[i + 2 :])
    return found


def test_dockerfile_installs_the_package_like_bootstrap() -> None:
    bootstrap = (REPO / "scripts" / "bootstrap").read_text(encoding="utf-8")
    [boot] = [args for line in bootstrap.splitlines() if line.startswith("$UV ") for args in pip_installs(line)]
    assert boot[-2:] == ["-e", ".[dev,spark]"], boot  # bootstrap installs the project, editable, with dev + spark extras
    runs = [rest for instr, rest in dockerfile_instructions() if instr == "RUN"]
    installs = [args for run in runs for args in pip_installs(run)]
    assert installs, "the Dockerfile installs jingpai"
    project_installs = []
    for args in installs:
        if args[-1:] == ["uv"]:  # bootstrap too installs uv with pip when it is missing
            continue
        # every other install takes its requirements from the project: pyproject.toml, never a package list
        assert args[-2:] in (["-r", "pyproject.toml"], ["-e", "."]), args
        flags = [a for a in args[:-2] if a.startswith("-") and a != "${TORCH_BACKEND:+--torch-backend"]
        assert flags == [a for a in boot[:-2] if a.startswith("-")], f"{args} vs bootstrap {boot}"
        project_installs.append(args[-2:])
    assert project_installs[-1] == ["-e", "."], "the last install is bootstrap's `-e .` (without the dev and spark extras)"
    # what the Dockerfile copies exists and is not left out of the build context
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    included = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore, "the context holds only what is re-included below"
    sources = [src for instr, rest in dockerfile_instructions() if instr == "COPY" for src in rest.split()[:-1]]
    assert {src.rstrip("/") for src in sources} == included
    for src in sources:
        assert (REPO / src).exists(), f"COPY {src}: not in the repository"


def test_dockerfile_targets_users_defaults_and_python() -> None:
    st = stages()
    assert {"base", "reranker", "gateway"} <= set(st)
    base = dict(st["base"])
    assert [r for i, r in st["base"] if i == "USER"] == ["jingpai"], "the images run as a non-root user"
    assert base["ENTRYPOINT"] == '["jingpai"]'
    assert f"docker/healthcheck.py {IMAGE_HEALTHCHECK}" in [r for i, r in st["base"] if i == "COPY"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    minimum = tuple(int(x) for x in re.search(r">=\s*([\d.]+)", pyproject["project"]["requires-python"]).group(1).split("."))
    python = re.search(r"ARG PYTHON_VERSION=([\d.]+)", DOCKERFILE.read_text(encoding="utf-8")).group(1)
    assert tuple(int(x) for x in python.split(".")) >= minimum

    for target, command, route in (("reranker", serve, "/health"), ("gateway", gateway, "/_jingpai/health")):
        instr = dict(st[target])
        assert instr["CMD"] == f'["{command.name}", "--host", "0.0.0.0"]'
        port = next(p for p in command.params if p.name == "port")
        assert instr["EXPOSE"] == str(port.default)
        assert f'{IMAGE_HEALTHCHECK} "http://127.0.0.1:${{{port.envvar}:-{port.default}}}{route}"' in instr["HEALTHCHECK"]


def test_compose_builds_the_dockerfile_targets(compose: Compose) -> None:
    for name in ("reranker", "reranker-cpu", "gateway"):
        build = compose.services[name]["build"]
        assert (REPO / "docker" / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
        assert build["target"] in stages()
    # `docker run` of the reranker image alone finds its model where compose puts it
    for name in ("reranker", "reranker-cpu"):
        assert ("ENV", f"JINGPAI_SERVE_MODEL={compose.services[name]['environment']['JINGPAI_SERVE_MODEL']}") in stages()["reranker"]


# ------------------------------------------------------------------------------------------ healthcheck.py


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_healthcheck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HEALTHCHECK), *args], capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def status_server() -> Iterator[tuple[str, dict[str, int]]]:
    """A real HTTP server answering every GET with ``state["status"]``."""
    state = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(state["status"])
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/health", state
    server.shutdown()
    server.server_close()


def test_healthcheck_script_exit_codes(status_server: tuple[str, dict[str, int]]) -> None:
    url, state = status_server
    assert run_healthcheck(url).returncode == 0
    state["status"] = 503
    result = run_healthcheck(url)
    assert (result.returncode, result.stderr.strip()) == (1, f"unhealthy: {url} answered HTTP 503")
    closed = f"http://127.0.0.1:{free_port()}/health"
    result = run_healthcheck(closed)
    assert result.returncode == 1 and result.stderr.startswith(f"unhealthy: {closed} is unreachable:")
    result = run_healthcheck("localhost:8081")
    assert (result.returncode, result.stderr.strip()) == (2, "usage: healthcheck.py http://HOST:PORT/PATH (got ['localhost:8081'])")


# ------------------------------------------------------------- the containers' processes, run for real here


def container_process(service: dict, *, port_var: str, port: int, overrides: dict[str, str],
                      log: Path) -> tuple[subprocess.Popen, list[str]]:
    """Start the service's ``jingpai`` command with its compose environment; return it and its health check.

    The only changes are the ones a container gets for free: its own port (here a free one) and paths
    inside its volumes (here local directories).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("JINGPAI_")}
    env.update({k: str(v) for k, v in service["environment"].items()})
    compose_port = env[port_var]
    env.update({port_var: str(port), "OMP_NUM_THREADS": "1", **overrides})
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "jingpai", *service["command"]], env=env, stdout=fh, stderr=subprocess.STDOUT)
    proc.log = log  # type: ignore[attr-defined]
    test = service["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", IMAGE_HEALTHCHECK]
    url = test[3].replace(f":{compose_port}/", f":{port}/")
    return proc, [sys.executable, str(HEALTHCHECK), url]


def wait_healthy(proc: subprocess.Popen, check: list[str], *, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        result = subprocess.run(check, capture_output=True, text=True, timeout=30, check=False)
        if result.returncode == 0:
            return
        if proc.poll() is not None:
            pytest.fail(f"{check[-1]}: the process exited with {proc.returncode}: {proc.log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{check[-1]} never became healthy: {result.stderr}")
        time.sleep(0.5)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from jingpai.reranker import registry
    from jingpai.reranker.tiny import build_tiny_checkpoint

    base = build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-bert"), ["哪些因素会影响中国的GDP", "rerank me"], seed=0)
    torch.manual_seed(0)
    model = registry.create("cross", base=str(base), max_length=32, device="cpu")
    return Path(model.save(tmp_path_factory.mktemp("models") / "reranker"))


@pytest.mark.slow
@pytest.mark.parametrize("service", ["reranker-cpu"])
def test_reranker_container_command_serves_and_passes_its_healthcheck(
    compose: Compose, service: str, tiny_model_dir: Path, tmp_path: Path,
) -> None:
    svc = compose.services[service]
    proc, check = container_process(
        svc, port_var="JINGPAI_SERVE_PORT", port=free_port(), overrides={"JINGPAI_SERVE_MODEL": str(tiny_model_dir)},
        log=tmp_path / "serve.log",
    )
    try:
        wait_healthy(proc, check)
    finally:
        stop(proc)
    after = subprocess.run(check, capture_output=True, text=True, timeout=30, check=False)
    assert after.returncode == 1 and "is unreachable" in after.stderr, "the health check fails once it is gone"


def test_gateway_container_command_serves_and_passes_its_healthcheck(compose: Compose, tmp_path: Path) -> None:
    """The gateway is healthy without its engine: the UI page is its own."""
    svc = compose.services["gateway"]
    proc, check = container_process(svc, port_var="JINGPAI_GATEWAY_PORT", port=free_port(), overrides={},
                                    log=tmp_path / "gateway.log")
    try:
        wait_healthy(proc, check)
    finally:
        stop(proc)
