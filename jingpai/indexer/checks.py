"""What decides the end of an indexing run: which bulk failures are the cluster's (stop the run) rather
than the document's (quarantine it), and whether a new physical index may replace the live one.

Used by :func:`jingpai.indexer.pipeline.index_corpus`; ``docs/indexing.md`` lists the rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jingpai.engine.client import Engine
    from jingpai.indexer.mapping import IndexMeta
    from jingpai.indexer.report import IndexReport
    from jingpai.indexer.settings import IndexSettings


def item_error(item: dict) -> str:
    (op,) = item.values()
    err = op.get("error") or {}
    if isinstance(err, dict):
        return f"engine rejected the document: {err.get('type', 'error')}: {err.get('reason', '')}".rstrip(": ")
    return f"engine rejected the document: {err}"


def item_kind(item: dict) -> str:
    (op,) = item.values()
    err = op.get("error")
    return f"engine rejected the document: {err.get('type', 'error')}" if isinstance(err, dict) else "engine rejected the document"


REFUSAL_TYPES = frozenset({
    "cluster_block_exception",  # index.blocks.write / read_only, disk flood-stage watermark
    "index_closed_exception",
    "index_not_found_exception",
    "security_exception",
    "es_rejected_execution_exception",  # write queue full after the helper's own retries
    "unavailable_shards_exception",
    "no_shard_available_action_exception",
})
"""Bulk item errors that are about the index or cluster, not the document."""


def is_refusal(item: dict) -> bool:
    """Whether a failed bulk item was refused for a reason of the index or cluster (any document would
    fail the same way) rather than for its own content: such items are not quarantined.

    Per-document failures are 400-class answers about the source (mapping conflicts, parse errors);
    authorisation (401/403), throttling (429), timeouts (408) and server errors (5xx) are the cluster's.
    """
    (op,) = item.values()
    err = op.get("error")
    kind = err.get("type") if isinstance(err, dict) else None
    status = op.get("status")
    if kind in REFUSAL_TYPES:
        return True
    return isinstance(status, int) and (status in (401, 403, 404, 408, 429) or status >= 500)


def alias_state(alias: str, before: list[str]) -> str:
    if not before:
        return f"the alias {alias} was not created"
    return f"the alias {alias} still points at {', '.join(before)}"


def check_build(
    engine: Engine, physical: str, report: IndexReport, settings: IndexSettings, *, live_meta: IndexMeta | None,
    dict_version: str | None, vector_model: str | None = None,
) -> str | None:
    """Why the freshly indexed ``physical`` must not replace the live index, or ``None`` when it may.

    A new index fails when the corpus had no records, when it holds no documents, when more than ``settings.max_rejected`` of the
    records read were quarantined, when the live index was built with a dictionary and this run has
    none (searchers would lose the keyword fields the gateway relies on), or when the live index has
    document vectors and this run has none (``vector_model``; the gateway's kNN search would lose them).
    """
    if report.read == 0:
        return "the corpus has no records (empty files or blank lines only)"
    if engine.count(physical) == 0:
        return f"it is empty: all {report.read} records read were rejected"
    if report.rejected / report.read > settings.max_rejected:
        return (
            f"{report.rejected} of {report.read} records read ({report.rejected / report.read:.1%}) were rejected, "
            f"over --max-rejected {settings.max_rejected:g} ({settings.max_rejected:.1%})"
        )
    if live_meta is not None and live_meta.dict_version is not None and dict_version is None:
        return (
            f"the live index was built with dictionary {live_meta.dict_version} and this run has none (--dict), "
            f"so its documents have no keywords"
        )
    if live_meta is not None and live_meta.vector_model is not None and vector_model is None:
        return (
            f"the live index has document vectors from model {live_meta.vector_model} and this run has none "
            f"(--vectors), so kNN search would find nothing"
        )
    return None
