"""The quarantine file ``<index>.rejected.jsonl``: every record a run could not index, with its reason.

Appended to, never truncated (each line names its run), and lossless: a line that is not valid UTF-8
keeps its exact bytes. :func:`jingpai.indexer.pipeline.index_corpus` writes it; ``docs/indexing.md``
describes the format.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any


class Quarantine:
    """``<index>.rejected.jsonl``: one line per rejected record with the original record and the reason.

    The file is appended to, so the rejections of earlier runs stay; each line names its ``run``. A line
    that is not valid UTF-8 also carries its exact bytes as ``record_base64`` (``record`` shows them
    with U+FFFD replacements, readable but not recoverable).

    Args:
        path: the quarantine file.
        run_id: written into every line, to tell runs apart.
        keep_lines: first line numbers remembered per reason, for the summary.
    """

    def __init__(self, path: Path, *, run_id: str, keep_lines: int = 5) -> None:
        self.path = path
        self.run_id = run_id
        self.keep_lines = keep_lines
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", encoding="utf-8")
        self.count = 0
        self.reasons: dict[str, int] = {}
        self.first_lines: dict[str, list[tuple[str, int]]] = {}

    def add(
        self, source: str, line: int, record: dict | str, reason: str, *, kind: str | None = None,
        raw_bytes: bytes | None = None,
    ) -> None:
        """Append one rejected record; ``kind`` groups it in the counts (default: ``reason`` up to ``:``)."""
        self.add_entry(entry(self.run_id, source, line, record, reason, raw_bytes=raw_bytes), kind=kind)

    def add_entry(self, item: dict[str, Any], *, kind: str | None = None) -> None:
        """Append one line made by :func:`entry` (elsewhere: a Spark executor), counted like :meth:`add`."""
        self._write(item)
        self.count += 1
        kind = kind or item["reason"].split(":")[0]
        self.reasons[kind] = self.reasons.get(kind, 0) + 1
        lines = self.first_lines.setdefault(kind, [])
        if len(lines) < self.keep_lines:
            lines.append((item["source"], item["line"]))

    def _write(self, item: dict[str, Any]) -> None:
        try:
            # the text layer encodes the whole string before writing any of it, so a failure writes nothing
            self._fh.write(json.dumps(item, ensure_ascii=False))
        except UnicodeEncodeError:
            self._fh.write(json.dumps(item))  # lone surrogates stay \u escapes: the record is kept exactly
        self._fh.write("\n")

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def entry(
    run_id: str, source: str, line: int, record: dict | str, reason: str, *, raw_bytes: bytes | None = None,
) -> dict[str, Any]:
    """One line of the quarantine file: the run, where the record came from, why, and the record itself."""
    item: dict[str, Any] = {"run": run_id, "source": source, "line": line, "reason": reason, "record": record}
    if raw_bytes is not None:
        item["record_base64"] = base64.b64encode(raw_bytes).decode("ascii")
    return item


class QuarantineBuffer(Quarantine):
    """A :class:`Quarantine` that keeps its lines in :attr:`entries` instead of a file: where the records are
    rejected (a Spark executor) is not where the quarantine file is (the driver's ``--quarantine-dir``)."""

    def __init__(self, *, run_id: str, keep_lines: int = 5) -> None:  # noqa: D107 - no file to open
        self.path = None  # type: ignore[assignment]
        self.run_id = run_id
        self.keep_lines = keep_lines
        self.count = 0
        self.reasons = {}
        self.first_lines = {}
        #: ``(line, kind)`` of every rejected record, in order
        self.entries: list[tuple[dict[str, Any], str | None]] = []
        self._kind: str | None = None

    def add_entry(self, item: dict[str, Any], *, kind: str | None = None) -> None:
        self._kind = kind or item["reason"].split(":")[0]
        super().add_entry(item, kind=kind)

    def _write(self, item: dict[str, Any]) -> None:
        self.entries.append((item, self._kind))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
