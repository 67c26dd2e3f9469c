"""The settings of a dictionary build and of its new-word discovery: light, so the CLI can read them.

``jingpai dict build``'s options are generated from these dataclasses (:mod:`jingpai.commands.options`),
and importing this module must not import numpy or jieba (every ``--help`` would pay for them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

#: below this many characters in all corpora together, starting worker processes costs more than it
#: saves: forked workers start in milliseconds, spawned ones re-import numpy and the segmenter (~1 s)
PARALLEL_MIN_CHARS = {"fork": 300_000, "spawn": 5_000_000}


@dataclass(frozen=True)
class DiscoverySettings:
    """Thresholds of new-word discovery.

    Args:
        min_n: shortest candidate, in units (Han characters or Latin/digit runs).
        max_n: longest candidate, in units.
        min_count: minimum occurrences in the corpus.
        min_pmi: minimum PMI of the weakest split (natural log).
        min_entropy: minimum of left and right neighbour entropy (nats).
        chunk_chars: the corpus is counted in chunks of about this many characters (memory grows with
            the chunk; a corpus that fits one chunk is counted exactly, and fastest).
        max_table: when an n-gram table carried across chunks grows past this many entries, its
            rarest n-grams are pruned (lossy counting: bounded memory, counts of very rare n-grams
            become approximate).
    """

    min_n: int = 2
    max_n: int = 6
    min_count: int = 5
    min_pmi: float = 3.0
    min_entropy: float = 1.0
    chunk_chars: int = 2_000_000
    max_table: int = 4_000_000

    def __post_init__(self) -> None:
        if not 1 <= self.min_n <= self.max_n:
            raise ValueError(f"n-gram range must satisfy 1 <= min_n <= max_n, got min_n={self.min_n}, max_n={self.max_n}")
        if self.min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {self.min_count}")



@dataclass(frozen=True)
class BuildSettings:
    """Every parameter of a dictionary build (recorded in the dictionary's ``meta.json``).

    Args:
        discovery: new-word discovery thresholds.
        known_words: also score the segmenter's own words found in the corpus (min 2 characters).
        known_min_count: minimum occurrences of a known word in the domain.
        smoothing: λ in diff-idf.
        min_score: keep words whose diff-idf is at least this.
        min_df: keep words found in at least this many documents of the domain.
        top_n: keep at most this many words per domain (``None``: all above the threshold).
        workers: processes for the per-domain work (``None``: one per CPU core when the corpora hold at
            least :data:`PARALLEL_MIN_CHARS` characters for the way processes start here, else
            in-process; 1: in-process).
    """

    discovery: DiscoverySettings = field(default_factory=DiscoverySettings)
    known_words: bool = True
    known_min_count: int = 3
    smoothing: float = 1.0
    min_score: float = 0.5
    min_df: int = 2
    top_n: int | None = 5000
    workers: int | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("workers")  # how fast, not what: must not change the recorded parameters
        return data


@dataclass(frozen=True)
class SparkBuildSettings:
    """Where a dictionary build runs: in this process (and its workers), or as Spark jobs.

    Args:
        spark: run the build as Spark jobs (:mod:`jingpai.keyword_dict.spark_build`; same result).
        master: the Spark master URL (``None``: ``local[*]``, or the ``--master`` of ``spark-submit``).
    """

    spark: bool = False
    master: str | None = None


__all__ = ["PARALLEL_MIN_CHARS", "BuildSettings", "DiscoverySettings", "SparkBuildSettings"]
