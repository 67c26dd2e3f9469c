"""The rerank service's errors and the one table of the HTTP status each answers (:data:`HTTP_STATUS`).

Every response of a failed request is ``{"error": message, "error_type": kind}`` (:class:`ErrorBody
<jingpai.reranker.service.schemas.ErrorBody>`); :func:`jingpai.reranker.service.http_errors.error_response`
builds it from :data:`HTTP_STATUS` (and covers FastAPI's validation and routing errors and bugs).

The errors sit in :mod:`jingpai.errors`' two branches: the client's input is wrong
(:class:`PayloadTooLargeError`, :class:`InvalidInputError`: :class:`~jingpai.errors.UserError`) or the
service cannot take the work now (:class:`QueueTimeoutError`, :class:`ServiceClosedError`:
:class:`~jingpai.errors.UnavailableError`).

>>> http_status(QueueTimeoutError("busy", retry_after_s=3))
(503, 'overloaded')
>>> isinstance(InvalidInputError("x"), UserError), InvalidInputError("x").status_code
(True, 422)
"""

from __future__ import annotations

from jingpai.errors import JingpaiError, UnavailableError, UserError

class ServiceSettingsError(UserError, ValueError):
    """A service setting that is invalid, or that this machine or model cannot honour."""


class ServiceError(JingpaiError):
    """An error the service reports to the client, with the status :data:`HTTP_STATUS` gives its class."""

    @property
    def status_code(self) -> int:
        """The HTTP status this error answers (from :data:`HTTP_STATUS`)."""
        return http_status(self)[0]

    @property
    def error_type(self) -> str:
        """The ``error_type`` of the response body (from :data:`HTTP_STATUS`)."""
        return http_status(self)[1]


class PayloadTooLargeError(ServiceError, UserError):
    """Body, document count or a pair over a configured limit."""


class InvalidInputError(ServiceError, UserError):
    """A request the model cannot score (query too long, no documents, input the model rejects)."""


class QueueTimeoutError(ServiceError, UnavailableError):
    """The request waited longer than ``queue_timeout_ms`` for its first batch."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ServiceClosedError(ServiceError, UnavailableError):
    """The batching engine was shut down."""


class ScoringError(ServiceError):
    """The model's forward pass failed for this request."""


#: the one place service errors meet HTTP: class → (status, ``error_type``); an error answers as the
#: first class of its MRO listed here
HTTP_STATUS: dict[type[ServiceError], tuple[int, str]] = {
    PayloadTooLargeError: (413, "payload_too_large"),
    InvalidInputError: (422, "validation"),
    QueueTimeoutError: (503, "overloaded"),
    ServiceClosedError: (503, "unavailable"),
    ScoringError: (500, "backend"),
    ServiceError: (500, "internal"),
}


def http_status(exc: ServiceError) -> tuple[int, str]:
    """``(status, error_type)`` of ``exc`` per :data:`HTTP_STATUS`."""
    return next(HTTP_STATUS[cls] for cls in type(exc).__mro__ if cls in HTTP_STATUS)


__all__ = [
    "HTTP_STATUS",
    "InvalidInputError",
    "PayloadTooLargeError",
    "QueueTimeoutError",
    "ScoringError",
    "ServiceClosedError",
    "ServiceError",
    "ServiceSettingsError",
    "http_status",
]
