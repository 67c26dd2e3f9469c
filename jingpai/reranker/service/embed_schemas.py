"""The embedding routes' request and response models (pydantic): TEI's ``/embed``, OpenAI's
``/v1/embeddings`` with OpenAI's error body (:class:`OpenAIErrorBody`), and :func:`embedding_errors`
(the errors each route documents).

Requests are strict, as the reranking routes' (:mod:`~jingpai.reranker.service.schemas`): a value must
already have its JSON schema type and unknown fields are refused. Both APIs also take token ids in
place of text; this service embeds text only, and says so (a 422/400 naming the field) instead of
answering a type error.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field

from jingpai.reranker.service.schemas import ErrorBody, PositiveJsonInt, StrictRequest, TruncationDirection


def _texts(field: str) -> BeforeValidator:
    """Refuse, with a message naming ``field``, what the union's type errors would only hint at: an empty
    list, and token ids (a list of integers, or of integer lists)."""

    def check(value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError(f"{field} must hold at least one text")
            if any(isinstance(v, list) or (isinstance(v, int) and not isinstance(v, bool)) for v in value):
                raise ValueError(f"{field} holds token ids; this service embeds text: send a string or a list of strings")
        return value

    return BeforeValidator(check)


def _no_prompt(value: Any) -> Any:
    if value is not None:
        raise ValueError(f"prompt_name {value!r} is not available: jingpai's models have no prompts; leave prompt_name out")
    return value


class TeiEmbedRequest(StrictRequest):
    """Hugging Face text-embeddings-inference ``/embed`` request."""

    inputs: Annotated[str | Annotated[list[str], Field(min_length=1)], _texts("inputs")] = Field(
        description="a text, or a list of texts (at most max_docs); token ids are not accepted"
    )
    normalize: bool = Field(True, description="scale each vector to unit length")
    truncate: bool | None = Field(
        None, description="false: refuse a text over max_length tokens (413) instead of cutting it (default: cut, as /info's auto_truncate)"
    )
    truncation_direction: TruncationDirection = Field(
        "Right", description="which end of a text over max_length is cut: Right keeps its start, Left its end; lowercase accepted"
    )
    prompt_name: Annotated[None, BeforeValidator(_no_prompt)] = Field(
        None, description="TEI's sentence-transformers prompt name: jingpai's models have none, so only null"
    )
    dimensions: PositiveJsonInt | None = Field(None, description="keep each vector's first N components (then normalized, with normalize)")

    def texts(self) -> list[str]:
        """``inputs`` as a list."""
        return [self.inputs] if isinstance(self.inputs, str) else list(self.inputs)


class OpenAIEmbeddingRequest(StrictRequest):
    """OpenAI ``/v1/embeddings`` request.

    ``create_app`` narrows ``model`` to the served model's name and ``dimensions`` to the model's: a
    request naming another model is refused (400) rather than answered by this one.
    """

    input: Annotated[str | Annotated[list[str], Field(min_length=1)], _texts("input")] = Field(
        description="a text, or a list of texts (at most max_docs); token ids are not accepted"
    )
    model: str | None = Field(None, description="the served model's name (see /info), or left out")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: lists of numbers; base64: each vector's little-endian float32 bytes, base64-encoded"
    )
    dimensions: PositiveJsonInt | None = Field(None, description="keep each vector's first N components, then normalize")
    user: str | None = Field(None, description="OpenAI's end-user id: accepted, not used")

    def texts(self) -> list[str]:
        """``input`` as a list."""
        return [self.input] if isinstance(self.input, str) else list(self.input)


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="the vector: numbers, or a base64 string with encoding_format=base64")


class OpenAIUsage(BaseModel):
    prompt_tokens: int = Field(description="tokens embedded (in the served model's tokens, after any cut)")
    total_tokens: int


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIEmbedding]
    model: str
    usage: OpenAIUsage


class OpenAIError(BaseModel):
    message: str = Field(description="what is wrong, naming the bad value or the limit (and where it is set)")
    type: str = Field(description="invalid_request_error (4xx), rate_limit_error (429, overloaded) or server_error (5xx)")
    param: str | None = Field(None, description="the request field at fault, where there is one")
    code: str | None = Field(
        None, description="the service's kind of error, lowercase: validation, tokenizer, overloaded, backend, unhealthy, http, internal"
    )


class OpenAIErrorBody(BaseModel):
    """An error response of ``/v1/embeddings`` (OpenAI's shape)."""

    error: OpenAIError


def embedding_errors(dialect: Literal["tei", "openai"]) -> dict[int | str, dict[str, Any]]:
    """The errors an embedding route documents (``responses=``): TEI's statuses on ``/embed``, OpenAI's
    (400 for every invalid request) on ``/v1/embeddings``."""
    body: type[BaseModel] = ErrorBody if dialect == "tei" else OpenAIErrorBody
    invalid = (
        "invalid JSON; an unknown or missing field; a value of the wrong type or range; an empty input list; token ids; "
        "another model's name"
    )
    refused = "the body is not text (not UTF-8/16/32), or the served model cannot embed (a cross-encoder)"
    responses: dict[int | str, dict[str, Any]] = {
        400: {"model": body, "description": refused if dialect == "tei" else f"{refused}; {invalid}"},
        413: {"model": body, "description": "body over max_body_bytes, more texts than max_docs, or truncate=false and a text over max_length"},
        429: {"model": body, "description": "overloaded: waited longer than queue_timeout_ms for the model (with Retry-After)"},
        500: {"model": body, "description": "internal error (a bug)" + ("" if dialect == "tei" else ", or the forward pass failed")},
        503: {"model": body, "description": "the service is shutting down"},
    }
    if dialect == "tei":
        responses[422] = {"model": body, "description": f"{invalid}; input the tokenizer cannot read"}
        responses[424] = {"model": body, "description": "the model's forward pass failed for this request"}
    else:
        # a documented 4XX also keeps FastAPI from adding its own 422 ({"detail": [...]}), never sent here
        responses["4XX"] = {"model": body, "description": "any other client error (an unknown route or method), in OpenAI's shape"}
    return responses


__all__ = [
    "OpenAIEmbedding",
    "OpenAIEmbeddingRequest",
    "OpenAIEmbeddingResponse",
    "OpenAIError",
    "OpenAIErrorBody",
    "OpenAIUsage",
    "TeiEmbedRequest",
    "embedding_errors",
]
