"""The rerank service in-process: a real tiny cross-encoder behind the real FastAPI app.

Concurrency tests drive the ASGI app through httpx's ASGI transport inside one event loop, so the
batching engine really merges requests; merging is checked through ``/metrics``, never through timings.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.service import ServiceSettings, TextMeasure, create_app, resolve_dtype

QUERY = "哪些因素会影响中国的GDP"
DOCS = [
    "影响中国GDP增长的因素有哪些",
    "今天天气怎么样",
    "花呗怎么还款",
    "who is the author of the iron lady",
    "中国经济增长的主要动力是消费投资和出口",
]


@pytest.fixture(scope="module")
def model_dir(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = registry.create("cross", base=str(tiny_bert_dir), max_length=64, device="cpu")
    return model.save(tmp_path_factory.mktemp("served") / "tiny-cross")


@pytest.fixture(scope="module")
def model(model_dir: Path) -> Reranker:
    return Reranker.load(model_dir, device="cpu")


def fp32(**kw) -> ServiceSettings:
    return ServiceSettings(model_name="tiny-cross", dtype="fp32", **kw)


@pytest.fixture
def client(model: Reranker) -> Iterator[TestClient]:
    with TestClient(create_app(fp32(max_docs=8, max_query_chars=40, max_body_bytes=4000), model)) as c:
        yield c


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def metric(text: str, name: str, **labels: str) -> float:
    """One sample's value from Prometheus text output."""
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


# ------------------------------------------------------------------------------------ API contracts


def test_tei_rerank_contract(client: TestClient, model: Reranker) -> None:
    expected_raw = model.predict([(QUERY, d) for d in DOCS])
    r = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "return_text": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [rec["index"] for rec in body] == list(np.argsort(-expected_raw, kind="stable"))
    for rec in body:
        assert set(rec) == {"index", "score", "text"}
        assert rec["text"] == DOCS[rec["index"]]
        assert rec["score"] == pytest.approx(sigmoid(expected_raw[rec["index"]]), abs=1e-5)
    raw = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "raw_scores": True}).json()
    assert all(set(rec) == {"index", "score"} for rec in raw)
    assert {rec["index"]: rec["score"] for rec in raw} == pytest.approx(dict(enumerate(expected_raw.tolist())), abs=1e-5)


def test_tei_rerank_fuses_first_stage_scores(client: TestClient, model: Reranker) -> None:
    model_scores = sigmoid(model.predict([(QUERY, d) for d in DOCS]))
    engine = [3.0, 9.0, 1.0, 5.0, 7.0]
    r = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "scores": engine, "fusion": "linear", "fusion_weight": 0.25})
    assert r.status_code == 200, r.text
    body = r.json()
    served = {rec["index"]: rec["model_score"] for rec in body}
    assert served == pytest.approx(dict(enumerate(model_scores.tolist())), abs=1e-5)
    # (the tiny model's scores lie close together: min-max would magnify float32 rounding, so fuse the served ones)
    engine_norm = [(e - 1.0) / 8.0 for e in engine]
    m_low, m_high = min(served.values()), max(served.values())
    expected = {i: 0.25 * engine_norm[i] + 0.75 * (served[i] - m_low) / (m_high - m_low) for i in range(len(DOCS))}
    assert {rec["index"]: rec["score"] for rec in body} == pytest.approx(expected, abs=1e-6)
    assert [rec["score"] for rec in body] == sorted((rec["score"] for rec in body), reverse=True)
    # default fusion with scores: linear 0.5; fusion=1.0 weight keeps the first-stage order
    engine_only = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "scores": engine, "fusion_weight": 1.0}).json()
    assert [rec["index"] for rec in engine_only] == [1, 4, 3, 0, 2]
    rrf = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "scores": engine, "fusion": "rrf", "rrf_k": 5}).json()
    model_rank = {int(i): r for r, i in enumerate(np.argsort(-model_scores, kind="stable"), start=1)}
    engine_rank = {1: 1, 4: 2, 3: 3, 0: 4, 2: 5}
    assert {rec["index"]: rec["score"] for rec in rrf} == pytest.approx(
        {i: 1 / (5 + engine_rank[i]) + 1 / (5 + model_rank[i]) for i in range(len(DOCS))}
    )
    plain = client.post("/rerank", json={"query": QUERY, "texts": DOCS}).json()
    assert all("model_score" not in rec for rec in plain)


