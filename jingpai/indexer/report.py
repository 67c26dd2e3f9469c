"""What one ``jingpai index`` run did (:class:`IndexReport`): counts, timing, the quarantine and the alias.

Its own module so the parts of a run (:mod:`~jingpai.indexer.bulk`, :mod:`~jingpai.indexer.checks`, the Spark
path) fill and read it without importing :mod:`jingpai.indexer.pipeline`, which imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class IndexReport:
    """What one run did."""

    alias: str
    physical_index: str
    read: int = 0
    indexed: int = 0
    rejected: int = 0
    seconds: float = 0.0
    quarantine_file: Path | None = None
    alias_swapped: bool = False
    reasons: dict[str, int] = field(default_factory=dict)
    first_lines: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    run_id: str = ""
    check_failure: str | None = None
    #: with vectors: documents whose vector was read back from the live index / computed by the model
    vectors_reused: int = 0
    vectors_embedded: int = 0

    @property
    def docs_per_s(self) -> float:
        return self.indexed / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        vectors = (f" / vectors: {self.vectors_embedded} embedded, {self.vectors_reused} reused"
                   if self.vectors_embedded or self.vectors_reused else "")
        return (
            f"read {self.read} / indexed {self.indexed} / rejected {self.rejected}{vectors} / "
            f"{self.seconds:.1f} s / {self.docs_per_s:.0f} docs/s → {self.physical_index} (alias {self.alias})"
        )

    def rejections(self, *, examples: int = 5) -> str:
        """The rejections grouped by reason, one line each with its count and first line numbers
        (empty when nothing was rejected)."""
        if not self.rejected:
            return ""
        sources = {src for lines in self.first_lines.values() for src, _ in lines}
        rows = [f"{self.rejected} rejected records appended to {self.quarantine_file} (run {self.run_id}):"]
        for kind, count in sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            where = [
                f"{Path(src).name}:{line}" if len(sources) > 1 else str(line)
                for src, line in self.first_lines.get(kind, [])[:examples]
            ]
            more = ", …" if count > len(where) else ""
            rows.append(f"  {count:>7} × {kind} (line {', '.join(where)}{more})")
        return "\n".join(rows)


__all__ = ["IndexReport"]
