"""``jingpai serve --model DIR``: serve a saved reranker over HTTP (see ``docs/service.md``).

The options are :class:`~jingpai.reranker.service.settings.ServiceSettings`' fields (defaults and types
come from there, see :mod:`jingpai.commands.options`), plus ``--host``, ``--port`` and ``--log-level``. Every option can also be set through the environment variable named in its help
(``JINGPAI_SERVE_*``), which is how the container image is configured.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from jingpai.commands.base import JingpaiCommand
from jingpai.commands.options import MODEL_DIR, Opt, env_name, settings_from, settings_options
from jingpai.reranker.service.settings import ServiceSettings

logger = logging.getLogger(__name__)

COMPONENT = "serve"

#: how ServiceSettings' fields look on the command line, in --help order
SPEC: dict[str, Opt] = {
    "model_dir": Opt(flag="--model", required=True, show_envvar=True, type=MODEL_DIR,
                     help="Model directory: a saved jingpai model (`jingpai train` / Reranker.save), or a Hugging Face / sentence-transformers cross-encoder directory as it is (docs/models.md)."),
    "model_name": Opt(show_envvar=True, help="Name reported by /info and Cohere/Jina responses (default: the directory name)."),
    "device": Opt(show_envvar=True, help="auto: CUDA when available."),
    "dtype": Opt(show_envvar=True,
                 help="Compute dtype. auto: GPU bf16 (fp16 without bf16); CPU bf16 with AMX/AVX512-BF16, else fp32. "
                      "int8 (CPU only): linear layers quantized to int8, ~2x fp32 speed, scores within ~1e-2."),
    "max_batch_tokens": Opt(show_envvar=True, type=click.IntRange(min=1), help="Padded tokens per forward pass (default: 4096 on a CPU, where batches that stay in cache run fastest; 16384 on a GPU)."),
    "max_length": Opt(show_envvar=True, type=click.IntRange(min=8), help="Tokens per (query, document) pair (default: the model's own)."),
    "max_docs": Opt(show_envvar=True, type=click.IntRange(min=1), help="Documents per request (more → 413)."),
    "max_body_bytes": Opt(show_envvar=True, type=click.IntRange(min=1), help="Request body size (more → 413)."),
    "max_query_chars": Opt(show_envvar=True, type=click.IntRange(min=1), help="Query length in characters (more → 422)."),
    "queue_timeout_ms": Opt(show_envvar=True, type=click.IntRange(min=1), help="Longest wait for a batch (more → 503 + Retry-After)."),
    "batch_wait_ms": Opt(show_envvar=True, type=click.FloatRange(min=0),
                         help="Wait this long after a request arrives for others to merge with (0: merge only what queued while busy)."),
    "long_docs": Opt(show_envvar=True, help="Documents over --max-length: truncate, or score the best of overlapping chunks."),
    "max_chunks_per_doc": Opt(show_envvar=True, type=click.IntRange(min=1), help="Chunks scored per document with --long-docs max-chunks."),
    "threads": Opt(show_envvar=True, type=click.IntRange(min=1), help="torch CPU threads (default: torch's choice)."),
    "compile": Opt(show_envvar=True,
                   help="Compile the forward pass at start-up (torch.compile, one graph for all batch shapes; ~20 s). On an AMX CPU: "
                        "1.2-1.7x the eager forward on fixed batches, 0.8-1.5x inside the service (docs/service.md). Stays eager "
                        "(logged) if compiling fails; batches the graph does not fit run eager."),
    "warmup": Opt(flag="--no-warmup", negate=True, show_envvar=True, help="Skip the start-up warm-up batch."),
    "expose_model_dir": Opt(show_envvar=True, help="Report the model directory's path in /info (off: the path stays private)."),
}


def _spec_options(*names: str):  # noqa: ANN202 - a click decorator
    return settings_options(COMPONENT, ServiceSettings, {name: SPEC[name] for name in names})


@click.command(cls=JingpaiCommand)
@_spec_options("model_dir", "model_name")
@click.option("--host", default="127.0.0.1", show_default=True, envvar=env_name(COMPONENT, "--host"), show_envvar=True, help="Bind address.")
@click.option("--port", type=click.IntRange(0, 65535), default=8081, show_default=True, envvar=env_name(COMPONENT, "--port"), show_envvar=True)
@_spec_options("device", "dtype", "max_batch_tokens", "max_length", "max_docs", "max_body_bytes", "max_query_chars", "queue_timeout_ms",
               "batch_wait_ms", "long_docs", "max_chunks_per_doc", "threads", "compile")
@_spec_options("warmup", "expose_model_dir")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True, envvar=env_name(COMPONENT, "--log-level"), show_envvar=True, help="uvicorn log level.")
def serve(host: str, port: int, log_level: str, **values) -> None:
    """Serve a saved reranking model: TEI /rerank, Cohere/Jina /v1|/v2/rerank, OpenSearch
    /opensearch/text_similarity, plus /health, /info, /metrics and /docs."""
    import torch
    import uvicorn

    from jingpai.reranker.base import Reranker
    from jingpai.reranker.service import create_app, resolve_device

    model_dir: Path = values["model_dir"]
    settings = settings_from(ServiceSettings, values, SPEC, model_name=values["model_name"] or model_dir.resolve().name)
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    try:
        model = Reranker.load(model_dir, device=resolve_device(settings.device))
        # the model was loaded for the service alone: it is handed over rather than copied
        app = create_app(settings, model, copy_model=False)
    except ValueError as exc:  # a model's own config checks (ModelLoadError & co. are JingpaiErrors, caught by the command)
        raise click.ClickException(str(exc)) from exc
    service = app.state.service
    click.echo(f"serving {service.model.name} model {settings.model_name} on http://{host}:{port} ({service.model.device}, "
               f"{service.dtype})", err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


__all__ = ["serve"]
