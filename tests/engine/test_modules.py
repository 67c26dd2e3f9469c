"""Optional OpenSearch modules from Maven Central: the harness adds them, the node loads them, they work.

The node with modules is the session fixture ``opensearch_modules`` (a third node, started only here and in
tests/indexer/test_rank_features.py); the plain nodes of ``engines`` show the fallbacks next to it.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine import harness
from jingpai.engine.client import Engine
from jingpai.engine.harness import MODULE_NAMES, EngineError, EngineModuleError, EngineSettings
from jingpai.engine.modules import OPENSEARCH_MODULES, descriptor, ensure_module_jars
from jingpai.errors import UserError

VALID = "valid modules: analysis-common, lang-painless, mapper-extras"


def test_unknown_module_names_the_valid_ones() -> None:
    with pytest.raises(EngineModuleError, match=rf"unknown engine module\(s\) 'analysis-smartcn'; {VALID}") as err:
        EngineSettings(kind="opensearch", modules=("mapper-extras", "analysis-smartcn"))
    assert isinstance(err.value, UserError) and isinstance(err.value, ValueError)


def test_elasticsearch_modules_are_refused_on_the_command_line() -> None:
    result = CliRunner().invoke(cli, ["engine", "up", "--kind", "elasticsearch", "--modules", "mapper-extras"])
    assert result.exit_code == 1
    assert "Error: modules (mapper-extras) are available for --kind opensearch only" in result.output
    assert "not published on Maven Central" in result.output
    # the variable of the naming scheme feeds the same option
    result = CliRunner().invoke(cli, ["engine", "up", "--kind", "opensearch"], env={"JINGPAI_ENGINE_MODULES": "painless"})
    assert result.exit_code == 1
    assert f"Error: unknown engine module(s) 'painless'; {VALID}" in result.output


def test_help_lists_the_modules() -> None:
    result = CliRunner().invoke(cli, ["engine", "up", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "--modules NAME,…" in result.output and "analysis-common, lang-painless, mapper-extras" in result.output


def test_modules_get_a_home_of_their_own() -> None:
    plain = EngineSettings(kind="opensearch", version="2.19.6")
    with_modules = EngineSettings(kind="opensearch", version="2.19.6", modules=("mapper-extras", "analysis-common", "mapper-extras"))
    assert with_modules.modules == ("analysis-common", "mapper-extras")
    assert plain.home == plain.dist_home == with_modules.dist_home
    assert with_modules.home.name == "opensearch-2.19.6+analysis-common+mapper-extras"


def test_descriptor_extends_painless_only_when_painless_is_there() -> None:
    spec = OPENSEARCH_MODULES["analysis-common"]
    alone = dict(line.split("=", 1) for line in descriptor(spec, "analysis-common", "2.19.6", ("analysis-common",)).splitlines())
    assert alone["extended.plugins"] == ""
    assert alone["classname"] == "org.opensearch.analysis.common.CommonAnalysisPlugin"
    assert alone["opensearch.version"] == alone["version"] == "2.19.6"
    both = descriptor(spec, "analysis-common", "2.19.6", ("analysis-common", "lang-painless"))
    assert "\nextended.plugins=lang-painless\n" in both


@pytest.mark.engine
def test_the_node_loads_the_modules_and_the_plain_node_stays_plain(
    opensearch_modules: Engine, engines: dict[str, Engine]
) -> None:
    assert set(MODULE_NAMES) <= harness.loaded_modules(opensearch_modules.url)
    assert set(MODULE_NAMES) <= opensearch_modules.modules()
    # the plain distribution shares the cache but not the home: no module leaked into it
    assert not set(MODULE_NAMES) & engines["opensearch"].modules()
    home = EngineSettings(kind="opensearch", modules=MODULE_NAMES).home
    if home.exists():  # absent when the fixture reuses a node given by JINGPAI_TEST_OPENSEARCH_MODULES_URL
        painless = home / "modules" / "lang-painless"
        assert {p.name for p in painless.glob("*.jar")} >= {"lang-painless-2.19.6.jar", "opensearch-scripting-painless-spi-2.19.6.jar"}
        assert any(p.name.startswith("antlr4-runtime-") for p in painless.glob("*.jar"))
        assert "createClassLoader" in (painless / "plugin-security.policy").read_text()
        port = urlsplit(opensearch_modules.url).port
        assert [n.modules for n in harness.running("opensearch") if n.port == port] == [tuple(MODULE_NAMES)]
        status = CliRunner().invoke(cli, ["engine", "status"], terminal_width=400)
        line = next(row for row in status.output.splitlines() if f"port {port} " in row)
        assert line.endswith("modules analysis-common,lang-painless,mapper-extras")


@pytest.fixture
def own_engines_dir() -> Iterator[Path]:
    """An engines dir of this test's own whose plain distribution and module jars are the shared ones.

    ``dist`` is a real folder (a home with modules made here stays here) holding a link to the shared
    plain distribution. It lies next to the default cache (see tests/engine/test_harness.py: the engine
    user must traverse it).
    """
    shared = harness.default_cache_dir()
    settings = EngineSettings(kind="opensearch", cache_dir=shared, modules=("mapper-extras",))
    harness.ensure_distribution(settings)
    ensure_module_jars(settings, "mapper-extras")  # fetched once into the shared cache
    engines_dir = shared.parent / f"test-{uuid.uuid4().hex[:10]}" / "engines"
    (engines_dir / "dist").mkdir(parents=True)
    (engines_dir / "dist" / settings.dist_home.name).symlink_to(settings.dist_home, target_is_directory=True)
    (engines_dir / "modules").symlink_to(shared / "modules", target_is_directory=True)
    try:
        yield engines_dir
    finally:
        shutil.rmtree(engines_dir.parent, ignore_errors=True)  # unlinks the links, never follows them


@pytest.mark.engine
def test_a_module_that_fails_to_load_is_named_with_the_log(own_engines_dir: Path) -> None:
    settings = EngineSettings(kind="opensearch", port=harness.free_port(), cache_dir=own_engines_dir, modules=("mapper-extras",))
    home = harness.ensure_home_with_modules(settings)
    assert home.parent == own_engines_dir / "dist" and home != settings.dist_home
    descriptor_file = home / "modules" / "mapper-extras" / "plugin-descriptor.properties"
    descriptor_file.write_text(descriptor_file.read_text().replace("MapperExtrasPlugin", "NoSuchPlugin"))
    try:
        with pytest.raises(EngineError, match=r"^opensearch with modules mapper-extras: opensearch exited with code \d+ during start-up; see .*engine\.log") as err:
            harness.start(settings)
        assert "NoSuchPlugin" in str(err.value)  # the log's error line comes with it
    finally:
        harness.stop(settings, purge=True)


@pytest.mark.engine
def test_verify_names_the_modules_a_node_lacks(engines: dict[str, Engine]) -> None:
    url = urlsplit(engines["opensearch"].url)
    if url.hostname != "127.0.0.1":
        pytest.skip("the plain node is not a local harness node")
    settings = EngineSettings(kind="opensearch", port=url.port, modules=("lang-painless", "mapper-extras"))
    with pytest.raises(EngineError, match=rf"module\(s\) lang-painless, mapper-extras did not load on opensearch .*{VALID}"):
        harness.verify_modules(settings)


# ---------------------------------------------------------------- analysis-common: CJK bigrams, synonyms

ANALYSIS = {
    "analysis": {
        "filter": {"zh_synonyms": {"type": "synonym_graph", "synonyms": ["季后赛, 淘汰赛"]}},
        "analyzer": {
            "cjk": {"type": "custom", "tokenizer": "standard", "filter": ["cjk_width", "lowercase", "cjk_bigram"]},
            "cjk_search": {
                "type": "custom",
                "tokenizer": "standard",
                "filter": ["cjk_width", "lowercase", "cjk_bigram", "zh_synonyms"],
            },
        },
    }
}
TITLES = {"1": "湖人队晋级季后赛", "2": "ＮＢＡ常规赛收官", "3": "季节变化与后院赛跑"}


@pytest.fixture
def new_index() -> Iterator[Callable[[Engine], str]]:
    """``new_index(engine)``: a fresh index name on ``engine``, deleted after the test."""
    made: list[tuple[Engine, str]] = []

    def make(engine: Engine) -> str:
        made.append((engine, f"test-{uuid.uuid4().hex[:10]}"))
        return made[-1][1]

    yield make
    for engine, name in made:
        engine.delete_index(name)


def _index_titles(engine: Engine, name: str, title_mapping: dict, settings: dict | None = None) -> None:
    engine.create_index(name, mappings={"properties": {"title": title_mapping}}, settings=settings)
    results = list(engine.bulk({"_index": name, "_id": i, "_source": {"title": t}} for i, t in TITLES.items()))
    assert all(ok for ok, _ in results), results
    engine.refresh(name)


def _highlights(engine: Engine, name: str, text: str) -> dict[str, list[str]]:
    body = {"query": {"match_phrase": {"title": text}}, "highlight": {"fields": {"title": {}}}}
    return {h["_id"]: h["highlight"]["title"] for h in engine.search(name, body)["hits"]["hits"]}


@pytest.mark.engine
def test_cjk_bigrams_synonyms_and_whole_word_highlights(opensearch_modules: Engine, new_index: Callable[[Engine], str]) -> None:
    engine = opensearch_modules
    fresh_index = new_index(engine)
    _index_titles(engine, fresh_index, {"type": "text", "analyzer": "cjk", "search_analyzer": "cjk_search"}, ANALYSIS)

    def tokens(analyzer: str, text: str) -> list[str]:
        resp = engine.request("POST", f"/{fresh_index}/_analyze", {"analyzer": analyzer, "text": text})
        return [t["token"] for t in resp["tokens"]]

    assert tokens("cjk", "季后赛") == ["季后", "后赛"]
    assert tokens("cjk", "ＮＢＡ季后赛") == ["nba", "季后", "后赛"]  # cjk_width folds full-width Latin
    assert set(tokens("cjk_search", "淘汰赛")) == {"淘汰", "汰赛", "季后", "后赛"}  # synonym_graph adds the other path

    # the highlight covers the word, not three single characters
    assert _highlights(engine, fresh_index, "季后赛") == {"1": ["湖人队晋级<em>季后赛</em>"]}
    # bigrams keep 季节…后院赛跑 (same characters, not adjacent) out; the synonym finds 季后赛
    hits = engine.search(fresh_index, {"query": {"match_phrase": {"title": "淘汰赛"}}})["hits"]["hits"]
    assert [h["_id"] for h in hits] == ["1"]
    hits = engine.search(fresh_index, {"query": {"match": {"title": "nba"}}})["hits"]["hits"]
    assert [h["_id"] for h in hits] == ["2"]


@pytest.mark.engine
def test_plain_node_has_no_cjk_bigram_and_highlights_per_character(
    engines: dict[str, Engine], new_index: Callable[[Engine], str]
) -> None:
    engine = engines["opensearch"]
    fresh_index = new_index(engine)
    with pytest.raises(Exception, match=r"Unknown filter type \[(synonym_graph|cjk_bigram)\]") as err:
        engine.create_index(fresh_index, settings=ANALYSIS)
    assert engine.is_api_error(err.value)
    engine.delete_index(fresh_index)
    _index_titles(engine, fresh_index, {"type": "text", "analyzer": "standard"})
    assert _highlights(engine, fresh_index, "季后赛") == {"1": ["湖人队晋级<em>季</em><em>后</em><em>赛</em>"]}


# ---------------------------------------------------------------- lang-painless

@pytest.mark.engine
def test_painless_script_query_and_script_score(opensearch_modules: Engine, new_index: Callable[[Engine], str]) -> None:
    engine = opensearch_modules
    fresh_index = new_index(engine)
    engine.create_index(fresh_index, mappings={"properties": {"likes": {"type": "integer"}, "title": {"type": "text"}}})
    likes = {"a": 3, "b": 10, "c": 7}
    assert all(ok for ok, _ in engine.bulk({"_index": fresh_index, "_id": i, "_source": {"likes": n, "title": "doc"}} for i, n in likes.items()))
    engine.refresh(fresh_index)
    script = {"source": "doc['likes'].value * params.f", "params": {"f": 0.5}}
    body = {"query": {"script_score": {"query": {"match_all": {}}, "script": script}}}
    hits = engine.search(fresh_index, body)["hits"]["hits"]
    assert [(h["_id"], h["_score"]) for h in hits] == [("b", 5.0), ("c", 3.5), ("a", 1.5)]
    body = {"query": {"bool": {"filter": {"script": {"script": {"source": "doc['likes'].value > params.min", "params": {"min": 5}}}}}}}
    assert sorted(h["_id"] for h in engine.search(fresh_index, body)["hits"]["hits"]) == ["b", "c"]


@pytest.mark.engine
def test_plain_node_refuses_painless(engines: dict[str, Engine], new_index: Callable[[Engine], str]) -> None:
    engine = engines["opensearch"]
    fresh_index = new_index(engine)
    engine.create_index(fresh_index, mappings={"properties": {"likes": {"type": "integer"}}})
    script = {"source": "doc['likes'].value", "lang": "painless"}
    with pytest.raises(Exception, match="painless") as err:
        engine.search(fresh_index, {"query": {"script_score": {"query": {"match_all": {}}, "script": script}}})
    assert engine.is_api_error(err.value)
