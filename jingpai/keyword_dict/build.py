"""Build a fused domain dictionary: discover words per domain, score them with diff-idf, threshold, fuse."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache

import numpy as np

from jingpai.errors import UserError
from jingpai.keyword_dict.diffidf import VocabularyIndex, diff_idf, domain_document_frequencies
from jingpai.keyword_dict.dictionary import Dictionary
from jingpai.keyword_dict.discovery import candidate_mask, find_words
from jingpai.keyword_dict.ngrams import chunks
from jingpai.keyword_dict.segment import Segmenter
from jingpai.keyword_dict.settings import PARALLEL_MIN_CHARS, BuildSettings, DiscoverySettings

logger = logging.getLogger(__name__)


#: a domain with fewer documents gets a warning: its document frequencies are too coarse for diff-idf
FEW_DOCS = 20


class BuildError(UserError, ValueError):
    """The corpora cannot make a dictionary: too few domains, or a domain that cannot contribute a word.

    Attributes:
        domains: the domains at fault (empty when the fault is not one domain's), so that a caller
            can name where their documents came from.
    """

    def __init__(self, message: str, *, domains: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.domains = tuple(domains)


def _listed(items: Sequence[str], limit: int = 5) -> str:
    return "; ".join(items[:limit]) + (f"; and {len(items) - limit} more" if len(items) > limit else "")


@lru_cache(maxsize=1)
def _plain_segmenter() -> Segmenter:
    return Segmenter()


def segment_counts(docs: Sequence[str], chunk_chars: int) -> Counter[str]:
    """Occurrences of each token of the plain segmenter (jieba's dictionary) in ``docs``."""
    counts: Counter[str] = Counter()
    for batch in chunks(docs, chunk_chars):
        # one call per chunk, not per document (cheaper): a word never spans a newline
        counts.update(_plain_segmenter().cut("\n".join(batch)))
    return counts


def known_candidates(counts: Mapping[str, int], min_count: int) -> Counter[str]:
    """The segmenter's words seen ``min_count`` times that can be keywords (:func:`candidate_mask`)."""
    frequent = [w for w, c in counts.items() if c >= min_count]
    return Counter({w: counts[w] for w, ok in zip(frequent, candidate_mask(frequent).tolist()) if ok})


def _known_words(docs: Sequence[str], min_count: int, chunk_chars: int) -> Counter[str]:
    return known_candidates(segment_counts(docs, chunk_chars), min_count)


def domain_candidates(docs: Sequence[str], s: BuildSettings) -> tuple[dict[str, int], Counter[str]]:
    """``({discovered word: count}, known words)`` of one domain's documents."""
    found = find_words(docs, s.discovery)
    known = _known_words(docs, s.known_min_count, s.discovery.chunk_chars) if s.known_words else Counter()
    return dict(zip(found.words, found.freq.tolist())), known


def _start_method() -> str:
    """``fork`` on Linux while no other Python thread runs (a forked child inherits the parent's imports
    and segmenter for free, but not its other threads, whose locks could stay held); else ``spawn``
    (macOS system libraries are not fork-safe; Windows cannot fork)."""
    if not sys.platform.startswith("linux"):
        return "spawn"
    if threading.active_count() > 1:
        logger.info("%d threads running: worker processes are spawned, not forked", threading.active_count())
        return "spawn"
    return "fork"


def _run_all(fn: Callable, args: list[tuple]) -> list:
    return [fn(*a) for a in args]


@contextlib.contextmanager
def _pool(workers: int, method: str) -> Iterator[Callable]:
    """``map(fn, args, sizes)``-like callable over ``workers`` processes: this one and ``workers - 1``
    child processes (none for one worker).

    Tasks are split by size ahead of time, largest first onto the least loaded process, and each child
    gets its share as one call: this process, already warm, works too rather than waiting, which saves
    a child's start and the transfer of its share. Results come back in argument order. Children run
    numpy and the segmenter only, never torch, so a forked child is safe next to torch's thread pools.
    """
    if workers <= 1:
        yield lambda fn, args, sizes: _run_all(fn, args)
        return
    with ProcessPoolExecutor(max_workers=workers - 1, mp_context=multiprocessing.get_context(method)) as ex:

        def pmap(fn, args, sizes):
            shares: list[list[int]] = [[] for _ in range(workers)]
            loads = [0] * workers
            for i in sorted(range(len(args)), key=lambda i: -sizes[i]):
                least = loads.index(min(loads))
                shares[least].append(i)
                loads[least] += sizes[i]
            children = [(share, ex.submit(_run_all, fn, [args[i] for i in share])) for share in shares[1:] if share]
            done = dict(zip(shares[0], _run_all(fn, [args[i] for i in shares[0]])))
            for share, future in children:
                done.update(zip(share, future.result()))
            return [done[i] for i in range(len(args))]

        yield pmap


def build_dictionary(
    domains: Mapping[str, Sequence[str]],
    *,
    background: Sequence[str] | None = None,
    settings: BuildSettings | None = None,
) -> Dictionary:
    """Build a dictionary from domain corpora.

    Args:
        domains: ``{domain name: documents}``.
        background: anti-domain corpus for every domain (``None``: each domain's anti-domain is all
            the other domains, which then needs at least two domains).
        settings: parameters (defaults: :class:`BuildSettings`).

    Returns:
        The fused :class:`Dictionary` (word → {domain: diff-idf}, freq = occurrences in its domains).

    Raises:
        BuildError: one domain without background, an empty domain, a domain with fewer than
            ``min_df`` documents, or a domain that keeps no word (the message gives the likely cause
            and :attr:`BuildError.domains` names the domains).

    Example:
        >>> d = build_dictionary({"finance": fin_docs, "sports": sport_docs})   # doctest: +SKIP
        >>> d.domain_words("finance")[:3]                                          # doctest: +SKIP
        ['A股', '基金', '净值']
    """
    s = settings or BuildSettings()
    _check_domains(domains, background, s)
    names = list(domains)
    corpora = [list(domains[n]) for n in names] + ([list(background)] if background is not None else [])
    sizes = [sum(map(len, docs)) for docs in corpora]
    method = _start_method()
    workers = min(_workers(s, sum(sizes), method), len(corpora))
    if s.known_words:
        _plain_segmenter()  # load the segmenter's dictionary once: forked workers inherit it
    with _pool(workers, method) as pmap:
        per_domain = pmap(domain_candidates, [(corpora[i], s) for i in range(len(names))], sizes)
        candidates, freqs, stats = fuse_candidates(names, [len(docs) for docs in corpora], sizes, per_domain)
        stats["background_docs"] = len(background) if background is not None else None
        vocabulary = sorted(set().union(*candidates.values()))
        index = VocabularyIndex.build(vocabulary)
        counted = pmap(domain_document_frequencies, [(docs, index, s.discovery.chunk_chars) for docs in corpora], sizes)
    return score_candidates(names, vocabulary, candidates, counted, background is not None, freqs, stats, s)


def _check_domains(domains: Mapping[str, Sequence[str]], background: Sequence[str] | None, s: BuildSettings) -> None:
    sizes = {name: (len(docs), max(map(len, docs), default=0)) for name, docs in domains.items()}
    check_corpus_sizes(sizes, has_background=background is not None, settings=s)


def check_corpus_sizes(sizes: Mapping[str, tuple[int, int]], *, has_background: bool, settings: BuildSettings) -> None:
    """Raise :class:`BuildError` for corpora that cannot make a dictionary, before the costly part.

    Args:
        sizes: ``{domain: (documents, characters of its longest document)}``.
        has_background: a background corpus is the anti-domain of every domain.
        settings: the build's parameters (``min_df``).
    """
    s = settings
    if not sizes:
        raise BuildError("no domain corpora given")
    for name, (n_docs, _) in sizes.items():
        if not n_docs:
            raise BuildError(f"domain {name!r} has no documents", domains=[name])
    if not has_background and len(sizes) < 2:
        raise BuildError(
            f"diff-idf needs an anti-domain: give at least two domains or a background corpus (got only {next(iter(sizes))!r})",
            domains=list(sizes),
        )
    # such a domain cannot keep a word, whatever its text
    too_few = [name for name, (n_docs, _) in sizes.items() if n_docs < s.min_df]
    if too_few:
        raise BuildError(_listed([_too_few_documents(n, *sizes[n], s.min_df) for n in too_few]), domains=too_few)
    few = [name for name, (n_docs, _) in sizes.items() if n_docs < FEW_DOCS]
    if few:
        logger.warning(
            "%d domain(s) have fewer than %d documents, so their diff-idf scores will be coarse: %s",
            len(few), FEW_DOCS, ", ".join(f"{n!r} {sizes[n][0]}" for n in few[:10]) + (" …" if len(few) > 10 else ""),
        )


def _workers(s: BuildSettings, chars: int, method: str) -> int:
    """Processes for the per-domain work (see :attr:`BuildSettings.workers`)."""
    if s.workers is not None:
        return s.workers
    if chars >= PARALLEL_MIN_CHARS[method]:
        return os.cpu_count() or 1
    logger.info("%d characters in all: building in-process (parallel from %d)", chars, PARALLEL_MIN_CHARS[method])
    return 1


def fuse_candidates(names, doc_counts, sizes, per_domain) -> tuple[dict[str, set[str]], Counter[str], dict]:
    """``(candidates per domain, freq per word, build statistics)`` from each domain's ``(discovered
    {word: count}, known-word Counter)``; a word's count in a domain is the larger of the two."""
    candidates: dict[str, set[str]] = {}
    freqs: Counter[str] = Counter()
    stats: dict = {"domains": {}}
    for i, (name, (found, known)) in enumerate(zip(names, per_domain)):
        n_docs = doc_counts[i]
        best = dict(known)
        for w, c in found.items():
            if c > best.get(w, 0):
                best[w] = c
        freqs.update(best)
        candidates[name] = set(best)
        stats["domains"][name] = {"docs": n_docs, "chars": sizes[i], "new_words": len(found), "known_words": len(known)}
        logger.info("domain %s: %d docs, %d new-word candidates, %d known words", name, n_docs, len(found), len(known))
    return candidates, freqs, stats


def score_candidates(names, vocabulary, candidates, counted, has_background, freqs, stats, s: BuildSettings) -> Dictionary:
    """The dictionary: diff-idf of each domain's candidates from ``counted`` = ``[(df over vocabulary,
    documents)]`` per domain (and the background last), thresholded, ranked and cut to ``top_n``."""
    df = np.stack([c[0] for c in counted])
    n_docs = [c[1] for c in counted]
    position = {w: i for i, w in enumerate(vocabulary)}
    total_df, total_n = df[: len(names)].sum(axis=0), sum(n_docs[: len(names)])
    rows: list[tuple[str, str, float, int]] = []
    for g, name in enumerate(names):
        if has_background:
            anti_df, anti_n = df[-1], n_docs[-1]
        else:
            anti_df, anti_n = total_df - df[g], total_n - n_docs[g]
        # vocabulary order is word order: sorted positions keep ties in word order below
        idx = np.sort(np.fromiter(map(position.__getitem__, candidates[name]), dtype=np.int64, count=len(candidates[name])))
        idx = idx[df[g, idx] >= s.min_df]
        n_min_df = idx.shape[0]
        if idx.shape[0]:
            diff_idf(int(df[g, idx[0]]), n_docs[g], int(anti_df[idx[0]]), anti_n, smoothing=s.smoothing)  # validates the corpora
        scores = np.log(anti_n / (anti_df[idx] + s.smoothing)) - np.log(n_docs[g] / (df[g, idx] + s.smoothing))
        ok = scores >= s.min_score
        idx, scores = idx[ok], scores[ok]
        order = np.lexsort((idx, -scores))[: s.top_n]
        stats["domains"][name].update(candidates=len(candidates[name]), in_min_df=int(n_min_df), kept=int(order.shape[0]))
        rows.extend((vocabulary[i], name, round(sc, 6), freqs[vocabulary[i]]) for i, sc in zip(idx[order].tolist(), scores[order].tolist()))
    empty = [name for name in names if not stats["domains"][name]["kept"]]
    if empty:
        raise BuildError(
            _listed([_why_empty(name, stats["domains"][name], s) for name in empty])
            + "; lower --min-count/--min-df/--min-score, or check the corpus's encoding and text column",
            domains=empty,
        )
    return Dictionary.from_rows(rows, params=s.to_dict(), stats=stats)


#: a document this long in a domain of too few documents suggests a corpus that is not one document per line
_LONG_DOC = 10_000


def _too_few_documents(name: str, n_docs: int, longest: int, min_df: int) -> str:
    why = f"domain {name!r} has {n_docs} document(s), fewer than min_df={min_df}, so none of its words can be kept"
    if longest >= _LONG_DOC:
        return f"{why}: its longest document is {longest:,} characters — each line is one document (one JSON object per line in .jsonl); split the text into one document per line"
    return f"{why}: give it more documents or lower --min-df"


def _why_empty(name: str, st: dict, s: BuildSettings) -> str:
    """Why domain ``name`` kept no word, from its build statistics."""
    head = f"domain {name!r} keeps no word"
    found = st["candidates"]
    if not found:
        return (
            f"{head}: its {st['docs']} documents ({st['chars']:,} characters) hold no Chinese or Latin word "
            f"frequent enough to score (min_count={s.discovery.min_count}): text in another language or encoding, or the wrong text column?"
        )
    if not st["in_min_df"]:
        return f"{head}: none of its {found} candidate words is in min_df={s.min_df} of its {st['docs']} documents"
    return (
        f"{head}: none of its {st['in_min_df']} candidate words scores diff-idf >= min_score={s.min_score} "
        f"against its anti-domain (is it a copy of another domain or of the background?)"
    )


__all__ = [
    "BuildError",
    "BuildSettings",
    "DiscoverySettings",
    "build_dictionary",
    "check_corpus_sizes",
    "domain_candidates",
    "fuse_candidates",
    "known_candidates",
    "score_candidates",
    "segment_counts",
]
