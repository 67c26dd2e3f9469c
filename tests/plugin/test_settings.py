"""Settings, CLI merging (CLI > env > config file > defaults) and the circuit breaker's state machine."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from jingpai.commands.gateway import _OPTION_FIELDS, build_settings, gateway
from jingpai.plugin.rerank_client import CircuitBreaker
from jingpai.plugin.settings import CLI_FLAGS, GatewayConfigError, GatewaySettings, load_config_file, setting_hint
from jingpai.reranker.fusion import FusionSpec


def settings_from(args: list[str], env: dict[str, str] | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> GatewaySettings:
    for key, value in (env or {}).items():
        assert monkeypatch is not None
        monkeypatch.setenv(key, value)
    with gateway.make_context("gateway", args) as ctx:
        params = dict(ctx.params)
        config = params.pop("config")
        return build_settings(ctx, params, config)


def test_cli_env_and_config_file_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gw.toml"
    config.write_text('[gateway]\nengine_url = "http://e:9200"\nwindow = 40\ntimeout_ms = 900\nrerank_fields = ["title"]\n')
    s = settings_from(["--config", str(config), "--window", "30"], {"JINGPAI_GATEWAY_TIMEOUT_MS": "250"}, monkeypatch)
    assert (s.engine_url, s.window, s.timeout_ms, s.rerank_fields, s.port) == ("http://e:9200", 30, 250, ("title",), 8080)


def test_missing_engine_and_bad_values_exit_non_zero(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(gateway, [], env={"JINGPAI_GATEWAY_ENGINE": ""})
    assert result.exit_code != 0
    assert "no engine URL: pass --engine URL, set JINGPAI_GATEWAY_ENGINE or engine_url in --config" in result.output
    result = runner.invoke(gateway, ["--engine", "http://e:9200", "--window", "600"])
    assert result.exit_code != 0 and "window (600) must not exceed max_window (500)" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text("windw = 3\n")
    with pytest.raises(GatewayConfigError, match=r"unknown setting\(s\) \['windw'\]"):
        load_config_file(bad)
    with pytest.raises(click.ClickException, match="engine_url must be an http"):
        settings_from(["--engine", "e:9200"])


def test_defaults_rerank_a_cpu_window_and_fuse_linearly() -> None:
    s = settings_from(["--engine", "http://e:9200"])
    assert (s.window, s.timeout_ms, s.fusion, s.fusion_weight, s.rrf_k) == (20, 3000, "linear", 0.5, 60)
    assert s.fusion_for("any") == FusionSpec() == GatewaySettings(engine_url="http://e:9200").fusion_for(None)


def test_fusion_from_cli_env_and_config_file_with_index_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(
        '[gateway]\nengine_url = "http://e:9200"\nfusion = "rrf"\nrrf_k = 30\nfusion_weight = 0.9\n'
        '[gateway.indices."products"]\nfusion = "linear"\n[gateway.indices."logs-*"]\nfusion_weight = 0\n'
    )
    s = settings_from(["--config", str(config), "--rrf-k", "10"], {"JINGPAI_GATEWAY_FUSION_WEIGHT": "0.4"}, monkeypatch)
    assert (s.fusion, s.fusion_weight, s.rrf_k) == ("rrf", 0.4, 10)
    assert s.fusion_for("products") == FusionSpec(mode="linear", weight=0.4, rrf_k=10)
    assert s.fusion_for("logs-2024") == FusionSpec(mode="rrf", weight=0.0, rrf_k=10)
    assert s.fusion_for("other") == FusionSpec(mode="rrf", weight=0.4, rrf_k=10)


def test_bad_fusion_settings_name_the_value_and_the_choices(tmp_path: Path) -> None:
    result = CliRunner().invoke(gateway, ["--engine", "http://e:9200", "--fusion", "sum"])
    assert result.exit_code != 0 and "'sum' is not one of 'replace', 'linear', 'rrf'" in result.output
    with pytest.raises(click.ClickException, match=r"fusion_weight must be a number in \[0, 1\] \(the engine's weight\), got 1.5"):
        settings_from(["--engine", "http://e:9200", "--fusion-weight", "1.5"])
    with pytest.raises(GatewayConfigError) as info:
        GatewaySettings(engine_url="http://e:9200", indices={"p": {"fusion": "max"}})
    assert str(info.value) == "indices.p: fusion must be one of replace, linear, rrf, got 'max'"
    with pytest.raises(GatewayConfigError) as info:
        GatewaySettings(engine_url="http://e:9200", indices={"p": {"hybrid_rerank_window": "all"}})
    assert str(info.value) == "indices.p: hybrid rerank_window must be one of fused, both, got 'all'"
    result = CliRunner().invoke(gateway, ["--engine", "http://e:9200", "--hybrid-rerank-window", "union"])
    assert result.exit_code != 0 and "'union' is not one of 'fused', 'both'" in result.output
    assert settings_from(["--engine", "http://e:9200", "--hybrid-rerank-window", "both"]).hybrid_for("x").rerank_window == "both"
    with pytest.raises(GatewayConfigError) as info:
        GatewaySettings(engine_url="http://e:9200", indices={"p": {"window": 3}})
    assert str(info.value) == "unknown setting(s) ['window'] in indices.p; expected some of ['fusion', 'fusion_weight', 'rrf_k', 'hybrid', 'hybrid_fusion', 'hybrid_weight', 'hybrid_k', 'hybrid_rrf_k', 'hybrid_rerank_window']"


def test_setting_hints_name_the_real_option_and_env_var() -> None:
    assert setting_hint("timeout_ms") == "--timeout-ms (env JINGPAI_GATEWAY_TIMEOUT_MS, config key timeout_ms)"
    assert setting_hint("dict_dirs") == "--dict (env JINGPAI_GATEWAY_DICT, config key dict_dirs)"
    assert setting_hint("seg_boost") == "config key seg_boost"
    for param in gateway.params:
        if param.name in _OPTION_FIELDS:
            assert param.opts[0] in setting_hint(_OPTION_FIELDS[param.name])
            assert f"(env {param.envvar}," in setting_hint(_OPTION_FIELDS[param.name])  # the command's own variable
    # every option a hint names is one of the command's (the command is generated from CLI_FLAGS)
    assert set(CLI_FLAGS) == set(_OPTION_FIELDS) <= {p.name for p in gateway.params}


def test_circuit_breaker_opens_probes_and_closes() -> None:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout_s=5.0, clock=lambda: now[0])
    assert breaker.allow() and breaker.state == "closed"
    breaker.record_failure()
    assert breaker.state == "closed"
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()
    now[0] = 5.0
    assert breaker.state == "half_open"
    assert breaker.allow() and not breaker.allow()  # one probe at a time
    breaker.record_failure()  # the probe failed: open again for a full period
    assert breaker.state == "open"
    now[0] = 10.0
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow()


def test_rerank_bounds_and_internals_from_cli_env_and_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = GatewaySettings(engine_url="http://e:9200")
    assert (defaults.rerank_concurrency, defaults.msearch_rerank_concurrency, defaults.expose_internals) == (8, 4, False)
    config = tmp_path / "gw.toml"
    config.write_text('[gateway]\nengine_url = "http://e:9200"\nrerank_concurrency = 16\nexpose_internals = true\n')
    s = settings_from(["--config", str(config), "--msearch-rerank-concurrency", "2"], {"JINGPAI_GATEWAY_RERANK_CONCURRENCY": "12"}, monkeypatch)
    assert (s.rerank_concurrency, s.msearch_rerank_concurrency, s.expose_internals) == (12, 2, True)
    assert settings_from(["--engine", "http://e:9200", "--expose-internals"]).expose_internals is True
    with pytest.raises(GatewayConfigError, match="msearch_rerank_concurrency must be >= 1, got 0"):
        GatewaySettings(engine_url="http://e:9200", msearch_rerank_concurrency=0)
    assert "--rerank-concurrency (env JINGPAI_GATEWAY_RERANK_CONCURRENCY" in setting_hint("rerank_concurrency")


def test_ui_flag_mounts_the_demo_ui_which_the_gateway_does_not_serve_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn
    from starlette.testclient import TestClient

    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: apps.append(app))
    for args in ([], ["--ui"]):
        result = CliRunner().invoke(gateway, ["--engine", "http://127.0.0.1:9", *args])
        assert result.exit_code == 0, result.output
    plain, with_ui = apps
    assert not [r for r in plain.routes if getattr(r, "path", "").startswith("/_jingpai/ui")]
    assert TestClient(with_ui).get("/_jingpai/ui/").status_code == 200
    assert "UI at http://127.0.0.1:8080/_jingpai/ui/" in result.output
