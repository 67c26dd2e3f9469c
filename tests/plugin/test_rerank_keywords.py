"""Keywords stored at index time reach a keyword reranker with the hits (``jingpai index --rerank-keywords``).

On both engines: the indexer stores each document's keywords of the text the gateway reranks, with its digest; the
gateway sends them when the digest is that of the text it sends; a ``kwbert`` on the same dictionary takes them
(the service's ``jingpai_rerank_given_keywords`` counter) and scores exactly as without them.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jingpai.engine.client import Engine
from jingpai.indexer.mapping import read_meta
from jingpai.indexer.pipeline import IndexingError, IndexSettings, index_corpus
from jingpai.indexer.rerank_keywords import RERANK_CHARS, rerank_text, text_digest
from jingpai.indexer.versions import list_versions
from jingpai.keyword_dict import KeywordExtractor
from jingpai.plugin.gateway import create_app
from jingpai.plugin.settings import GatewaySettings
from jingpai.reranker import registry
from jingpai.reranker.service import ServiceSettings
from jingpai.reranker.service import create_app as create_service_app
from jingpai.reranker.tiny import build_tiny_checkpoint
from jingpai.serving import ServerThread, serve

from .conftest import corpus, search


@pytest.fixture(scope="module")
def kwbert_url(dictionary, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``jingpai serve`` of a tiny kwbert on the gateway tests' dictionary."""
    d, _ = dictionary
    texts = [doc["title"] + doc["content"] for doc in corpus()] + ["中国GDP", "中国经济增长", "银行利率"]
    base = build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-kwbert"), texts, seed=1)
    model = registry.create("kwbert", base=str(base), max_length=64, device="cpu", dictionary=None)
    model.set_dictionary(d)
    with serve(create_service_app(ServiceSettings(model_name="tiny-kwbert", device="cpu", dtype="fp32", warmup=False), model)) as server:
        yield server.url


def given(url: str) -> dict[str, float]:
    """The service's ``jingpai_rerank_given_keywords`` counter by outcome."""
    text = httpx.get(f"{url}/metrics").text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'jingpai_rerank_given_keywords_total\{outcome="(\w+)"\} (\S+)', text)}


def test_stored_keywords_reach_the_keyword_reranker_and_score_as_found_there(
    engine: Engine, indices, dictionary, kwbert_url: str, tmp_path: Path
) -> None:
    d, dict_dir = dictionary
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps(doc, ensure_ascii=False) for doc in corpus()) + "\n", encoding="utf-8")
    alias = f"test-rk-{uuid.uuid4().hex[:8]}"
    try:
        settings = IndexSettings(index=alias, text_fields=("title", "content"), id_field="id", quarantine_dir=tmp_path, progress=False,
                                 rerank_keywords=True)
        assert index_corpus(engine, [path], settings, dictionary=d).indexed == len(corpus())
        engine.refresh(alias)
        meta = read_meta(engine, alias).rerank_keywords
        assert meta is not None and (meta.fields, meta.chars, meta.top_k, meta.dict_version) == (("title", "content"), RERANK_CHARS, 20, d.version)
        stored = engine.raw.get(index=alias, id="d02")["_source"]["jingpai"]["rk"]
        text = rerank_text(corpus()[1], ("title", "content"), chars=RERANK_CHARS)
        assert stored == {"sha1": text_digest(text), "words": KeywordExtractor(d, top_k=20).words(text)}
        assert stored["words"]

        gateway = GatewaySettings(engine_url=engine.url, reranker_url=kwbert_url, window=20, dict_dirs=(dict_dir,), timeout_ms=20_000)
        server = ServerThread(create_app(gateway)).start()
        try:
            body = {"query": {"match": {"content": "中国经济"}}, "size": 10, "_source": ["title"]}
            before = given(kwbert_url)
            answer = search(server.url, alias, body)
            after = given(kwbert_url)
            window = min(answer["hits"]["total"]["value"], 20)
            assert answer["jingpai"]["reranked"] is True
            assert after.get("taken", 0) - before.get("taken", 0) == window
            # what folding added for the reranker stays out of the page
            assert all(set(h["_source"]) == {"title"} for h in answer["hits"]["hits"])
            # the same search over the index without stored keywords: the model found them itself, same scores
            plain = search(server.url, indices[engine.kind][0], body)
            assert [h["_id"] for h in plain["hits"]["hits"]] == [h["_id"] for h in answer["hits"]["hits"]]
            for ours, theirs in zip(answer["hits"]["hits"], plain["hits"]["hits"], strict=True):
                assert ours["_jingpai"]["model_score"] == pytest.approx(theirs["_jingpai"]["model_score"], abs=1e-6)
            # reranked on another field, the text sent is not the one the keywords were found in: none are sent
            before = given(kwbert_url)
            search(server.url, alias, {**body, "ext": {"jingpai": {"fields": ["content"]}}})
            assert given(kwbert_url) == before
        finally:
            server.stop()

        # rerunning without --rerank-keywords builds a new generation: its documents would hold them only in part
        plain_run = IndexSettings(index=alias, text_fields=("title", "content"), id_field="id", quarantine_dir=tmp_path, progress=False)
        index_corpus(engine, [path], plain_run, dictionary=d)
        versions = list_versions(engine, alias)
        assert [(v.generation, v.rerank_keywords) for v in versions] == [(1, True), (2, False)]
    finally:
        engine.raw.indices.delete(index=f"{alias}*")


def test_rerank_keywords_need_a_dictionary(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"id": "1", "title": "中国", "content": "经济"}, ensure_ascii=False) + "\n", encoding="utf-8")
    settings = IndexSettings(index=f"test-rk-{uuid.uuid4().hex[:8]}", id_field="id", quarantine_dir=tmp_path, progress=False, rerank_keywords=True)
    with pytest.raises(IndexingError, match=r"--rerank-keywords stores dictionary keywords: it needs a dictionary \(--dict DIR\)"):
        index_corpus(engine, [path], settings)
