"""Optional engine modules: OpenSearch's ``analysis-common``, ``mapper-extras`` and ``lang-painless`` from Maven Central.

The integ-test distributions carry core modules only. OpenSearch publishes the jars of its other modules on
Maven Central (``org.opensearch.plugin:<artifact>:<version>``, the same version as the distribution);
``opensearch-plugin install`` refuses them as system modules, but a ``modules/<name>/`` folder holding the
jars, a ``plugin-descriptor.properties`` and, where needed, a ``plugin-security.policy`` loads at start-up.

- :func:`ensure_module_jars` resolves a module's jar and its runtime dependencies (read from the module's
  own POM) with ``mvn dependency:copy-dependencies`` into ``<cache>/modules/<kind>-<version>/<name>``,
  once; Maven checks each file's ``.sha1`` from Maven Central (``--strict-checksums``).
- :func:`ensure_home_with_modules` copies the unpacked distribution to its own home
  (``<cache>/dist/<kind>-<version>+<module>+…``) and adds the module folders, once, so a plain node
  sharing the cache keeps the plain distribution; its marker records what the plugins were made from
  (:func:`~jingpai.engine.plugins.plugin_fingerprint`), and a home whose record differs is composed again.
- :func:`verify_modules` checks after start that every requested module loaded.

Elasticsearch 8.19's modules are not on Maven Central: :class:`~jingpai.engine.settings.EngineSettings`
refuses ``modules`` for it.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from jingpai.engine.distributions import ensure_distribution, require_tool
from jingpai.engine.plugins import harness_http, install_plugins, plugin_fingerprint, plugin_spec
from jingpai.engine.settings import MODULE_NAMES, EngineError, EngineSettings

logger = logging.getLogger(__name__)

GROUP = "org.opensearch.plugin"
#: core artifacts already on the node's classpath: excluded from a module's folder (jar hell otherwise)
_CORE = ("org.opensearch", "opensearch")


@dataclass(frozen=True)
class ModuleSpec:
    """One OpenSearch module as the distribution ships it.

    Args:
        artifact: its artifact id under :data:`GROUP`.
        classname: the plugin class ``plugin-descriptor.properties`` names.
        description: the descriptor's description.
        extends: modules it extends when they are installed too (their class loader is its parent).
        policy: its ``plugin-security.policy`` (``None``: it needs no permissions beyond the defaults).
    """

    artifact: str
    classname: str
    description: str
    extends: tuple[str, ...] = ()
    policy: str | None = None


# painless compiles scripts to classes at run time: its own class loader, and the loaders of the classes
# it allow-lists (the module's plugin-security.policy in OpenSearch's source)
_PAINLESS_POLICY = """grant {
  // needed to generate runtime classes
  permission java.lang.RuntimePermission "createClassLoader";
  // needed to find the classloader to load allow-listed classes from
  permission java.lang.RuntimePermission "getClassLoader";
};
"""

OPENSEARCH_MODULES: dict[str, ModuleSpec] = {
    "analysis-common": ModuleSpec(
        artifact="analysis-common",
        classname="org.opensearch.analysis.common.CommonAnalysisPlugin",
        description='Adds "built in" analyzers to OpenSearch.',
        # its painless extension (analysis predicate scripts) is loaded only when painless is there too
        extends=("lang-painless",),
    ),
    "mapper-extras": ModuleSpec(
        artifact="mapper-extras-client",
        classname="org.opensearch.index.mapper.MapperExtrasPlugin",
        description="Adds advanced field mappers (rank_feature(s), scaled_float, search_as_you_type, token_count).",
    ),
    "lang-painless": ModuleSpec(
        artifact="lang-painless",
        classname="org.opensearch.painless.PainlessPlugin",
        description="An easy, safe and fast scripting language for OpenSearch",
        policy=_PAINLESS_POLICY,
    ),
}


def _pom(artifact: str, version: str) -> str:
    """A throw-away project depending on the module: Maven reads the module's POM for the rest."""
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>jingpai</groupId><artifactId>engine-module</artifactId><version>0</version><packaging>pom</packaging>
  <dependencies><dependency>
    <groupId>{GROUP}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>
    <exclusions><exclusion><groupId>{_CORE[0]}</groupId><artifactId>{_CORE[1]}</artifactId></exclusion></exclusions>
  </dependency></dependencies>
