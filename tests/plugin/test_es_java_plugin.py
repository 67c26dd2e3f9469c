"""The Elasticsearch plugin (java/elasticsearch-plugin, the ``jingpai`` retriever): Maven builds the zip
``bin/elasticsearch-plugin install`` takes and runs its JUnit tests; the engine-neutral classes it compiles in are
java/jingpai-core's (tested in test_java_plugin.py). The first online build downloads the Elasticsearch 8.19.21 jars.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from tests.plugin.test_java_plugin import maven_build

PROJECT = Path(__file__).resolve().parents[2] / "java" / "elasticsearch-plugin"
ZIP = PROJECT / "target" / "jingpai-elasticsearch-8.19.21.zip"


@pytest.fixture(scope="module")
def build() -> subprocess.CompletedProcess:
    return maven_build(PROJECT)


def test_the_plugin_builds_into_an_installable_zip(build: subprocess.CompletedProcess) -> None:
    assert build.returncode == 0, f"mvn package failed:\n{(build.stdout + build.stderr)[-6000:]}"
    with zipfile.ZipFile(ZIP) as archive:
        names = set(archive.namelist())
        descriptor = archive.read("plugin-descriptor.properties").decode()
        with archive.open("jingpai-elasticsearch-8.19.21.jar") as jar_file, zipfile.ZipFile(jar_file) as jar:
            classes = set(jar.namelist())
    assert {"jingpai-elasticsearch-8.19.21.jar", "plugin-descriptor.properties", "plugin-security.policy", "entitlement-policy.yaml"} <= names
    assert "elasticsearch.version=8.19.21" in descriptor and "classname=io.jingpai.elasticsearch.JingpaiPlugin" in descriptor
    # the shared classes are compiled in (one jar: no jar of jingpai-core to install beside it)
    assert {"io/jingpai/core/Fusion.class", "io/jingpai/core/RerankClient.class", "io/jingpai/elasticsearch/JingpaiRetrieverBuilder.class"} <= classes


def test_the_java_tests_pass(build: subprocess.CompletedProcess) -> None:
    assert build.returncode == 0, f"mvn package failed:\n{(build.stdout + build.stderr)[-6000:]}"
    reports = sorted((PROJECT / "target" / "surefire-reports").glob("TEST-*.xml"))
    suites = {ET.parse(r).getroot().get("name"): ET.parse(r).getroot() for r in reports}
    assert {"io.jingpai.elasticsearch.RetrieverSettingsTest"} <= set(suites)
    for name, suite in suites.items():
        assert int(suite.get("tests", "0")) > 0, name
        assert suite.get("failures") == "0" and suite.get("errors") == "0" and suite.get("skipped") == "0", name
