"""A local, loopback-only Elasticsearch or OpenSearch node for development, tests, benchmarks and the demo.

The official *integ-test-zip* distributions are fetched from Maven Central with ``mvn dependency:copy``,
cached with their unpacked tree, and run on the machine's Java 17 (:mod:`jingpai.engine.distributions`).
Each running node owns one *instance directory* (config, data, logs, pid file) named after its kind and
port. Engines refuse to run as root, so when the caller is root the node runs as an unprivileged system
user that the harness creates and that owns the engine tree and the instance directory
(:mod:`jingpai.engine.node`).

This module is the harness's one import point: it re-exports the settings (:mod:`jingpai.engine.settings`),
the distributions and the node lifecycle.

Note: the integ-test-zip distributions carry only the core modules (no ``analysis-common``,
``mapper-extras``, ``lang-painless``), so everything jingpai sends to an engine uses core features only.
OpenSearch's optional modules (:mod:`jingpai.engine.modules`) and its k-NN plugin
(:mod:`jingpai.engine.plugins`, needed for document vectors) are added to a home of their own on request.

Example:
    >>> settings = EngineSettings(kind="opensearch", port=9200)
    >>> node = start(settings)           # doctest: +SKIP
    >>> node.url                         # doctest: +SKIP
    'http://127.0.0.1:9200'
    >>> stop(settings)                   # doctest: +SKIP
"""

from __future__ import annotations

from jingpai.engine.distributions import ensure_distribution, java_home
from jingpai.engine.modules import OPENSEARCH_MODULES, ensure_home_with_modules, loaded_modules, verify_modules
from jingpai.engine.node import launch, run_dir, running, start, status, stop, wait
from jingpai.engine.plugins import OPENSEARCH_PLUGINS, loaded_plugins, verify_plugins
from jingpai.engine.settings import (
    ARTIFACTS,
    DEFAULT_PORTS,
    DEFAULT_VERSIONS,
    ENGINE_KINDS,
    ENGINE_USER,
    MODULE_NAMES,
    EngineError,
    EngineKind,
    EngineModuleError,
    EngineSettings,
    KNN_PLUGIN_VERSIONS,
    NodeInfo,
    PLUGIN_NAMES,
    default_cache_dir,
)
from jingpai.net import free_port  # re-exported: the tests and the bench import it from here

__all__ = [
    "ARTIFACTS",
    "DEFAULT_PORTS",
    "DEFAULT_VERSIONS",
    "ENGINE_KINDS",
    "ENGINE_USER",
    "KNN_PLUGIN_VERSIONS",
    "MODULE_NAMES",
    "OPENSEARCH_MODULES",
    "OPENSEARCH_PLUGINS",
    "PLUGIN_NAMES",
    "EngineError",
    "EngineKind",
    "EngineModuleError",
    "EngineSettings",
    "NodeInfo",
    "default_cache_dir",
    "ensure_distribution",
    "ensure_home_with_modules",
    "free_port",
    "java_home",
    "launch",
    "loaded_modules",
    "loaded_plugins",
    "run_dir",
    "running",
    "start",
    "status",
    "stop",
    "verify_modules",
    "verify_plugins",
    "wait",
]