</project>
"""


def ensure_module_jars(settings: EngineSettings, name: str) -> Path:
    """The folder holding module ``name``'s jars for ``settings``' version, fetched once."""
    spec = OPENSEARCH_MODULES[name]
    version = settings.resolved_version
    target = settings.root / "modules" / f"{settings.kind}-{version}" / name
    marker = target / ".jingpai-fetched"
    if marker.exists():
        return target
    mvn = require_tool("mvn", "install Maven (Debian: apt-get install maven)")
    coordinates = f"{GROUP}:{spec.artifact}:{version}"
    logger.info("fetching module %s (%s and its dependencies) from Maven Central", name, coordinates)
    staging = target.with_name(name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="jingpai-module-") as project:
        pom = Path(project) / "pom.xml"
        pom.write_text(_pom(spec.artifact, version))
        proc = subprocess.run(
            [mvn, "-q", "-B", "--strict-checksums", "-f", str(pom), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={staging}"],
            capture_output=True,
            text=True,
            cwd=project,
        )
    main_jar = staging / f"{spec.artifact}-{version}.jar"
    if proc.returncode != 0 or not main_jar.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise EngineError(
            f"could not fetch module {name} ({coordinates}) with `mvn dependency:copy-dependencies` "
            f"(exit {proc.returncode}); check the version exists on Maven Central and the network reaches it: "
            f"{' | '.join(tail)}"
        )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    marker.write_text(coordinates)
    return target


def descriptor(spec: ModuleSpec, name: str, version: str, modules: tuple[str, ...]) -> str:
    """``plugin-descriptor.properties`` of module ``name`` in a home that holds ``modules``."""
    extends = [m for m in spec.extends if m in modules]
    return "\n".join(
        [
            f"description={spec.description}",
            f"version={version}",
            f"name={name}",
            f"classname={spec.classname}",
            "java.version=11",
            f"opensearch.version={version}",
            "custom.foldername=",
            f"extended.plugins={','.join(extends)}",
            "has.native.controller=false",
        ]
    ) + "\n"


def _add_module(settings: EngineSettings, modules_dir: Path, name: str, core_jars: set[str]) -> None:
    spec = OPENSEARCH_MODULES[name]
    folder = modules_dir / name
    folder.mkdir()
    for jar in sorted(ensure_module_jars(settings, name).glob("*.jar")):
        if jar.name in core_jars:
            logger.info("module %s: %s is on the node's classpath already; left out", name, jar.name)
            continue
        shutil.copy2(jar, folder / jar.name)
    version = settings.resolved_version
    (folder / "plugin-descriptor.properties").write_text(descriptor(spec, name, version, settings.modules))
    if spec.policy:
        (folder / "plugin-security.policy").write_text(spec.policy)


def ensure_home_with_modules(settings: EngineSettings) -> Path:
    """The distribution with ``settings.modules`` added and ``settings.plugins`` installed
    (:func:`~jingpai.engine.plugins.install_plugins`), in a home of its own; the plain one without either."""
    if not settings.modules and not settings.plugins:
        return ensure_distribution(settings)
    # first: a source-built plugin without sources fails here, naming the fix, before any download
    record = _home_record(settings)
    base = ensure_distribution(settings)
    home = settings.home
    marker = home / ".jingpai-unpacked"
    if marker.exists():
        found = marker.read_text()
        # homes composed before plugins had fingerprints recorded the names only: still right for pinned plugins
        legacy = ",".join((*settings.modules, *settings.plugins))
        if found == record or (found == legacy and not any(plugin_spec(settings.kind, p).from_source for p in settings.plugins)):
            return home
        logger.info("%s was composed from other plugin sources (%s, now %s): composing it again",
                    home, found.replace("\n", "; "), record.replace("\n", "; "))
    staging = home.with_name(home.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(base, staging, symlinks=True)
    (staging / ".jingpai-unpacked").unlink()
    core_jars = {p.name for p in (staging / "lib").glob("*.jar")}
    for name in settings.modules:
        if (staging / "modules" / name).exists():
            logger.info("%s %s ships module %s already", settings.kind, settings.resolved_version, name)
            continue
        _add_module(settings, staging / "modules", name, core_jars)
    # after the modules: the plugin tool checks that the modules a plugin extends are there
    install_plugins(settings, staging)
    shutil.rmtree(home, ignore_errors=True)
    staging.rename(home)
    marker.write_text(record)
    return home


def _home_record(settings: EngineSettings) -> str:
    """The marker of a composed home: its modules and plugins, then ``<plugin>=<fingerprint>`` per plugin
    (the pinned version, or the hash of a source-built plugin's sources)."""
    lines = [",".join((*settings.modules, *settings.plugins))]
    lines += [f"{name}={plugin_fingerprint(settings, name)}" for name in settings.plugins]
    return "\n".join(lines)


def loaded_modules(url: str, **http) -> set[str]:
    """Names of the modules the node at ``url`` loaded (``GET _nodes/_local/plugins``; ``http``: more ``httpx``
    arguments, the CA and credentials of a secured node)."""
    resp = httpx.get(f"{url}/_nodes/_local/plugins", params={"filter_path": "nodes.*.modules.name"}, timeout=10.0, **http)
    resp.raise_for_status()
    nodes = resp.json().get("nodes") or {}
    return {m["name"] for node in nodes.values() for m in node.get("modules", [])}


def verify_modules(settings: EngineSettings) -> None:
    """Raise :class:`EngineError` naming each module of ``settings`` that the running node did not load."""
    if not settings.modules:
        return
    try:
        loaded = loaded_modules(settings.url, **harness_http(settings))
    except httpx.HTTPError as exc:
        raise EngineError(f"could not list the modules of {settings.kind} at {settings.url}: {exc}") from exc
    missing = [m for m in settings.modules if m not in loaded]
    if missing:
        raise EngineError(
            f"module(s) {', '.join(missing)} did not load on {settings.kind} at {settings.url} "
            f"(loaded: {', '.join(sorted(loaded))}); valid modules: {', '.join(MODULE_NAMES)}; "
            f"see {settings.instance_dir / 'engine.log'}"
        )


__all__ = [
    "OPENSEARCH_MODULES",
    "ModuleSpec",
    "descriptor",
    "ensure_home_with_modules",
    "ensure_module_jars",
    "loaded_modules",
    "verify_modules",
]
