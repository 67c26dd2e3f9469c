"""TEI conformance of ``jingpai serve``: a plain HTTP client posts Hugging Face TEI's documented ``/rerank``
requests to the real service (tiny real cross-encoder, real uvicorn) and checks the answers against the
shapes of TEI's OpenAPI (``docs/openapi.json`` of text-embeddings-inference: ``RerankRequest``, ``Rank``,
``ErrorResponse``/``ErrorType`` and the statuses 413/422/424/429); the gateway's rerank client against
the same service as it would use a real TEI (``/info`` ``model_id`` and ``max_client_batch_size``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from fastapi import FastAPI

from jingpai.plugin.rerank_client import RerankClient, RerankUnavailable
from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.service import ServiceSettings, create_app
from jingpai.serving import serve

#: TEI's ``ErrorType`` (router/src/lib.rs): serialized by name
TEI_ERROR_TYPES = {"Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty"}
QUERY = "What is Deep Learning?"
TEXTS = ["Deep Learning is a subset of machine learning based on neural networks.", "Cheese is made from milk.", "深度学习是机器学习的一个分支"]
# CJK: one token per character, so the text's last tokens are a piece of text that tokenizes back to them
LONG = "今天天气很好，我们去公园散步。" * 8 + "深度学习是机器学习的一个分支，基于神经网络。"


@pytest.fixture(scope="module")
def model(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Reranker:
    torch.manual_seed(0)
    saved = registry.create("cross", base=str(tiny_bert_dir), max_length=64, device="cpu").save(tmp_path_factory.mktemp("tei") / "tiny-cross")
    return Reranker.load(saved, device="cpu")


def settings(**kw) -> ServiceSettings:
    return ServiceSettings(model_name="tiny-cross", dtype="fp32", warmup=False, **kw)


@pytest.fixture(scope="module")
def url(model: Reranker) -> Iterator[str]:
    with serve(create_app(settings(max_docs=8), model)) as server:
        yield server.url


def assert_rank_list(body: object, n: int, *, text: bool) -> None:
    """TEI's ``RerankResponse``: ``[Rank]``, ``Rank = {index: int >= 0, score: number, text?: string}``; one per text."""
    assert isinstance(body, list) and len(body) == n
    for rank in body:
        assert set(rank) == ({"index", "score", "text"} if text else {"index", "score"})
        assert isinstance(rank["index"], int) and rank["index"] >= 0 and isinstance(rank["score"], float)
        assert not text or isinstance(rank["text"], str)
    assert sorted(r["index"] for r in body) == list(range(n))
    assert [r["score"] for r in body] == sorted((r["score"] for r in body), reverse=True)


