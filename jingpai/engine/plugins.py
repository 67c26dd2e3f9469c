"""Optional OpenSearch plugins from Maven Central: the k-NN plugin (``knn_vector`` fields, ``knn`` queries).

Unlike the modules (:mod:`jingpai.engine.modules`), a plugin is published as the zip
``opensearch-plugin install`` takes, so the harness installs it with the distribution's own tool:

- :func:`ensure_plugin_zip` fetches ``org.opensearch.plugin:<artifact>:<version>:zip`` once with
  ``mvn dependency:copy`` into ``<cache>/plugins/``, at the version
  :data:`~jingpai.engine.settings.KNN_PLUGIN_VERSIONS` pins for the engine version (a plugin loads only on
  the exact OpenSearch version its descriptor names);
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

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx

from jingpai.engine.distributions import java_home, require_tool
from jingpai.engine.settings import KNN_PLUGIN_VERSIONS, PLUGIN_NAMES, EngineError, EngineSettings

logger = logging.getLogger(__name__)

GROUP = "org.opensearch.plugin"


@dataclass(frozen=True)
class PluginSpec:
    """One OpenSearch plugin as Maven Central publishes it.

    Args:
        artifact: its artifact id under :data:`GROUP` (the zip).
        installed_name: the name the node lists it under (``GET _nodes/_local/plugins``).
        versions: engine version → plugin version, the pairs known to work together.
    """

    artifact: str
    installed_name: str
    versions: dict[str, str]


OPENSEARCH_PLUGINS: dict[str, PluginSpec] = {
    "knn": PluginSpec(artifact="opensearch-knn", installed_name="opensearch-knn", versions=KNN_PLUGIN_VERSIONS),
}


def plugin_version(settings: EngineSettings, name: str) -> str:
    """The version of plugin ``name`` pinned for ``settings``' engine version (settings checked it exists)."""
    return OPENSEARCH_PLUGINS[name].versions[settings.resolved_version]


def ensure_plugin_zip(settings: EngineSettings, name: str) -> Path:
    """The zip of plugin ``name`` for ``settings``' engine version, fetched once into ``<cache>/plugins``."""
    spec = OPENSEARCH_PLUGINS[name]
    version = plugin_version(settings, name)
    folder = settings.root / "plugins"
    zip_path = folder / f"{spec.artifact}-{version}.zip"
    if zip_path.exists():
        return zip_path
    mvn = require_tool("mvn", "install Maven (Debian: apt-get install maven)")
    folder.mkdir(parents=True, exist_ok=True)
    artifact = f"{GROUP}:{spec.artifact}:{version}:zip"
    logger.info("fetching plugin %s (%s) from Maven Central", name, artifact)
    proc = subprocess.run(
        [mvn, "-q", "-B", "--strict-checksums", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={folder}"],
        capture_output=True,
        text=True,
        cwd=folder,
    )
    if proc.returncode != 0 or not zip_path.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise EngineError(
            f"could not fetch plugin {name} ({artifact}) with `mvn dependency:copy` (exit {proc.returncode}); "
            f"check the version exists on Maven Central and the network reaches it: {' | '.join(tail)}"
        )
    return zip_path


def install_plugins(settings: EngineSettings, home: Path) -> None:
    """Install ``settings.plugins`` into ``home`` (a home being composed) with its ``opensearch-plugin`` tool.

    ``--batch`` accepts the permissions the plugin's security policy asks for (the k-NN plugin: loading its
    native libraries, reading ``/proc/cpuinfo``), which the tool would otherwise ask about on a terminal.
    """
    jhome = str(java_home())
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "JAVA_HOME": jhome, "OPENSEARCH_JAVA_HOME": jhome}
    for name in settings.plugins:
        zip_path = ensure_plugin_zip(settings, name)
        proc = subprocess.run(
            [str(home / "bin" / "opensearch-plugin"), "install", "--batch", zip_path.resolve().as_uri()],
            capture_output=True,
            text=True,
            cwd=home,
            env=env,
            timeout=300,
        )
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise EngineError(
                f"`opensearch-plugin install {zip_path}` failed in {home} (exit {proc.returncode}): {' | '.join(tail)}"
            )
        logger.info("installed plugin %s %s into %s", name, plugin_version(settings, name), home)


def loaded_plugins(url: str) -> set[str]:
    """Names of the plugins the node at ``url`` loaded (``GET _nodes/_local/plugins``)."""
    resp = httpx.get(f"{url}/_nodes/_local/plugins", params={"filter_path": "nodes.*.plugins.name"}, timeout=10.0)
    resp.raise_for_status()
    nodes = resp.json().get("nodes") or {}
    return {p["name"] for node in nodes.values() for p in node.get("plugins", [])}


def verify_plugins(settings: EngineSettings) -> None:
    """Raise :class:`EngineError` naming each plugin of ``settings`` that the running node did not load."""
    if not settings.plugins:
        return
    try:
        loaded = loaded_plugins(settings.url)
    except httpx.HTTPError as exc:
        raise EngineError(f"could not list the plugins of {settings.kind} at {settings.url}: {exc}") from exc
    missing = [p for p in settings.plugins if OPENSEARCH_PLUGINS[p].installed_name not in loaded]
    if missing:
        raise EngineError(
            f"plugin(s) {', '.join(missing)} did not load on {settings.kind} at {settings.url} "
            f"(loaded: {', '.join(sorted(loaded)) or 'none'}); valid plugins: {', '.join(PLUGIN_NAMES)}; "
            f"see {settings.instance_dir / 'engine.log'}"
        )


__all__ = [
    "OPENSEARCH_PLUGINS",
    "PluginSpec",
    "ensure_plugin_zip",
    "install_plugins",
    "loaded_plugins",
    "plugin_version",
    "verify_plugins",
]
