"""The gateway's keyword dictionaries, looked up by version: from ``--dict`` directories and a dictionary root.

An index's ``_meta`` names the dictionary version it was built with
(:attr:`jingpai.indexer.mapping.IndexMeta.dict_version`). The gateway loads the ``--dict`` directories at
start, and, with a dictionary root (``--dict-root DIR``), loads any other version the first time an index
needs it, without a restart: the root is a directory under which ``jingpai dict build --out`` wrote
dictionary directories, at most :data:`ROOT_DEPTH` levels down (``<root>/news/``,
``<root>/news/<version>/``, ``<root>/<version>/`` …). A directory's version is read from its ``meta.json``,
so directory names are free.

Loading a dictionary (parsing it, building its segmenter) takes time, so it runs on one worker thread of
the store: callers on the event loop await it (:meth:`DictionaryStore.aget`), concurrent first requests for
one version share one load, and loads, root scans and reloads never run at once. A version that cannot be
found or loaded is logged once and remembered as failed (its searches are not augmented,
``augment_reason: dictionary_not_loaded``) for :data:`RETRY_FAILED_S` seconds, then looked for again;
:meth:`DictionaryStore.reload` (``POST /_jingpai/reload``) rescans at once and forgets every failure.

Example:
    >>> store = DictionaryStore([], root=Path("dicts"))            # doctest: +SKIP
    >>> dictionary, segmenter = await store.aget("3f2a9c01b7de")   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from jingpai.errors import UserError

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary, Segmenter

logger = logging.getLogger(__name__)

#: how many directory levels below the root are searched for dictionary directories
ROOT_DEPTH = 3
#: seconds a version that could not be found or loaded is not looked for again (unless reloaded)
RETRY_FAILED_S = 60.0

Entry = tuple["Dictionary", "Segmenter"]


class DictionaryRootError(UserError, ValueError):
    """The configured dictionary root is not a readable directory."""


def dictionary_version(directory: Path) -> str | None:
    """The version a dictionary directory's ``meta.json`` names, without loading it (``None``: no readable
    ``meta.json`` with a version)."""
    from jingpai.keyword_dict.dictionary import META_FILE

    try:
        meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    version = meta.get("version") if isinstance(meta, dict) else None
    return version if isinstance(version, str) and version else None


def scan_root(root: Path, *, depth: int = ROOT_DEPTH) -> dict[str, Path]:
    """``{version: directory}`` of the dictionary directories under ``root`` (``root`` itself included), at
    most ``depth`` levels down; a dictionary directory is not searched further. Of two directories with one
    version (the same content) the first in name order is kept.

    Raises:
        DictionaryRootError: ``root`` is not a directory.
    """
    from jingpai.keyword_dict.dictionary import TSV_FILE

    if not root.is_dir():
        raise DictionaryRootError(f"dictionary root {root} is not a directory (set --dict-root to the directory of `jingpai dict build --out` directories)")
    found: dict[str, Path] = {}

    def visit(directory: Path, level: int) -> None:
        if (directory / TSV_FILE).is_file():
            version = dictionary_version(directory)
            if version is None:
                logger.warning("skipping %s under the dictionary root: it has no meta.json naming its version "
                               "(write it with `jingpai dict build --out` or Dictionary.save)", directory)
            else:
                found.setdefault(version, directory)
            return
        if level >= depth:
            return
        try:
            children = sorted(p for p in directory.iterdir() if p.is_dir())
        except OSError as exc:
            logger.warning("cannot list %s under the dictionary root: %s", directory, exc)
            return
        for child in children:
            visit(child, level + 1)

    visit(root, 0)
    return found


@dataclass(frozen=True)
class ReloadReport:
    """What :meth:`DictionaryStore.reload` found: versions loaded, versions found but not loaded yet (loaded
    on first use), and the directories that failed (path → reason)."""

    loaded: list[str]
    available: dict[str, Path] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class DictionaryStore:
    """The keyword dictionaries of the gateway, by version (see the module docstring).

    Args:
        dirs: dictionary directories (``Dictionary.save`` layout), loaded now.
        root: the dictionary root (``None``: only ``dirs``), scanned now and on a version not found.
        retry_s: how long a failed version is not looked for again when there is a root.
        clock: monotonic time source.

    Raises:
        jingpai.keyword_dict.DictionaryError: a ``dirs`` entry holds no dictionary (raised at start-up,
            so a typo in ``--dict`` is not silently ignored).
        DictionaryRootError: ``root`` is not a directory.
    """

    def __init__(self, dirs: Iterable[Path] = (), *, root: Path | None = None, retry_s: float = RETRY_FAILED_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from jingpai.keyword_dict import Dictionary

        self.dirs = tuple(Path(d) for d in dirs)
        self.root = Path(root) if root is not None else None
        self.retry_s = retry_s
        self._clock = clock
        self._entries: dict[str, Entry] = {}
        #: version → directory, of the root's scan and the --dict directories
        self._found: dict[str, Path] = {}
        #: version → when it last failed to be found or loaded
        self._failed: dict[str, float] = {}
        self._pending: dict[str, Future[Entry | None]] = {}
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._plain: Segmenter | None = None
        for directory in self.dirs:
            self._add(Dictionary.load(directory), directory)
        if self.root is not None:
            self._found = {**scan_root(self.root), **self._found}
            logger.info("dictionary root %s holds %d version(s): %s", self.root, len(self._found), ", ".join(sorted(self._found)) or "none")

    @property
    def versions(self) -> list[str]:
        """The loaded versions, sorted."""
        return sorted(self._entries)

    def plain_segmenter(self) -> Segmenter:
        """The segmenter without a domain dictionary (for indices built without one)."""
        if self._plain is None:
            from jingpai.keyword_dict import Segmenter

            self._plain = Segmenter()
        return self._plain

    def loaded(self, version: str) -> Entry | None:
        """The dictionary of ``version`` and its segmenter if loaded; never loads or logs (safe on the event loop)."""
        return self._entries.get(version)

    def get(self, version: str) -> Entry | None:
        """The dictionary of ``version`` and its segmenter, loaded (and the root rescanned) if needed; ``None``
        when it cannot be (logged once per failure). Blocks while loading: on an event loop use :meth:`aget`."""
        entry = self._entries.get(version)
        if entry is not None or self._failed_recently(version):
            return entry
        return self._submit(version).result()

    async def aget(self, version: str) -> Entry | None:
        """:meth:`get` off the event loop: concurrent calls for one version share one load."""
        entry = self._entries.get(version)
        if entry is not None or self._failed_recently(version):
            return entry
        return await asyncio.wrap_future(self._submit(version))

    def reload(self) -> ReloadReport:
        """Forget every failure, re-read the ``--dict`` directories (a changed one is loaded again under its new
        version), rescan the root and load the versions searches asked for that are now found. Loaded versions
        are kept (an index may still use them). Blocks: on an event loop use :meth:`areload`."""
        return self._worker().submit(self._reload).result()

    async def areload(self) -> ReloadReport:
        """:meth:`reload` off the event loop (after any load in progress)."""
        return await asyncio.wrap_future(self._worker().submit(self._reload))

    def close(self) -> None:
        """Stop the loading thread (loads not started are cancelled)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # ------------------------------------------------------------------------------ on the worker thread

    def _worker(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                # one thread: loads, rescans and reloads never run at once, and need no other lock
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jingpai-dict")
            return self._executor

    def _submit(self, version: str) -> Future[Entry | None]:
        worker = self._worker()
        with self._lock:
            pending = self._pending.get(version)
            if pending is not None:
                return pending
            pending = self._pending[version] = worker.submit(self._load_version, version)
        # outside the lock: a load already done runs the callback here, and it takes the lock
        pending.add_done_callback(lambda done: self._forget_pending(version, done))
        return pending

    def _forget_pending(self, version: str, done: Future) -> None:
        with self._lock:
            if self._pending.get(version) is done:
                del self._pending[version]

    def _failed_recently(self, version: str) -> bool:
        failed_at = self._failed.get(version)
        if failed_at is None:
            return False
        # without a root nothing can change until a reload: the failure stands until then
        return self.root is None or self._clock() - failed_at < self.retry_s

    def _add(self, dictionary: Dictionary, directory: Path) -> Entry:
        from jingpai.keyword_dict import Segmenter

        entry = (dictionary, Segmenter(dictionary))
        self._entries[dictionary.version] = entry
        self._found[dictionary.version] = directory
        self._failed.pop(dictionary.version, None)
        logger.info("loaded keyword dictionary %s from %s (%d words)", dictionary.version, directory, len(dictionary.words()))
        return entry

    def _load_version(self, version: str) -> Entry | None:
        """Find and load ``version`` (rescanning the root when it is not known); log and remember a failure."""
        if version in self._entries:
            return self._entries[version]
        if self._failed_recently(version):
            return None
        directory = self._found.get(version)
        if directory is None and self.root is not None:
            try:
                self._found = {**scan_root(self.root), **{v: p for v, p in self._found.items() if p in self.dirs}}
            except DictionaryRootError as exc:
                return self._fail(version, str(exc))
            directory = self._found.get(version)
        if directory is None:
            where = f"not under the dictionary root {self.root}" if self.root is not None else "no --dict-root is configured"
            return self._fail(version, f"{where} and no --dict directory holds it")
        from jingpai.keyword_dict import Dictionary, DictionaryError

        try:
            dictionary = Dictionary.load(directory)
        except (DictionaryError, OSError, ValueError) as exc:
            return self._fail(version, f"{directory} could not be loaded: {exc}")
        if dictionary.version != version:  # rewritten since the scan
            self._found.pop(version, None)
            self._add(dictionary, directory)
            return self._fail(version, f"{directory} now holds version {dictionary.version}")
        return self._add(dictionary, directory)

    def _fail(self, version: str, why: str) -> None:
        self._failed[version] = self._clock()
        retry = f"; looked for again in {self.retry_s:.0f} s" if self.root is not None else ""
        logger.warning(
            "keyword dictionary %s (used by an index) is not loaded: %s; loaded: %s — queries on that index are not "
            "augmented (put its `jingpai dict build` directory under --dict-root or pass --dict DIR, then POST "
            "/_jingpai/reload%s)", version, why, ", ".join(self.versions) or "none", retry,
        )
        return None

    def _reload(self) -> ReloadReport:
        from jingpai.keyword_dict import Dictionary, DictionaryError

        wanted = set(self._failed)
        self._failed.clear()
        failed: dict[str, str] = {}
        found: dict[str, Path] = {}
        if self.root is not None:
            try:
                found = scan_root(self.root)
            except DictionaryRootError as exc:
                failed[str(self.root)] = str(exc)
                logger.warning("reload: %s", exc)
        for directory in self.dirs:
            version = dictionary_version(directory)
            if version is not None and version in self._entries:
                found[version] = directory
                continue
            try:
                self._add(Dictionary.load(directory), directory)
            except (DictionaryError, OSError, ValueError) as exc:
                failed[str(directory)] = str(exc)
                logger.warning("reload: --dict %s could not be loaded: %s", directory, exc)
        self._found = {**found, **{v: p for v, p in self._found.items() if v in self._entries}}
        for version in sorted(wanted & set(self._found)):
            self._load_version(version)
        available = {v: p for v, p in self._found.items() if v not in self._entries}
        logger.info("reloaded dictionaries: loaded %s; found, loaded on first use: %s", self.versions, sorted(available) or "none")
        return ReloadReport(loaded=self.versions, available=dict(sorted(available.items())), failed=failed)


__all__ = ["ROOT_DEPTH", "RETRY_FAILED_S", "DictionaryRootError", "DictionaryStore", "ReloadReport", "dictionary_version", "scan_root"]
