"""The gateway's own errors: what it answers itself, in the engine's error shape, and what it leaves to the engine.

:class:`GatewayError` carries the HTTP status and the ``error.type`` of the answer
(:func:`jingpai.plugin.gateway.app.handle_exception` turns it into the body). :class:`NotOursToJudge` is the
opposite: a part of a search the gateway cannot interpret, so the client's request goes to the engine unchanged.
"""

from __future__ import annotations

from jingpai.errors import JingpaiError, UserError


class GatewayError(JingpaiError):
    """An error the gateway itself answers, in the engine's error shape (``status``, ``error_type``)."""

    status = 500
    error_type = "jingpai_gateway_exception"


class BadGatewayRequest(UserError, GatewayError):
    """The gateway's own input is invalid (``?jingpai=``, ``ext.jingpai``, fusion parameters, gzip body): 400."""

    status = 400
    error_type = "jingpai_illegal_argument_exception"


class NestedTooDeep(BadGatewayRequest):
    """A request body, or one line of an NDJSON body, nests deeper than ``max_body_depth``: 400, and the
    engine never sees it (deep enough, it overflows the engine's stack and kills the node)."""

    error_type = "jingpai_nested_too_deep_exception"


class NotOursToJudge(Exception):
    """Part of a search the gateway cannot interpret (a ``_source`` of the wrong type, a non-numeric ``size``,
    an ``_msearch`` header whose ``index`` is not a name): the client's request goes to the engine unchanged
    and the engine answers it, with its own status and error.

    A signal inside the gateway, never raised to a caller, so it is no :class:`~jingpai.errors.JingpaiError`.
    """


__all__ = ["BadGatewayRequest", "GatewayError", "NestedTooDeep", "NotOursToJudge"]
