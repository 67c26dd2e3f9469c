"""Optional engine plugins: the OpenSearch k-NN plugin from Maven Central (``knn_vector`` fields, ``knn`` queries),
jingpai's own OpenSearch search-pipeline plugin (``jingpai_keywords`` / ``jingpai_rerank``) and jingpai's own
Elasticsearch plugin (the ``jingpai`` retriever), both built from source (``java/opensearch-plugin``,
``java/elasticsearch-plugin``, each compiling in the engine-neutral sources of ``java/jingpai-core``).

Unlike the modules (:mod:`jingpai.engine.modules`), a plugin is the zip ``opensearch-plugin install`` takes,
so the harness installs it with the distribution's own tool:

- :func:`ensure_plugin_zip` gives the zip, cached under ``<cache>/plugins/``: the k-NN zip
  (``org.opensearch.plugin:<artifact>:<version>:zip``) is fetched once with ``mvn dependency:copy`` at the
  version :data:`~jingpai.engine.settings.KNN_PLUGIN_VERSIONS` pins for the engine version (a plugin loads
  only on the exact OpenSearch version its descriptor names) and checked against the SHA-256 pinned for it
  (:data:`~jingpai.engine.settings.KNN_PLUGIN_SHA256`, :func:`check_sha256`); the jingpai zip is built with ``mvn package``
  from ``java/opensearch-plugin`` (:func:`plugin_source_dir`) for the engine version, once per state of its
  sources (:func:`source_fingerprint`);
- :func:`plugin_fingerprint` names what a home's plugin was made from (the pinned version, or the sources'
  hash): :func:`~jingpai.engine.modules.ensure_home_with_modules` records it and recomposes a home whose
  record differs, so an edited plugin source reaches the next node;
- :func:`install_plugins` runs ``bin/opensearch-plugin install --batch file://…`` in a home being composed
  (:func:`~jingpai.engine.modules.ensure_home_with_modules` calls it, after adding the modules the plugin
  extends: the k-NN plugin extends ``lang-painless``);
- :func:`verify_plugins` checks after start that the node lists every plugin.

The k-NN zip on Maven Central carries the Java plugin and its jars but not its native libraries
(``libopensearchknn_faiss`` / ``_nmslib``, which the full OpenSearch distribution ships in its own
``plugins/opensearch-knn/lib``): its ``faiss`` and ``nmslib`` engines cannot run here, its ``lucene``
engine (pure Java, in the node's Lucene) can, and that is the one jingpai maps (:mod:`jingpai.engine.vectors`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

import jingpai
from jingpai.engine.distributions import java_home, require_tool
from jingpai.engine.settings import (
    KNN_PLUGIN_SHA256, KNN_PLUGIN_VERSIONS, PLUGIN_NAMES, SECURITY_PLUGIN_SHA256, SECURITY_PLUGIN_VERSIONS, EngineError, EngineModuleError,
    EngineSettings,
)

logger = logging.getLogger(__name__)

GROUP = "org.opensearch.plugin"
#: where the jingpai plugin's Maven project is, when it is not the repository checkout's ``java/opensearch-plugin``
SOURCE_ENV = "JINGPAI_OPENSEARCH_PLUGIN_SRC"
#: the same for the Elasticsearch plugin (``java/elasticsearch-plugin``)
ES_SOURCE_ENV = "JINGPAI_ELASTICSEARCH_PLUGIN_SRC"
#: per engine kind: the variable naming the plugin's Maven project and its folder under ``java/``
SOURCE_DIRS: dict[str, tuple[str, str]] = {"opensearch": (SOURCE_ENV, "opensearch-plugin"),
                                           "elasticsearch": (ES_SOURCE_ENV, "elasticsearch-plugin")}
#: the engine-neutral Maven project both plugins compile in, beside the plugin's folder
CORE_DIR = "jingpai-core"


@dataclass(frozen=True)
class PluginSpec:
    """One OpenSearch plugin as Maven Central publishes it.

    Args:
        artifact: its artifact id (under :data:`GROUP` on Maven Central; the built zip's name otherwise).
        installed_name: the name the node lists it under (``GET _nodes/_local/plugins``).
        versions: engine version → plugin version, the pairs known to work together; ``None``: built from
            source (:func:`plugin_source_dir`) for whatever engine version runs it.
        sha256: plugin version → SHA-256 of its zip, checked after each fetch (every pinned version has one).
    """

    artifact: str
    installed_name: str
    versions: dict[str, str] | None
    sha256: dict[str, str] | None = None

    @property
    def from_source(self) -> bool:
        return self.versions is None


OPENSEARCH_PLUGINS: dict[str, PluginSpec] = {
    "jingpai": PluginSpec(artifact="jingpai-opensearch", installed_name="jingpai", versions=None),
    "knn": PluginSpec(artifact="opensearch-knn", installed_name="opensearch-knn", versions=KNN_PLUGIN_VERSIONS, sha256=KNN_PLUGIN_SHA256),
    # TLS, users and roles (jingpai.engine.security writes its configuration into the node's instance)
    "security": PluginSpec(artifact="opensearch-security", installed_name="opensearch-security", versions=SECURITY_PLUGIN_VERSIONS,
                           sha256=SECURITY_PLUGIN_SHA256),
}
ELASTICSEARCH_PLUGINS: dict[str, PluginSpec] = {
    "jingpai": PluginSpec(artifact="jingpai-elasticsearch", installed_name="jingpai", versions=None),
}


def plugin_spec(kind: str, name: str) -> PluginSpec:
    """Plugin ``name`` of engine ``kind`` (settings checked that it exists for that kind)."""
    return (ELASTICSEARCH_PLUGINS if kind == "elasticsearch" else OPENSEARCH_PLUGINS)[name]


def plugin_version(settings: EngineSettings, name: str) -> str:
    """The version of plugin ``name`` for ``settings``' engine version: the pinned one (settings checked it
    exists), or the engine version itself for a plugin built from source (its pom builds it for that version)."""
    spec = plugin_spec(settings.kind, name)
    return settings.resolved_version if spec.versions is None else spec.versions[settings.resolved_version]


def plugin_source_dir(kind: str = "opensearch") -> Path:
    """The jingpai plugin's Maven project for engine ``kind``: ``$JINGPAI_OPENSEARCH_PLUGIN_SRC`` /
    ``$JINGPAI_ELASTICSEARCH_PLUGIN_SRC``, else ``java/opensearch-plugin`` / ``java/elasticsearch-plugin`` of the
    repository checkout the ``jingpai`` package is imported from.

    Raises:
        EngineModuleError: neither holds a ``pom.xml`` (a wheel install carries no Java sources).
    """
    env_name, folder = SOURCE_DIRS[kind]
    engine = "Elasticsearch" if kind == "elasticsearch" else "OpenSearch"
    env = os.environ.get(env_name)
    candidate = Path(env).expanduser() if env else Path(jingpai.__file__).resolve().parents[1] / "java" / folder
    if not (candidate / "pom.xml").is_file():
        origin = f"${env_name}" if env else "the repository checkout next to the installed jingpai package"
        raise EngineModuleError(
            f"the jingpai {engine} plugin's sources were not found at {candidate} ({origin}: no pom.xml); "
            f"set {env_name} to a java/{folder} folder of the jingpai repository, or install a built "
            f"jingpai-{kind} zip on your own node with `bin/{kind}-plugin install file:///…/jingpai-{kind}-<version>.zip`"
        )
    return candidate


def core_source_dir(source: Path) -> Path | None:
    """The engine-neutral sources the plugin at ``source`` compiles in (``../jingpai-core``), if it is there."""
    core = source.parent / CORE_DIR
    return core if (core / "pom.xml").is_file() else None


def _source_files(source: Path) -> list[Path]:
    """What the plugin zip is built from: the pom and everything under ``src/`` (not ``target/``), then the same of
    the engine-neutral project beside it (:func:`core_source_dir`)."""
    files = [source / "pom.xml", *sorted(p for p in (source / "src").rglob("*") if p.is_file())]
    core = core_source_dir(source)
    if core is not None:
        files += [core / "pom.xml", *sorted(p for p in (core / "src" / "main").rglob("*") if p.is_file())]
    return files


def source_fingerprint(source: Path) -> str:
    """A short hash of the plugin's sources (paths and contents of :func:`_source_files`)."""
    digest = hashlib.sha256()
    for path in _source_files(source):
        digest.update(os.path.relpath(path, source).replace(os.sep, "/").encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def plugin_fingerprint(settings: EngineSettings, name: str) -> str:
    """What plugin ``name`` of a composed home is made from: its pinned version, or ``src-<hash of its sources>``."""
    if plugin_spec(settings.kind, name).from_source:
        return f"src-{source_fingerprint(plugin_source_dir(settings.kind))}"
    return plugin_version(settings, name)


def _build_plugin_zip(settings: EngineSettings, name: str) -> Path:
    """Build the jingpai plugin's zip for ``settings``' engine version, once per state of its sources."""
    spec = plugin_spec(settings.kind, name)
    source = plugin_source_dir(settings.kind)
    engine = "Elasticsearch" if settings.kind == "elasticsearch" else "OpenSearch"
    version = plugin_version(settings, name)
    folder = settings.root / "plugins"
    zip_path = folder / f"{spec.artifact}-{version}-{source_fingerprint(source)}.zip"
    if zip_path.exists():
        return zip_path
    mvn = require_tool("mvn", "install Maven (Debian: apt-get install maven); it builds the jingpai plugin from source")
    folder.mkdir(parents=True, exist_ok=True)
    logger.info("building plugin %s for %s %s from %s with Maven", name, engine, version, source)
    # built in a copy: the checkout's own target/ (the JUnit build of tests/plugin/test_java_plugin.py) stays
    # untouched, and two harness builds of different versions cannot clean each other's output
    with tempfile.TemporaryDirectory(prefix="jingpai-plugin-build-") as tmp:
        project = Path(tmp) / source.name
        project.mkdir()
        shutil.copy2(source / "pom.xml", project / "pom.xml")
        shutil.copytree(source / "src", project / "src")
        core = core_source_dir(source)
        if core is not None:
            (Path(tmp) / CORE_DIR).mkdir()
            shutil.copy2(core / "pom.xml", Path(tmp) / CORE_DIR / "pom.xml")
            shutil.copytree(core / "src" / "main", Path(tmp) / CORE_DIR / "src" / "main")
        proc = subprocess.run(
            [mvn, "-q", "-B", "-DskipTests", f"-D{settings.kind}.version={version}", "package"],
            capture_output=True,
            text=True,
            cwd=project,
            timeout=900,
        )
        built = project / "target" / f"{spec.artifact}-{version}.zip"
        if proc.returncode != 0 or not built.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-8:]
            raise EngineError(
                f"could not build plugin {name} from {source} for {engine} {version} with `mvn package` "
                f"(exit {proc.returncode}); run `mvn -B -f {source / 'pom.xml'} -D{settings.kind}.version={version} package` "
                f"to see why (Java 17 and Maven Central or a filled ~/.m2 are needed): {' | '.join(tail)}"
            )
        partial = zip_path.with_name(zip_path.name + ".partial")
        shutil.copy2(built, partial)
        partial.rename(zip_path)
    return zip_path


