"""The engine harness's error paths give one clear line naming the fix."""

from __future__ import annotations

import re
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine import harness
from jingpai.engine.harness import EngineError, EngineSettings


def test_unknown_kind_names_valid_options() -> None:
    with pytest.raises(ValueError, match=r"unknown engine kind 'solr'; expected one of opensearch, elasticsearch"):
        EngineSettings(kind="solr")  # type: ignore[arg-type]


def test_busy_port_is_reported() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(EngineError, match=rf"port {port} on 127.0.0.1 is already in use .* --port"):
            harness.launch(EngineSettings(kind="opensearch", port=port))


def test_missing_java_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EngineError, match=r"`java` was not found on PATH; install Java 17"):
        harness.java_home()


def test_missing_mvn_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    settings = EngineSettings(kind="opensearch", version="2.19.0", cache_dir=tmp_path / "cache")
    with pytest.raises(EngineError, match=r"`mvn` was not found on PATH; install Maven"):
        harness.ensure_distribution(settings)


def test_node_that_fails_to_start_points_at_its_log() -> None:
    settings = EngineSettings(kind="opensearch", port=harness.free_port(), heap="1x")
    try:
        with pytest.raises(EngineError, match=r"opensearch exited with code \d+ during start-up; see .*engine\.log"):
            harness.start(settings)
    finally:
        harness.stop(settings, purge=True)


@pytest.fixture
def own_cache_dir() -> Iterator[Path]:
    """A cache dir of this test's own (``--cache-dir``), sharing the distributions of the default one.

    Other test sessions' nodes live under the default cache dir; ``down`` without ``--port`` and
    ``status`` must see only this test's nodes. It lies next to the default cache dir rather than under
    pytest's tmp_path, which the unprivileged engine user cannot traverse when the tests run as root.
    """
    shared = harness.default_cache_dir()
    harness.ensure_distribution(EngineSettings(kind="opensearch", cache_dir=shared))
    cache = shared.parent / f"test-{uuid.uuid4().hex[:10]}"
    (cache / "engines").mkdir(parents=True)
    for sub in ("dist", "zips"):
        (cache / "engines" / sub).symlink_to(shared / sub, target_is_directory=True)
    try:
        yield cache
    finally:
        shutil.rmtree(cache, ignore_errors=True)  # unlinks the symlinks, never follows them


def test_cli_up_status_down_round_trip(own_cache_dir: Path) -> None:
    cache = ["--cache-dir", str(own_cache_dir)]
    second = EngineSettings(kind="opensearch", port=harness.free_port(), cache_dir=own_cache_dir / "engines")
    port = harness.free_port()
    runner = CliRunner()
    try:
        proc = harness.launch(second)  # starts while `up` starts the first: two nodes, neither on the default port
        up = runner.invoke(cli, ["engine", "up", "--kind", "opensearch", "--port", str(port), *cache])
        assert up.exit_code == 0, up.output
        assert up.stdout.strip().splitlines()[-1] == f"http://127.0.0.1:{port}"
        harness.wait(second, proc)

        again = runner.invoke(cli, ["engine", "up", "--kind", "opensearch", "--port", str(port), *cache])
        assert again.exit_code == 1
        assert f"already runs on http://127.0.0.1:{port}" in again.output

        status = runner.invoke(cli, ["engine", "status", *cache])
        lines = status.output.splitlines()
        assert len(lines) == 2, status.output
        for p in (port, second.resolved_port):
            assert re.match(rf"opensearch +2\.19\.\d+ +port {p} +running +pid \d+ +http://127\.0\.0\.1:{p} ", next(x for x in lines if f"port {p} " in x))

        both = runner.invoke(cli, ["engine", "down", "--kind", "opensearch", *cache])
        assert both.exit_code == 1
        ports = ", ".join(map(str, sorted([port, second.resolved_port])))
        assert f"2 opensearch nodes run, on ports {ports}; choose one with --port or stop them all with --all" in both.output

        default = runner.invoke(cli, ["engine", "down", "--kind", "opensearch", *cache, "--port", "9200"])
        assert default.output.strip() == f"no running opensearch node on http://127.0.0.1:9200; opensearch runs on port(s) {ports}: pass one of them with --port"

        one = runner.invoke(cli, ["engine", "down", "--kind", "opensearch", "--port", str(second.resolved_port), *cache, "--purge"])
        assert one.exit_code == 0 and one.output.strip() == f"stopped opensearch on {second.url}"
        # the case of the issue: no --port, one node up on a port that is not the default
        down = runner.invoke(cli, ["engine", "down", "--kind", "opensearch", *cache])
        assert down.exit_code == 0 and down.output.strip() == f"stopped opensearch on http://127.0.0.1:{port}"
        status = runner.invoke(cli, ["engine", "status", *cache])
        assert re.match(rf"opensearch +2\.19\.\d+ +port {port} +stopped ", status.output), status.output
        none = runner.invoke(cli, ["engine", "down", "--kind", "opensearch", *cache])
        assert none.output.strip() == f"no running opensearch node (none of the nodes recorded under {own_cache_dir.resolve()}/engines/run runs)"
    finally:
        for settings in (second, EngineSettings(kind="opensearch", port=port, cache_dir=own_cache_dir / "engines")):
            harness.stop(settings, purge=True)
