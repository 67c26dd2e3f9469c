"""End-to-end smoke test on both real engines through the official clients."""

from __future__ import annotations

from jingpai.engine.client import Engine

DOCS = [
    {"id": "1", "title": "央行宣布下调存款准备金率", "category": "财经"},
    {"id": "2", "title": "国足在世界杯预选赛中战胜对手", "category": "体育"},
    {"id": "3", "title": "股市大涨，沪指创年内新高", "category": "股票"},
    {"id": "4", "title": "新学期中小学课后服务全面推开", "category": "教育"},
]


def test_index_bulk_and_search_chinese(engine: Engine, index_name: str) -> None:
    engine.create_index(
        index_name,
        mappings={"properties": {"title": {"type": "text", "analyzer": "standard"}, "category": {"type": "keyword"}}},
    )
    results = list(
        engine.bulk({"_index": index_name, "_id": d["id"], "_source": d} for d in DOCS)
    )
    assert all(ok for ok, _ in results), results
    engine.refresh(index_name)
    assert engine.count(index_name) == len(DOCS)

    hits = engine.search(index_name, {"query": {"match": {"title": "股市"}}})["hits"]["hits"]
    assert [h["_id"] for h in hits][:1] == ["3"]

    hits = engine.search(index_name, {"query": {"term": {"category": "体育"}}})["hits"]["hits"]
    assert [h["_source"]["title"] for h in hits] == [DOCS[1]["title"]]


def test_engine_kind_detected(engine: Engine, engine_urls: dict[str, str]) -> None:
    assert engine.url == engine_urls[engine.kind].rstrip("/")
    major = int(engine.version.split(".")[0])
    assert (engine.kind, major) in {("opensearch", 2), ("elasticsearch", 8)}
    # The official client of the right product must be in use.
    expected_module = "elasticsearch" if engine.kind == "elasticsearch" else "opensearchpy"
    assert type(engine.raw).__module__.split(".")[0] == expected_module
