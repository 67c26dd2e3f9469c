"""docker/compose.yaml and docker/.env: valid for every profile, and in agreement with the CLI's options.

The CLI side is read from the real click commands at test time (``serve.params``, ``gateway.params``,
``index``'s ``--engine``), so a new or renamed option fails here until docker/ follows it.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import click
import pytest
import yaml

from jingpai import __version__
from jingpai.cli import COMMANDS
from jingpai.engine import harness
from jingpai.commands.index import index
from jingpai.commands.gateway import gateway
from jingpai.commands.serve import serve

from .conftest import COMPOSE_FILE, Compose, compose_defaults, docker_compose, load_compose, read_env_file

ENGINE_PROFILES = {"opensearch", "elasticsearch", "opensearch-dev", "elasticsearch-dev"}
RERANKER_PROFILES = {"gpu", "cpu"}
RERANKER_SERVICES = {"gpu": "reranker", "cpu": "reranker-cpu"}
ENGINE_CONTAINER_PORT = 9200

#: options whose compose value deliberately differs from the CLI default: they name compose services
#: and volume paths (checked by test_compose_specific_values_point_at_services_and_volumes)
COMPOSE_SPECIFIC = {"JINGPAI_SERVE_MODEL", "JINGPAI_GATEWAY_ENGINE", "JINGPAI_GATEWAY_RERANKER", "JINGPAI_ENGINE_URL"}


def envvar_params(command: click.Command) -> dict[str, click.Parameter]:
    return {p.envvar: p for p in command.params if isinstance(p.envvar, str)}


def host_param(command: click.Command) -> click.Parameter:
    return next(p for p in command.params if p.name == "host")


def index_engine_param() -> click.Parameter:
    return next(p for p in index.commands["run"].params if p.name == "engine_url")


def index_engine_env() -> str:
    """The shared engine variable `jingpai index` reads (after its own JINGPAI_INDEX_ENGINE)."""
    envvar = index_engine_param().envvar
    return envvar if isinstance(envvar, str) else envvar[-1]


def published(port: str) -> tuple[str, str, str]:
    """``HOST:PUBLISHED:TARGET`` → its three parts."""
    host, published_port, target = port.rsplit(":", 2)
    return host, published_port, target


# ------------------------------------------------------------------------------------ docker-compose config


def test_profiles_are_the_documented_ones(compose: Compose) -> None:
    assert compose.profiles() == ENGINE_PROFILES | RERANKER_PROFILES
    assert not [n for n, s in compose.services.items() if not s.get("profiles")], "every service belongs to a profile"


@pytest.mark.parametrize("profile", sorted(ENGINE_PROFILES | RERANKER_PROFILES))
def test_docker_compose_config_accepts_every_profile(profile: str) -> None:
    result = docker_compose("--profile", profile, "config")
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    # what docker-compose resolved equals our reading of compose.yaml + .env, so the checks below hold
    ours = load_compose()
    for name, service in resolved["services"].items():
        mine = ours.services[name]
        assert {k: str(v) for k, v in service["environment"].items()} == {k: str(v) for k, v in mine["environment"].items()}
        assert service["healthcheck"]["test"] == [t.replace("$", "$$") for t in mine["healthcheck"]["test"]]
        assert [p.removesuffix("/tcp") for p in service.get("ports", [])] == mine.get("ports", [])
        assert service.get("command") == mine.get("command")


def test_docker_compose_config_rejects_a_broken_file(tmp_path: Path) -> None:
    """The validator really validates: a misspelt service key is an error naming it."""
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE_FILE.read_text(encoding="utf-8").replace("    healthcheck:\n", "    healthchek:\n", 1))
    (tmp_path / ".env").write_text((COMPOSE_FILE.parent / ".env").read_text(encoding="utf-8"))
    result = docker_compose("config", compose_file=broken)
    assert result.returncode != 0
    assert "healthchek" in result.stderr


@pytest.mark.parametrize("profile", sorted(ENGINE_PROFILES | RERANKER_PROFILES))
def test_each_profile_wires_one_engine_and_one_reranker(compose: Compose, profile: str) -> None:
    active = compose.active(profile)
    engines = compose.with_alias("engine", active)
    rerankers = compose.with_alias("reranker", active)
    if profile in ENGINE_PROFILES:
        assert len(engines) == 1 and "gateway" in active, f"{profile}: engines {sorted(engines)}"
        assert not rerankers
    else:
        assert list(rerankers) == [RERANKER_SERVICES[profile]] and not engines and "gateway" not in active
    for name, service in active.items():
        for dep in service.get("depends_on", {}):
            assert dep in active, f"{profile}: {name} depends on {dep}, which this profile does not start"


# ------------------------------------------------------------------------------------ .env vs compose vs CLI


def test_env_file_and_compose_defaults_agree() -> None:
    env = read_env_file()
    defaults = compose_defaults(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert set(defaults) == set(env), "every ${VAR} in compose.yaml is set in .env and every .env line is used"
    for name, written in defaults.items():
        assert set(written) == {env[name]}, f"{name}: compose.yaml defaults {written} vs .env {env[name]!r}"


def cli_values(command: click.Command, environment: dict[str, str], args: list[str],
               monkeypatch: pytest.MonkeyPatch) -> click.Context:
    """Parse ``args`` with exactly ``environment`` as the process environment, as the container would.

    With an empty ``environment`` this gives the CLI's own defaults, as click resolves them.
    """
    for name in list(os.environ):
        if name.startswith("JINGPAI_"):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return command.make_context(command.name or "cmd", list(args))


@pytest.mark.parametrize("service", ["reranker", "reranker-cpu"])
def test_reranker_environment_is_the_serve_options_with_their_defaults(
    compose: Compose, service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc = compose.services[service]
    env = {k: str(v) for k, v in svc["environment"].items() if k.startswith("JINGPAI_")}
    params = envvar_params(serve)
    host = host_param(serve)
    assert set(env) == set(params) - {host.envvar}, "one compose variable per `jingpai serve` option (but --host)"
    assert COMMANDS["serve"] == "jingpai.commands.serve:serve" and svc["command"][0] == "serve"
    args = svc["command"][1:]
    assert args == ["--host", "0.0.0.0"], "the container binds every interface; the CLI default stays local"
    assert host.default == "127.0.0.1"

    env["JINGPAI_SERVE_MODEL"] = str(tmp_path)  # must exist to parse; its compose value is checked elsewhere
    ctx = cli_values(serve, env, args, monkeypatch)
    defaults = cli_values(serve, {"JINGPAI_SERVE_MODEL": str(tmp_path)}, args, monkeypatch).params
    for envvar, param in params.items():
        if envvar == host.envvar or envvar in COMPOSE_SPECIFIC:
            continue
        default = defaults[param.name]
        assert ctx.params[param.name] == default, f"{envvar}={env[envvar]!r} vs CLI default {default!r}"
        if default is None:
            assert env[envvar] == "", f"{envvar}: the CLI has no default, so .env leaves it empty"
        else:
            assert ctx.get_parameter_source(param.name) is click.core.ParameterSource.ENVIRONMENT, envvar


def test_gateway_environment_is_the_gateway_options_with_their_defaults(
    compose: Compose, monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc = compose.services["gateway"]
    env = {k: str(v) for k, v in svc["environment"].items()}
    params = envvar_params(gateway)
    host = host_param(gateway)
    assert set(env) == (set(params) - {host.envvar}) | {index_engine_env()}
    assert COMMANDS["gateway"] == "jingpai.commands.gateway:gateway" and svc["command"][0] == "gateway"
    args = svc["command"][1:]
    assert args == ["--host", "0.0.0.0"] and host.default == "127.0.0.1"

    ctx = cli_values(gateway, {k: v for k, v in env.items() if k in params}, args, monkeypatch)
    defaults = cli_values(gateway, {}, args, monkeypatch).params
    for envvar, param in params.items():
        if envvar == host.envvar or envvar in COMPOSE_SPECIFIC:
            continue
        default = defaults[param.name]
        assert ctx.params[param.name] == default, f"{envvar}={env[envvar]!r} vs CLI default {default!r}"
        if default in (None, ()):
            assert env[envvar] == "", f"{envvar}: the CLI has no default, so .env leaves it empty"
        else:
            assert ctx.get_parameter_source(param.name) is click.core.ParameterSource.ENVIRONMENT, envvar


def test_compose_specific_values_point_at_services_and_volumes(compose: Compose) -> None:
    gw_env = compose.services["gateway"]["environment"]
    engines = compose.with_alias("engine")
    assert set(engines) == {"opensearch", "opensearch-dev", "elasticsearch", "elasticsearch-dev"}
    for envvar in ("JINGPAI_GATEWAY_ENGINE", index_engine_env()):
        url = urlsplit(gw_env[envvar])
        assert (url.scheme, url.hostname, url.port) == ("http", "engine", ENGINE_CONTAINER_PORT), envvar
    for name, service in engines.items():
        assert [published(p)[2] for p in service["ports"]] == [str(ENGINE_CONTAINER_PORT)], name

    url = urlsplit(gw_env["JINGPAI_GATEWAY_RERANKER"])
    assert url.hostname == "reranker" and set(compose.with_alias("reranker")) == set(RERANKER_SERVICES.values())
    for name in RERANKER_SERVICES.values():
        svc = compose.services[name]
        assert url.port == int(svc["environment"]["JINGPAI_SERVE_PORT"]), "the gateway calls the reranker's port"
        model = Path(svc["environment"]["JINGPAI_SERVE_MODEL"])
        mounts = {m.split(":")[1]: m.split(":")[0] for m in svc["volumes"]}
        assert mounts.get(str(model.parent)) == "models", f"{name}: {model} must lie in the models volume"
        assert "models" in compose.data["volumes"]


def test_published_ports_and_bind_address_follow_the_cli(compose: Compose) -> None:
    env = compose.env
    assert env["JINGPAI_PUBLISH_HOST"] == host_param(serve).default == host_param(gateway).default
    gw = compose.services["gateway"]
    port = str(gw["environment"]["JINGPAI_GATEWAY_PORT"])
    assert port == str(next(p.default for p in gateway.params if p.name == "port"))
    assert gw["ports"] == [f"{env['JINGPAI_PUBLISH_HOST']}:{port}:{port}"]
    serve_port = str(next(p.default for p in serve.params if p.name == "port"))
    for name in RERANKER_SERVICES.values():
        svc = compose.services[name]
        assert svc["environment"]["JINGPAI_SERVE_PORT"] == serve_port
        assert svc["ports"] == [f"{env['JINGPAI_PUBLISH_HOST']}:{env['JINGPAI_RERANKER_PUBLISH']}:{serve_port}"]
    # the engines: the harness's versions and host ports, so `jingpai index` defaults reach OpenSearch
    for kind in harness.ENGINE_KINDS:
        for name in (kind, f"{kind}-dev"):
            svc = compose.services[name]
            assert svc["image"].endswith(f":{harness.DEFAULT_VERSIONS[kind]}"), svc["image"]
            assert published(svc["ports"][0])[:2] == (env["JINGPAI_PUBLISH_HOST"], str(harness.DEFAULT_PORTS[kind]))
    assert urlsplit(index_engine_param().default).port == harness.DEFAULT_PORTS["opensearch"]
    assert env["JINGPAI_TAG"] == __version__


def healthcheck_url(service: dict) -> str:
    test = service["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "/opt/jingpai/healthcheck.py"], test
    return test[3]


def test_jingpai_healthchecks_hit_the_services_own_ports(compose: Compose) -> None:
    for name in RERANKER_SERVICES.values():
        svc = compose.services[name]
        url = urlsplit(healthcheck_url(svc))
        assert (url.hostname, url.port, url.path) == ("127.0.0.1", int(svc["environment"]["JINGPAI_SERVE_PORT"]), "/health")
    gw = compose.services["gateway"]
    url = urlsplit(healthcheck_url(gw))
    assert (url.hostname, url.port, url.path) == ("127.0.0.1", int(gw["environment"]["JINGPAI_GATEWAY_PORT"]), "/_jingpai/health")
    for name, svc in compose.services.items():
        assert svc["healthcheck"]["retries"] >= 3 and svc["healthcheck"].get("start_period"), name


def test_engine_security_is_off_only_in_the_dev_profiles(compose: Compose) -> None:
    for name, svc in compose.with_alias("engine").items():
        env = {k: str(v) for k, v in svc["environment"].items()}
        dev = name.endswith("-dev")
        assert svc["profiles"] == [name], "each engine service is its own profile"
        hc = shlex.split(svc["healthcheck"]["test"][1])
        assert "_cluster/health" in " ".join(hc), name
        assert env["discovery.type"] == "single-node"
        if name.startswith("elasticsearch"):
            assert env["ingest.geoip.downloader.enabled"] == "false"
            assert env["xpack.security.enabled"] == ("false" if dev else "true"), name
            assert ("ELASTIC_PASSWORD" in env) is not dev
        else:
            assert (env.get("DISABLE_SECURITY_PLUGIN") == "true") is dev, name
            assert ("OPENSEARCH_INITIAL_ADMIN_PASSWORD" in env) is not dev
        assert ("-u" in hc) is not dev, f"{name}: the health check authenticates exactly when security is on"


def test_named_volumes_for_engine_data_models_and_dictionaries(compose: Compose) -> None:
    volumes = set(compose.data["volumes"])
    assert volumes == {"opensearch-data", "elasticsearch-data", "models", "dicts"}
    mounts = {n: {m.split(":")[0]: m.split(":")[1] for m in s.get("volumes", [])} for n, s in compose.services.items()}
    for name in ("opensearch", "opensearch-dev"):
        assert mounts[name] == {"opensearch-data": "/usr/share/opensearch/data"}
    for name in ("elasticsearch", "elasticsearch-dev"):
        assert mounts[name] == {"elasticsearch-data": "/usr/share/elasticsearch/data"}
    assert {"dicts": "/dicts", "models": "/models"}.items() <= mounts["gateway"].items()


def test_gpu_reservation_only_in_the_gpu_profile(compose: Compose) -> None:
    gpu = compose.services["reranker"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu == [{"driver": "nvidia", "device_ids": [compose.env["JINGPAI_GPU_DEVICES"]], "capabilities": ["gpu"]}]
    assert "deploy" not in compose.services["reranker-cpu"]
    assert compose.services["reranker"]["build"]["args"]["TORCH_BACKEND"] == compose.env["JINGPAI_CUDA_TORCH_BACKEND"]
    assert compose.services["reranker-cpu"]["build"]["args"]["TORCH_BACKEND"] == "cpu"
    assert compose.services["gateway"]["build"]["args"]["TORCH_BACKEND"] == "cpu"