def ensure_plugin_zip(settings: EngineSettings, name: str) -> Path:
    """The zip of plugin ``name`` for ``settings``' engine version, fetched (or built) once into ``<cache>/plugins``."""
    spec = plugin_spec(settings.kind, name)
    if spec.from_source:
        return _build_plugin_zip(settings, name)
    version = plugin_version(settings, name)
    folder = settings.root / "plugins"
    zip_path = folder / f"{spec.artifact}-{version}.zip"
    if zip_path.exists():
        return zip_path
    mvn = require_tool("mvn", "install Maven (Debian: apt-get install maven)")
    folder.mkdir(parents=True, exist_ok=True)
    artifact = f"{GROUP}:{spec.artifact}:{version}:zip"
    expected = (spec.sha256 or {})[version]
    logger.info("fetching plugin %s (%s) from Maven Central", name, artifact)
    # fetched into a scratch folder and moved into the cache only once it checks out, so a bad zip is never reused
    with tempfile.TemporaryDirectory(prefix="jingpai-plugin-fetch-", dir=folder) as tmp:
        proc = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={tmp}"],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        fetched = Path(tmp) / zip_path.name
        if proc.returncode != 0 or not fetched.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise EngineError(
                f"could not fetch plugin {name} ({artifact}) with `mvn dependency:copy` (exit {proc.returncode}); "
                f"check the version exists on Maven Central and the network reaches it: {' | '.join(tail)}"
            )
        check_sha256(fetched, expected, what=f"plugin {name} ({artifact})")
        fetched.replace(zip_path)
    return zip_path


