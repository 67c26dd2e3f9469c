"""``jingpai dict build --spark``: :func:`~jingpai.keyword_dict.build.build_dictionary` as Spark jobs.

The same steps as on one machine, each a Spark job over the ``(domain, text)`` records of
:mod:`~jingpai.keyword_dict.spark_corpus`:

1. read and check the corpora (one pass; the parsed records stay cached on the executors);
2. new-word discovery over the whole of each domain (:mod:`~jingpai.keyword_dict.spark_discovery`);
3. the segmenter's known words: token counts per task, summed by ``reduceByKey``;
4. document frequencies of the fused vocabulary: the vocabulary index is broadcast once, each task
   counts its documents (:func:`~jingpai.keyword_dict.diffidf.domain_document_frequencies`) and the
   per-domain arrays are summed by ``reduceByKey``;
5. diff-idf, thresholds and the dictionary, on the driver, by the local path's own functions
   (:func:`~jingpai.keyword_dict.build.fuse_candidates`, :func:`~jingpai.keyword_dict.build.score_candidates`).

The driver holds what the local path holds after discovery (candidates, vocabulary, one document-frequency
array per domain), never the corpus. PySpark is imported by the caller's session only.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from jingpai.keyword_dict.build import check_corpus_sizes, domain_candidates, fuse_candidates, known_candidates, score_candidates, segment_counts
from jingpai.keyword_dict.corpus import LabelledSpec
from jingpai.keyword_dict.dictionary import Dictionary
from jingpai.keyword_dict.diffidf import VocabularyIndex, domain_document_frequencies
from jingpai.keyword_dict.settings import BuildSettings
from jingpai.keyword_dict.spark_corpus import BACKGROUND, Corpora, Source, read_corpora
from jingpai.keyword_dict.spark_discovery import count_ngrams, discover_words, total_units

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)


def build_dictionary_spark(
    session: SparkSession,
    sources: Sequence[Source],
    *,
    spec: LabelledSpec | None = None,
    text_fields: Sequence[str] = ("text",),
    encoding: str = "utf-8",
    settings: BuildSettings | None = None,
    origins: dict[str, list[str]] | None = None,
) -> Dictionary:
    """Build a dictionary from ``sources`` with Spark: the result of :func:`build_dictionary` on the same corpora.

    Args:
        session: the Spark session (:func:`jingpai.spark.spark_session`).
        sources: the corpora, domains first in the order the local command reads them, then the background.
        spec: how labelled files are read.
        text_fields: JSONL text fields.
        encoding: the corpora's encoding.
        settings: parameters (defaults: :class:`BuildSettings`).
        origins: filled with ``{domain: inputs it was read from}`` once they are read (for error messages).

    Returns:
        The dictionary.

    Raises:
        CorpusReadError: a corpus the local readers would refuse, with the same message.
        BuildError: corpora that cannot make a dictionary (as the local build).
    """
    s = settings or BuildSettings()
    corpora = read_corpora(session, sources, spec=spec or LabelledSpec(), text_fields=text_fields, encoding=encoding)
    if origins is not None:
        origins.update(corpora.origins)
    try:
        return _build(session.sparkContext, corpora, s)
    finally:
        corpora.parsed.unpersist()


def _build(sc, corpora: Corpora, s: BuildSettings) -> Dictionary:
    sizes = corpora.sizes
    has_background = BACKGROUND in sizes
    names = [name for name in sizes if name != BACKGROUND]
    check_corpus_sizes({n: (sizes[n][0], sizes[n][2]) for n in names}, has_background=has_background, settings=s)
    docs = corpora.documents()
    # a domain smaller than one chunk is counted whole by one task, as on one machine (exact, and
    # several times faster than tables keyed by n-gram); larger ones are sharded by n-gram key
    whole = [n for n in names if sizes[n][1] < s.discovery.chunk_chars]
    sharded = [n for n in names if n not in whole]
    found = _whole_domains(docs, whole, [sizes[n][1] for n in whole], s) if whole else {}
    if sharded:
        found.update(_sharded_domains(docs, sharded, s))
    per_domain = [found[n] for n in names]
    candidates, freqs, stats = fuse_candidates(names, [sizes[n][0] for n in names], [sizes[n][1] for n in names], per_domain)
    stats["background_docs"] = sizes[BACKGROUND][0] if has_background else None
    vocabulary = sorted(set().union(*candidates.values()))
    counted = _document_frequencies(docs, VocabularyIndex.build(vocabulary), s.discovery.chunk_chars)
    corpora_order = names + ([BACKGROUND] if has_background else [])
    return score_candidates(names, vocabulary, candidates, [counted[c] for c in corpora_order], has_background, freqs, stats, s)


def _whole_domains(docs: RDD, names: list[str], chars: list[int], s: BuildSettings) -> dict[str, tuple[dict[str, int], Counter[str]]]:
    """:func:`~jingpai.keyword_dict.build.domain_candidates` of each domain in ``names`` (of ``chars``
    characters), each counted whole in one partition: as many partitions as the default parallelism,
    domains dealt out largest first (each task then costs a Python worker round trip, not a domain)."""
    parts = min(len(names), docs.context.defaultParallelism)
    by_size = sorted(range(len(names)), key=lambda i: -chars[i])
    task = {names[i]: rank % parts for rank, i in enumerate(by_size)}
    grouped = docs.filter(lambda r: r[0] in task).partitionBy(parts, lambda name: task[name])
    per_task = grouped.mapPartitions(lambda rows: _candidates_of(rows, s))
    return dict(per_task.collect())


def _candidates_of(rows: Iterable[tuple[str, str]], s: BuildSettings) -> Iterator[tuple[str, tuple]]:
    for domain, texts in _by_corpus(rows).items():
        yield domain, domain_candidates(texts, s)


def _sharded_domains(docs: RDD, names: list[str], s: BuildSettings) -> dict[str, tuple[dict[str, int], Counter[str]]]:
    """Discovery over n-gram tables sharded by key (:mod:`~jingpai.keyword_dict.spark_discovery`) and known
    words counted per task, for the domains in ``names``."""
    wanted = set(names)
    domain_docs = docs.filter(lambda r: r[0] in wanted)
    buckets = 2 * domain_docs.context.defaultParallelism
    tables = count_ngrams(domain_docs, s.discovery, buckets=buckets).persist(_storage_level())
    try:
        found = discover_words(tables, s.discovery, buckets=buckets, total_units=total_units(tables))
    finally:
        tables.unpersist()
    known = _known_words(domain_docs, s) if s.known_words else {}
    return {n: (found.get(n, {}), known.get(n, Counter())) for n in names}


def _storage_level():
    from pyspark import StorageLevel

    return StorageLevel.MEMORY_AND_DISK


def _by_corpus(rows: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for corpus, text in rows:
        out[corpus].append(text)
    return out


def _segment_partition(rows: Iterable[tuple[str, str]], chunk_chars: int) -> Iterator[tuple[tuple[str, str], int]]:
    for domain, docs in _by_corpus(rows).items():
        for word, count in segment_counts(docs, chunk_chars).items():
            yield (domain, word), count


def _known_words(docs: RDD, s: BuildSettings) -> dict[str, Counter[str]]:
    """``{domain: known words}``: the segmenter's words seen ``known_min_count`` times (as on one machine)."""
    chunk_chars, least = s.discovery.chunk_chars, s.known_min_count
    counts = (
        docs.mapPartitions(lambda rows: _segment_partition(rows, chunk_chars))
        .reduceByKey(lambda a, b: a + b)
        .filter(lambda kv: kv[1] >= least)
        .collect()
    )
    per_domain: dict[str, dict[str, int]] = defaultdict(dict)
    for (domain, word), count in counts:
        per_domain[domain][word] = count
    return {domain: known_candidates(words, least) for domain, words in per_domain.items()}


def _document_frequencies(docs: RDD, index: VocabularyIndex, chunk_chars: int) -> dict[str, tuple]:
    """``{corpus: (df over the vocabulary, documents)}``; the index is broadcast to the executors once."""
    shared = docs.context.broadcast(index)

    def count(rows: Iterable[tuple[str, str]]) -> Iterator[tuple[str, tuple]]:
        for corpus, texts in _by_corpus(rows).items():
            yield corpus, domain_document_frequencies(texts, shared.value, chunk_chars)

    try:
        return dict(docs.mapPartitions(count).reduceByKey(lambda a, b: (a[0] + b[0], a[1] + b[1])).collect())
    finally:
        shared.unpersist()


__all__ = ["build_dictionary_spark"]
