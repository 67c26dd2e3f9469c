"""The harness's source-built plugin (``--plugins jingpai``): settings, where its sources are, their fingerprint,
the record a composed home keeps, and the errors that name the fix; the k-NN zip's pinned SHA-256. No node here: tests/plugin/test_pipeline_node.py
starts one with the plugin."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine.modules import _home_record
from jingpai.engine.plugins import (OPENSEARCH_PLUGINS, SOURCE_ENV, check_sha256, ensure_plugin_zip, plugin_fingerprint, plugin_source_dir,
                                    source_fingerprint)
from jingpai.engine.settings import KNN_PLUGIN_SHA256, KNN_PLUGIN_VERSIONS, EngineError, EngineModuleError, EngineSettings

REPO_SOURCE = Path(__file__).resolve().parents[2] / "java" / "opensearch-plugin"


def test_the_jingpai_plugin_needs_no_module_and_gets_a_home_of_its_own() -> None:
    settings = EngineSettings(kind="opensearch", plugins=("jingpai",))
    assert settings.plugins == ("jingpai",) and settings.modules == ()
    assert settings.home.name == f"opensearch-{settings.resolved_version}+jingpai"
    both = EngineSettings(kind="opensearch", plugins=("knn", "jingpai"))
    assert both.plugins == ("jingpai", "knn") and both.home.name.endswith("+lang-painless+jingpai+knn")
    on_es = EngineSettings(kind="elasticsearch", plugins=("jingpai",))
    assert on_es.plugins == ("jingpai",) and on_es.home.name == f"elasticsearch-{on_es.resolved_version}+jingpai"
    with pytest.raises(EngineModuleError, match=r"plugins \(knn\) are for --kind opensearch only: .*valid plugins for --kind elasticsearch: jingpai"):
        EngineSettings(kind="elasticsearch", plugins=("knn", "jingpai"))


def test_the_sources_are_the_checkout_or_the_env_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SOURCE_ENV, raising=False)
    assert plugin_source_dir() == REPO_SOURCE
    monkeypatch.setenv(SOURCE_ENV, str(tmp_path))
    with pytest.raises(EngineModuleError, match=rf"sources were not found at {tmp_path} \(\${SOURCE_ENV}: no pom.xml\); set {SOURCE_ENV}"):
        plugin_source_dir()
    result = CliRunner().invoke(cli, ["engine", "up", "--kind", "opensearch", "--plugins", "jingpai", "--cache-dir", str(tmp_path / "c")])
    assert result.exit_code == 1 and f"set {SOURCE_ENV}" in result.output


def test_the_fingerprint_follows_the_sources_not_the_build_output(tmp_path: Path) -> None:
    source = tmp_path / "opensearch-plugin"
    shutil.copytree(REPO_SOURCE, source, ignore=shutil.ignore_patterns("target"))
    shutil.copytree(REPO_SOURCE.parent / "jingpai-core", tmp_path / "jingpai-core", ignore=shutil.ignore_patterns("target"))
    before = source_fingerprint(source)
    assert before == source_fingerprint(REPO_SOURCE)
    (source / "target").mkdir()
    (source / "target" / "x.class").write_bytes(b"\0")
    assert source_fingerprint(source) == before
    java = next((source / "src" / "main" / "java").rglob("RerankProcessor.java"))
    java.write_text(java.read_text() + "\n// edited\n")
    assert source_fingerprint(source) != before
    edited = source_fingerprint(source)
    core = next((tmp_path / "jingpai-core" / "src" / "main" / "java").rglob("Fusion.java"))
    core.write_text(core.read_text() + "\n// edited\n")
    assert source_fingerprint(source) != edited, "the engine-neutral sources it compiles in are part of it"


def test_a_home_records_what_its_plugins_were_made_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SOURCE_ENV, raising=False)
    settings = EngineSettings(kind="opensearch", plugins=("jingpai", "knn"))
    assert plugin_fingerprint(settings, "knn") == "2.19.6.0"
    assert _home_record(settings).splitlines() == [
        "lang-painless,jingpai,knn", f"jingpai=src-{source_fingerprint(REPO_SOURCE)}", "knn=2.19.6.0"]


def test_building_without_maven_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SOURCE_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn on it
    settings = EngineSettings(kind="opensearch", plugins=("jingpai",), cache_dir=tmp_path)
    with pytest.raises(EngineError, match=r"`mvn` was not found on PATH; install Maven .*builds the jingpai plugin from source"):
        ensure_plugin_zip(settings, "jingpai")


def test_every_pinned_knn_zip_has_its_sha256() -> None:
    assert set(KNN_PLUGIN_SHA256) == set(KNN_PLUGIN_VERSIONS.values())
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in KNN_PLUGIN_SHA256.values())


def test_a_fetched_zip_that_is_not_the_pinned_release_never_reaches_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the real zip from Maven Central, checked against a pin it cannot match (Maven itself serves no .sha1 for it on
    # some mirrors, which is why the harness checks its own pin)
    spec = OPENSEARCH_PLUGINS["knn"]
    monkeypatch.setitem(OPENSEARCH_PLUGINS, "knn", replace(spec, sha256={"2.19.6.0": "0" * 64}))
    settings = EngineSettings(kind="opensearch", plugins=("knn",), cache_dir=tmp_path)
    with pytest.raises(EngineError, match=r"plugin knn \(org.opensearch.plugin:opensearch-knn:2.19.6.0:zip\): SHA-256 of the fetched "
                                          r"opensearch-knn-2.19.6.0.zip is c21b9565\w{56}, expected 0{64}; the download is corrupt"):
        ensure_plugin_zip(settings, "knn")
    assert not list((tmp_path / "plugins").rglob("*.zip"))
    monkeypatch.setitem(OPENSEARCH_PLUGINS, "knn", spec)
    assert check_sha256(ensure_plugin_zip(settings, "knn"), KNN_PLUGIN_SHA256["2.19.6.0"], what="knn") is None