def assert_tei_error(resp: httpx.Response, status: int, error_type: str) -> str:
    """TEI's ``ErrorResponse``: ``{error: string, error_type: ErrorType}`` with the status TEI gives the type."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error", "error_type"} and isinstance(body["error"], str) and body["error"]
    assert body["error_type"] == error_type and error_type in TEI_ERROR_TYPES
    return body["error"]


def test_documented_requests_answer_teis_response_shape(url: str, model: Reranker) -> None:
    # the OpenAPI example, then every documented field (booleans nullable, truncation_direction Left/Right)
    r = httpx.post(f"{url}/rerank", json={"query": QUERY, "texts": ["Deep Learning is ..."]})
    assert_rank_list(r.json(), 1, text=False)
    full = {"query": QUERY, "texts": TEXTS, "truncate": True, "truncation_direction": "Right", "raw_scores": True, "return_text": True}
    r = httpx.post(f"{url}/rerank", json=full)
    assert r.status_code == 200, r.text
    assert_rank_list(r.json(), len(TEXTS), text=True)
    expected = model.predict([(QUERY, t) for t in TEXTS])
    assert {rank["index"]: rank["score"] for rank in r.json()} == pytest.approx(dict(enumerate(expected.tolist())), abs=1e-5)
    assert all(rank["text"] == TEXTS[rank["index"]] for rank in r.json())
    for direction in ("Left", "left", "right"):
        r = httpx.post(f"{url}/rerank", json={**full, "truncation_direction": direction, "truncate": None, "return_text": False})
        assert r.status_code == 200, r.text
        assert_rank_list(r.json(), len(TEXTS), text=False)


def test_truncation_direction_left_keeps_the_end_of_a_long_text(url: str, model: Reranker) -> None:
    tok = model.tokenizer
    assert len(tok(LONG, add_special_tokens=False)["input_ids"]) > 64
    scores = {}
    for direction in ("Right", "Left"):
        r = httpx.post(f"{url}/rerank", json={"query": QUERY, "texts": [LONG, TEXTS[1]], "raw_scores": True, "truncation_direction": direction})
        assert r.status_code == 200, r.text
        scores[direction] = {rank["index"]: rank["score"] for rank in r.json()}
    # Right: the model's own (longest-first, right side) truncation of the whole pair
    assert scores["Right"][0] == pytest.approx(float(model.predict([(QUERY, LONG)])[0]), abs=1e-5)
    # Left: the text's last tokens, exactly the pair the tokenizer builds when it cuts from the left (TEI's Left)
    tok.truncation_side = "left"
    try:
        left_ids = tok(QUERY, LONG, truncation="longest_first", max_length=64)["input_ids"]
    finally:
        tok.truncation_side = "right"
    q_len = len(tok(QUERY, add_special_tokens=False)["input_ids"])
    offsets = tok(LONG, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    tail = LONG[offsets[-(64 - 3 - q_len)][0] :]
    assert model.featurize([(QUERY, tail)])["input_ids"][0].tolist() == left_ids
    assert scores["Left"][0] == pytest.approx(float(model.predict([(QUERY, tail)])[0]), abs=1e-5)
    assert model.featurize([(QUERY, LONG)])["input_ids"][0].tolist() != left_ids  # the two directions keep other tokens
    assert scores["Left"][1] == pytest.approx(scores["Right"][1], abs=1e-6)  # a short text is not cut either way
    r = httpx.post(f"{url}/rerank", json={"query": QUERY, "texts": [LONG], "truncate": False, "truncation_direction": "Left"})
    assert "send truncate=true to cut it" in assert_tei_error(r, 413, "Validation")


def test_errors_have_teis_body_and_status(url: str) -> None:
    r = httpx.post(f"{url}/rerank", json={"query": QUERY, "texts": ["x"] * 9})
    assert assert_tei_error(r, 413, "Validation").startswith("texts holds 9 documents; the limit is max_docs=8")
    r = httpx.post(f"{url}/rerank", json={"query": QUERY, "texts": ["x"], "truncation_direction": "Middle"})
    assert_tei_error(r, 422, "Validation")
    # a lone surrogate is valid JSON that no tokenizer can encode: TEI's tokenizer error
    r = httpx.post(f"{url}/rerank", content=b'{"query": "q", "texts": ["bad \\ud800 text"]}', headers={"content-type": "application/json"})
    assert assert_tei_error(r, 422, "Tokenizer").startswith("the model could not read this request's input")


def test_overload_is_429_overloaded(model: Reranker) -> None:
    # the batcher holds every request 2 s to gather more, far past the 5 ms queue timeout
    with serve(create_app(settings(queue_timeout_ms=5, batch_wait_ms=2000), model)) as server:
        r = httpx.post(f"{server.url}/rerank", json={"query": QUERY, "texts": TEXTS})
        assert_tei_error(r, 429, "Overloaded")
        assert r.headers["retry-after"] == "1"
        client = RerankClient(server.url, timeout_ms=30_000)
        with pytest.raises(RerankUnavailable) as caught:
            asyncio.run(client.rerank(QUERY, TEXTS))
        assert caught.value.reason == "reranker_overloaded" and "HTTP 429" in caught.value.detail


def break_forward_pass(app: FastAPI) -> None:
    """Give the served model a real word embedding too small for the tokenizer's ids: the forward pass of
    any real text raises (IndexError), as a broken model or device would."""
    net = app.state.service.model.net
    name, emb = max(((n, m) for n, m in net.named_modules() if isinstance(m, torch.nn.Embedding)), key=lambda nm: nm[1].num_embeddings)
    parent = net.get_submodule(name.rsplit(".", 1)[0])
    setattr(parent, name.rsplit(".", 1)[1], torch.nn.Embedding(4, emb.embedding_dim))


def test_a_failed_forward_pass_is_424_backend_on_tei_and_500_elsewhere(model: Reranker) -> None:
    app = create_app(settings(), model)
    break_forward_pass(app)
    with serve(app) as server:
        r = httpx.post(f"{server.url}/rerank", json={"query": QUERY, "texts": TEXTS})
        assert assert_tei_error(r, 424, "Backend").startswith("scoring failed: IndexError")
        r = httpx.post(f"{server.url}/opensearch/text_similarity", json={"query_text": QUERY, "text_docs": TEXTS})
        assert r.status_code == 500 and r.json()["error_type"] == "Backend"
        r = httpx.post(f"{server.url}/v2/rerank", json={"query": QUERY, "documents": TEXTS})
        assert r.status_code == 500 and set(r.json()) == {"message"}
        client = RerankClient(server.url, timeout_ms=30_000)
        with pytest.raises(RerankUnavailable) as caught:
            asyncio.run(client.rerank(QUERY, TEXTS))
        assert caught.value.reason == "reranker_inference_failed" and "HTTP 424" in caught.value.detail


def test_info_has_teis_fields(url: str) -> None:
    info = httpx.get(f"{url}/info").json()
    assert info["model_id"] == info["model_name"] == "tiny-cross"
    assert info["max_input_length"] == 64 and info["max_client_batch_size"] == 8 and info["auto_truncate"] is True


def test_gateway_client_reads_model_id_and_batches_to_max_client_batch_size(model: Reranker) -> None:
    texts = [f"{t} {i}" for i in range(3) for t in TEXTS]  # 9 texts, max_client_batch_size 4
    app = create_app(settings(max_docs=4), model)
    with serve(app) as server:

        async def go() -> tuple[list[float], str | None]:
            client = RerankClient(server.url, timeout_ms=30_000)
            try:
                return await client.rerank(QUERY, texts), await client.model_name()
            finally:
                await client.aclose()

        scores, name = asyncio.run(go())
        metrics = httpx.get(f"{server.url}/metrics").text
    assert name == "tiny-cross"
    expected = torch.sigmoid(torch.tensor(model.predict([(QUERY, t) for t in texts]))).tolist()
    assert scores == pytest.approx(expected, abs=1e-5)
    assert 'jingpai_rerank_requests_total{route="/rerank",status="200"} 3.0' in metrics  # 4 + 4 + 1 texts
