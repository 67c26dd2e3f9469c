"""The official Spark connectors of the two engines: which jars, fetched how, and how they are configured.

``jingpai index --spark`` writes with the connector of the engine it talks to — OpenSearch's
``opensearch-spark-30_2.13`` or Elasticsearch's ``elasticsearch-spark-30_2.13`` (Scala 2.13, like the
PySpark 4.0 of the ``spark`` extra) — through its Hadoop ``OutputFormat``, the connectors' documented
PySpark API (their DataFrame source is built against Spark 3 and fails on Spark 4 with
``NoSuchMethodError: Dataset.sqlContext()``).

The jars come from Maven Central with ``mvn dependency:copy`` into ``<cache>/connectors`` once, like the
engine distributions and modules (Spark's own Ivy resolution, ``spark.jars.packages``, is left to
``spark-submit --packages`` on a cluster). Only the connector and ``jaxb-api`` are fetched: Spark ships
the connector's other dependencies, and ``jaxb-api`` (gone from Java 17 and from Spark 4) is what the
connector's bulk error handler needs to write rejected documents to a side index.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from jingpai.engine.distributions import require_tool
from jingpai.engine.settings import EngineError, EngineKind, default_cache_dir

logger = logging.getLogger(__name__)

#: what the connectors' bulk error handler needs beyond Spark's classpath
JAXB_API = "javax.xml.bind:jaxb-api:2.3.1"


@dataclass(frozen=True)
class Connector:
    """One engine's Spark connector.

    Args:
        coordinates: ``group:artifact:version`` on Maven Central.
        output_format: its Hadoop ``OutputFormat`` class.
        prefix: the prefix of its settings (``opensearch`` / ``es``).
        handler: the name of its built-in error handler that writes failures to an index.
    """

    coordinates: str
    output_format: str
    prefix: str
    handler: str

    @property
    def jar_name(self) -> str:
        _, artifact, version = self.coordinates.split(":")
        return f"{artifact}-{version}.jar"


CONNECTORS: dict[EngineKind, Connector] = {
    # the only Scala 2.13 release of the OpenSearch connector on Maven Central
    "opensearch": Connector(
        "org.opensearch.client:opensearch-spark-30_2.13:1.2.0", "org.opensearch.hadoop.mr.OpenSearchOutputFormat",
        "opensearch", "opensearch",
    ),
    "elasticsearch": Connector(
        "org.elasticsearch:elasticsearch-spark-30_2.13:8.14.3", "org.elasticsearch.hadoop.mr.EsOutputFormat", "es", "es",
    ),
}


def connector_for(kind: EngineKind, coordinates: str | None = None) -> Connector:
    """The connector of ``kind``, with other ``coordinates`` (``group:artifact:version``) when given."""
    base = CONNECTORS[kind]
    if coordinates is None:
        return base
    if coordinates.count(":") != 2:
        raise EngineError(f"connector coordinates {coordinates!r} are not group:artifact:version")
    return Connector(coordinates, base.output_format, base.prefix, base.handler)


def _fetch(mvn: str, coordinates: str, target: Path) -> Path:
    _, artifact, version = coordinates.split(":")
    jar = target / f"{artifact}-{version}.jar"
    if jar.exists():
        return jar
    logger.info("fetching %s from Maven Central", coordinates)
    proc = subprocess.run(
        [mvn, "-q", "-B", "--strict-checksums", "dependency:copy", f"-Dartifact={coordinates}",
         f"-DoutputDirectory={target}"],
        capture_output=True, text=True, cwd=target,
    )
    if proc.returncode != 0 or not jar.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise EngineError(
            f"could not fetch {coordinates} with `mvn dependency:copy` (exit {proc.returncode}); check the version "
            f"exists on Maven Central and the network reaches it, or pass the jar to spark-submit: {' | '.join(tail)}"
        )
    return jar


def ensure_connector_jars(connector: Connector, *, cache_dir: Path | None = None) -> list[Path]:
    """The connector's jar and ``jaxb-api``, fetched once into ``<cache>/connectors``."""
    mvn = require_tool("mvn", "install Maven (Debian: apt-get install maven), or pass the connector with --packages")
    target = (cache_dir or default_cache_dir()).resolve() / "connectors"
    target.mkdir(parents=True, exist_ok=True)
    return [_fetch(mvn, connector.coordinates, target), _fetch(mvn, JAXB_API, target)]


__all__ = ["CONNECTORS", "JAXB_API", "Connector", "connector_for", "ensure_connector_jars"]