def check_sha256(path: Path, expected: str, *, what: str) -> None:
    """Raise :class:`EngineError` unless ``path``'s SHA-256 is ``expected``.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "z.zip"; _ = p.write_bytes(b"zip")
    >>> check_sha256(p, "4e6d8c", what="plugin x")
    Traceback (most recent call last):
    ...
    jingpai.engine.settings.EngineError: plugin x: SHA-256 of the fetched z.zip is 4a70fe9aa6436e02c2dea340fbd1e352e4ef2d8ce6ca52ad25d4b95471fc8bf2, expected 4e6d8c; the download is corrupt or not the pinned release (the *_PLUGIN_SHA256 pins in jingpai.engine.settings)
    """
    with path.open("rb") as fh:
        got = hashlib.file_digest(fh, "sha256").hexdigest()
    if got != expected:
        raise EngineError(f"{what}: SHA-256 of the fetched {path.name} is {got}, expected {expected}; the download is corrupt "
                          "or not the pinned release (the *_PLUGIN_SHA256 pins in jingpai.engine.settings)")


def install_plugins(settings: EngineSettings, home: Path) -> None:
    """Install ``settings.plugins`` into ``home`` (a home being composed) with its ``opensearch-plugin`` /
    ``elasticsearch-plugin`` tool.

    ``--batch`` accepts the permissions the plugin's security policy asks for (the k-NN plugin: loading its
    native libraries, reading ``/proc/cpuinfo``; jingpai: connecting to the reranker), which the tool would
    otherwise ask about on a terminal.
    """
    jhome = str(java_home())
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "JAVA_HOME": jhome, "OPENSEARCH_JAVA_HOME": jhome, "ES_JAVA_HOME": jhome}
    tool = f"{settings.kind}-plugin"
    for name in settings.plugins:
        zip_path = ensure_plugin_zip(settings, name)
        proc = subprocess.run(
            [str(home / "bin" / tool), "install", "--batch", zip_path.resolve().as_uri()],
            capture_output=True,
            text=True,
            cwd=home,
            env=env,
            timeout=300,
        )
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise EngineError(
                f"`{tool} install {zip_path}` failed in {home} (exit {proc.returncode}): {' | '.join(tail)}"
            )
        logger.info("installed plugin %s %s into %s", name, plugin_version(settings, name), home)


