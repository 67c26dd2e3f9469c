"""Dictionaries without restarts: a dictionary root scanned and loaded on first use, ``POST /_jingpai/reload``,
and a missing version logged once (unit tests of the store, then real engines through a real gateway)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from jingpai.engine.client import Engine
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.keyword_dict import Dictionary
from jingpai.plugin.dictionaries import DictionaryRootError, DictionaryStore, scan_root
from jingpai.plugin.gateway import create_app
from jingpai.plugin.settings import GatewaySettings
from tests.plugin.conftest import KEYWORDS, corpus, search, serve
from tests.plugin.test_settings import settings_from

V1 = Dictionary.from_scores(KEYWORDS)
#: v2 knows 出口 (exports), which v1 does not: a search for it shows which version augmented it
V2 = Dictionary.from_scores({**KEYWORDS, "出口": {"econ": 2.5}})
#: a third version nobody's index uses
V3 = Dictionary.from_scores({"天气": {"weather": 2.0}})
STORE_LOG = "jingpai.plugin.dictionaries"
N_LOOKUPS = 500


def loads_of(caplog: pytest.LogCaptureFixture, version: str) -> int:
    return sum(r.getMessage().startswith(f"loaded keyword dictionary {version} ") for r in caplog.records)


def misses_of(caplog: pytest.LogCaptureFixture, version: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"keyword dictionary {version} (used by an index) is not loaded")]


# ---------------------------------------------------------------------------------------------- the store


def test_scan_finds_every_layout_dict_build_writes_and_stops_at_the_depth(tmp_path: Path) -> None:
    V1.save(tmp_path / "news")                       # <root>/<name>/, as `jingpai dict build --out <root>/news`
    V2.save(tmp_path / "news" / "v2" / V2.version)   # <root>/<name>/<sub>/<version>/ (inside a dictionary: not searched)
    V2.save(tmp_path / "finance" / V2.version)       # <root>/<name>/<version>/
    V3.save(tmp_path / "a" / "b" / "c" / "d")        # four levels down: past ROOT_DEPTH
    assert scan_root(tmp_path) == {V1.version: tmp_path / "news", V2.version: tmp_path / "finance" / V2.version}
    V3.save(tmp_path / V3.version)                   # <root>/<version>/
    assert scan_root(tmp_path)[V3.version] == tmp_path / V3.version
    with pytest.raises(DictionaryRootError, match="is not a directory"):
        scan_root(tmp_path / "missing")


def test_store_loads_a_root_version_on_first_use_once_and_logs_a_missing_one_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    V1.save(tmp_path / "econ" / V1.version)
    store = DictionaryStore([], root=tmp_path)
    try:
        assert store.versions == [] and store.loaded(V1.version) is None  # scanned, not loaded
        with caplog.at_level(logging.INFO, logger=STORE_LOG):
            async def first_requests() -> list:
                return await asyncio.gather(*(store.aget(V1.version) for _ in range(8)))

            entries = asyncio.run(first_requests())
            assert loads_of(caplog, V1.version) == 1
            assert all(e is entries[0] and e[0].version == V1.version for e in entries)
            assert store.get("000000000000") is None and store.get("000000000000") is None
        assert len(misses := misses_of(caplog, "000000000000")) == 1  # remembered, not looked for on every search
        assert str(tmp_path) in misses[0] and "POST /_jingpai/reload" in misses[0]
        # a version built into the root after start is found without a reload: the root is rescanned on a miss
        V2.save(tmp_path / "econ" / V2.version)
        assert store.get(V2.version)[0].version == V2.version
        assert store.versions == sorted([V1.version, V2.version])
    finally:
        store.close()


def test_reload_forgets_failures_loads_what_was_asked_for_and_rereads_dict_dirs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, pinned = tmp_path / "root", tmp_path / "pinned"
    root.mkdir()
    V1.save(pinned)
    store = DictionaryStore([pinned], root=root)
    try:
        with caplog.at_level(logging.WARNING, logger=STORE_LOG):
            assert store.get(V2.version) is None
        V2.save(root / V2.version)
        V3.save(root / "weather")
        assert store.get(V2.version) is None  # the failure stands until the retry time or a reload
        report = store.reload()
        # v2 was asked for: loaded by the reload; v3 was not: found, loaded on first use
        assert report.loaded == sorted([V1.version, V2.version]) and list(report.available) == [V3.version] and report.failed == {}
        V3.save(pinned)  # the --dict directory now holds another dictionary: read again under its new version
        assert V3.version in store.reload().loaded and V1.version in store.versions  # loaded versions are kept
        (pinned / "dictionary.tsv").write_text("broken\n", encoding="utf-8")
        (pinned / "meta.json").write_text('{"version": "ffffffffffff"}', encoding="utf-8")
        report = store.reload()
        assert list(report.failed) == [str(pinned)] and "dictionary.tsv" in report.failed[str(pinned)]
    finally:
        store.close()


def test_a_lookup_that_fails_at_once_does_not_block_its_caller(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = DictionaryStore([], root=tmp_path, retry_s=0)  # every miss looks again: an empty root fails in microseconds
    results: list = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: the load often finishes before get() has its future back
    try:
        with caplog.at_level(logging.WARNING, logger=STORE_LOG):
            caller = threading.Thread(target=lambda: results.extend(store.get(V1.version) for _ in range(N_LOOKUPS)), daemon=True)
            caller.start()
            caller.join(timeout=120)  # a hang guard, not a timing: the lookups take well under a second
    finally:
        sys.setswitchinterval(switch)
        store.close()
    assert not caller.is_alive(), "DictionaryStore.get deadlocked on a load that had already finished"
    assert results == [None] * N_LOOKUPS
    # every lookup misses; a get() that arrives while the previous lookup's bookkeeping is still being
    # cleared shares that lookup (and its one warning), so there may be fewer warnings than gets
    assert 1 <= len(misses_of(caplog, V1.version)) <= N_LOOKUPS


def test_store_without_a_root_keeps_the_old_behaviour(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    V1.save(tmp_path / "d")
    store = DictionaryStore([tmp_path / "d"])
    with caplog.at_level(logging.WARNING, logger=STORE_LOG):
        assert store.get(V2.version) is None and store.get(V2.version) is None
    assert len(misses := misses_of(caplog, V2.version)) == 1 and "no --dict-root is configured" in misses[0]
    store.close()


def test_dict_root_option_env_and_a_missing_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings_from(["--engine", "http://e:9200"]).dict_root is None
    s = settings_from(["--engine", "http://e:9200"], {"JINGPAI_GATEWAY_DICT_ROOT": str(tmp_path)}, monkeypatch)
    assert s.dict_root == tmp_path
    with pytest.raises(DictionaryRootError, match="missing is not a directory"):
        create_app(GatewaySettings(engine_url="http://e:9200", dict_root=tmp_path / "missing"))


# ---------------------------------------------------------------------------------------------- through the gateway

BODY = {"query": {"match": {"content": "中国GDP出口"}}, "size": 5}


@pytest.fixture
def alias(engine: Engine) -> Iterator[str]:
    name = f"test-dr-{uuid.uuid4().hex[:8]}"
    yield name
    engine.raw.indices.delete(index=f"{name}*")


def index_with(engine: Engine, alias: str, dictionary: Dictionary, tmp: Path) -> None:
    path = tmp / "docs.jsonl"
    path.write_text("\n".join(json.dumps(doc, ensure_ascii=False) for doc in corpus()) + "\n", encoding="utf-8")
    settings = IndexSettings(index=alias, text_fields=("title", "content"), id_field="id", quarantine_dir=tmp, progress=False)
    assert index_corpus(engine, [path], settings, dictionary=dictionary).indexed == len(corpus())
    engine.refresh(alias)


@pytest.mark.engine
def test_reindex_with_a_new_dictionary_is_augmented_without_restart(engine: Engine, alias: str, tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "dicts"
    V1.save(root / "econ" / V1.version)
    index_with(engine, alias, V1, tmp_path)
    settings = GatewaySettings(engine_url=engine.url, dict_root=root, meta_ttl_s=0)
    with serve(create_app(settings)) as gw, caplog.at_level(logging.INFO, logger=STORE_LOG):
        assert httpx.get(f"{gw.url}/_jingpai/health").json()["dictionaries"] == []  # found under the root, not loaded
        with ThreadPoolExecutor(8) as pool:  # concurrent first requests: one load
            answers = list(pool.map(lambda _: search(gw.url, alias, BODY)["jingpai"], range(8)))
        assert all(a["augmented"] and a["augment_reason"] is None for a in answers)
        assert all("GDP" in a["keywords"] and "出口" not in a["keywords"] for a in answers)
        assert loads_of(caplog, V1.version) == 1
        # a new dictionary version into the root and a re-index with it (the alias moves to the new index)
        V2.save(root / "econ" / V2.version)
        index_with(engine, alias, V2, tmp_path)
        answer = search(gw.url, alias, BODY)["jingpai"]
        assert answer["augmented"] and "出口" in answer["keywords"]  # v2's keyword: v2 augmented it
        assert loads_of(caplog, V2.version) == 1
        assert httpx.get(f"{gw.url}/_jingpai/health").json()["dictionaries"] == sorted([V1.version, V2.version])


@pytest.mark.engine
def test_missing_version_is_logged_once_and_reload_picks_up_a_new_directory(engine: Engine, alias: str, tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "dicts"
    root.mkdir()
    index_with(engine, alias, V2, tmp_path)
    with serve(create_app(GatewaySettings(engine_url=engine.url, dict_root=root))) as gw:
        with caplog.at_level(logging.WARNING, logger=STORE_LOG):
            for _ in range(2):
                answer = search(gw.url, alias, BODY)["jingpai"]
                assert not answer["augmented"] and answer["augment_reason"] == "dictionary_not_loaded"
        assert len(misses := misses_of(caplog, V2.version)) == 1
        assert f"not under the dictionary root {root}" in misses[0]
        V2.save(root / V2.version)   # <root>/<version>/
        V3.save(root / "weather")    # a version no index uses
        reload = httpx.post(f"{gw.url}/_jingpai/reload")
        assert reload.status_code == 200
        assert reload.json() == {"loaded": [V2.version], "available": [V3.version], "failed": 0}  # no paths by default
        answer = search(gw.url, alias, BODY)["jingpai"]
        assert answer["augmented"] and "出口" in answer["keywords"]
        assert httpx.get(f"{gw.url}/_jingpai/reload").status_code != 200  # POST only (GET is the engine's to answer)
    verbose = GatewaySettings(engine_url=engine.url, dict_root=root, expose_internals=True)
    with serve(create_app(verbose)) as gw:
        body = httpx.post(f"{gw.url}/_jingpai/reload").json()
    assert body["dict_root"] == str(root) and body["paths"] == {V2.version: str(root / V2.version), V3.version: str(root / "weather")}
