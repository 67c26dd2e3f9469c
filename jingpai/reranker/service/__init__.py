"""The rerank HTTP service behind ``jingpai serve``: one model, several client conventions.

Routes (see ``docs/service.md``):

* ``POST /rerank`` — Hugging Face TEI: ``{query, texts, truncate?, truncation_direction?, raw_scores?,
  return_text?}`` → ``[{index, score, text?}]`` best first; errors as TEI's ``{error, error_type}``
  (429 ``Overloaded``, 424 ``Backend``). Callers with first-stage scores add ``scores`` (parallel to
  ``texts``) and optionally ``fusion``, ``fusion_weight``, ``rrf_k`` (:mod:`jingpai.reranker.fusion`):
  ``score`` is then the fused score and ``model_score`` the model's.
* ``POST /v1/rerank``, ``POST /v2/rerank`` — Cohere / Jina: ``{model?, query, documents, top_n?,
  return_documents?, rank_fields?}`` (``model``: the served name, or left out) → ``{results: [{index,
  relevance_score, document?}], meta: {api_version, billed_units: {search_units}}, …}`` best first; errors
  as Cohere's ``{message}``.
* ``POST /opensearch/text_similarity`` — OpenSearch ML connector: ``{query_text, text_docs}`` →
  ``{inference_results: [{output: [{name: "similarity", data_type: "FLOAT32", shape: [1], data: [s]}]}]}``
  in input order.
* ``POST /embed`` — TEI: ``{inputs, normalize?, truncate?, truncation_direction?, dimensions?}`` →
  ``[[float, ...]]`` in input order; ``POST /v1/embeddings`` — OpenAI: ``{input, model?, encoding_format?,
  dimensions?}`` → ``{object: "list", data: [{object: "embedding", index, embedding}], model, usage}``,
  errors as OpenAI's ``{error: {message, type, param, code}}``. Only a model that embeds (an
  :class:`EmbeddingModel`, such as ``use-bi``) serves them; a cross-encoder answers 400.
* ``GET /health``, ``GET /info``, ``GET /metrics`` (Prometheus), ``GET /openapi.json``, ``GET /docs``.

Every scoring and embedding route feeds one :class:`BatchingEngine`: the (query, document) pairs (or
texts to embed) of concurrent requests are merged, sorted by length and cut into batches whose padded size stays within
``max_batch_tokens``; each batch runs on one worker thread under ``torch.inference_mode()`` and, when
the dtype is not fp32, ``torch.autocast``. A batch that raises is re-run request by request so only the
request that caused the error fails. The service runs its own copy of the model: the caller's stays as
it was.

Example:
    >>> from jingpai.reranker.base import Reranker
    >>> app = create_app(ServiceSettings(max_docs=100), Reranker.load("models/cross"))  # doctest: +SKIP
    >>> uvicorn.run(app, host="127.0.0.1", port=8081)                                   # doctest: +SKIP

Modules (one concept each):

* :mod:`~jingpai.reranker.service.settings` — :class:`ServiceSettings`, device and dtype resolution.
* :mod:`~jingpai.reranker.service.errors` — the service's errors and the HTTP status of each;
  :mod:`~jingpai.reranker.service.http_errors` — the one exception → HTTP response handler.
* :mod:`~jingpai.reranker.service.model_copy` — the service's own copy of the model (cast, quantized).
* :mod:`~jingpai.reranker.service.measuring` — :class:`TextMeasure`, token counts and cuts.
* :mod:`~jingpai.reranker.service.forward` — one batch through the model.
* :mod:`~jingpai.reranker.service.batching` — :class:`BatchingEngine`, merging concurrent requests.
* :mod:`~jingpai.reranker.service.scoring` — :class:`RerankService`, limits, truncation and chunking.
* :mod:`~jingpai.reranker.service.embedding` — :class:`TextEmbedder` and :class:`EmbeddingModel`, the
  embedding side of the service.
* :mod:`~jingpai.reranker.service.metrics` — :class:`ServiceMetrics` (Prometheus).
* :mod:`~jingpai.reranker.service.schemas`, :mod:`~jingpai.reranker.service.embed_schemas` — the API's
  request/response models.
* :mod:`~jingpai.reranker.service.rerank_routes`, :mod:`~jingpai.reranker.service.embed_routes`,
  :mod:`~jingpai.reranker.service.service_routes`,
  :mod:`~jingpai.reranker.service.middleware` and :mod:`~jingpai.reranker.service.app` — the HTTP app.
"""

from __future__ import annotations

from jingpai.lazy import lazy_exports

#: public name → the module that defines it. Imported on first use (PEP 562), so that
#: ``jingpai.reranker.service.settings`` alone (what ``jingpai serve --help`` needs) loads neither
#: torch nor FastAPI.
_EXPORTS = {
    "CannotEmbedError": "errors",
    "InvalidInputError": "errors",
    "PayloadTooLargeError": "errors",
    "QueueTimeoutError": "errors",
    "ScoringError": "errors",
    "ServiceClosedError": "errors",
    "ServiceError": "errors",
    "ServiceSettingsError": "errors",
    "TokenizerError": "errors",
    "error_response": "http_errors",
    "DType": "settings",
    "Device": "settings",
    "LongDocs": "settings",
    "ServiceSettings": "settings",
    "cpu_has_native_bf16": "settings",
    "resolve_device": "settings",
    "resolve_dtype": "settings",
    "TextMeasure": "measuring",
    "ServiceMetrics": "metrics",
    "quantize_int8": "model_copy",
    "serving_model": "model_copy",
    "BatchingEngine": "batching",
    "RerankService": "scoring",
    "EmbeddingModel": "embedding",
    "TextEmbedder": "embedding",
    "ErrorBody": "schemas",
    "create_app": "app",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


__all__ = sorted(_EXPORTS)
