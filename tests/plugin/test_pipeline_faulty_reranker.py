"""Issue 53 inside the engine: the jingpai OpenSearch plugin's ``jingpai_rerank`` pipeline against the stand-in
reranker (``bench/standin_reranker.py``, the cases of ``tests/vectors/rerank_answers.json``) on a real node.

Before, the plugin held a search 114 s on a body trickled one byte every 0.2 s (``timeout_ms`` 3000) — a node's
search thread and its client held with it — and took a 40 MB answer. Every case now answers 200 in the engine's
order (of the augmented query) with the case's reason, within the deadline (a generous margin: the trickle alone
would take ~150 s). The node, the index and the pipeline are the ones of :mod:`tests.plugin.test_pipeline_node`.
"""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from bench.standin_reranker import StandIn, load_cases
from jingpai.cli import cli
from jingpai.engine.client import Engine
from tests.plugin.conftest import ids
from tests.plugin.test_pipeline_node import index, node  # noqa: F401  (the plugin node and its index, fixtures)

TIMEOUT_MS = 1000
BODY = {"query": {"match": {"content": "中国经济"}}, "size": 10}
CASES = ["infinity", "nan", "negative_indices", "duplicate_index", "index_out_of_range", "too_few_items", "string_scores", "html",
         "http_500_html", "trickle_one_byte_per_200ms", "padded_40mb", "padded_40mb_chunked", "gzip_not_asked_for", "nested_5000_deep"]


@pytest.fixture(scope="module")
def standin() -> StandIn:
    with StandIn() as server:
        yield server


@pytest.fixture(scope="module")
def pipeline(node: Engine, index: str, standin: StandIn, dictionary) -> str:  # noqa: F811
    """The index's default pipeline, reranking with the stand-in; a breaker that never opens (every case is seen)."""
    _, dict_dir = dictionary
    name = f"{index}-faulty"
    result = CliRunner().invoke(cli, ["plugin", "pipeline", "--index", index, "--reranker", standin.url, "--dict", str(dict_dir),
                                      "--engine", node.url, "--timeout-ms", str(TIMEOUT_MS), "--breaker-failures", "1000", "--name", name])
    assert result.exit_code == 0, result.output
    return name


@pytest.mark.parametrize("case", CASES)
def test_a_faulty_reranker_fails_open_inside_the_engine(node: Engine, index: str, pipeline: str, standin: StandIn, case: str) -> None:  # noqa: F811
    standin.use(case)
    engine_order = node.search(index, {**BODY, "ext": {"jingpai": {"mode": "augment"}}})
    started = time.monotonic()
    resp = node.search(index, BODY)
    took = time.monotonic() - started
    info = resp["ext"]["jingpai"]
    assert (info["reranked"], info["reason"]) == (False, load_cases()[case]["expected"]["reason"]), info
    assert ids(resp) == ids(engine_order) and ids(resp)
    assert took < TIMEOUT_MS / 1000 + 3.0, f"{case} held the search {took:.1f} s"
    assert any(path == "/rerank" for path, _ in standin.requests), "the stand-in was asked"


def test_the_stand_in_serves_a_valid_ranking_through_the_same_pipeline(node: Engine, index: str, pipeline: str, standin: StandIn) -> None:  # noqa: F811
    """The control: the stand-in's valid answer for 20 texts is taken (the window holds 20 hits of this query)."""
    standin.use("valid_best_first")
    info = node.search(index, BODY)["ext"]["jingpai"]
    assert info["reranked"] is True and info["window"] == 20, info


def test_max_answer_bytes_is_the_pipelines_bound(node: Engine, index: str, standin: StandIn, dictionary) -> None:  # noqa: F811
    """`jingpai plugin pipeline --max-answer-bytes 256` writes the bound; the stand-in's valid answer (~700 bytes) is then
    too large, and the search fails open naming it; the default pipeline's bound is left to the processor."""
    _, dict_dir = dictionary
    base = ["plugin", "pipeline", "--index", index, "--reranker", standin.url, "--dict", str(dict_dir), "--engine", node.url]
    printed = CliRunner().invoke(cli, [*base, "--print-only"])
    assert printed.exit_code == 0 and "max_answer_bytes" not in printed.output, printed.output
    result = CliRunner().invoke(cli, [*base, "--max-answer-bytes", "256", "--name", f"{index}-small"])
    assert result.exit_code == 0, result.output
    rerank = node.request("GET", f"/_search/pipeline/{index}-small")[f"{index}-small"]["response_processors"][0]["jingpai_rerank"]
    assert rerank["max_answer_bytes"] == 256
    standin.use("valid_best_first")
    info = node.search(index, BODY)["ext"]["jingpai"]
    assert (info["reranked"], info["reason"]) == (False, "reranker_bad_response"), info
