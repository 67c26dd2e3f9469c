"""The HTTP API's request and response models (pydantic), one set per client convention, plus
:class:`ErrorBody` (TEI's error body), :class:`CohereErrorBody` and :func:`scoring_errors` (the errors a
scoring route documents).

Requests are strict: a value must already have its JSON schema type, and unknown fields are refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from jingpai.reranker.fusion import FUSION_MODES, FusionError, FusionMode, FusionSpec
from jingpai.reranker.service.errors import ErrorDialect, ErrorType, InvalidInputError


def _integral(value: Any) -> Any:
    # JSON Schema counts 3.0 as an integer (clients and schemathesis send such); strict int alone refuses it
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: a JSON integer ≥ 1: ``3`` or ``3.0``, never ``"3"``, ``true`` or ``3.5`` (the bound sits inside the
#: annotation: outside it, pydantic would write ``ge`` instead of ``minimum`` into the JSON schema)
PositiveJsonInt = Annotated[int, Field(ge=1), BeforeValidator(_integral)]


def bounded_json_int(le: int) -> Any:
    """:data:`PositiveJsonInt` at most ``le`` (a bound known only when the app is built, such as the served
    model's embedding dimensions); both bounds sit inside the annotation, so the schema says ``maximum``."""
    return Annotated[int, Field(ge=1, le=le), BeforeValidator(_integral)]


class StrictRequest(BaseModel):
    """Base of every request model: strict types, unknown fields refused."""

    # strict: a value must already have its schema type (``0`` is no boolean, ``"3"`` no integer), so
    # whatever the OpenAPI schema calls invalid is refused rather than quietly coerced
    model_config = ConfigDict(extra="forbid", strict=True)


#: TEI's ``TruncationDirection`` (``Left``/``Right``), and the lowercase spelling some TEI clients send
TruncationDirection = Literal["Right", "Left", "right", "left"]


class GivenKeywords(StrictRequest):
    """Keywords of the texts already known to the caller (``jingpai index --rerank-keywords`` stores them; the gateway
    sends them with the hits): a keyword model takes them instead of segmenting each text again, only when they were
    ranked with its own dictionary version. Other models ignore them."""

    dictionary_version: str = Field(description="version of the keyword dictionary that ranked them (see /info's dictionary_version)")
    top_k: PositiveJsonInt = Field(description="how many keywords were kept per text: a list of exactly top_k may be cut")
    words: list[list[str] | None] = Field(description="per text, parallel to texts: its keywords best first (null: unknown)")


class TeiRerankRequest(StrictRequest):
    """Hugging Face text-embeddings-inference ``/rerank`` request."""

    query: str
    texts: list[str] = Field(min_length=1)
    truncate: bool | None = Field(None, description="false: reject pairs over max_length (413) instead of cutting them")
    truncation_direction: TruncationDirection = Field(
        "Right",
        description="which end of a document over max_length is cut: Right keeps its start, Left its end (the query, "
        "when it must be cut too, always keeps its start); lowercase accepted",
    )
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
    keywords: GivenKeywords | None = Field(None, description="the texts' dictionary keywords, where known (keyword models)")

    def given_words(self) -> GivenKeywords | None:
        """:attr:`keywords`, checked to hold one entry per text.

        Raises:
            InvalidInputError: ``keywords.words`` is not parallel to ``texts``.
        """
        if self.keywords is not None and len(self.keywords.words) != len(self.texts):
            raise InvalidInputError(
                f"keywords.words holds {len(self.keywords.words)} entries for {len(self.texts)} texts; expected one per text (null: unknown)"
            )
        return self.keywords

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


class CohereDocument(BaseModel):
    """A structured Cohere v1 document: string fields; ``text`` is ranked unless ``rank_fields`` names others."""

    # any string field is kept (Cohere returns the whole document); the annotation types the extra fields
    model_config = ConfigDict(extra="allow", strict=True)
    __pydantic_extra__: dict[str, str] = Field(init=False)

    text: str | None = None


class CohereRerankRequest(StrictRequest):
    """Cohere / Jina rerank request.

    ``create_app`` narrows ``model`` to the served model's name: a request naming another model is
    refused (422) rather than silently answered by this one.
    """

    model: str | None = Field(None, description="the served model's name (see /info), or left out")
    query: str
    documents: list[str | CohereDocument] = Field(
        min_length=1, description="strings, or objects of string fields (Cohere v1) that carry text or the rank_fields"
    )
    top_n: PositiveJsonInt | None = None
    return_documents: bool = False
    rank_fields: list[str] | None = Field(
        None, min_length=1,
        description='Cohere v1: the fields of object documents to rank on, as "field: value" lines in this order (default: text)',
    )
    max_chunks_per_doc: PositiveJsonInt | None = Field(None, description="Cohere v1: score the best of up to N chunks of long documents")
    max_tokens_per_doc: PositiveJsonInt | None = Field(None, description="Cohere v2: cut each document to N tokens")

    def texts(self) -> list[str]:
        """The text ranked for each document: a string as is, an object's ``text`` or its ``rank_fields``.

        Raises:
            InvalidInputError: an object document lacks ``text`` (no ``rank_fields``) or a field ``rank_fields`` names.
        """
        out = []
        for i, doc in enumerate(self.documents):
            if isinstance(doc, str):
                out.append(doc)
                continue
            fields = {**({"text": doc.text} if doc.text is not None else {}), **(doc.model_extra or {})}
            if self.rank_fields is None:
                if doc.text is None:
                    raise InvalidInputError(
                        f"documents[{i}] has no text field (fields: {', '.join(sorted(fields)) or 'none'}); "
                        "send its text in text, or name the fields to rank with rank_fields"
                    )
                out.append(doc.text)
                continue
            missing = [name for name in self.rank_fields if name not in fields]
            if missing:
                raise InvalidInputError(
                    f"documents[{i}] has no field {', '.join(map(repr, missing))} named in rank_fields "
                    f"(its fields: {', '.join(sorted(fields)) or 'none'})"
                )
            out.append("\n".join(f"{name}: {fields[name]}" for name in self.rank_fields))
        return out

    def returned(self, i: int) -> dict[str, str]:
        """Document ``i`` as ``return_documents`` answers it: an object as sent, a string as ``{"text": ...}``."""
        doc = self.documents[i]
        return {"text": doc} if isinstance(doc, str) else doc.model_dump(exclude_none=True)


class CohereResult(BaseModel):
    index: int
    relevance_score: float
    document: dict[str, str] | None = Field(None, description="with return_documents: the document as sent ({text} for a string)")


class ApiVersion(BaseModel):
    version: str


class BilledUnits(BaseModel):
    search_units: int = Field(
        description="Cohere's rule: one unit per 100 documents, a document counting once per started 500 tokens "
        "(query included)"
    )


class CohereMeta(BaseModel):
    api_version: ApiVersion
    billed_units: BilledUnits


class CohereRerankResponse(BaseModel):
    id: str
    model: str
    results: list[CohereResult]
    meta: CohereMeta


class TextSimilarityRequest(StrictRequest):
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
    """An error response (TEI's ``ErrorResponse``): a message naming the bad value or the limit (and where it
    is set), and its kind."""

    error: str
    error_type: ErrorType = Field(
        description="TEI's ErrorType: Validation (413, 422, 400), Tokenizer (422), Overloaded (429), Backend (424 on "
        "/rerank, 500 elsewhere), Unhealthy (503); and Http (404/405), Internal (500, a bug)"
    )


class CohereErrorBody(BaseModel):
    """An error response of the Cohere routes (Cohere's shape): the message naming the bad value or the limit."""

    message: str


def scoring_errors(dialect: ErrorDialect) -> dict[int | str, dict[str, Any]]:
    """The errors a scoring route of ``dialect`` can answer (``responses=`` of the routes; 422 replaces
    FastAPI's own schema, whose ``{"detail": [...]}`` shape this service never sends)."""
    body = CohereErrorBody if dialect == "cohere" else ErrorBody
    failed = 424 if dialect == "tei" else 500
    return {
        400: {"model": body, "description": "the body is not text (not UTF-8/16/32)"},
        413: {
            "model": body,
            "description": "body over max_body_bytes, more documents than max_docs, or truncate=false and a pair over max_length",
        },
        422: {
            "model": body,
            "description": "invalid JSON; an unknown or missing field; a value of the wrong type or range; an empty document list; "
            "a query over max_query_chars; another model's name; a document without its text or rank_fields; input the "
            "tokenizer cannot read",
        },
        429: {"model": body, "description": "overloaded: waited longer than queue_timeout_ms for the model (with Retry-After)"},
        failed: {"model": body, "description": "the model's forward pass failed for this request"},
        **({500: {"model": body, "description": "internal error (a bug)"}} if failed != 500 else {}),
        503: {"model": body, "description": "the service is shutting down"},
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
    model_id: str = Field(description="TEI's name of the served model (the same as model_name)")
    model_name: str
    architecture: str
    model_dir: str | None = Field(None, description="where the model was loaded from; only with the expose_model_dir setting on")
    dictionary_version: str | None = None
    jingpai_version: str
    device: str
    dtype: str
    compiled: bool = Field(False, description="the forward pass runs compiled (torch.compile; the compile setting, when it succeeded)")
    token_ids_once: bool = Field(
        False, description="the model reads the token ids the service measured each text with, instead of tokenizing each pair again")
    attention: str | None = None
    score: str
    long_docs: str
    max_chunks_per_doc: int
    token_counts: Literal["exact", "estimated"]
    max_input_length: int = Field(description="TEI: tokens per (query, document) pair (limits.max_length)")
    max_client_batch_size: int = Field(description="TEI: texts per request (limits.max_docs)")
    embedding_dim: int | None = Field(
        None, description="dimensions of the vectors /embed and /v1/embeddings answer; null: the model cannot embed (a cross-encoder)"
    )
    vector_model: str | None = Field(
        None, description="the loaded model's identity, <folder>@<12 hex of its config and weights>, as `jingpai index --vectors` records it "
                          "with an index; the gateway embeds a query only for an index whose vectors come from the same files; null: not "
                          "loaded from a folder")
    auto_truncate: bool = Field(True, description="TEI: pairs over max_input_length are cut unless the request sends truncate=false")
    limits: Limits


__all__ = [
    "ApiVersion",
    "BilledUnits",
    "CohereDocument",
    "CohereErrorBody",
    "CohereMeta",
    "CohereRerankRequest",
    "CohereRerankResponse",
    "CohereResult",
    "GivenKeywords",
    "ErrorBody",
    "Health",
    "Info",
    "Limits",
    "ModelTensor",
    "ModelTensorOutput",
    "PositiveJsonInt",
    "StrictRequest",
    "TeiRank",
    "TeiRerankRequest",
    "TextSimilarityRequest",
    "TextSimilarityResponse",
    "TruncationDirection",
    "bounded_json_int",
    "scoring_errors",
]
