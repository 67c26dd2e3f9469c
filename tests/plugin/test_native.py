"""Native integrations: shipped blueprints have the documented shapes, their request templates work
against the real service, and the installers explain what the integ-test engines lack."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner

from jingpai.engine.client import Engine
from jingpai.plugin import native
from jingpai.commands.plugin import plugin_group

DOCS = ["中国GDP增长放缓", "明天北京晴", "银行股票下跌"]
QUERY = "中国\"GDP\""  # a quote, to check the template's escaping


def test_opensearch_blueprints_have_the_documented_shapes() -> None:
    settings = native.NativeSettings(service_url="http://10.0.0.5:8081/", document_fields=("title", "content"))
    connector = native.opensearch_connector(settings)
    assert {"name", "description", "version", "protocol", "parameters", "actions"} <= set(connector)
    assert connector["protocol"] == "http" and connector["parameters"]["endpoint"] == "http://10.0.0.5:8081"
    (action,) = connector["actions"]
    assert (action["action_type"], action["method"], action["url"]) == ("predict", "POST", "${parameters.endpoint}/v1/rerank")
    assert action["pre_process_function"] == "connector.pre_process.cohere.rerank"
    assert action["post_process_function"] == "connector.post_process.cohere.rerank"
    model = native.opensearch_model(settings, "conn-1")
    assert model == {"name": "jingpai-rerank", "function_name": "remote", "description": model["description"], "connector_id": "conn-1"}
    pipeline = native.opensearch_pipeline(settings, "model-1")
    (processor,) = pipeline["response_processors"]
    assert processor == {"rerank": {"ml_opensearch": {"model_id": "model-1"}, "context": {"document_fields": ["title", "content"]}}}
    search = native.opensearch_search("中国GDP", field="content")
    assert search["ext"] == {"rerank_context": {"query_text": "中国GDP"}}


def test_opensearch_connector_request_works_against_the_service(reranker_url: str) -> None:
    action = native.opensearch_connector(native.NativeSettings(service_url=reranker_url))["actions"][0]
    # what ML Commons does: substitute parameters (the cohere pre-process gives query, documents, top_n)
    body = (
        action["request_body"]
        .replace("${parameters.query}", json.dumps(QUERY, ensure_ascii=False)[1:-1])
        .replace("${parameters.documents}", json.dumps(DOCS, ensure_ascii=False))
        .replace("${parameters.top_n}", str(len(DOCS)))
    )
    url = action["url"].replace("${parameters.endpoint}", reranker_url)
    resp = httpx.post(url, content=body.encode(), headers=action["headers"], timeout=60)
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    # the cohere post-process reads $.results and orders scores by index, one per input document
    assert sorted(r["index"] for r in results) == [0, 1, 2]
    assert all(isinstance(r["relevance_score"], float) for r in results)


def test_elasticsearch_inference_endpoint_works_against_the_service(reranker_url: str) -> None:
    endpoint = native.elasticsearch_inference_endpoint(native.NativeSettings(service_url=reranker_url))
    assert endpoint["service"] == "custom"
    svc = endpoint["service_settings"]
    assert svc["url"] == f"{reranker_url}/v1/rerank"
    assert svc["response"]["json_parser"] == {"reranked_index": "$.results[*].index", "relevance_score": "$.results[*].relevance_score"}
    # ES replaces ${query} / ${input} with JSON values (templates are not quoted)
    body = svc["request"].replace("${query}", json.dumps(QUERY, ensure_ascii=False)).replace("${input}", json.dumps(DOCS, ensure_ascii=False))
    resp = httpx.post(svc["url"], content=body.encode(), headers=svc["headers"], timeout=60)
    assert resp.status_code == 200, resp.text
    assert len([r["index"] for r in resp.json()["results"]]) == len([r["relevance_score"] for r in resp.json()["results"]]) == 3
    retriever = native.elasticsearch_retriever("中国GDP", field="content", inference_id="jingpai-rerank", window=30)
    assert retriever["retriever"]["text_similarity_reranker"]["rank_window_size"] == 30


@pytest.mark.engine
def test_installers_name_what_the_engine_lacks(engine: Engine) -> None:
    settings = native.NativeSettings(service_url="http://127.0.0.1:8081")
    if engine.kind == "opensearch":
        with pytest.raises(native.NativeIntegrationError, match="lacks the plugin\\(s\\) opensearch-ml, opensearch-neural-search"):
            native.install_opensearch_pipeline(engine, settings)
        with pytest.raises(native.NativeIntegrationError, match="the rerank inference endpoint needs Elasticsearch"):
            native.install_elasticsearch_inference(engine, settings)
    else:
        with pytest.raises(native.NativeIntegrationError, match="lacks the module\\(s\\) x-pack-inference"):
            native.install_elasticsearch_inference(engine, settings)
        with pytest.raises(native.NativeIntegrationError, match="the ML Commons rerank pipeline needs OpenSearch"):
            native.install_opensearch_pipeline(engine, settings)
    command = "opensearch-pipeline" if engine.kind == "opensearch" else "es-inference"
    result = CliRunner().invoke(plugin_group, [command, "--engine", engine.url, "--service", "http://127.0.0.1:8081"])
    assert result.exit_code == 1 and "lacks the" in result.output
    printed = CliRunner().invoke(plugin_group, [command, "--engine", engine.url, "--service", "http://s:1", "--print-only"])
    assert printed.exit_code == 0 and "http://s:1" in printed.output
