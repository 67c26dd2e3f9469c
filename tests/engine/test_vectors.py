"""Dense vectors in both engines: the k-NN plugin in the harness, the vector mapping and ``Engine.knn_search``.

The OpenSearch node with the k-NN plugin is the session fixture ``opensearch_knn`` (a node of its own,
started only by the tests that use it); Elasticsearch 8 needs nothing extra.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine import harness
from jingpai.engine.client import Engine
from jingpai.engine.settings import KNN_PLUGIN_VERSIONS, EngineModuleError, EngineSettings
from jingpai.engine.vectors import VectorSettingError, VectorsUnsupportedError, field_mapping, index_settings, knn_body

# unit vectors in 3-d: a and b close, c apart
DOCS = {"a": ([1.0, 0.0, 0.0], "red"), "b": ([0.8, 0.6, 0.0], "blue"), "c": ([0.0, 0.0, 1.0], "red")}


def test_plugin_settings_pin_the_engine_version_and_add_painless() -> None:
    knn = EngineSettings(kind="opensearch", plugins=("knn", "knn"))
    assert knn.plugins == ("knn",) and knn.modules == ("lang-painless",)  # the k-NN plugin extends painless
    assert knn.resolved_version in KNN_PLUGIN_VERSIONS
    assert knn.home.name == f"opensearch-{knn.resolved_version}+lang-painless+knn"
    with pytest.raises(EngineModuleError, match=r"unknown engine plugin\(s\) 'neural'; valid plugins: jingpai, knn"):
        EngineSettings(kind="opensearch", plugins=("neural",))
    with pytest.raises(EngineModuleError, match="no k-NN plugin version is pinned for OpenSearch 2.19.5 .* valid --version with --plugins knn: 2.19.6, 2.19.1"):
        EngineSettings(kind="opensearch", version="2.19.5", plugins=("knn",))


def test_elasticsearch_plugins_are_refused_on_the_command_line() -> None:
    result = CliRunner().invoke(cli, ["engine", "up", "--kind", "elasticsearch", "--plugins", "knn"])
    assert result.exit_code == 1
    assert "Error: plugins (knn) are for --kind opensearch only: Elasticsearch 8 indexes and searches dense vectors" in result.output


def test_vector_fragments_per_engine() -> None:
    es = field_mapping("elasticsearch", 512)
    assert (es["type"], es["dims"], es["index"], es["similarity"], es["index_options"]["type"]) == (
        "dense_vector", 512, True, "dot_product", "int8_hnsw")
    os_ = field_mapping("opensearch", 512)
    assert (os_["type"], os_["dimension"], os_["method"]["engine"], os_["method"]["parameters"]["encoder"]["name"]) == (
        "knn_vector", 512, "lucene", "sq")
    with pytest.raises(VectorSettingError, match="vector dimension 0 is outside 1..4096"):
        field_mapping("elasticsearch", 0)
    with pytest.raises(VectorSettingError, match="k=5, num_candidates=3"):
        knn_body("opensearch", [1.0], field="v", k=5, num_candidates=3)
    assert field_mapping("elasticsearch", 8, index="flat")["index_options"] == {"type": "int8_flat"}
    assert field_mapping("opensearch", 8, index="flat") == {"type": "knn_vector", "dimension": 8}
    assert (index_settings("opensearch"), index_settings("opensearch", index="flat")) == ({"index.knn": True}, {})
    # flat: Elasticsearch's knn searches it exactly as it is; OpenSearch scores every document with a script
    assert knn_body("elasticsearch", [3.0, 4.0], field="v", k=2, num_candidates=2, index="flat")["knn"]["query_vector"] == [0.6, 0.8]
    body = knn_body("opensearch", [3.0, 4.0], field="v", k=2, num_candidates=2, index="flat", filter={"term": {"t": "x"}})
    scored = body["query"]["script_score"]
    assert scored["query"] == {"term": {"t": "x"}} and scored["script"]["params"] == {"field": "v", "query_value": [0.6, 0.8]}
    assert body["size"] == 2 and body["_source"] == {"excludes": ["v"]}
    with pytest.raises(VectorSettingError, match="unknown vector index 'ivf'; expected one of hnsw, flat"):
        field_mapping("elasticsearch", 8, index="ivf")  # type: ignore[arg-type]


@pytest.fixture(params=["elasticsearch", "opensearch"])
def vector_engine(request: pytest.FixtureRequest) -> Engine:
    """Elasticsearch (the session node) and OpenSearch with the k-NN plugin."""
    if request.param == "elasticsearch":
        return request.getfixturevalue("engines")["elasticsearch"]
    return request.getfixturevalue("opensearch_knn")


@pytest.fixture
def vector_index(vector_engine: Engine) -> Iterator[str]:
    name = f"test-vec-{uuid.uuid4().hex[:10]}"
    vector_engine.check_vectors()
    vector_engine.create_index(
        name, settings=vector_engine.vector_index_settings(),
        mappings={"properties": {"v": vector_engine.vector_mapping(3), "colour": {"type": "keyword"}}},
    )
    for doc_id, (vector, colour) in DOCS.items():
        vector_engine.index_document(name, doc_id, {"v": vector, "colour": colour})
    vector_engine.refresh(name)
    yield name
    vector_engine.delete_index(name)


@pytest.mark.engine
def test_knn_search_finds_the_nearest_and_filters_in_the_graph(vector_engine: Engine, vector_index: str) -> None:
    hits = vector_engine.knn_search(vector_index, [0.9, 0.1, 0.0], field="v", k=2, num_candidates=10)["hits"]["hits"]
    assert [h["_id"] for h in hits] == ["a", "b"]
    assert hits[0]["_score"] == pytest.approx((1 + 0.9 / (0.82 ** 0.5)) / 2, abs=0.02)  # (1 + cos) / 2 on both engines
    assert "v" not in hits[0]["_source"] and hits[0]["_source"]["colour"] == "red"
    red = vector_engine.knn_search(vector_index, [0.9, 0.1, 0.0], field="v", k=2, num_candidates=10,
                                   filter={"term": {"colour": "red"}})["hits"]["hits"]
    assert [h["_id"] for h in red] == ["a", "c"]


@pytest.mark.engine
def test_the_knn_node_loads_the_plugin_and_the_plain_node_has_none(opensearch_knn: Engine, engines: dict[str, Engine]) -> None:
    assert {"opensearch-knn", "lang-painless"} <= opensearch_knn.modules()
    plain = engines["opensearch"]
    assert "opensearch-knn" not in plain.modules()
    with pytest.raises(VectorsUnsupportedError, match=r"no k-NN plugin \(opensearch-knn\).*jingpai engine up --kind opensearch --plugins knn"):
        plain.check_vectors()
    engines["elasticsearch"].check_vectors()  # Elasticsearch 8: core
    port = int(opensearch_knn.url.rsplit(":", 1)[1])
    recorded = [n for n in harness.running("opensearch") if n.port == port]
    if recorded:  # started by this session's harness (not given by JINGPAI_TEST_OPENSEARCH_KNN_URL)
        assert recorded[0].plugins == ("knn",) and recorded[0].modules == ("lang-painless",)
        line = next(ln for ln in CliRunner().invoke(cli, ["engine", "status"]).output.splitlines() if f"port {port} " in ln)
        assert line.endswith("modules lang-painless  plugins knn")
