"""Cohere conformance of ``jingpai serve``: the official ``cohere`` SDK (v1 ``Client``/``AsyncClient`` and v2
``ClientV2``/``AsyncClientV2``) pointed at the real service (tiny real cross-encoder, real uvicorn).

Checked: results (index, relevance_score, document), ``meta.api_version`` and ``meta.billed_units.search_units``
(Cohere's rule: one unit per 100 documents, a document counting once per started 500 tokens with the query),
v1 ``rank_fields`` over object documents, and errors surfacing as the SDK's exception of the status with
Cohere's ``{"message"}`` body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import cohere
import numpy as np
import pytest
import torch
from cohere.core.api_error import ApiError

from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.service import ServiceSettings, create_app
from jingpai.serving import serve

QUERY = "哪些因素会影响中国的GDP"
DOCS = ["影响中国GDP增长的因素有哪些", "今天天气怎么样", "花呗怎么还款", "中国经济增长的主要动力是消费投资和出口"]
MODEL = "tiny-cross"


@pytest.fixture(scope="module")
def model(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Reranker:
    torch.manual_seed(0)
    saved = registry.create("cross", base=str(tiny_bert_dir), max_length=64, device="cpu").save(tmp_path_factory.mktemp("co") / MODEL)
    return Reranker.load(saved, device="cpu")


@pytest.fixture(scope="module")
def url(model: Reranker) -> Iterator[str]:
    with serve(create_app(ServiceSettings(model_name=MODEL, dtype="fp32", warmup=False, max_docs=300), model)) as server:
        yield server.url


def relevance(model: Reranker, texts: list[str]) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-model.predict([(QUERY, t) for t in texts]).astype(np.float64)))


def test_v1_sync_and_async_clients(url: str, model: Reranker) -> None:
    expected = relevance(model, DOCS)
    best = list(np.argsort(-expected, kind="stable")[:2])
    sync = cohere.Client(api_key="unused", base_url=url)
    resp = sync.rerank(model=MODEL, query=QUERY, documents=DOCS, top_n=2, return_documents=True)
    assert [r.index for r in resp.results] == best
    for r in resp.results:
        assert r.relevance_score == pytest.approx(expected[r.index], abs=1e-5)
        assert r.document is not None and r.document.text == DOCS[r.index]
    assert resp.id and resp.meta.api_version.version == "1" and resp.meta.billed_units.search_units == 1

    async def call() -> cohere.RerankResponse:
        return await cohere.AsyncClient(api_key="unused", base_url=url).rerank(query=QUERY, documents=DOCS, max_chunks_per_doc=2)

    resp = asyncio.run(call())
    assert [r.index for r in resp.results] == list(np.argsort(-expected, kind="stable"))
    assert all(r.document is None for r in resp.results)


def test_v2_sync_and_async_clients(url: str, model: Reranker) -> None:
    expected = relevance(model, DOCS)
    resp = cohere.ClientV2(api_key="unused", base_url=url).rerank(model=MODEL, query=QUERY, documents=DOCS, top_n=3, max_tokens_per_doc=4)
    first4 = [d[: model.tokenizer(d, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"][3][1]] for d in DOCS]
    cut = relevance(model, first4)  # each document cut to its first 4 tokens
    assert [r.index for r in resp.results] == list(np.argsort(-cut, kind="stable")[:3])
    assert [r.relevance_score for r in resp.results] == pytest.approx(sorted(cut.tolist(), reverse=True)[:3], abs=1e-5)
    assert resp.meta.api_version.version == "2" and resp.meta.billed_units.search_units == 1

    async def call():
        return await cohere.AsyncClientV2(api_key="unused", base_url=url).rerank(model=MODEL, query=QUERY, documents=DOCS)

    resp = asyncio.run(call())
    assert {r.index: r.relevance_score for r in resp.results} == pytest.approx(dict(enumerate(expected.tolist())), abs=1e-5)


def test_v1_rank_fields_rank_field_lines_of_object_documents(url: str, model: Reranker) -> None:
    docs = [{"title": "花呗", "body": "怎么还款", "id": "a"}, {"title": "中国GDP", "body": "增长的因素", "id": "b"}]
    client = cohere.Client(api_key="unused", base_url=url)
    resp = client.rerank(query=QUERY, documents=docs, rank_fields=["title", "body"], return_documents=True)
    ranked = ["title: 花呗\nbody: 怎么还款", "title: 中国GDP\nbody: 增长的因素"]
    expected = relevance(model, ranked)
    assert {r.index: r.relevance_score for r in resp.results} == pytest.approx(dict(enumerate(expected.tolist())), abs=1e-5)
    assert {r.index: r.document.dict() for r in resp.results} == dict(enumerate(docs))  # returned whole, as sent
    # strings and documents with text mix; without rank_fields an object document is ranked by its text
    resp = client.rerank(query=QUERY, documents=[DOCS[0], {"text": DOCS[1], "id": "x"}])
    assert {r.index: r.relevance_score for r in resp.results} == pytest.approx(dict(enumerate(relevance(model, DOCS[:2]).tolist())), abs=1e-5)
    with pytest.raises(cohere.UnprocessableEntityError) as caught:
        client.rerank(query=QUERY, documents=docs, rank_fields=["title", "author"])
    assert caught.value.body == {"message": "documents[0] has no field 'author' named in rank_fields (its fields: body, id, title)"}
    with pytest.raises(cohere.UnprocessableEntityError) as caught:
        client.rerank(query=QUERY, documents=docs)
    assert caught.value.body == {
        "message": "documents[0] has no text field (fields: body, id, title); send its text in text, or name the fields to rank "
        "with rank_fields"
    }


def test_billed_search_units_follow_coheres_rule(url: str) -> None:
    client = cohere.ClientV2(api_key="unused", base_url=url)

    def units(documents: list[str]) -> float | None:
        return client.rerank(model=MODEL, query="中国", documents=documents).meta.billed_units.search_units

    assert units(["短文"] * 100) == 1
    assert units(["短文"] * 101) == 2
    # a document of 600 tokens (one per CJK character) and the 2-token query: 2 chunks of 500 → 100 documents' worth
    assert units(["经" * 600] + ["短文"] * 98) == 1
    assert units(["经" * 600] + ["短文"] * 99) == 2
    assert units(["经" * 997, "短文"]) == 1  # 999 tokens with the query: 2 chunks, plus 1 document


def test_a_max_tokens_per_doc_past_a_c_long_counts_every_token(url: str) -> None:
    """Valid JSON (a positive integer) of any size: the tokenizer's cap takes a C long, so it is bounded first (a
    2**70 once raised OverflowError, a 500, found by the schema test)."""
    import httpx

    body = {"model": MODEL, "query": "中国", "documents": ["经" * 600, "短文"], "max_tokens_per_doc": 2**70}
    answer = httpx.post(f"{url}/v2/rerank", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["meta"]["billed_units"]["search_units"] == 1


def test_errors_are_the_sdks_exceptions_with_coheres_message(url: str) -> None:
    client = cohere.ClientV2(api_key="unused", base_url=url)
    with pytest.raises(cohere.UnprocessableEntityError) as caught:
        client.rerank(model="rerank-v3.5", query=QUERY, documents=DOCS)
    assert caught.value.status_code == 422
    assert caught.value.body == {
        "message": "model 'rerank-v3.5' is not served here; this service serves 'tiny-cross' (send that name or leave model out)"
    }
    with pytest.raises(ApiError) as caught:
        client.rerank(model=MODEL, query=QUERY, documents=["x"] * 301)
    assert caught.value.status_code == 413
    assert caught.value.body == {"message": "documents holds 301 documents; the limit is max_docs=300 (--max-docs / JINGPAI_SERVE_MAX_DOCS)"}


def test_overload_is_the_sdks_too_many_requests(model: Reranker) -> None:
    app = create_app(ServiceSettings(model_name=MODEL, dtype="fp32", warmup=False, queue_timeout_ms=5, batch_wait_ms=2000), model)
    with serve(app) as server, pytest.raises(cohere.TooManyRequestsError) as caught:
        cohere.Client(api_key="unused", base_url=server.url).rerank(query=QUERY, documents=DOCS, request_options={"max_retries": 0})
    assert caught.value.status_code == 429 and caught.value.body["message"].startswith("the request waited more than 5 ms")
