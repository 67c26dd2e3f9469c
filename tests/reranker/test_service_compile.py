"""``compile``: the service's forward pass compiled once (torch.compile) for every batch shape.

A real tiny cross-encoder behind the real app, compiled for real (inductor on the CPU): the compiled
service must score as the eager one does, for a one-pair request, unpadded and padded batches and merged
requests of other lengths, without compiling a second graph after start-up.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import httpx
import pytest
import torch

from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.service import ServiceMetrics, ServiceSettings, create_app
from jingpai.reranker.service.compiling import compile_scores
from jingpai.reranker.service.forward import ForwardPass

QUERY = "哪些因素会影响中国的GDP"
DOCS = ["影响中国GDP增长的因素有哪些", "今天天气怎么样", "花呗怎么还款", "who is the author of the iron lady",
        "中国经济增长的主要动力是消费投资和出口，其中消费的贡献最大"]
#: requests of other sizes and lengths than the start-up probe: one pair, no padding (two equal
#: documents), padding, and a long document cut at max_length
REQUESTS = [
    {"query": QUERY, "texts": DOCS[:1]},
    {"query": "花呗", "texts": ["花呗还款", "花呗还款"]},
    {"query": QUERY, "texts": DOCS},
    {"query": "经济", "texts": ["中国经济增长的主要动力" * 12, "天气", *DOCS]},
]


@pytest.fixture(scope="module")
def model(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Reranker:
    torch.manual_seed(0)
    saved = registry.create("cross", base=str(tiny_bert_dir), max_length=48, device="cpu").save(tmp_path_factory.mktemp("compiled") / "m")
    return Reranker.load(saved, device="cpu")


def scores_of(app, requests: list[dict]) -> list[list[float]]:
    """Each request's raw scores in input order, the requests sent concurrently (so they merge into batches)."""

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await asyncio.gather(*(c.post("/rerank", json={**r, "raw_scores": True}) for r in requests))

    out = []
    for r in asyncio.run(go()):
        assert r.status_code == 200, r.text
        out.append([rec["score"] for rec in sorted(r.json(), key=lambda rec: rec["index"])])
    return out


def info(app) -> dict:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get("/info")

    return asyncio.run(go()).json()


@pytest.fixture(scope="module")
def compiled_app(model: Reranker):
    # compiled when the app is created, as `jingpai serve --compile` does before it listens
    return create_app(ServiceSettings(model_name="c", dtype="fp32", compile=True), model)


def test_compiled_service_scores_every_shape_as_the_eager_one_with_one_graph(model: Reranker, compiled_app) -> None:
    from torch._dynamo.utils import counters

    eager = create_app(ServiceSettings(model_name="e", dtype="fp32"), model)
    assert info(compiled_app)["compiled"] is True
    graphs = counters["stats"]["unique_graphs"]
    got = scores_of(compiled_app, REQUESTS)
    got += [s for one in REQUESTS for s in scores_of(compiled_app, [one])]  # each alone: other batch shapes
    assert counters["stats"]["unique_graphs"] == graphs, "a request shape compiled a new graph after start-up"
    want = scores_of(eager, REQUESTS)
    want += [s for one in REQUESTS for s in scores_of(eager, [one])]
    assert [len(s) for s in got] == [len(s) for s in want] == [1, 2, 5, 7] * 2
    for g, w in zip(got, want, strict=True):
        assert max(abs(a - b) for a, b in zip(g, w, strict=True)) < 1e-4, (g, w)
    assert info(eager)["compiled"] is False


def test_compile_that_moves_the_probe_scores_stays_eager_and_logs_why(model: Reranker, caplog) -> None:
    own = copy.deepcopy(model)
    own.net.eval()  # as the service's copy is: dropout would move the eager scores
    forward = ForwardPass(own, ServiceMetrics(), dtype="fp32")
    assert compile_scores(own, forward._eager_scores, tolerance=-1.0) is None  # any drift is too much
    assert "compiled probe scores move by" in caplog.text and "serving the eager forward pass" in caplog.text


def test_a_forward_pass_that_fails_the_probe_is_not_compiled_and_says_why(model: Reranker, caplog) -> None:
    def scores(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise RuntimeError("this forward pass cannot run")

    assert compile_scores(copy.deepcopy(model), scores) is None
    assert "could not be compiled (RuntimeError: this forward pass cannot run); serving the eager forward pass" in caplog.text


def test_a_batch_the_graph_does_not_fit_is_served_eager_and_nothing_compiles_while_serving(model: Reranker, caplog) -> None:
    from torch._dynamo.utils import counters

    own = copy.deepcopy(model)
    own.net.eval()  # as the service's copy is: dropout would move the eager scores
    forward = ForwardPass(own, ServiceMetrics(), dtype="fp32")

    def branching(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        # a Python branch on the batch size: the graph compiled for the probe batches (3 and 2 pairs) is
        # guarded on it, so a larger batch would need a graph of its own
        if batch["input_ids"].shape[0] > 8:
            return forward._eager_scores(batch) + 0.0
        return forward._eager_scores(batch)

    compiled = compile_scores(own, branching)
    assert compiled is not None
    graphs = counters["stats"]["unique_graphs"]
    with torch.inference_mode():
        batch = own.featurize([(QUERY, d) for d in DOCS * 2])  # 10 pairs: the other branch
        got = compiled(batch)
        want = forward._eager_scores(batch)
    assert counters["stats"]["unique_graphs"] == graphs, "a new graph was compiled while serving"
    assert compiled.eager_batches == 1
    assert torch.allclose(got, want, atol=1e-6)
    assert "does not fit the compiled graph; served eager (no compiling while serving)" in caplog.text
