"""The engine harness's error paths give one clear line naming the fix."""

from __future__ import annotations

import socket

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


def test_cli_up_status_down_round_trip() -> None:
    port = harness.free_port()
    runner = CliRunner()
    try:
        up = runner.invoke(cli, ["engine", "up", "--kind", "opensearch", "--port", str(port)])
        assert up.exit_code == 0, up.output
        assert up.stdout.strip().splitlines()[-1] == f"http://127.0.0.1:{port}"

        again = runner.invoke(cli, ["engine", "up", "--kind", "opensearch", "--port", str(port)])
        assert again.exit_code == 1
        assert f"already runs on http://127.0.0.1:{port}" in again.output

        status = runner.invoke(cli, ["engine", "status"])
        line = next(line for line in status.output.splitlines() if f":{port}" in line)
        assert "running" in line
    finally:
        down = runner.invoke(cli, ["engine", "down", "--kind", "opensearch", "--port", str(port), "--purge"])
    assert down.exit_code == 0
    assert down.output.strip() == f"stopped opensearch on http://127.0.0.1:{port}"
