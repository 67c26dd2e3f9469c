"""The options ``jingpai plugin pipeline`` (OpenSearch) and ``jingpai plugin retriever`` (Elasticsearch) share.

Both write, for one jingpai index, what makes an engine plugin do the gateway's work: the same reranker, mode,
dictionary, fusion, window, timeout, breaker, slots and answer-size options, read into one
:class:`~jingpai.plugin.settings.GatewaySettings` (the gateway's defaults where an option is not given), and the
names of the settings written only when given (:data:`WHEN_GIVEN`: the plugins' defaults are the gateway's).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from jingpai.commands.options import SHARED_ENGINE_ENV, engine_auth_options
from jingpai.plugin.settings import ENV_PREFIX

if TYPE_CHECKING:
    from jingpai.plugin.settings import GatewaySettings

FUSIONS = ("linear", "rrf", "replace")
#: settings written only when given (the plugins' defaults are the gateway's)
WHEN_GIVEN = ("breaker_failures", "breaker_reset_s", "rerank_concurrency", "max_answer_bytes")
#: what a plugin does: the gateway's modes but off (an index without the plugin's settings)
PIPELINE_MODES = ("rerank", "augment")
#: the numeric options, in the order they are read (None: the gateway's default)
_NUMERIC = ("fusion_weight", "window", "timeout_ms", "breaker_failures", "breaker_reset_s", "rerank_concurrency", "max_answer_bytes")

F = TypeVar("F", bound=Callable[..., Any])


def plugin_options(kind: Literal["OpenSearch", "Elasticsearch"], *, default_engine: str, window_help: str) -> Callable[[F], F]:
    """The shared options of a ``jingpai plugin`` command writing for ``kind``'s plugin (``--index`` … ``--max-answer-bytes``)."""
    options = [
        click.option("--index", required=True, help="A jingpai index or alias (built by `jingpai index`)."),
        click.option("--reranker", default=None, metavar="URL",
                     help=f"`jingpai serve` URL as the {kind} node reaches it (required unless --mode augment)."),
        click.option("--mode", type=click.Choice(PIPELINE_MODES), default="rerank", show_default=True,
                     help="rerank: augmentation and rerank; augment: augmentation alone."),
        click.option("--dict", "dict_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
                     help="The dictionary folder the index was built with; needed when the index has one."),
        # the same variables as the other `jingpai plugin` commands' --engine
        click.option("--engine", envvar=["JINGPAI_PLUGIN_ENGINE", SHARED_ENGINE_ENV, f"{ENV_PREFIX}ENGINE"], default=default_engine,
                     show_default=True, metavar="URL", help=f"{kind} URL (a node with the jingpai plugin)."),
        # who writes the pipeline / search template: --engine-user … --engine-ca-file (read back with options.engine_auth)
        engine_auth_options("plugin"),
        click.option("--fusion", type=click.Choice(FUSIONS), default="linear", show_default=True, help="Engine and model score fusion."),
        click.option("--fusion-weight", type=float, default=None, metavar="W", help="The engine's weight in [0, 1] (default: the gateway's, 0.5)."),
        click.option("--window", type=int, default=None, metavar="N", help=window_help),
        click.option("--timeout-ms", type=int, default=None, metavar="MS",
                     help="Reranker call timeout; past it the search fails open to the engine's order (default: the gateway's, 3000)."),
        click.option("--breaker-failures", type=int, default=None, metavar="N",
                     help="Consecutive reranker failures that open the circuit breaker (default: the gateway's 3)."),
        click.option("--breaker-reset-s", type=float, default=None, metavar="S",
                     help="Seconds an open breaker fails searches open before one probe request (default: the gateway's 10)."),
        click.option("--rerank-concurrency", type=int, default=None, metavar="N",
                     help="Reranker calls in flight at once on each node; a search that gets no slot within --timeout-ms fails open "
                          "(reranker_busy) (default: the gateway's 8)."),
        click.option("--max-answer-bytes", type=int, default=None, metavar="N",
                     help="The largest reranker answer read; a larger one fails open (reranker_bad_response) (default: the gateway's, 1048576)."),
    ]

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def plugin_settings(*, engine: str, reranker: str | None, mode: str, fusion: str, augment_hint: str,
                    **numeric: float | None) -> tuple[GatewaySettings, tuple[str, ...]]:
    """The gateway settings the options name, and which of :data:`WHEN_GIVEN` were given (to be written).

    Raises:
        click.UsageError: ``mode`` rerank without a reranker (``augment_hint`` says what to do instead).
    """
    from jingpai.plugin.settings import GatewaySettings

    if mode == "rerank" and reranker is None:
        raise click.UsageError(f"--reranker URL is required to rerank (or {augment_hint} with --mode augment)")
    given = {name: numeric[name] for name in _NUMERIC if numeric.get(name) is not None}
    settings = GatewaySettings(engine_url=engine, reranker_url=reranker, fusion=fusion, **given)  # type: ignore[arg-type]
    return settings, tuple(name for name in WHEN_GIVEN if name in given)


__all__ = ["FUSIONS", "PIPELINE_MODES", "WHEN_GIVEN", "plugin_options", "plugin_settings"]
