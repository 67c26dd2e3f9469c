"""The click classes every ``jingpai`` command uses: jingpai's errors are caught here, once.

A :class:`~jingpai.errors.JingpaiError` escaping a command becomes click's one-line ``Error: …`` and
exit status 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any

import click

from jingpai.errors import JingpaiError


def _invoke_catching(invoke: Any, ctx: click.Context) -> Any:
    try:
        return invoke(ctx)
    except JingpaiError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:
        # an engine's 401/403 or an untrusted certificate met after connecting (a search the user may not run): one
        # line naming the fix, like every other refusal; the official clients' errors carry their status
        module = type(exc).__module__.split(".")[0]
        if module in ("opensearchpy", "elasticsearch", "elastic_transport", "urllib3", "httpx"):
            from jingpai.commands.options import engine_auth
            from jingpai.engine.client import access_error

            try:
                auth = engine_auth()
            except JingpaiError:
                auth = None
            problem = access_error(exc, url=ctx.params.get("engine_url") or "the engine", auth=auth)
            if problem is not None:
                raise click.ClickException(str(problem)) from exc
        raise


class JingpaiCommand(click.Command):
    """A click command whose :class:`JingpaiError` exits 1 with its message."""

    def invoke(self, ctx: click.Context) -> Any:
        return _invoke_catching(super().invoke, ctx)


class JingpaiGroup(click.Group):
    """A click group whose sub-commands (and sub-groups) are :class:`JingpaiCommand` / :class:`JingpaiGroup`."""

    command_class = JingpaiCommand
    group_class = type  # sub-groups are of this same class

    def invoke(self, ctx: click.Context) -> Any:
        return _invoke_catching(super().invoke, ctx)


__all__ = ["JingpaiCommand", "JingpaiGroup"]
