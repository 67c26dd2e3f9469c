"""Shared fixtures: real Elasticsearch and OpenSearch nodes, started once per test session.

Set ``JINGPAI_TEST_OPENSEARCH_URL`` / ``JINGPAI_TEST_ELASTICSEARCH_URL`` to reuse nodes you already
run (``jingpai engine up``) and skip the start-up while iterating locally. The OpenSearch node with the
optional modules (:func:`opensearch_modules`) starts only for the tests that ask for it; reuse one with
``JINGPAI_TEST_OPENSEARCH_MODULES_URL`` (``jingpai engine up --modules analysis-common,lang-painless,mapper-extras``).
The OpenSearch node with the k-NN plugin (:func:`opensearch_knn`, for document vectors) likewise; reuse one with
``JINGPAI_TEST_OPENSEARCH_KNN_URL`` (``jingpai engine up --plugins knn``). The secured OpenSearch node
(:func:`opensearch_secured`) likewise; reuse one with ``JINGPAI_TEST_OPENSEARCH_SECURED_URL`` and ``…_SECURED_INSTANCE``.
"""

from __future__ import annotations

import builtins
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jingpai.engine import harness, security
from jingpai.engine.client import Engine, EngineAuth, connect
from jingpai.engine.security import SecurityAdmin

SHARED_DATA = Path(os.environ.get("JINGPAI_DATA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data"))


@pytest.fixture
def without_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import pyspark`` fails for the rest of the test (``monkeypatch.undo()`` ends it early), as where the
    ``spark`` extra is not installed."""
    real_import = builtins.__import__

    def no_pyspark(name: str, *args, **kwargs):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError("No module named 'pyspark'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyspark)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (or ``JINGPAI_DATA_DIR``); tests that need it skip with the reason when absent."""
    if not SHARED_DATA.exists():
        pytest.skip(f"shared data not found at {SHARED_DATA}; set JINGPAI_DATA_DIR")
    return SHARED_DATA


@pytest.fixture(scope="session")
def engine_urls() -> Iterator[dict[str, str]]:
    """``{kind: url}`` for both engines; starts the ones not given by env, in parallel, and stops them after."""
    urls: dict[str, str] = {}
    launched: list[tuple[harness.EngineSettings, object]] = []
    for kind in harness.ENGINE_KINDS:
        given = os.environ.get(f"JINGPAI_TEST_{kind.upper()}_URL")
        if given:
            urls[kind] = given
            continue
        settings = harness.EngineSettings(kind=kind, port=harness.free_port())
        launched.append((settings, harness.launch(settings)))
    try:
        for settings, proc in launched:
            node = harness.wait(settings, proc)
            urls[settings.kind] = node.url
        yield urls
    finally:
        for settings, _ in launched:
            harness.stop(settings, purge=True)


@pytest.fixture(scope="session")
def engines(engine_urls: dict[str, str]) -> Iterator[dict[str, Engine]]:
    clients = {kind: connect(url) for kind, url in engine_urls.items()}
    yield clients
    for client in clients.values():
        client.close()


@pytest.fixture(params=harness.ENGINE_KINDS)
def engine(request: pytest.FixtureRequest, engines: dict[str, Engine]) -> Engine:
    """Each engine test runs once on OpenSearch and once on Elasticsearch."""
    return engines[request.param]


@pytest.fixture
def index_name(engine: Engine) -> Iterator[str]:
    """A fresh index name, deleted (with anything matching its prefix) after the test."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    engine.raw.indices.delete(index=f"{name}*")


@pytest.fixture(scope="session")
def opensearch_modules() -> Iterator[Engine]:
    """An OpenSearch node WITH ``analysis-common``, ``lang-painless`` and ``mapper-extras`` (from Maven Central).

    A third node, started (about 30 s) only by the tests that use this fixture, and stopped after the session.
    """
    given = os.environ.get("JINGPAI_TEST_OPENSEARCH_MODULES_URL")
    settings = None if given else harness.EngineSettings(
        kind="opensearch", port=harness.free_port(), modules=harness.MODULE_NAMES
    )
    try:
        client = connect(given or harness.start(settings).url)
        yield client
        client.close()
    finally:
        if settings is not None:
            harness.stop(settings, purge=True)


@pytest.fixture(scope="session")
def opensearch_knn() -> Iterator[Engine]:
    """An OpenSearch node WITH the k-NN plugin (``knn_vector`` fields), from Maven Central at the pinned version.

    Started (about 40 s) only by the tests that use this fixture, and stopped after the session.
    """
    given = os.environ.get("JINGPAI_TEST_OPENSEARCH_KNN_URL")
    settings = None if given else harness.EngineSettings(kind="opensearch", port=harness.free_port(), plugins=("knn",))
    try:
        client = connect(given or harness.start(settings).url)
        yield client
        client.close()
    finally:
        if settings is not None:
            harness.stop(settings, purge=True)


@dataclass(frozen=True)
class SecuredNode:
    """A running OpenSearch node with the security plugin (TLS, internal users), and its admin."""

    url: str
    ca_file: Path
    admin: SecurityAdmin

    def auth(self, user: str | None = None, password: str | None = None) -> EngineAuth:
        """Credentials for ``user`` (none: anonymous) with the node's CA."""
        return EngineAuth(user=user, password=password, ca_file=self.ca_file)

    def admin_engine(self) -> Engine:
        return connect(self.url, auth=self.auth(self.admin.user, self.admin.password))


@pytest.fixture(scope="session")
def opensearch_secured() -> Iterator[SecuredNode]:
    """An OpenSearch node WITH the security plugin, k-NN and jingpai's (``engine up --plugins jingpai,knn,security``:
    OpenSearch 2.19.1, TLS with a CA made locally, an admin user; k-NN for hybrid search as a user, the jingpai plugin's
    pipelines as a user, where Maven and Java can build it); tests create their own users and roles through
    ``SecuredNode.admin``.

    Started (about a minute; several on a loaded machine) only by the tests that use this fixture, and stopped after
    the session. Reuse a running one with ``JINGPAI_TEST_OPENSEARCH_SECURED_URL`` and
    ``JINGPAI_TEST_OPENSEARCH_SECURED_INSTANCE`` (its instance directory, which holds its CA and admin password).
    """
    given = os.environ.get("JINGPAI_TEST_OPENSEARCH_SECURED_URL")
    # the jingpai plugin too (built for 2.19.1 by Maven; its pipelines as each user: tests/plugin/test_secured_pipeline.py),
    # where Java and Maven are there to build it
    plugins = ("knn", "security", *(("jingpai",) if shutil.which("mvn") and shutil.which("java") else ()))
    settings = None if given else harness.EngineSettings(kind="opensearch", port=harness.free_port(), plugins=plugins)
    try:
        if given:
            url, inst = given, Path(os.environ["JINGPAI_TEST_OPENSEARCH_SECURED_INSTANCE"])
        else:
            url, inst = harness.start(settings).url, settings.instance_dir
        yield SecuredNode(url=url, ca_file=security.ca_file(inst), admin=security.SecurityAdmin.of(url, inst))
    finally:
        if settings is not None:
            harness.stop(settings, purge=True)