def test_tei_rerank_fusion_errors_name_the_problem(client: TestClient) -> None:
    r = client.post("/rerank", json={"query": "q", "texts": ["a", "b"], "scores": [1.0]})
    assert r.status_code == 422 and r.json()["error"] == "scores holds 1 values for 2 texts; expected one per text"
    r = client.post("/rerank", json={"query": "q", "texts": ["a"], "fusion": "linear", "fusion_weight": 0.3})
    assert r.status_code == 422 and r.json()["error"] == "fusion, fusion_weight need scores: the first-stage scores, one per text"
    r = client.post("/rerank", json={"query": "q", "texts": ["a"], "scores": [1.0], "fusion": "sum"})
    assert r.status_code == 422 and r.json()["error"] == "fusion: Input should be 'replace', 'linear' or 'rrf'"
    r = client.post("/rerank", json={"query": "q", "texts": ["a"], "scores": [1.0], "fusion_weight": 2})
    assert r.status_code == 422 and r.json()["error"] == "fusion_weight: Input should be less than or equal to 1"


@pytest.mark.parametrize("version", ["1", "2"])
def test_cohere_jina_rerank_contract(client: TestClient, model: Reranker, version: str) -> None:
    expected = sigmoid(model.predict([(QUERY, d) for d in DOCS]))
    documents = [DOCS[0], {"text": DOCS[1]}, *DOCS[2:]]
    r = client.post(f"/v{version}/rerank", json={"model": "tiny-cross", "query": QUERY, "documents": documents, "top_n": 3, "return_documents": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "tiny-cross" and body["id"]
    assert body["meta"] == {"api_version": {"version": version}, "billed_units": {"search_units": 1}}
    results = body["results"]
    assert [res["index"] for res in results] == list(np.argsort(-expected, kind="stable")[:3])
    for res in results:
        assert res["relevance_score"] == pytest.approx(expected[res["index"]], abs=1e-5)
        assert res["document"] == {"text": DOCS[res["index"]]}
    plain = client.post(f"/v{version}/rerank", json={"query": QUERY, "documents": DOCS}).json()["results"]
    assert len(plain) == len(DOCS) and all(set(res) == {"index", "relevance_score"} for res in plain)


def test_opensearch_text_similarity_contract(client: TestClient, model: Reranker) -> None:
    expected = sigmoid(model.predict([(QUERY, d) for d in DOCS]))
    r = client.post("/opensearch/text_similarity", json={"query_text": QUERY, "text_docs": DOCS})
    assert r.status_code == 200, r.text
    results = r.json()["inference_results"]
    assert len(results) == len(DOCS)
    for i, res in enumerate(results):  # input order, one tensor each
        (tensor,) = res["output"]
        assert tensor["name"] == "similarity" and tensor["data_type"] == "FLOAT32" and tensor["shape"] == [1]
        assert tensor["data"][0] == pytest.approx(expected[i], abs=1e-5)


def test_health_info_metrics_and_openapi(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    info = client.get("/info").json()
    assert info["model_name"] == info["model_id"] == "tiny-cross" and info["architecture"] == "cross"
    assert info["device"] == "cpu" and info["dtype"] == "fp32" and info["token_counts"] == "exact"
    assert info["dictionary_version"] is None and info["score"] == "sigmoid(logit)"
    assert info["limits"] == {
        "max_docs": 8, "max_body_bytes": 4000, "max_query_chars": 40, "max_length": 64,
        "max_batch_tokens": 4096, "queue_timeout_ms": 30000,  # unset: the CPU's default (cache-sized batches)
    }
    client.post("/rerank", json={"query": QUERY, "texts": DOCS[:2]})
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert metric(metrics.text, "jingpai_rerank_requests_total", route="/rerank", status="200") == 1
    assert metric(metrics.text, "jingpai_rerank_pairs_total") == 2  # the start-up warm-up is not counted
    # the two pairs padded to the longer one: the real tokens are what the tokenizer makes of each pair
    lengths = [len(ids) for ids in client.app.state.service.model.tokenizer([QUERY] * 2, DOCS[:2], truncation=True, max_length=64)["input_ids"]]
    assert metric(metrics.text, "jingpai_rerank_real_tokens_total") == sum(lengths)
    assert metric(metrics.text, "jingpai_rerank_padded_tokens_total") == 2 * max(lengths)
    spec = client.get("/openapi.json").json()
    assert {"/rerank", "/v1/rerank", "/v2/rerank", "/opensearch/text_similarity", "/health", "/info", "/metrics"} <= set(spec["paths"])
    tei = spec["components"]["schemas"]["TeiRerankRequest"]
    assert tei["required"] == ["query", "texts"] and tei["additionalProperties"] is False


def test_info_keeps_the_model_directory_private_unless_told(model: Reranker, model_dir: Path) -> None:
    with TestClient(create_app(fp32(model_dir=model_dir, warmup=False), model)) as c:
        assert c.get("/info").json()["model_dir"] is None
    with TestClient(create_app(fp32(model_dir=model_dir, warmup=False, expose_model_dir=True), model)) as c:
        assert c.get("/info").json()["model_dir"] == str(model_dir)


# ------------------------------------------------------------------------------------ batching


def test_concurrent_requests_merge_into_batches_and_score_as_one_by_one(model: Reranker) -> None:
    queries = [QUERY, "花呗怎么还款", "iron lady author", "今天天气"]
    requests = [("/rerank", {"query": q, "texts": DOCS[i % 3 :], "raw_scores": True}) for i, q in enumerate(queries * 2)]
    app = create_app(fp32(batch_wait_ms=500), model)
    responses, metrics = run_concurrently(app, requests)
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]

    batches = metric(metrics, "jingpai_rerank_batch_requests_count")
    single = metric(metrics, "jingpai_rerank_batch_requests_bucket", le="1.0")
    assert batches < len(requests) and single < batches, "concurrent requests were not merged"
    assert metric(metrics, "jingpai_rerank_batch_requests_sum") >= len(requests)
    assert metric(metrics, "jingpai_rerank_pairs_total") == sum(len(b["texts"]) for _, b in requests)

    sequential = TestClient(create_app(fp32(), model))
    for (_, body), resp in zip(requests, responses, strict=True):
        got = {rec["index"]: rec["score"] for rec in resp.json()}
        alone = {rec["index"]: rec["score"] for rec in sequential.post("/rerank", json=body).json()}
        direct = model.predict([(body["query"], t) for t in body["texts"]])
        assert got == pytest.approx(alone, abs=1e-5)
        assert got == pytest.approx(dict(enumerate(direct.tolist())), abs=1e-5)


def test_token_budget_defaults_by_device_and_a_set_one_is_kept() -> None:
    from jingpai.reranker.service.settings import DEFAULT_MAX_BATCH_TOKENS, resolve_max_batch_tokens

    assert resolve_max_batch_tokens(None, torch.device("cpu")) == DEFAULT_MAX_BATCH_TOKENS["cpu"] == 4096
    assert resolve_max_batch_tokens(None, torch.device("cuda")) == DEFAULT_MAX_BATCH_TOKENS["cuda"] == 16384
    assert resolve_max_batch_tokens(16384, torch.device("cpu")) == 16384
    with pytest.raises(ValueError, match=r"max_batch_tokens must be >= 1 \(or unset\), got 0"):
        ServiceSettings(max_batch_tokens=0)


def test_token_budget_splits_sorted_batches(model: Reranker) -> None:
    app = create_app(fp32(max_batch_tokens=100), model)
    engine = app.state.service.engine
    lengths = [30, 5, 12, 30, 7, 50, 12]
    plan = engine.plan(lengths)
    assert sorted(i for batch in plan for i in batch) == list(range(len(lengths)))
    for batch in plan:
        assert len(batch) * max(lengths[i] for i in batch) <= 100
    flat = [lengths[i] for batch in plan for i in batch]
    assert flat == sorted(lengths)
    assert engine.plan([150]) == [[0]]  # one pair over budget still runs, alone


def test_a_failing_batch_fails_only_its_own_request(model: Reranker) -> None:
    good = [("/rerank", {"query": QUERY, "texts": DOCS, "raw_scores": True}), ("/v1/rerank", {"query": "花呗", "documents": DOCS[:2]})]
    # a lone surrogate is valid JSON but no tokenizer can encode it: featurize raises for this request
    bad = ("/rerank", {"query": QUERY, "texts": [DOCS[0], "bad \ud800 text"]})
    app = create_app(fp32(batch_wait_ms=500), model)

    async def go() -> tuple[list[httpx.Response], str]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as c:

            def post(path: str, body: dict):
                data = json.dumps(body, ensure_ascii=True).encode("ascii")  # ascii escapes keep \ud800 sendable
                return c.post(path, content=data, headers={"content-type": "application/json"})

            responses = await asyncio.gather(post(*good[0]), post(*bad), post(*good[1]))
            return list(responses), (await c.get("/metrics")).text

    (ok1, failed, ok2), metrics = asyncio.run(go())
    assert failed.status_code == 422 and failed.json()["error_type"] == "Tokenizer"
    assert failed.json()["error"].startswith("the model could not read this request's input: TypeError:")
    assert ok1.status_code == 200 and ok2.status_code == 200
    direct = model.predict([(QUERY, d) for d in DOCS])
    assert {rec["index"]: rec["score"] for rec in ok1.json()} == pytest.approx(dict(enumerate(direct.tolist())), abs=1e-5)
    # the merged batch failed once, then the bad request failed again on its own retry
    assert metric(metrics, "jingpai_rerank_failed_batches_total") == 2
    assert metric(metrics, "jingpai_rerank_requests_total", route="/rerank", status="422") == 1


def test_waiting_too_long_is_tei_429_overloaded_with_retry_after(model: Reranker) -> None:
    # the batcher holds every request for 2 s to gather more, far past the 5 ms queue timeout
    app = create_app(fp32(queue_timeout_ms=5, batch_wait_ms=2000), model)
    requests = [("/rerank", {"query": QUERY, "texts": DOCS}), ("/v2/rerank", {"query": QUERY, "documents": DOCS})]
    (tei, cohere), metrics = run_concurrently(app, requests)
    message = (
        "the request waited more than 5 ms for the model (queue_timeout_ms, --queue-timeout-ms / "
        "JINGPAI_SERVE_QUEUE_TIMEOUT_MS); retry later"
    )
    assert tei.status_code == 429 and cohere.status_code == 429  # TEI's overloaded, Cohere's too-many-requests
    assert tei.headers["retry-after"] == "1" and cohere.headers["retry-after"] == "1"
    assert tei.json() == {"error": message, "error_type": "Overloaded"}
    assert cohere.json() == {"message": message}
    assert metric(metrics, "jingpai_rerank_queue_timeouts_total") == 2


# ------------------------------------------------------------------------------------ limits and errors


def test_too_many_documents_is_413_naming_the_limit(client: TestClient) -> None:
    r = client.post("/v2/rerank", json={"query": "q", "documents": ["a"] * 9})
    assert r.status_code == 413
    assert r.json() == {"message": "documents holds 9 documents; the limit is max_docs=8 (--max-docs / JINGPAI_SERVE_MAX_DOCS)"}
    r = client.post("/rerank", json={"query": "q", "texts": ["a"] * 9})
    assert r.status_code == 413 and r.json()["error_type"] == "Validation"


def test_body_over_the_limit_is_413_with_or_without_content_length(client: TestClient) -> None:
    r = client.post("/rerank", json={"query": "q", "texts": ["长" * 1500]})
    assert r.status_code == 413
    assert r.json()["error"].startswith("request body is 45")
    assert r.json()["error"].endswith("bytes; the limit is max_body_bytes=4000 (--max-body-bytes / JINGPAI_SERVE_MAX_BODY_BYTES)")

    def chunked() -> Iterator[bytes]:
        yield b'{"query": "q", "texts": ["'
        for _ in range(50):
            yield b"x" * 100
        yield b'"]}'

    r = client.post("/opensearch/text_similarity", content=chunked(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"] == (
        "request body is more than 4000 bytes; the limit is max_body_bytes=4000 (--max-body-bytes / JINGPAI_SERVE_MAX_BODY_BYTES)"
    )


def test_query_too_long_is_422_naming_the_limit(client: TestClient) -> None:
    r = client.post("/opensearch/text_similarity", json={"query_text": "问" * 41, "text_docs": ["a"]})
    assert r.status_code == 422
    assert r.json() == {
        "error": "query_text is 41 characters long; the limit is max_query_chars=40 (--max-query-chars / JINGPAI_SERVE_MAX_QUERY_CHARS)",
        "error_type": "Validation",
    }


def test_unknown_fields_and_bad_values_are_422(client: TestClient) -> None:
    r = client.post("/rerank", json={"query": "q", "texts": ["a"], "truncation_side": "left"})
    assert r.status_code == 422
    assert r.json()["error"] == "truncation_side: unknown field (see /openapi.json for the accepted fields)"
    r = client.post("/rerank", json={"query": "q", "texts": ["a"], "truncation_direction": "Both"})
    assert r.status_code == 422
    assert r.json()["error"] == "truncation_direction: Input should be 'Right', 'Left', 'right' or 'left'"
    r = client.post("/v1/rerank", json={"query": "q", "documents": ["a"], "top_n": 0})
    assert r.status_code == 422 and r.json() == {"message": "top_n: Input should be greater than or equal to 1"}
    r = client.post("/rerank", json={"query": "q"})
    assert r.status_code == 422 and r.json()["error"] == "texts: Field required"
    r = client.post("/rerank", json={"query": "q", "texts": []})
    assert r.status_code == 422 and r.json()["error"] == "texts must hold at least 1 item"
    r = client.post("/rerank", content=b'{"query": ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"].startswith("the body is not valid JSON (at character 10")
    r = client.post("/rerank", content=b'{"query": "q", "texts": ["a"]}', headers={"content-type": "text/plain"})
    assert r.status_code == 422
    assert r.json()["error"] == "the body must be a JSON object sent with content-type: application/json (see /openapi.json)"


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        ("/v1/rerank", {"documents": [], "query": "q"}, "documents must hold at least 1 item"),
        ("/opensearch/text_similarity", {"text_docs": [], "query_text": "q"}, "text_docs must hold at least 1 item"),
        ("/v2/rerank", {"documents": ["a"], "query": "q", "return_documents": 0}, "return_documents: Input should be a valid boolean"),
        ("/rerank", {"texts": ["a"], "query": "q", "raw_scores": 1}, "raw_scores: Input should be a valid boolean"),
        ("/rerank", {"texts": ["a"], "query": "q", "truncate": "false"}, "truncate: Input should be a valid boolean"),
        ("/v1/rerank", {"documents": ["a"], "query": "q", "top_n": "2"}, "top_n: Input should be a valid integer"),
        ("/v1/rerank", {"documents": ["a"], "query": "q", "top_n": 1.5}, "top_n: Input should be a valid integer"),
        ("/v1/rerank", {"documents": ["a"], "query": "q", "top_n": True}, "top_n: Input should be a valid integer"),
        ("/rerank", {"texts": ["a"], "query": "q", "scores": ["1"]}, "scores.0: Input should be a valid number"),
    ],
)
def test_values_are_taken_only_with_their_schema_type(client: TestClient, path: str, body: dict, error: str) -> None:
    r = client.post(path, json=body)
    expected = {"message": error} if path.startswith("/v") else {"error": error, "error_type": "Validation"}
    assert r.status_code == 422 and r.json() == expected


def test_an_integral_float_is_an_integer_as_in_json_schema(client: TestClient) -> None:
    r = client.post("/v2/rerank", json={"query": QUERY, "documents": DOCS, "top_n": 2.0, "max_tokens_per_doc": 16.0})
    assert r.status_code == 200, r.text
    assert len(r.json()["results"]) == 2


@pytest.mark.parametrize("version", ["1", "2"])
def test_cohere_model_must_be_the_served_one_or_left_out(client: TestClient, version: str) -> None:
    for model in ("tiny-cross", None):
        r = client.post(f"/v{version}/rerank", json={"model": model, "query": QUERY, "documents": DOCS[:2]})
        assert r.status_code == 200 and r.json()["model"] == "tiny-cross", r.text
    r = client.post(f"/v{version}/rerank", json={"model": "rerank-v3.5", "query": QUERY, "documents": DOCS[:2]})
    assert r.status_code == 422
    assert r.json() == {
        "message": "model 'rerank-v3.5' is not served here; this service serves 'tiny-cross' (send that name or leave model out)",
    }


def test_a_body_that_is_not_text_is_400_naming_the_cause_and_documented(client: TestClient) -> None:
    r = client.post("/rerank", content=b'{"query": "\xff"}', headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == {
        "error": "the body could not be read as JSON text (UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 11: "
        "invalid start byte)",
        "error_type": "Validation",
    }
    documented = client.get("/openapi.json").json()["paths"]["/rerank"]["post"]["responses"]["400"]
    assert documented["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}


def test_truncate_false_rejects_pairs_over_max_length(client: TestClient, model: Reranker) -> None:
    long_doc = "中国经济" * 30  # 120 tokens > max_length 64
    r = client.post("/rerank", json={"query": "中国", "texts": ["短文", long_doc], "truncate": False})
    assert r.status_code == 413
    assert r.json()["error"] == (
        "texts[1] is more than 64 tokens together with the query; the limit is max_length=64 (--max-length / "
        "JINGPAI_SERVE_MAX_LENGTH); send truncate=true to cut it"
    )
    r = client.post("/rerank", json={"query": "中国", "texts": ["短文", long_doc], "raw_scores": True})
    assert r.status_code == 200
    scores = {rec["index"]: rec["score"] for rec in r.json()}
    assert scores[1] == pytest.approx(float(model.predict([("中国", long_doc)])[0]), abs=1e-5)  # truncated like the model


def test_text_measure_reads_a_prefix_of_long_texts_but_matches_the_whole_text(model: Reranker) -> None:
    measure = TextMeasure(model)
    zh = "影响中国GDP增长的因素有哪些，消费投资和出口。" * 200
    en = "the quick brown fox jumps over the lazy dog " * 300
    for text in (zh, en, "短文"):
        full = model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        ((spans, more),) = measure.spans([text], cap=100)
        assert spans == [tuple(sp) for sp in full[:100]] and more == (len(full) > 100)
    assert measure.lengths(["短文", zh], cap=100) == [2, 101]


def test_max_chunks_scores_the_best_chunk_of_a_long_document(model: Reranker) -> None:
    long_doc = "今天天气很好，我们去公园散步。" * 6 + "影响中国GDP增长的因素有哪些？消费投资和出口。" * 3
    measure = TextMeasure(model)
    assert measure.lengths([long_doc])[0] > 64
    truncated = float(model.predict([(QUERY, long_doc)])[0])
    app = create_app(fp32(long_docs="max-chunks", max_chunks_per_doc=6), model)
    (r,), metrics = run_concurrently(app, [("/rerank", {"query": QUERY, "texts": [long_doc], "raw_scores": True})])
    chunk_pairs = metric(metrics, "jingpai_rerank_pairs_total")
    assert 2 <= chunk_pairs <= 6
    q_len = measure.lengths([QUERY])[0]
    room = 64 - measure.pair_overhead - q_len
    (spans, _more), = measure.spans([long_doc], cap=10_000)
    chunks = measure.windows(long_doc, spans, size=room, stride=room - room // 8, limit=6)
    assert len(chunks) == chunk_pairs
    best = float(model.predict([(QUERY, c) for c in chunks]).max())
    score = r.json()[0]["score"]
    assert score == pytest.approx(best, abs=1e-5)
    assert score >= truncated - 1e-5  # the first chunk is exactly the truncated pair
    # Cohere v1 asks for chunking per request, even on a truncating service
    app = create_app(fp32(max_chunks_per_doc=6), model)
    (r,), metrics = run_concurrently(app, [("/v1/rerank", {"query": QUERY, "documents": [long_doc], "max_chunks_per_doc": 6})])
    assert r.json()["results"][0]["relevance_score"] == pytest.approx(sigmoid(np.array(best)), abs=1e-5)
    assert metric(metrics, "jingpai_rerank_pairs_total") == chunk_pairs


def test_app_puts_the_model_in_eval_mode_and_max_length_replaces_the_models(model_dir: Path) -> None:
    model = Reranker.load(model_dir, device="cpu")
    model.net.train()
    app = create_app(fp32(max_length=32), model)
    served = app.state.service.model  # the service's own copy (the caller's model stays as it was)
    assert served.config.max_length == 32 and app.state.service.max_length == 32
    assert not served.net.training  # served with dropout off
    with pytest.raises(ValueError, match="max_length=512 exceeds the model's max_position_embeddings=256"):
        create_app(fp32(max_length=512), model)


# ------------------------------------------------------------------------------------ settings


def test_settings_reject_bad_values_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"dtype='int4' is not valid; expected one of auto, bf16, fp16, fp32, int8"):
        ServiceSettings(dtype="int4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"long_docs='split' is not valid; expected one of truncate, max-chunks"):
        ServiceSettings(long_docs="split")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_docs must be >= 1, got 0"):
        ServiceSettings(max_docs=0)
    with pytest.raises(ValueError, match="batch_wait_ms must be >= 0, got -1"):
        ServiceSettings(batch_wait_ms=-1)


def test_dtype_resolution() -> None:
    cpu = torch.device("cpu")
    assert resolve_dtype("fp32", cpu) == "fp32" and resolve_dtype("bf16", cpu) == "bf16"
    from jingpai.reranker.service import cpu_has_native_bf16

    assert resolve_dtype("auto", cpu) == ("bf16" if cpu_has_native_bf16() else "fp32")
    assert resolve_dtype("int8", cpu) == "int8"
    with pytest.raises(ValueError, match=r"dtype='int8' \(dynamic int8 quantization\) runs on the CPU only, not on cuda"):
        resolve_dtype("int8", torch.device("cuda"))


def test_int8_quantizes_linear_layers_and_keeps_scores_close(model_dir: Path) -> None:
    own = Reranker.load(model_dir, device="cpu")
    fp32_scores = own.predict([(QUERY, d) for d in DOCS])
    app = create_app(ServiceSettings(dtype="int8"), own)
    with TestClient(app) as c:
        assert c.get("/info").json()["dtype"] == "int8"
        r = c.post("/rerank", json={"query": QUERY, "texts": DOCS, "raw_scores": True})
    assert r.status_code == 200
    served = app.state.service.model.net  # the service quantizes its own copy of the model
    quantized = [m for m in served.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    assert quantized and not any(type(m) is torch.nn.Linear for m in served.modules())
    got = {rec["index"]: rec["score"] for rec in r.json()}
    assert max(abs(got[i] - fp32_scores[i]) for i in range(len(DOCS))) < 0.05
    assert any(got[i] != fp32_scores[i] for i in range(len(DOCS)))  # it really ran another kernel


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_create_app_leaves_the_callers_model_unchanged(model_dir: Path, dtype: str) -> None:
    # the service casts, quantizes and re-configures its own copy; the caller's model is not touched
    own = Reranker.load(model_dir, device="cpu")
    own.net.train()
    net, config = own.net, own.config
    before = {name: (p.dtype, p.detach().clone()) for name, p in net.named_parameters()}
    app = create_app(ServiceSettings(dtype=dtype, max_length=32, warmup=False), own)  # type: ignore[arg-type]
    with TestClient(app) as c:
        assert c.post("/rerank", json={"query": QUERY, "texts": DOCS}).status_code == 200
    served = app.state.service.model
    assert served is not own and served.net is not net and served.config.max_length == 32
    assert own.net is net and own.config is config and own.config.max_length == 64
    assert net.training, "the caller's net keeps its mode"
    assert not any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in net.modules())
    after = dict(net.named_parameters())
    assert set(after) == set(before)
    for name, (dtype_before, value) in before.items():
        assert after[name].dtype == dtype_before == torch.float32 and torch.equal(after[name].detach(), value), name


def test_bf16_autocast_on_cpu_keeps_the_ranking_close(model: Reranker) -> None:
    app = create_app(ServiceSettings(dtype="bf16"), model)
    with TestClient(app) as c:
        assert c.get("/info").json()["dtype"] == "bf16"
        r = c.post("/rerank", json={"query": QUERY, "texts": DOCS, "raw_scores": True})
    assert r.status_code == 200
    got = {rec["index"]: rec["score"] for rec in r.json()}
    direct = model.predict([(QUERY, d) for d in DOCS])
    assert max(abs(got[i] - direct[i]) for i in range(len(DOCS))) < 0.05


def test_bf16_on_cpu_casts_the_service_copy_once_and_leaves_the_callers_weights(model: Reranker) -> None:
    from jingpai.reranker.service import RerankService, ServiceMetrics

    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    service = RerankService(model, ServiceSettings(dtype="bf16", warmup=False), ServiceMetrics())
    assert {p.dtype for p in service.model.net.parameters()} == {torch.bfloat16}
    assert service.engine.forward.cast_inputs
    assert all(torch.equal(v, before[k]) and v.dtype == torch.float32 for k, v in model.net.state_dict().items())


def test_bf16_cast_that_moves_the_probe_scores_falls_back_to_the_exact_fp32_weights(model: Reranker, caplog) -> None:
    import copy

    from jingpai.reranker.service.model_copy import cast_weights_if_faithful

    own = copy.deepcopy(model)
    before = {k: v.clone() for k, v in own.net.state_dict().items()}
    assert cast_weights_if_faithful(own, tolerance=-1.0) is False  # any drift is too much
    assert all(torch.equal(v, before[k]) for k, v in own.net.state_dict().items())
    assert "serving fp32 weights under bf16 autocast" in caplog.text
    assert cast_weights_if_faithful(own) is True


def test_cut_long_documents_tokenize_like_whole_ones_when_the_query_is_long(model: Reranker) -> None:
    # the service cuts a long document to about max_length tokens before the model tokenizes the pair;
    # with a query longer than that, longest-first truncation must still keep exactly the tokens it keeps
    # from the whole document (the odd token goes to the longer side)
    from jingpai.reranker.service import RerankService, ServiceMetrics

    service = RerankService(model, fp32(warmup=False), ServiceMetrics())
    query = ("影响中国经济增长的因素有哪些以及这些因素如何变化" * 4)[:70]  # 70 tokens > max_length 64
    docs = [("中国GDP增长的主要因素包括投资消费和出口" * 30)[:n] for n in (60, 64, 65, 66, 67, 68, 71, 72, 73, 400)]
    pairs, _, owner, _ = service._prepare(query, docs, truncate=True, chunks=1, doc_tokens=None, docs_field="texts")
    assert owner == list(range(len(docs))) and any(len(d) < len(docs[i]) for i, (_, d) in enumerate(pairs))
    cut = model.featurize(pairs)["input_ids"]
    whole = model.featurize([(query, d) for d in docs])["input_ids"]
    assert torch.equal(cut, whole)
    # the measured token ids, joined, are the same input (the model does not tokenize them again)
    _, _, _, encodings = service._prepare(query, docs, truncate=True, chunks=1, doc_tokens=None, docs_field="texts")
    assert encodings is not None and torch.equal(service.model.featurize_encodings(encodings)["input_ids"], whole)


# ------------------------------------------------------------------------------------ token ids computed once


def test_measured_token_ids_are_the_models_input_and_texts_are_not_tokenized_again(model: Reranker, monkeypatch) -> None:
    app = create_app(fp32(batch_wait_ms=200), model)
    service = app.state.service
    assert service.measure.joins
    with TestClient(create_app(fp32(), model)) as client:
        assert client.get("/info").json()["token_ids_once"] is True

    def tokenized_again(*_args, **_kw):
        raise AssertionError("the model tokenized a text the service had measured")

    # a spy on the service's own model copy: a plain request must reach it as token ids only
    monkeypatch.setattr(service.model, "featurize", tokenized_again)
    monkeypatch.setattr(service.model, "pair_encodings", tokenized_again)
    long_query = ("影响中国经济增长的因素有哪些以及这些因素如何变化" * 4)[:70]
    bodies = [{"query": QUERY, "texts": DOCS, "raw_scores": True},
              {"query": "中国", "texts": ["短文", "中国经济" * 40, ""], "raw_scores": True},  # a document cut to max_length
              {"query": long_query, "texts": ["中国GDP增长的主要因素包括投资消费和出口" * 8, "天气"], "raw_scores": True}]
    responses, metrics = run_concurrently(app, [("/rerank", b) for b in bodies])
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    monkeypatch.undo()
    for body, r in zip(bodies, responses, strict=True):
        direct = model.predict([(body["query"], t) for t in body["texts"]])
        assert {rec["index"]: rec["score"] for rec in r.json()} == pytest.approx(dict(enumerate(direct.tolist())), abs=1e-5)


def test_a_batch_of_measured_and_chunked_pairs_scores_each_as_alone(model: Reranker) -> None:
    # chunks are new texts (the model tokenizes them); merged with measured pairs they share one batch
    long_doc = "今天天气很好，我们去公园散步。" * 6 + "影响中国GDP增长的因素有哪些？消费投资和出口。" * 3
    requests = [("/v1/rerank", {"query": QUERY, "documents": [long_doc, DOCS[0]], "max_chunks_per_doc": 4}),
                ("/rerank", {"query": "花呗怎么还款", "texts": DOCS, "raw_scores": True})]
    app = create_app(fp32(batch_wait_ms=500, max_chunks_per_doc=4), model)
    responses, metrics = run_concurrently(app, requests)
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    assert metric(metrics, "jingpai_rerank_batch_requests_count") == 1, "the two requests were not merged"
    sequential = TestClient(create_app(fp32(max_chunks_per_doc=4), model))
    chunked, alone = responses[0].json()["results"], sequential.post(requests[0][0], json=requests[0][1]).json()["results"]
    assert {r["index"]: r["relevance_score"] for r in chunked} == pytest.approx({r["index"]: r["relevance_score"] for r in alone}, abs=1e-6)
    direct = model.predict([("花呗怎么还款", d) for d in DOCS])
    assert {rec["index"]: rec["score"] for rec in responses[1].json()} == pytest.approx(dict(enumerate(direct.tolist())), abs=1e-5)


def test_token_ids_that_would_differ_from_featurize_are_not_used(model: Reranker, caplog) -> None:
    import copy

    skewed = copy.deepcopy(model)
    joined = skewed.featurize_encodings
    skewed.featurize_encodings = lambda encodings: {k: v.flip(-1) for k, v in joined(encodings).items()}  # a wrong input
    with caplog.at_level("WARNING", logger="jingpai.reranker.service.measuring"):
        measure = TextMeasure(skewed)
    assert not measure.joins
    assert "joined token ids differ from its featurize() (input_ids" in caplog.text
    assert "pairs are tokenized again from text" in caplog.text
