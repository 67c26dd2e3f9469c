"""The ``connector`` writer of ``jingpai index --spark``: the engine's official Spark connector, nothing dropped silently.

The built documents go through the connector's Hadoop OutputFormat (``saveAsNewAPIHadoopFile``) as JSON,
their ids from ``--id-field`` (``mapping.id``). The connector's built-in error handler that writes to an
index (``write.rest.error.handlers = opensearch|es``) catches every document the engine rejects after the
connector's own retries and stores it with the engine's error in a side index ``<physical>-rejected-<run>``;
the driver reads that back into the quarantine file, with each record's file and line, and deletes it. A
refusal of the index or cluster (write block, closed index, …) stops the run as on the local path.
Finally the index's document count is checked against the ids sent (counted only when the index holds
fewer documents than were sent). The documents are built once, cached, in one job that also counts them.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from jingpai.engine.client import Engine
from jingpai.engine.connectors import Connector, connector_for
from jingpai.indexer.bulk import EngineRefusedError, IndexingError
from jingpai.indexer.checks import alias_state, is_refusal, item_error, item_kind
from jingpai.indexer.quarantine import Quarantine, entry
from jingpai.indexer.settings import IndexSettings
from jingpai.indexer.spark_build import bad_rows, count_vectors, origin_fields, tallies
from jingpai.indexer.spark_settings import SparkIndexSettings

if TYPE_CHECKING:
    from pyspark import RDD

    from jingpai.indexer.pipeline import IndexReport, Target

logger = logging.getLogger(__name__)


def connector_conf(connector: Connector, engine: Engine, physical: str, settings: IndexSettings, side_index: str) -> dict[str, str]:
    """The connector's settings for writing JSON documents into ``physical`` (see the module docstring)."""
    url = urlsplit(engine.url)
    p = connector.prefix
    handler = f"{p}.write.rest.error.handler.{connector.handler}"
    conf = {
        f"{p}.nodes": str(url.hostname),
        f"{p}.port": str(url.port or (443 if url.scheme == "https" else 9200)),
        # the URL given is the way in (a load balancer, a container port): do not discover data nodes
        f"{p}.nodes.wan.only": "true",
        f"{p}.net.ssl": "true" if url.scheme == "https" else "false",
        f"{p}.resource": physical,
        f"{p}.input.json": "yes",
        f"{p}.mapping.id": str(settings.id_field),
        f"{p}.index.auto.create": "no",  # jingpai created it with its mapping; a typo must not make another
        f"{p}.batch.size.entries": str(settings.batch_size),
        f"{p}.batch.write.retry.count": str(settings.retries),
        f"{p}.write.rest.error.handlers": connector.handler,
        "mapreduce.reduce.speculative": "false",  # a retried task writes the same ids again: harmless, but off
        f"{handler}.client.resource": side_index,
        f"{handler}.client.inherit": "true",
    }
    if url.username:
        conf[f"{p}.net.http.auth.user"] = url.username
        conf[f"{p}.net.http.auth.pass"] = url.password or ""
    return conf


def write_with_connector(
    engine: Engine, spark_settings: SparkIndexSettings, built: RDD, target: Target, settings: IndexSettings,
    quarantine: Quarantine, report: IndexReport,
) -> None:
    """Write the ``doc`` rows of ``built`` with the connector; quarantine the ``bad`` ones and the engine's rejections.

    Raises:
        EngineRefusedError: the engine refused writes to the index or cluster.
        IndexingError: the index holds fewer documents than were sent and not rejected.
    """
    from pyspark import StorageLevel

    connector = connector_for(engine.kind, spark_settings.connector)
    side_index = f"{target.physical}-rejected-{quarantine.run_id.lower()}"
    built = built.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = tallies(built)  # fills the cache: the documents are built once, in one job
        count_vectors(report, counts)
        sent = sum(t["doc"] for t in counts)
        report.read = sent + sum(t["bad"] for t in counts)
        for row in bad_rows(built, counts):
            quarantine.add_entry(row[1], kind=row[2])
        engine.create_index(side_index)
        conf = connector_conf(connector, engine, target.physical, settings, side_index)
        built.filter(lambda row: row[0] == "doc").map(lambda row: (None, row[2])).saveAsNewAPIHadoopFile(
            "-", connector.output_format, "org.apache.hadoop.io.NullWritable", "org.apache.hadoop.io.Text", conf=conf,
        )
        rejected = _engine_rejections(engine, side_index)
        refusal = next((item for item in rejected.values() if is_refusal(item)), None)
        if refusal is not None:
            raise EngineRefusedError(
                f"the engine refused to write to {target.physical}: {item_error(refusal).removeprefix('engine rejected the document: ')}. "
                f"This is the index's or the cluster's state, not the documents', so none were quarantined for it; "
                f"{alias_state(settings.index, target.live_before)}. Fix the cluster and re-run the same command to resume"
            )
        report.indexed = sent - _quarantine_rejected(built, rejected, quarantine)
        _check_count(engine, target, built, sent, len(rejected))
    finally:
        built.unpersist()
        engine.delete_index(side_index)


def _engine_rejections(engine: Engine, side_index: str) -> dict[str, dict]:
    """``{document id: bulk item}`` of the documents the connector's error handler stored in ``side_index``."""
    engine.refresh(side_index)
    found: dict[str, dict] = {}
    for hit in engine.scan(side_index):
        failure = hit["_source"]
        error = failure.get("error") or {}
        header = (failure.get("event") or {}).get("raw", "").split("\n", 1)[0]
        try:
            doc_id = str(next(iter(json.loads(header).values()))["_id"])
        except (ValueError, KeyError, StopIteration, TypeError, AttributeError):
            logger.warning("the connector stored a failure without a readable bulk header: %s", failure)
            doc_id = f"unknown-{len(found)}"
        found[doc_id] = {"index": {"status": None, "error": {"type": error.get("code", "error"), "reason": error.get("message", "")}}}
    return found


def _quarantine_rejected(built: RDD, rejected: dict[str, dict], quarantine: Quarantine) -> int:
    """Append the engine's rejections with their files and lines; return how many records they are."""
    ids = set(rejected)
    if not ids:
        return 0
    origins = built.filter(lambda row: row[0] == "doc" and row[1] in ids).collect()
    for _, doc_id, source, file, line in origins:
        item = rejected[doc_id]
        quarantine.add_entry(entry(quarantine.run_id, file, line, origin_fields(source), item_error(item)), kind=item_kind(item))
    return len(origins)


def _check_count(engine: Engine, target: Target, built: RDD, sent: int, rejected: int) -> None:
    """Raise :class:`IndexingError` when the index holds fewer documents than the distinct ids sent and not rejected.

    The ids are counted (a job) only when the index holds fewer documents than were sent: ``sent`` is at
    least the distinct ids, so a count that reaches it passes without one."""
    engine.refresh(target.physical)
    count = engine.count(target.physical)
    if count >= sent - rejected:
        return
    expected = built.filter(lambda row: row[0] == "doc").map(lambda row: row[1]).distinct().count() - rejected
    if count < expected:
        raise IndexingError(
            f"{target.physical} holds {count} documents but {expected} distinct ids were sent and not rejected: the "
            f"connector lost documents. The alias was not moved; re-run the same command (the ids are the same), "
            f"or use --spark-writer bulk"
        )


__all__ = ["connector_conf", "write_with_connector"]
