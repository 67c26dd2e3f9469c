"""Native engine integrations: rerank with ``jingpai serve`` from inside the engine, no gateway.

- **OpenSearch ≥ 2.12** (ML Commons + neural-search plugins): an ML Commons *remote connector* to the
  service's Cohere-compatible ``/v1/rerank``, a remote model registered on it, and a search pipeline
  whose ``rerank`` response processor (``ml_opensearch`` type) calls that model. Queries then pass the
  query text in ``ext.rerank_context.query_text`` and ``?search_pipeline=jingpai-rerank``.
- **Elasticsearch ≥ 8.19** (x-pack inference plugin): a ``custom`` ``rerank`` inference endpoint
  pointing at ``/v1/rerank``, used by the ``text_similarity_reranker`` retriever (Enterprise licence).

The JSON bodies are shipped as templates in ``jingpai/plugin/blueprints/`` and rendered here. The
integ-test engine distributions jingpai's tests run on lack these plugins; the installers detect that
and raise :class:`NativeIntegrationError` naming what is missing (see ``docs/gateway.md``).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from jingpai.errors import UnavailableError

if TYPE_CHECKING:
    from jingpai.engine.client import Engine

logger = logging.getLogger(__name__)

OPENSEARCH_PLUGINS: tuple[str, ...] = ("opensearch-ml", "opensearch-neural-search")
ELASTICSEARCH_MODULES: tuple[str, ...] = ("x-pack-inference",)


class NativeIntegrationError(UnavailableError, RuntimeError):
    """The engine cannot host the native integration (wrong engine, missing plugin, failed API call)."""


@dataclass(frozen=True)
class NativeSettings:
    """Options of the native integrations.

    Args:
        service_url: base URL of ``jingpai serve`` as the *engine* reaches it.
        name: connector / model / pipeline / inference endpoint name.
        document_fields: document fields the engine sends to the reranker.
        deploy_timeout_s: how long to wait for the OpenSearch remote model to deploy.
    """

    service_url: str
    name: str = "jingpai-rerank"
    document_fields: tuple[str, ...] = ("title", "content")
    deploy_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.service_url.startswith(("http://", "https://")):
            raise ValueError(f"service_url must be an http(s) URL, got {self.service_url!r}")
        if not self.document_fields:
            raise ValueError("document_fields must name at least one field")
        object.__setattr__(self, "service_url", self.service_url.rstrip("/"))


def _template(name: str, **values: Any) -> dict:
    """Load ``blueprints/<name>.json`` and replace ``"{{key}}"`` placeholders (JSON values, not text)."""
    text = resources.files("jingpai.plugin").joinpath("blueprints", f"{name}.json").read_text(encoding="utf-8")
    data = json.loads(text)

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: fill(v) for k, v in node.items()}
        if isinstance(node, list):
            return [fill(v) for v in node]
        if isinstance(node, str):
            for key, value in values.items():
                token = "{{" + key + "}}"
                if node == token:
                    return value
                if token in node:
                    node = node.replace(token, str(value))
        return node

    return fill(data)


# ---------------------------------------------------------------------------------------------- OpenSearch


def opensearch_connector(settings: NativeSettings) -> dict:
    """Body of ``POST /_plugins/_ml/connectors/_create`` for ``jingpai serve``."""
    body = _template("opensearch_connector", service_url=settings.service_url)
    body["name"] = settings.name
    return body


def opensearch_model(settings: NativeSettings, connector_id: str) -> dict:
    """Body of ``POST /_plugins/_ml/models/_register?deploy=true`` for the connector."""
    body = _template("opensearch_model", connector_id=connector_id)
    body["name"] = settings.name
    return body


def opensearch_pipeline(settings: NativeSettings, model_id: str) -> dict:
    """Body of ``PUT /_search/pipeline/<name>`` with a ``rerank`` (``ml_opensearch``) response processor."""
    return _template("opensearch_pipeline", model_id=model_id, document_fields=list(settings.document_fields))


def opensearch_search(query_text: str, *, field: str, size: int = 10) -> dict:
    """An example search body for the pipeline: a match query plus ``ext.rerank_context.query_text``."""
    return {"size": size, "query": {"match": {field: query_text}}, "ext": {"rerank_context": {"query_text": query_text}}}


def install_opensearch_pipeline(engine: Engine, settings: NativeSettings) -> dict[str, str]:
    """Create connector, remote model (deployed) and search pipeline on an OpenSearch cluster.

    Returns:
        ``{"connector_id", "model_id", "pipeline"}``.

    Raises:
        NativeIntegrationError: the engine is not OpenSearch, lacks ML Commons / neural-search, or an
            API call failed (the engine's message is included). Remote connectors to non-HTTPS or
            private hosts also need ``plugins.ml_commons.trusted_connector_endpoints_regex`` to match
            the service URL.
    """
    if engine.kind != "opensearch":
        raise NativeIntegrationError(f"the ML Commons rerank pipeline needs OpenSearch; {engine.url} is {engine.kind} {engine.version}")
    missing = [p for p in OPENSEARCH_PLUGINS if p not in engine.modules()]
    if missing:
        raise NativeIntegrationError(
            f"OpenSearch {engine.version} at {engine.url} lacks the plugin(s) {', '.join(missing)} needed for a rerank "
            "search pipeline (the integ-test/min distribution ships without them; use the full OpenSearch distribution "
            "or `bin/opensearch-plugin install` them)"
        )
    try:
        connector = engine.request("POST", "/_plugins/_ml/connectors/_create", opensearch_connector(settings))
        model = engine.request("POST", "/_plugins/_ml/models/_register?deploy=true", opensearch_model(settings, connector["connector_id"]))
        model_id = model.get("model_id") or _wait_task(engine, model["task_id"], settings.deploy_timeout_s)
        engine.request("PUT", f"/_search/pipeline/{settings.name}", opensearch_pipeline(settings, model_id))
    except NativeIntegrationError:
        raise
    except Exception as exc:
        raise NativeIntegrationError(f"creating the rerank pipeline on {engine.url} failed: {exc}") from exc
    logger.info("created connector %s, model %s and search pipeline %s", connector["connector_id"], model_id, settings.name)
    return {"connector_id": connector["connector_id"], "model_id": model_id, "pipeline": settings.name}


def _wait_task(engine: Engine, task_id: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        task = engine.request("GET", f"/_plugins/_ml/tasks/{task_id}")
        if task.get("model_id") and task.get("state") in ("COMPLETED", "DEPLOYED", None):
            return str(task["model_id"])
        if task.get("state") in ("FAILED", "COMPLETED_WITH_ERROR"):
            raise NativeIntegrationError(f"ML Commons task {task_id} failed: {task.get('error')}")
        time.sleep(1.0)
    raise NativeIntegrationError(f"ML Commons task {task_id} did not finish within {timeout_s:.0f} s")


# ---------------------------------------------------------------------------------------------- Elasticsearch


def elasticsearch_inference_endpoint(settings: NativeSettings) -> dict:
    """Body of ``PUT /_inference/rerank/<name>``: a ``custom`` service calling ``/v1/rerank``."""
    return _template("elasticsearch_inference", service_url=settings.service_url)


def elasticsearch_retriever(query_text: str, *, field: str, inference_id: str, window: int = 50, size: int = 10) -> dict:
    """A search body with the ``text_similarity_reranker`` retriever (Enterprise licence) over a match query."""
    return {
        "size": size,
        "retriever": {
            "text_similarity_reranker": {
                "retriever": {"standard": {"query": {"match": {field: query_text}}}},
                "field": field,
                "inference_id": inference_id,
                "inference_text": query_text,
                "rank_window_size": window,
            }
        },
    }


def install_elasticsearch_inference(engine: Engine, settings: NativeSettings) -> dict[str, str]:
    """Create the ``custom`` rerank inference endpoint on an Elasticsearch ≥ 8.19 cluster.

    Returns:
        ``{"inference_id", "task_type"}``.

    Raises:
        NativeIntegrationError: the engine is not Elasticsearch, lacks the inference plugin, or the API
            call failed (the engine's message is included).
    """
    if engine.kind != "elasticsearch":
        raise NativeIntegrationError(f"the rerank inference endpoint needs Elasticsearch; {engine.url} is {engine.kind} {engine.version}")
    missing = [m for m in ELASTICSEARCH_MODULES if m not in engine.modules()]
    if missing:
        raise NativeIntegrationError(
            f"Elasticsearch {engine.version} at {engine.url} lacks the module(s) {', '.join(missing)} that serve the "
            "_inference API (the integ-test distribution ships without them; use the default distribution)"
        )
    try:
        engine.request("PUT", f"/_inference/rerank/{settings.name}", elasticsearch_inference_endpoint(settings))
    except Exception as exc:
        raise NativeIntegrationError(f"creating the inference endpoint on {engine.url} failed: {exc}") from exc
    return {"inference_id": settings.name, "task_type": "rerank"}


__all__ = [
    "ELASTICSEARCH_MODULES",
    "OPENSEARCH_PLUGINS",
    "NativeIntegrationError",
    "NativeSettings",
    "elasticsearch_inference_endpoint",
    "elasticsearch_retriever",
    "install_elasticsearch_inference",
    "install_opensearch_pipeline",
    "opensearch_connector",
    "opensearch_model",
    "opensearch_pipeline",
    "opensearch_search",
]
