"""The rerank service's errors and the one table of the HTTP status each answers (:data:`HTTP_STATUS`).

A failed request answers in its route's dialect (:func:`jingpai.reranker.service.http_errors.error_response`):
TEI's ``{"error": message, "error_type": kind}`` (:class:`ErrorBody
<jingpai.reranker.service.schemas.ErrorBody>`, ``kind`` one of TEI's ``ErrorType`` names) everywhere but on
the Cohere routes, which answer Cohere's ``{"message": message}`` with the same status, and OpenAI's
``/v1/embeddings``, which answers OpenAI's ``{"error": {"message", "type", "param", "code"}}`` and 400
where the others answer 422 (OpenAI's status for a request it cannot take).

The errors sit in :mod:`jingpai.errors`' two branches: the client's input is wrong
(:class:`PayloadTooLargeError`, :class:`InvalidInputError`, :class:`TokenizerError`, and
:class:`CannotEmbedError` for an embedding request to a model that cannot embed:
:class:`~jingpai.errors.UserError`) or the service cannot take the work now (:class:`QueueTimeoutError`,
:class:`ServiceClosedError`: :class:`~jingpai.errors.UnavailableError`).

>>> http_status(QueueTimeoutError("busy", retry_after_s=3))
(429, 'Overloaded')
>>> http_status(ScoringError("nan")), http_status(ScoringError("nan"), dialect="tei")
((500, 'Backend'), (424, 'Backend'))
>>> isinstance(InvalidInputError("x"), UserError), InvalidInputError("x").status_code
(True, 422)
>>> http_status(InvalidInputError("x", param="input"), dialect="openai")
(400, 'Validation')
"""

from __future__ import annotations

from typing import Literal

from jingpai.errors import JingpaiError, UnavailableError, UserError

#: the ``error_type`` values: TEI's ``ErrorType`` names (Validation 413/422, Tokenizer 422, Overloaded 429,
#: Backend 424 on ``/rerank``, Unhealthy 503), plus ``Http`` (unknown route or method) and ``Internal`` (a bug)
ErrorType = Literal["Validation", "Tokenizer", "Overloaded", "Backend", "Unhealthy", "Http", "Internal"]

#: how a route answers errors: ``tei`` (``/rerank``, ``/embed``: a failed forward pass is TEI's 424),
#: ``cohere`` (``{"message"}``), ``openai`` (``/v1/embeddings``: ``{"error": {...}}``, invalid requests
#: 400), ``service`` (every other route: TEI's body, the plain HTTP statuses)
ErrorDialect = Literal["tei", "cohere", "openai", "service"]


class ServiceSettingsError(UserError, ValueError):
    """A service setting that is invalid, or that this machine or model cannot honour."""


class ServiceError(JingpaiError):
    """An error the service reports to the client, with the status :data:`HTTP_STATUS` gives its class.

    Args:
        message: what is wrong, naming the bad value or the limit (and where it is set).
        param: the request field at fault, where there is one (OpenAI's ``error.param``).
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

    @property
    def status_code(self) -> int:
        """The HTTP status this error answers outside ``/rerank`` (from :data:`HTTP_STATUS`)."""
        return http_status(self)[0]

    @property
    def error_type(self) -> ErrorType:
        """The ``error_type`` of the TEI-shaped response body (from :data:`HTTP_STATUS`)."""
        return http_status(self)[1]


class PayloadTooLargeError(ServiceError, UserError):
    """Body, document count or a pair over a configured limit."""


class InvalidInputError(ServiceError, UserError):
    """A request the model cannot score (query too long, no documents, a document missing a rank field)."""


class TokenizerError(InvalidInputError):
    """The model could not featurize (tokenize) this request's input."""


class CannotEmbedError(ServiceError, UserError):
    """An embedding request (``/embed``, ``/v1/embeddings``) to a service whose model cannot embed (a
    cross-encoder scores pairs; it has no vector of one text)."""


class QueueTimeoutError(ServiceError, UnavailableError):
    """The request waited longer than ``queue_timeout_ms`` for its first batch: the model is overloaded."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ServiceClosedError(ServiceError, UnavailableError):
    """The batching engine was shut down."""


class ScoringError(ServiceError):
    """The model's forward pass failed for this request."""


#: the one place service errors meet HTTP: class → (status, ``error_type``); an error answers as the
#: first class of its MRO listed here
HTTP_STATUS: dict[type[ServiceError], tuple[int, ErrorType]] = {
    PayloadTooLargeError: (413, "Validation"),
    # 400, not 422: the request is well formed, this deployment's model cannot answer it (and no client
    # retries a 4xx, as OpenAI's does a 5xx)
    CannotEmbedError: (400, "Validation"),
    TokenizerError: (422, "Tokenizer"),
    InvalidInputError: (422, "Validation"),
    QueueTimeoutError: (429, "Overloaded"),
    ServiceClosedError: (503, "Unhealthy"),
    ScoringError: (500, "Backend"),
    ServiceError: (500, "Internal"),
}

#: where a dialect answers another status than :data:`HTTP_STATUS`: TEI's ``/rerank`` and ``/embed`` answer
#: a failed inference 424 (Failed Dependency), Cohere and OpenSearch clients know 500 for it; OpenAI
#: answers an invalid request 400 where TEI answers 422
DIALECT_STATUS: dict[tuple[ErrorDialect, type[ServiceError]], int] = {
    ("tei", ScoringError): 424,
    ("openai", InvalidInputError): 400,
    ("openai", TokenizerError): 400,
}


def http_status(exc: ServiceError, *, dialect: ErrorDialect = "service") -> tuple[int, ErrorType]:
    """``(status, error_type)`` of ``exc`` per :data:`HTTP_STATUS` (and :data:`DIALECT_STATUS` for ``dialect``)."""
    cls = next(cls for cls in type(exc).__mro__ if cls in HTTP_STATUS)
    status, kind = HTTP_STATUS[cls]
    return DIALECT_STATUS.get((dialect, cls), status), kind


__all__ = [
    "DIALECT_STATUS",
    "HTTP_STATUS",
    "CannotEmbedError",
    "ErrorDialect",
    "ErrorType",
    "InvalidInputError",
    "PayloadTooLargeError",
    "QueueTimeoutError",
    "ScoringError",
    "ServiceClosedError",
    "ServiceError",
    "ServiceSettingsError",
    "TokenizerError",
    "http_status",
]
