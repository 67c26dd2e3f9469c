"""The HTTP API's request and response models (pydantic), one set per client convention, plus
:class:`ErrorBody` (every error response) and :data:`SCORING_ERRORS` (the errors a scoring route documents).

Requests are strict: a value must already have its JSON schema type, and unknown fields are refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from jingpai.reranker.fusion import FUSION_MODES, FusionError, FusionMode, FusionSpec
from jingpai.reranker.service.errors import InvalidInputError


def _integral(value: Any) -> Any:
    # JSON Schema counts 3.0 as an integer (clients and schemathesis send such); strict int alone refuses it
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: a JSON integer ≥ 1: ``3`` or ``3.0``, never ``"3"``, ``true`` or ``3.5`` (the bound sits inside the
#: annotation: outside it, pydantic would write ``ge`` instead of ``minimum`` into the JSON schema)
PositiveJsonInt = Annotated[int, Field(ge=1), BeforeValidator(_integral)]


class _Strict(BaseModel):
    # strict: a value must already have its schema type (``0`` is no boolean, ``"3"`` no integer), so
    # whatever the OpenAPI schema calls invalid is refused rather than quietly coerced
    model_config = ConfigDict(extra="forbid", strict=True)


class TeiRerankRequest(_Strict):
    """Hugging Face text-embeddings-inference ``/rerank`` request."""

    query: str
    texts: list[str] = Field(min_length=1)
    truncate: bool | None = Field(None, description="false: reject pairs over max_length (413) instead of cutting them")
    raw_scores: bool = Field(False, description="true: the model's raw score instead of a [0, 1] relevance")
    return_text: bool = False
    scores: list[float] | None = Field(
        None, description="first-stage (engine) scores parallel to texts: score becomes the fusion of these with the model's"
    )
    fusion: FusionMode | None = Field(None, description=f"with scores: {' | '.join(FUSION_MODES)} (default {FusionSpec.mode})")
    fusion_weight: float | None = Field(
        None, ge=0.0, le=1.0, description=f"the first-stage scores' weight for linear/rrf (default {FusionSpec.weight})"
    )
    rrf_k: PositiveJsonInt | None = Field(None, description=f"RRF constant (default {FusionSpec.rrf_k})")

    def fusion_spec(self) -> FusionSpec | None:
        """The requested fusion (``None``: no ``scores``, plain reranking).

        Raises:
            InvalidInputError: fusion parameters without ``scores``, or ``scores`` not parallel to ``texts``.
        """
        asked = [name for name in ("fusion", "fusion_weight", "rrf_k") if getattr(self, name) is not None]
        if self.scores is None:
            if asked and self.fusion != "replace":
                raise InvalidInputError(f"{', '.join(asked)} need scores: the first-stage scores, one per text")
            return None
        if len(self.scores) != len(self.texts):
            raise InvalidInputError(f"scores holds {len(self.scores)} values for {len(self.texts)} texts; expected one per text")
        try:
            return FusionSpec().override(fusion=self.fusion, fusion_weight=self.fusion_weight, rrf_k=self.rrf_k)
        except FusionError as exc:
            raise InvalidInputError(str(exc)) from exc


class TeiRank(BaseModel):
    index: int
    score: float
    model_score: float | None = Field(None, description="the model's own score, when score is a fusion (request had scores)")
    text: str | None = None


class CohereDocument(_Strict):
    text: str


class CohereRerankRequest(_Strict):
    """Cohere / Jina rerank request.

    ``create_app`` narrows ``model`` to the served model's name: a request naming another model is
    refused (422) rather than silently answered by this one.
    """

    model: str | None = Field(None, description="the served model's name (see /info), or left out")
    query: str
    documents: list[str | CohereDocument] = Field(min_length=1)
    top_n: PositiveJsonInt | None = None
    return_documents: bool = False
    max_chunks_per_doc: PositiveJsonInt | None = Field(None, description="Cohere v1: score the best of up to N chunks of long documents")
    max_tokens_per_doc: PositiveJsonInt | None = Field(None, description="Cohere v2: cut each document to N tokens")


class CohereResult(BaseModel):
    index: int
    relevance_score: float
    document: CohereDocument | None = None


class ApiVersion(BaseModel):
    version: str


class CohereMeta(BaseModel):
    api_version: ApiVersion


class CohereRerankResponse(BaseModel):
    id: str
    model: str
    results: list[CohereResult]
    meta: CohereMeta


class TextSimilarityRequest(_Strict):
    """OpenSearch ML Commons ``text_similarity`` input."""

    query_text: str
    text_docs: list[str] = Field(min_length=1)


class ModelTensor(BaseModel):
    name: Literal["similarity"] = "similarity"
    data_type: Literal["FLOAT32"] = "FLOAT32"
    shape: list[int] = Field(default_factory=lambda: [1])
    data: list[float]


class ModelTensorOutput(BaseModel):
    output: list[ModelTensor]


class TextSimilarityResponse(BaseModel):
    inference_results: list[ModelTensorOutput]


class ErrorBody(BaseModel):
    """Every error response: a message naming the bad value or the limit (and where it is set), and its kind."""

    error: str
    error_type: str = Field(
        description="validation | bad_request | payload_too_large | overloaded | unavailable | backend | internal | http"
    )


#: the errors a scoring route can answer (``responses=`` of the routes; 422 replaces FastAPI's own schema,
#: whose ``{"detail": [...]}`` shape this service never sends)
SCORING_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "the body is not text (not UTF-8/16/32)"},
    413: {
        "model": ErrorBody,
        "description": "body over max_body_bytes, more documents than max_docs, or truncate=false and a pair over max_length",
    },
    422: {
        "model": ErrorBody,
        "description": "invalid JSON; an unknown or missing field; a value of the wrong type or range; an empty document list; "
        "a query over max_query_chars; another model's name; input the model cannot read",
    },
    500: {"model": ErrorBody, "description": "the model's forward pass failed for this request"},
    503: {"model": ErrorBody, "description": "waited longer than queue_timeout_ms (with Retry-After), or the service is shutting down"},
}


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Limits(BaseModel):
    max_docs: int
    max_body_bytes: int
    max_query_chars: int
    max_length: int
    max_batch_tokens: int
    queue_timeout_ms: int


class Info(BaseModel):
    model_name: str
    architecture: str
    model_dir: str | None = Field(None, description="where the model was loaded from; only with the expose_model_dir setting on")
    dictionary_version: str | None = None
    jingpai_version: str
    device: str
    dtype: str
    attention: str | None = None
    score: str
    long_docs: str
    max_chunks_per_doc: int
    token_counts: Literal["exact", "estimated"]
    limits: Limits


__all__ = [
    "ApiVersion",
    "CohereDocument",
    "CohereMeta",
    "CohereRerankRequest",
    "CohereRerankResponse",
    "CohereResult",
    "ErrorBody",
    "Health",
    "Info",
    "Limits",
    "ModelTensor",
    "ModelTensorOutput",
    "PositiveJsonInt",
    "SCORING_ERRORS",
    "TeiRank",
    "TeiRerankRequest",
    "TextSimilarityRequest",
    "TextSimilarityResponse",
]
