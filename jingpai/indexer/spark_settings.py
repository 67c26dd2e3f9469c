"""The Spark options of ``jingpai index --spark``: light, so the CLI can generate its options from them.

Importing this module must not import PySpark, the engine client or jieba (``jingpai index --help``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SparkWriter = Literal["auto", "connector", "bulk"]
SPARK_WRITERS: tuple[SparkWriter, ...] = ("auto", "connector", "bulk")


@dataclass(frozen=True)
class SparkIndexSettings:
    """How ``jingpai index --spark`` runs (docs/scale.md).

    Args:
        master: Spark master URL (``None``: ``local[*]``, or the one ``spark-submit`` was given).
        writer: who writes the documents the executors built. ``connector``: the engine's official Spark
            connector (its Hadoop OutputFormat); it needs ``--id-field`` (it takes the id from a document
            field) and, for Elasticsearch, a cluster that answers ``GET /``. ``bulk``: each executor
            writes its partition with jingpai's own bulk writer (retries, quarantine of rejected
            documents). ``auto``: the connector where it can write, else ``bulk`` (the reason is logged).
        connector: Maven coordinates of the connector (``None``: the engine's, see
            :data:`jingpai.engine.connectors.CONNECTORS`).
    """

    master: str | None = None
    writer: SparkWriter = "auto"
    connector: str | None = None

    def __post_init__(self) -> None:
        if self.writer not in SPARK_WRITERS:
            raise ValueError(f"unknown Spark writer {self.writer!r}; expected one of {', '.join(SPARK_WRITERS)}")
        if self.connector is not None and self.connector.count(":") != 2:
            raise ValueError(f"connector coordinates {self.connector!r} are not group:artifact:version")


__all__ = ["SPARK_WRITERS", "SparkIndexSettings", "SparkWriter"]
