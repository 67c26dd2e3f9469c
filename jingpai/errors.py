"""The one exception hierarchy of jingpai.

Every error jingpai raises on purpose derives from :class:`JingpaiError`, so a caller (a CLI, the
gateway, a user's script) can catch jingpai's failures in one ``except`` and let real bugs through.
The two branches say whose move it is:

- :class:`UserError`: the input, a setting or a file is wrong. The message names the bad value and
  what would be valid; retrying the same call fails the same way.
- :class:`UnavailableError`: something jingpai needs (the engine, the reranker, a port) cannot be
  reached or refused the work; the same call may succeed later.

Component errors keep their historical built-in base as a second parent (``DictionaryError`` is still
a ``ValueError``), so code written against those keeps working.

>>> class BadThing(UserError, ValueError): ...
>>> isinstance(BadThing("x"), JingpaiError), isinstance(BadThing("x"), ValueError)
(True, True)
"""

from __future__ import annotations


class JingpaiError(Exception):
    """Base of every error jingpai raises on purpose (the message is meant for a person)."""


class UserError(JingpaiError):
    """Bad input, setting or file: the message names the value and what was expected."""


class UnavailableError(JingpaiError):
    """A service jingpai depends on (engine, reranker, port, device) is unreachable or refused the work."""


__all__ = ["JingpaiError", "UnavailableError", "UserError"]
