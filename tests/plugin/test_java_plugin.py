"""The OpenSearch plugin (java/opensearch-plugin): Maven builds the zip and runs its JUnit tests, which replay the
shared vectors of tests/vectors against the Java fusion, paging and augmentation (see test_shared_vectors.py). The
engine-neutral classes both plugins compile in (fusion, paging, the reranker client, the breaker) are tested once,
in java/jingpai-core.

The build runs offline first (dependencies cached under ~/.m2) and online when something is missing; the first
online build downloads the OpenSearch 2.19.6 jars and the Maven plugins from Maven Central (about a minute).
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2] / "java" / "opensearch-plugin"
CORE = PROJECT.parent / "jingpai-core"
ZIP = PROJECT / "target" / "jingpai-opensearch-2.19.6.zip"


def _maven(project: Path, offline: bool, goal: str = "package") -> subprocess.CompletedProcess:
    command = ["mvn", "-q", "-B", *(["-o"] if offline else []), "-f", str(project / "pom.xml"), "clean", goal]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


def maven_build(project: Path, goal: str = "package") -> subprocess.CompletedProcess:
    """``mvn clean <goal>`` of ``project``, offline first (dependencies cached under ~/.m2), online when something is missing."""
    missing = [tool for tool in ("mvn", "java") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: the jingpai plugins need Java 17 and Maven (scripts/bootstrap installs them)")
    result = _maven(project, offline=True, goal=goal)
    if result.returncode != 0 and "offline mode" in (result.stdout + result.stderr):
        result = _maven(project, offline=False, goal=goal)
    return result


@pytest.fixture(scope="module")
def build() -> subprocess.CompletedProcess:
    return maven_build(PROJECT)


@pytest.fixture(scope="module")
def core_build() -> subprocess.CompletedProcess:
    return maven_build(CORE, "test")


def test_the_plugin_builds_into_an_installable_zip(build: subprocess.CompletedProcess) -> None:
    assert build.returncode == 0, f"mvn package failed:\n{(build.stdout + build.stderr)[-6000:]}"
    import zipfile

    with zipfile.ZipFile(ZIP) as archive:
        names = set(archive.namelist())
        descriptor = archive.read("plugin-descriptor.properties").decode()
    assert {"jingpai-opensearch-2.19.6.jar", "plugin-descriptor.properties", "plugin-security.policy"} <= names
    assert "opensearch.version=2.19.6" in descriptor and "classname=io.jingpai.opensearch.JingpaiPlugin" in descriptor


def test_the_java_tests_replay_the_shared_vectors(build: subprocess.CompletedProcess) -> None:
    assert build.returncode == 0, f"mvn package failed:\n{(build.stdout + build.stderr)[-6000:]}"
    reports = sorted((PROJECT / "target" / "surefire-reports").glob("TEST-*.xml"))
    suites = {ET.parse(r).getroot().get("name"): ET.parse(r).getroot() for r in reports}
    assert {"io.jingpai.opensearch.AugmentTest", "io.jingpai.opensearch.OverridesTest"} <= set(suites)
    for name, suite in suites.items():
        assert int(suite.get("tests", "0")) > 0, name
        assert suite.get("failures") == "0" and suite.get("errors") == "0" and suite.get("skipped") == "0", name


def test_the_engine_neutral_tests_replay_the_shared_vectors(core_build: subprocess.CompletedProcess) -> None:
    """java/jingpai-core: fusion and paging (fusion.json, paging.json), the plan of ext.jingpai (overrides.json)."""
    assert core_build.returncode == 0, f"mvn test failed:\n{(core_build.stdout + core_build.stderr)[-6000:]}"
    reports = sorted((CORE / "target" / "surefire-reports").glob("TEST-*.xml"))
    suites = {ET.parse(r).getroot().get("name"): ET.parse(r).getroot() for r in reports}
    assert {"io.jingpai.core.FusionTest", "io.jingpai.core.RerankPlanTest", "io.jingpai.core.SegmenterTest"} <= set(suites)
    for name, suite in suites.items():
        assert int(suite.get("tests", "0")) > 0, name
        assert suite.get("failures") == "0" and suite.get("errors") == "0" and suite.get("skipped") == "0", name


def test_the_java_tests_cover_the_circuit_breaker(core_build: subprocess.CompletedProcess) -> None:
    """CircuitBreakerTest: the gateway's breaker (closed → open → half-open → closed) in the plugins' rerank client."""
    assert core_build.returncode == 0, f"mvn test failed:\n{(core_build.stdout + core_build.stderr)[-6000:]}"
    report = CORE / "target" / "surefire-reports" / "TEST-io.jingpai.core.CircuitBreakerTest.xml"
    suite = ET.parse(report).getroot()
    assert int(suite.get("tests", "0")) >= 4 and suite.get("failures") == "0" and suite.get("errors") == "0"


def test_the_java_tests_replay_the_bad_reranker_answers(core_build: subprocess.CompletedProcess) -> None:
    """RerankAnswersTest: every case of tests/vectors/rerank_answers.json (test_rerank_answers.py) served by a stand-in on
    loopback and read by the plugin's RerankClient: the gateway client's scores, or its reason and message, within the deadline."""
    import json

    assert core_build.returncode == 0, f"mvn test failed:\n{(core_build.stdout + core_build.stderr)[-6000:]}"
    report = CORE / "target" / "surefire-reports" / "TEST-io.jingpai.core.RerankAnswersTest.xml"
    suite = ET.parse(report).getroot()
    cases = json.loads((PROJECT.parents[1] / "tests" / "vectors" / "rerank_answers.json").read_text(encoding="utf-8"))["cases"]
    assert int(suite.get("tests", "0")) == len(cases) + 1, "one dynamic test per case, and the default bound's"
    assert suite.get("failures") == "0" and suite.get("errors") == "0" and suite.get("skipped") == "0"