def loaded_plugins(url: str, **http: Any) -> set[str]:
    """Names of the plugins the node at ``url`` loaded (``GET _nodes/_local/plugins``; ``http``: more ``httpx``
    arguments, the CA and credentials of a secured node)."""
    resp = httpx.get(f"{url}/_nodes/_local/plugins", params={"filter_path": "nodes.*.plugins.name"}, timeout=10.0, **http)
    resp.raise_for_status()
    nodes = resp.json().get("nodes") or {}
    return {p["name"] for node in nodes.values() for p in node.get("plugins", [])}


def harness_http(settings: EngineSettings) -> dict[str, Any]:
    """``httpx`` arguments for the harness's own calls to its node: none, or a secured node's CA and admin."""
    if not settings.secured:
        return {}
    from jingpai.engine.security import admin_http_kwargs

    return admin_http_kwargs(settings.instance_dir)


def verify_plugins(settings: EngineSettings) -> None:
    """Raise :class:`EngineError` naming each plugin of ``settings`` that the running node did not load."""
    if not settings.plugins:
        return
    try:
        loaded = loaded_plugins(settings.url, **harness_http(settings))
    except httpx.HTTPError as exc:
        raise EngineError(f"could not list the plugins of {settings.kind} at {settings.url}: {exc}") from exc
    missing = [p for p in settings.plugins if plugin_spec(settings.kind, p).installed_name not in loaded]
    if missing:
        raise EngineError(
            f"plugin(s) {', '.join(missing)} did not load on {settings.kind} at {settings.url} "
            f"(loaded: {', '.join(sorted(loaded)) or 'none'}); valid plugins: {', '.join(PLUGIN_NAMES)}; "
            f"see {settings.instance_dir / 'engine.log'}"
        )


__all__ = [
    "CORE_DIR",
    "ELASTICSEARCH_PLUGINS",
    "ES_SOURCE_ENV",
    "OPENSEARCH_PLUGINS",
    "SOURCE_DIRS",
    "SOURCE_ENV",
    "PluginSpec",
    "check_sha256",
    "harness_http",
    "core_source_dir",
    "ensure_plugin_zip",
    "install_plugins",
    "loaded_plugins",
    "plugin_fingerprint",
    "plugin_source_dir",
    "plugin_spec",
    "plugin_version",
    "source_fingerprint",
    "verify_plugins",
]
