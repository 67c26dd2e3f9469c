"""``jingpai index --spark``: the documents built in Spark executors, written into the same versioned index.

The driver does what :func:`jingpai.indexer.pipeline.index_corpus` does around the writing — the same
physical index choice, mapping, build settings, quarantine file, :func:`~jingpai.indexer.checks.check_build`
and alias swap (``pipeline._finish``) — and Spark does the rest: reading the input
(:mod:`jingpai.indexer.spark_input`), segmentation, keywords and keyword weights in the executors with
the dictionary broadcast once (:mod:`jingpai.indexer.spark_build`), with ``--vectors`` the documents' vectors
(the model's folder shipped to the executors; each Python worker loads it once), and the writing, with one of two writers:

- ``connector``: the engine's official Spark connector (:mod:`jingpai.engine.connectors`) through its
  Hadoop OutputFormat, ids from ``--id-field``. Documents the engine rejects are written by the
  connector's own error handler into a side index ``<physical>-rejected-<run>``, which the driver reads
  back into the quarantine file (with each record's file and line) and deletes; the index's count is
  then checked against the documents sent, so nothing is dropped silently.
- ``bulk``: each executor writes its partition with :class:`~jingpai.indexer.bulk.BulkWriter`, exactly
  the local path's writer (retries, quarantine of rejected documents, refusals stop the run).

A failed job raises before ``_finish``: the alias never moves to a partly written index, and a re-run
writes the same ids into the same physical index. See ``docs/scale.md``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jingpai.engine.client import Engine
from jingpai.errors import UserError
from jingpai.indexer.bulk import EngineRefusedError, EngineUnreachableError, IndexingError
from jingpai.indexer.mapping import IndexMeta
from jingpai.indexer.pipeline import IndexReport, Target, _finish, _prepare_index, open_run
from jingpai.indexer.quarantine import Quarantine
from jingpai.indexer.settings import IndexSettings
from jingpai.indexer.spark_build import BulkPartition, PartitionJob, PartitionVectors, bad_rows, count_vectors, tallies
from jingpai.indexer.spark_input import list_files, read_headers, read_lines
from jingpai.indexer.spark_settings import SparkIndexSettings
from jingpai.indexer.vector_reuse import LiveVectors
from jingpai.indexer.vectors import Embedder
from jingpai.spark import require_pyspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jingpai.keyword_dict import Dictionary

logger = logging.getLogger(__name__)


class ConnectorUnusableError(UserError, ValueError):
    """``--spark-writer connector`` was asked for where the connector cannot write (the message says why)."""


def connector_obstacle(engine: Engine, settings: IndexSettings) -> str | None:
    """Why the official connector cannot write this run (``None``: it can)."""
    if settings.id_field is None:
        return (
            "the connectors take the document id from a field of the JSON document and cannot leave a helper "
            "field out of JSON input, so the content-hash ids need --id-field (or --spark-writer bulk)"
        )
    if engine.kind == "elasticsearch":
        import httpx

        try:
            status = httpx.get(engine.url + "/", timeout=10.0).status_code
        except httpx.HTTPError as exc:
            return f"GET {engine.url}/ failed ({exc}), and the Elasticsearch connector starts every task with it"
        if status != 200:
            return (
                f"GET {engine.url}/ answers HTTP {status}: this Elasticsearch has no rest-root module (its integ-test "
                "distribution, as `jingpai engine up` runs, ships without it), and the Elasticsearch connector calls "
                "GET / in every task to check the cluster; use --spark-writer bulk"
            )
    return None


def choose_writer(engine: Engine, settings: IndexSettings, spark_settings: SparkIndexSettings) -> str:
    """``connector`` or ``bulk`` for this run; :class:`ConnectorUnusableError` when the connector was asked for
    but cannot write, a logged fallback to ``bulk`` under ``auto``."""
    if spark_settings.writer == "bulk":
        return "bulk"
    obstacle = connector_obstacle(engine, settings)
    if obstacle is None:
        return "connector"
    if spark_settings.writer == "connector":
        raise ConnectorUnusableError(f"--spark-writer connector cannot write to {engine.kind} at {engine.url}: {obstacle}")
    logger.warning("--spark-writer auto: writing with jingpai's bulk writer in the executors, not the connector: %s", obstacle)
    return "bulk"


def index_corpus_spark(
    engine: Engine,
    paths: Sequence[str | Path],
    settings: IndexSettings,
    spark_settings: SparkIndexSettings,
    *,
    dictionary: Dictionary | None = None,
    embedder: Embedder | None = None,
    spark: SparkSession | None = None,
) -> IndexReport:
    """:func:`~jingpai.indexer.pipeline.index_corpus` with Spark doing the reading, building and writing.

    Args:
        engine: target cluster.
        paths: corpus files, globs or directories, local or anything Spark reads (``hdfs://``, ``s3a://``).
        settings: the run's options (as for the local path).
        spark_settings: master, writer, connector.
        dictionary: keyword dictionary (``None``: the segmenter's own, no keywords).
        embedder: the bi-encoder of ``settings.vectors`` (``None``: no vectors), loaded here for the index's
            ``_meta``; its folder is shipped to the executors (``addFile``), each Python worker loads it (from the
            same path where it exists, else the shipped copy) and embeds its partition's documents, after reading
            unchanged ones' vectors back from the live index.
        spark: a running session (``None``: the active one, as it is; without one, a session is started on
            ``spark_settings.master``, with the connector's jars when the connector writes, and stopped afterwards).

    Returns:
        The run's :class:`IndexReport`; the alias points at the physical index when it returns.

    Raises:
        CorpusError, BuildCheckError, EngineRefusedError, EngineUnreachableError, IndexingError: as
            :func:`~jingpai.indexer.pipeline.index_corpus`.
        ConnectorUnusableError: ``--spark-writer connector`` where the connector cannot write.
        SparkUnavailable: PySpark or Java is missing.
        EmbedderLoadError: the model's folder changed after ``embedder`` was loaded (nothing written).
        IndexingError: also when a task could not load the model (its :class:`EmbedderLoadError` message: the
            folder is missing there, or holds another model than the driver loaded); the alias was not moved.
    """
    started = time.perf_counter()
    require_pyspark()
    from pyspark.sql import SparkSession

    writer = choose_writer(engine, settings, spark_settings)
    spark = spark or SparkSession.getActiveSession()  # a notebook's or a test's session is used as it is
    own = spark is None
    session = spark if spark is not None else _session(engine, spark_settings, writer)
    try:
        return _run(engine, [str(p) for p in paths], settings, spark_settings, dictionary, embedder, session, writer, started)
    finally:
        if own:
            session.stop()


def _session(engine: Engine, spark_settings: SparkIndexSettings, writer: str) -> SparkSession:
    from jingpai.engine.connectors import connector_for, ensure_connector_jars
    from jingpai.spark import spark_session

    jars = ensure_connector_jars(connector_for(engine.kind, spark_settings.connector)) if writer == "connector" else []
    return spark_session(app_name="jingpai index", master=spark_settings.master, jars=jars)


# long: the driver's whole run in one place, as index_corpus has it
def _run(
    engine: Engine, paths: list[str], settings: IndexSettings, spark_settings: SparkIndexSettings,
    dictionary: Dictionary | None, embedder: Embedder | None, spark: SparkSession, writer: str, started: float,
) -> IndexReport:
    files = read_headers(spark, list_files(spark, paths, settings), settings)  # CorpusError: nothing written yet
    if embedder is not None:
        _ship_model(spark, embedder)  # EmbedderLoadError: nothing written yet
    lines = read_lines(spark, files)
    dict_version = dictionary.version if dictionary is not None else None
    meta, target, quarantine, report = open_run(engine, settings, dict_version, embedder=embedder)
    broadcast = spark.sparkContext.broadcast(dictionary) if dictionary is not None else None
    job = PartitionJob(report.run_id, settings, meta, {f.source: f for f in files}, broadcast,
                       _partition_vectors(engine, embedder, target, meta, settings))
    try:
        restore = _prepare_index(engine, target, meta, settings)
        logger.info("spark: %s writer, %d files, %d partitions → %s", writer, len(files), lines.rdd.getNumPartitions(), target.physical)
        if writer == "bulk":
            partition = BulkPartition(job, engine.url, target.physical, tuple(target.live_before))
            _spark_errors(lambda: _collect_bulk(lines.rdd.mapPartitions(partition), quarantine, report))
        else:
            from jingpai.indexer.spark_connector import write_with_connector

            _spark_errors(lambda: write_with_connector(engine, spark_settings, lines.rdd.mapPartitions(job.build), target,
                                                       settings, quarantine, report))
    finally:
        lines.release()
        quarantine.close()
        report.rejected = quarantine.count
        report.reasons = dict(quarantine.reasons)
        report.first_lines = {k: list(v) for k, v in quarantine.first_lines.items()}
        if broadcast is not None:
            broadcast.unpersist()
    _finish(engine, target, report, settings, restore=restore, dict_version=dict_version, started=started,
            vector_model=meta.vector_model)
    return report


def _ship_model(spark: SparkSession, embedder: Embedder) -> None:
    """Send the model's folder to every executor, where the embedder can ship itself (a saved model's
    :meth:`~jingpai.jobs.document_vectors.ModelEmbedder.ship`): a task whose machine lacks the path loads that copy."""
    from py4j.protocol import Py4JError

    ship = getattr(embedder, "ship", None)
    if ship is None:
        logger.info("the embedder %s cannot ship itself: each task loads it from %s", embedder.model_id, embedder.model_path)
        return
    try:
        ship(spark.sparkContext)
    except (OSError, Py4JError) as exc:
        logger.warning("could not ship %s to the executors (%s): each task reads the model from that path",
                       embedder.model_path, str(exc).splitlines()[0][:200])


def _partition_vectors(
    engine: Engine, embedder: Embedder | None, target: Target, meta: IndexMeta, settings: IndexSettings,
) -> PartitionVectors | None:
    """What the tasks need for the documents' vectors, the live index to read them back from chosen here, once."""
    if embedder is None:
        return None
    live = LiveVectors.choose(engine, target.live_before, target.live_meta, meta, enabled=settings.reuse_vectors)
    return PartitionVectors(embedder, engine.url, live.index if live is not None else None)


def _collect_bulk(rows, quarantine: Quarantine, report: IndexReport) -> None:  # noqa: ANN001 - an RDD
    """Write every partition in one job (the tally fills the cache), then fetch the quarantined rows."""
    from pyspark import StorageLevel

    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)  # only the bad rows and one sum per partition
    try:
        counts = tallies(rows)
        count_vectors(report, counts)
        report.read = sum(t["read"] for t in counts)
        report.indexed = sum(t["indexed"] for t in counts)
        for row in bad_rows(rows, counts):
            quarantine.add_entry(row[1], kind=row[2])
    finally:
        rows.unpersist()


_JINGPAI_ERROR = re.compile(r"jingpai\.[\w.]+\.(\w+Error): (.+)")
_ERRORS = {"EngineRefusedError": EngineRefusedError, "EngineUnreachableError": EngineUnreachableError}


def _spark_errors(action) -> None:  # noqa: ANN001 - a callable
    """Run ``action``; a failed Spark job becomes the jingpai error an executor raised (its message), or
    :class:`IndexingError` with the job's own last line."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        action()
    except (Py4JJavaError, PySparkException) as exc:
        text = str(exc)
        found = _JINGPAI_ERROR.findall(text)
        if found:
            name, message = found[-1]
            raise _ERRORS.get(name, IndexingError)(message) from exc
        causes = [ln.strip().removeprefix("Caused by: ") for ln in text.splitlines() if ln.startswith("Caused by: ")]
        last = (causes[-1] if causes else text.strip().splitlines()[0])[:400]
        raise IndexingError(
            f"the Spark job failed: {last}. The alias was not moved; re-run the same command to resume"
        ) from exc


__all__ = ["ConnectorUnusableError", "choose_writer", "connector_obstacle", "index_corpus_spark"]
