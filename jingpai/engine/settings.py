"""What describes a local engine node: its settings, the record of a running one, and the harness's error.

Used by :mod:`jingpai.engine.distributions` (which distribution to fetch) and :mod:`jingpai.engine.node`
(which node to run); :mod:`jingpai.engine.harness` re-exports everything.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from jingpai.errors import UnavailableError, UserError

logger = logging.getLogger(__name__)

EngineKind = Literal["opensearch", "elasticsearch"]
ENGINE_KINDS: tuple[EngineKind, ...] = ("opensearch", "elasticsearch")

#: Maven coordinates (group:artifact) and default version of each engine's integ-test-zip.
ARTIFACTS: dict[EngineKind, str] = {
    "opensearch": "org.opensearch.distribution.integ-test-zip:opensearch",
    "elasticsearch": "org.elasticsearch.distribution.integ-test-zip:elasticsearch",
}
DEFAULT_VERSIONS: dict[EngineKind, str] = {"opensearch": "2.19.6", "elasticsearch": "8.19.21"}
#: Default HTTP ports: different per kind so both engines can run side by side.
DEFAULT_PORTS: dict[EngineKind, int] = {"opensearch": 9200, "elasticsearch": 9201}
ENGINE_USER = "jingpai-engine"
#: optional modules the harness adds to an OpenSearch integ-test distribution (:mod:`jingpai.engine.modules`)
MODULE_NAMES: tuple[str, ...] = ("analysis-common", "lang-painless", "mapper-extras")
#: optional plugins the harness installs into an OpenSearch home (:mod:`jingpai.engine.plugins`): ``jingpai``
#: (this repository's search-pipeline plugin, built from ``java/opensearch-plugin`` with Maven), ``knn`` and
#: ``security`` (TLS, users, roles: :mod:`jingpai.engine.security`)
PLUGIN_NAMES: tuple[str, ...] = ("jingpai", "knn", "security")
#: the optional plugins of an Elasticsearch home: ``jingpai`` (the ``jingpai`` retriever, built from
#: ``java/elasticsearch-plugin``); Elasticsearch indexes dense vectors with its core modules
ELASTICSEARCH_PLUGIN_NAMES: tuple[str, ...] = ("jingpai",)
#: The one place the engine and plugin versions that work together are pinned: OpenSearch version →
#: ``org.opensearch.plugin:opensearch-knn`` version. A plugin loads only on the exact OpenSearch version
#: its descriptor names (``opensearch.version``); Maven Central serves the k-NN zip for both of these
#: (checked with ``mvn dependency:copy``), and 2.19 is the last line that runs on Java 17. The default
#: OpenSearch (2.19.6) has its match, so ``--plugins knn`` keeps the version every other node runs;
#: 2.19.1 is the pair the k-NN issue named, kept for ``--version 2.19.1``.
KNN_PLUGIN_VERSIONS: dict[str, str] = {"2.19.6": "2.19.6.0", "2.19.1": "2.19.1.0"}
#: SHA-256 of each pinned k-NN zip as Maven Central served it (2026-11-27). The harness checks the fetched zip
#: against it rather than against Maven's ``.sha1`` files: those come from the same server, and mirrors serve
#: the zip without them at times (``--strict-checksums`` then refuses a good zip).
KNN_PLUGIN_SHA256: dict[str, str] = {
    "2.19.6.0": "c21b9565624d29fd4024e3a3902712349006cb7894a73c45d976756a761e628f",
    "2.19.1.0": "eab8c9818865bc035212eab5068cdacae164baa09d4c152f49b736d6f6b0e85c",
}
#: OpenSearch version → ``org.opensearch.plugin:opensearch-security`` version. Maven Central serves the security
#: zip for 2.19.1, 2.19.3 and 2.19.4 but not for 2.19.5 or 2.19.6 (checked with ``mvn dependency:copy``,
#: 2026-12-01), so a secured node cannot run the harness's default OpenSearch: ``--plugins security`` without
#: ``--version`` runs :data:`SECURITY_DEFAULT_VERSION`, the release with a k-NN zip too (``--plugins knn,security``).
SECURITY_PLUGIN_VERSIONS: dict[str, str] = {"2.19.1": "2.19.1.0", "2.19.4": "2.19.4.0"}
SECURITY_PLUGIN_SHA256: dict[str, str] = {
    "2.19.1.0": "94a04f12ac6033902209fac1e4e512618d45beee604bbf0e42c3ed79c55220cf",
    "2.19.4.0": "1f673622c462c4171a8c53f9b1ad20e5b839834cb79b0d3b388da180a0e514e8",
}
SECURITY_DEFAULT_VERSION = "2.19.1"
#: modules a plugin extends (``extended.plugins`` in its descriptor): added to the home with it
PLUGIN_MODULES: dict[str, tuple[str, ...]] = {"knn": ("lang-painless",)}


class EngineError(UnavailableError, RuntimeError):
    """The engine could not be obtained, started, reached or stopped; the message names the fix."""


class EngineModuleError(UserError, ValueError):
    """A requested module or plugin is unknown, the engine kind has none on Maven Central, or no plugin
    version is pinned for the requested engine version."""


def default_cache_dir() -> Path:
    """Where distributions and instance directories live.

    ``JINGPAI_CACHE_DIR`` wins; otherwise ``~/.cache/jingpai/engines`` for a normal user, and
    ``/var/cache/jingpai/engines`` for root (root's home is not readable by the engine user).
    """
    env = os.environ.get("JINGPAI_CACHE_DIR")
    if env:
        return Path(env).expanduser() / "engines"
    if os.geteuid() == 0:
        return Path("/var/cache/jingpai/engines")
    return Path.home() / ".cache" / "jingpai" / "engines"


@dataclass(frozen=True)
class EngineSettings:
    """How to run one local engine node.

    Args:
        kind: ``opensearch`` or ``elasticsearch``.
        version: distribution version on Maven Central; ``None`` picks the tested default.
        port: HTTP port on 127.0.0.1; ``None`` picks the kind's default (9200 / 9201).
        heap: JVM heap, e.g. ``512m``.
        cache_dir: distributions and instance directories; ``None`` → :func:`default_cache_dir`.
        startup_timeout_s: how long :func:`start` waits for the cluster to answer.
        modules: optional modules to add (OpenSearch only), from :data:`MODULE_NAMES`; kept sorted and
            unique. A distribution with modules gets a home of its own (:attr:`home`).
        plugins: optional plugins to install, from :data:`PLUGIN_NAMES` (OpenSearch) or
            :data:`ELASTICSEARCH_PLUGIN_NAMES`: ``knn`` at the version :data:`KNN_PLUGIN_VERSIONS` pins for the
            engine version (``security`` likewise, :data:`SECURITY_PLUGIN_VERSIONS`), ``jingpai`` built from source for it; the modules they extend are added to ``modules``.
            Kept sorted and unique; part of the home's name.
    """

    kind: EngineKind = "opensearch"
    version: str | None = None
    port: int | None = None
    heap: str = "512m"
    cache_dir: Path | None = None
    startup_timeout_s: float = 180.0
    modules: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"unknown engine kind {self.kind!r}; expected one of {', '.join(ENGINE_KINDS)}")
        modules = tuple(sorted(set(self.modules)))
        unknown = [m for m in modules if m not in MODULE_NAMES]
        if unknown:
            raise EngineModuleError(
                f"unknown engine module(s) {', '.join(map(repr, unknown))}; valid modules: {', '.join(MODULE_NAMES)}"
            )
        if modules and self.kind == "elasticsearch":
            raise EngineModuleError(
                f"modules ({', '.join(modules)}) are available for --kind opensearch only: Elasticsearch 8.19's "
                "modules are not published on Maven Central, so its integ-test distribution runs with core "
                "modules and jingpai uses its core-only fallbacks there"
            )
        plugins = self._checked_plugins()
        required = {m for p in plugins for m in PLUGIN_MODULES.get(p, ())}
        if required - set(modules):
            logger.info("plugin(s) %s extend module(s) %s: adding them", ", ".join(plugins), ", ".join(sorted(required - set(modules))))
        object.__setattr__(self, "modules", tuple(sorted(set(modules) | required)))
        object.__setattr__(self, "plugins", plugins)

    def _checked_plugins(self) -> tuple[str, ...]:
        plugins = tuple(sorted(set(self.plugins)))
        unknown = [p for p in plugins if p not in PLUGIN_NAMES]
        if unknown:
            raise EngineModuleError(
                f"unknown engine plugin(s) {', '.join(map(repr, unknown))}; valid plugins: {', '.join(PLUGIN_NAMES)}"
            )
        if self.kind == "elasticsearch" and set(plugins) - set(ELASTICSEARCH_PLUGIN_NAMES):
            raise EngineModuleError(
                f"plugins ({', '.join(p for p in plugins if p not in ELASTICSEARCH_PLUGIN_NAMES)}) are for --kind opensearch only: "
                "Elasticsearch 8 indexes and searches dense vectors (dense_vector, knn) with its core modules, so it needs no plugin; "
                f"valid plugins for --kind elasticsearch: {', '.join(ELASTICSEARCH_PLUGIN_NAMES)}")
        if "security" in plugins and self.resolved_version not in SECURITY_PLUGIN_VERSIONS:
            raise EngineModuleError(
                f"no security plugin is served on Maven Central for OpenSearch {self.resolved_version} (a plugin must match "
                f"the engine version exactly); valid --version with --plugins security: {', '.join(SECURITY_PLUGIN_VERSIONS)} "
                f"(without --version: {SECURITY_DEFAULT_VERSION})"
            )
        if "knn" in plugins and self.resolved_version not in KNN_PLUGIN_VERSIONS:
            raise EngineModuleError(
                f"no k-NN plugin version is pinned for OpenSearch {self.resolved_version} (a plugin must match the "
                f"engine version exactly); valid --version with --plugins knn: {', '.join(KNN_PLUGIN_VERSIONS)}"
            )
        return plugins

    @property
    def resolved_version(self) -> str:
        if self.version:
            return self.version
        return SECURITY_DEFAULT_VERSION if self.secured else DEFAULT_VERSIONS[self.kind]

    @property
    def secured(self) -> bool:
        """Whether the node runs the security plugin: HTTPS, and every request authenticated."""
        return "security" in self.plugins

    @property
    def resolved_port(self) -> int:
        return self.port or DEFAULT_PORTS[self.kind]

    @property
    def root(self) -> Path:
        return (self.cache_dir or default_cache_dir()).resolve()

    @property
    def dist_home(self) -> Path:
        """The unpacked distribution as published."""
        return self.root / "dist" / f"{self.kind}-{self.resolved_version}"

    @property
    def home(self) -> Path:
        """The home the node runs from: :attr:`dist_home`, or a copy of it with :attr:`modules` and
        :attr:`plugins` added (``opensearch-2.19.6+lang-painless+knn``)."""
        if not self.modules and not self.plugins:
            return self.dist_home
        return self.dist_home.with_name(self.dist_home.name + "+" + "+".join((*self.modules, *self.plugins)))

    @property
    def instance_dir(self) -> Path:
        return self.root / "run" / f"{self.kind}-{self.resolved_port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.secured else 'http'}://127.0.0.1:{self.resolved_port}"


@dataclass(frozen=True)
class NodeInfo:
    """A running (or recorded) node."""

    kind: EngineKind
    version: str
    url: str
    pid: int
    instance_dir: Path
    log_file: Path
    alive: bool = True
    extra: dict = field(default_factory=dict)
    modules: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()

    @property
    def port(self) -> int:
        """The node's HTTP port on 127.0.0.1."""
        port = urlsplit(self.url).port
        if port is None:
            raise EngineError(f"node URL {self.url!r} in {self.instance_dir} names no port")
        return port


__all__ = [
    "ARTIFACTS",
    "DEFAULT_PORTS",
    "DEFAULT_VERSIONS",
    "ELASTICSEARCH_PLUGIN_NAMES",
    "ENGINE_KINDS",
    "ENGINE_USER",
    "EngineError",
    "EngineKind",
    "EngineModuleError",
    "EngineSettings",
    "KNN_PLUGIN_VERSIONS",
    "MODULE_NAMES",
    "PLUGIN_MODULES",
    "PLUGIN_NAMES",
    "NodeInfo",
    "SECURITY_DEFAULT_VERSION",
    "SECURITY_PLUGIN_SHA256",
    "SECURITY_PLUGIN_VERSIONS",
    "default_cache_dir",
]
