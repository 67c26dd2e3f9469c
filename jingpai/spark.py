"""One way to get a SparkSession for jingpai's Spark paths (``dict build --spark``, ``index --spark``).

PySpark is an optional extra (``pip install 'jingpai[spark]'``) and needs Java 17 on the machine; both
are checked here, before the JVM starts, so a missing piece is one clear line instead of a Py4J trace.

Why these defaults:

- **loopback for local masters**: a ``local[...]`` driver binds to 127.0.0.1 (Spark otherwise picks the
  machine's external address and warns); a cluster master keeps Spark's own choice.
- **executors run this interpreter** (``PYSPARK_PYTHON`` = ``sys.executable`` unless set), so they see
  the same jingpai, jieba and numpy as the driver on a local master.
- **no UI**, and shuffle partitions follow the default parallelism on a local master: 200 partitions on
  2 cores is pure task overhead.

Partitioning, shuffles and retries are Spark's; nothing here schedules work.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jingpai.errors import UserError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
#: the PySpark line jingpai is built and tested against (Scala 2.13, like the OpenSearch connector)
PYSPARK_REQUIREMENT = "pyspark>=4.0,<4.1"


class SparkUnavailable(UserError):
    """The Spark path was asked for, but PySpark or Java is missing (the message says how to fix it)."""


def require_pyspark() -> Any:
    """The imported ``pyspark`` module; :class:`SparkUnavailable` naming the extra when it is missing."""
    try:
        import pyspark
    except ImportError as exc:
        raise SparkUnavailable(
            f"--spark needs PySpark, which is not installed: pip install 'jingpai[spark]' ({PYSPARK_REQUIREMENT})"
        ) from exc
    return pyspark


def require_java() -> str:
    """The ``java`` Spark will start; :class:`SparkUnavailable` when neither ``JAVA_HOME`` nor ``PATH`` has one."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise SparkUnavailable(
            "--spark needs Java 17 (set JAVA_HOME or put java on PATH; Debian: apt-get install openjdk-17-jre-headless)"
        )
    return java


def is_local(master: str) -> bool:
    """Whether ``master`` runs everything in this machine's driver JVM (``local``, ``local[N]``, ``local[*]``)."""
    return master == "local" or master.startswith("local[")


def spark_session(
    *,
    app_name: str,
    master: str | None = None,
    jars: Sequence[Path] = (),
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession on ``master`` (default ``local[*]``) with ``jars`` on the driver and executor classpath.

    ``conf`` is applied last, so a caller (or a user through it) can override every default above.
    Under ``spark-submit`` with ``master`` None, the master given to spark-submit stands.
    """
    require_pyspark()
    require_java()
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).config("spark.ui.enabled", "false")
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # started by spark-submit: its --master stands
    resolved = master or DEFAULT_MASTER
    if master is not None or not under_submit:
        builder = builder.master(resolved)
    if is_local(resolved):
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", str(_local_cores(resolved)))
        )
    if jars:
        builder = builder.config("spark.jars", ",".join(str(path) for path in jars))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    log.info("spark: master %s, default parallelism %d", session.sparkContext.master,
             session.sparkContext.defaultParallelism)
    return session


def _local_cores(master: str) -> int:
    inner = master[len("local["):-1] if master.startswith("local[") else "1"
    if inner in ("*", ""):
        return os.cpu_count() or 1
    return max(1, int(inner.split(",")[0]))


__all__ = [
    "DEFAULT_MASTER",
    "PYSPARK_REQUIREMENT",
    "SparkUnavailable",
    "is_local",
    "require_java",
    "require_pyspark",
    "spark_session",
]
