"""``jingpai serve --model DIR``: serve a saved reranker over HTTP (see ``docs/service.md``).

Every option can also be set through the environment variable named in its help (``JINGPAI_SERVE_*``),
which is how the container image is configured.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

logger = logging.getLogger(__name__)


def _env(name: str) -> str:
    return f"JINGPAI_SERVE_{name}"


@click.command()
@click.option("--model", "model_dir", required=True, envvar=_env("MODEL"), show_envvar=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Saved model directory (from `jingpai train` / Reranker.save).")
@click.option("--model-name", default=None, envvar=_env("MODEL_NAME"), show_envvar=True,
              help="Name reported by /info and Cohere/Jina responses (default: the directory name).")
@click.option("--host", default="127.0.0.1", show_default=True, envvar=_env("HOST"), show_envvar=True, help="Bind address.")
@click.option("--port", type=click.IntRange(0, 65535), default=8081, show_default=True, envvar=_env("PORT"), show_envvar=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              envvar=_env("DEVICE"), show_envvar=True, help="auto: CUDA when available.")
@click.option("--dtype", type=click.Choice(["auto", "bf16", "fp16", "fp32", "int8"]), default="auto", show_default=True,
              envvar=_env("DTYPE"), show_envvar=True,
              help="Compute dtype. auto: GPU bf16 (fp16 without bf16); CPU bf16 with AMX/AVX512-BF16, else fp32. "
                   "int8 (CPU only): linear layers quantized to int8, ~2x fp32 speed, scores within ~1e-2.")
@click.option("--max-batch-tokens", type=click.IntRange(min=1), default=16384, show_default=True,
              envvar=_env("MAX_BATCH_TOKENS"), show_envvar=True, help="Padded tokens per forward pass.")
@click.option("--max-length", type=click.IntRange(min=8), default=None, envvar=_env("MAX_LENGTH"), show_envvar=True,
              help="Tokens per (query, document) pair (default: the model's own).")
@click.option("--max-docs", type=click.IntRange(min=1), default=1000, show_default=True,
              envvar=_env("MAX_DOCS"), show_envvar=True, help="Documents per request (more → 413).")
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=4 * 1024 * 1024, show_default=True,
              envvar=_env("MAX_BODY_BYTES"), show_envvar=True, help="Request body size (more → 413).")
@click.option("--max-query-chars", type=click.IntRange(min=1), default=2048, show_default=True,
              envvar=_env("MAX_QUERY_CHARS"), show_envvar=True, help="Query length in characters (more → 422).")
@click.option("--queue-timeout-ms", type=click.IntRange(min=1), default=30_000, show_default=True,
              envvar=_env("QUEUE_TIMEOUT_MS"), show_envvar=True, help="Longest wait for a batch (more → 503 + Retry-After).")
@click.option("--batch-wait-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
              envvar=_env("BATCH_WAIT_MS"), show_envvar=True,
              help="Wait this long after a request arrives for others to merge with (0: merge only what queued while busy).")
@click.option("--long-docs", type=click.Choice(["truncate", "max-chunks"]), default="truncate", show_default=True,
              envvar=_env("LONG_DOCS"), show_envvar=True,
              help="Documents over --max-length: truncate, or score the best of overlapping chunks.")
@click.option("--max-chunks-per-doc", type=click.IntRange(min=1), default=8, show_default=True,
              envvar=_env("MAX_CHUNKS_PER_DOC"), show_envvar=True, help="Chunks scored per document with --long-docs max-chunks.")
@click.option("--threads", type=click.IntRange(min=1), default=None, envvar=_env("THREADS"), show_envvar=True,
              help="torch CPU threads (default: torch's choice).")
@click.option("--no-warmup", is_flag=True, envvar=_env("NO_WARMUP"), show_envvar=True, help="Skip the start-up warm-up batch.")
@click.option("--expose-model-dir", is_flag=True, envvar=_env("EXPOSE_MODEL_DIR"), show_envvar=True,
              help="Report the model directory's path in /info (off: the path stays private).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True, envvar=_env("LOG_LEVEL"), show_envvar=True, help="uvicorn log level.")
def serve(model_dir: Path, model_name: str | None, host: str, port: int, device: str, dtype: str, max_batch_tokens: int,
          max_length: int | None, max_docs: int, max_body_bytes: int, max_query_chars: int, queue_timeout_ms: int,
          batch_wait_ms: float, long_docs: str, max_chunks_per_doc: int, threads: int | None, no_warmup: bool,
          expose_model_dir: bool, log_level: str) -> None:
    """Serve a saved reranking model: TEI /rerank, Cohere/Jina /v1|/v2/rerank, OpenSearch
    /opensearch/text_similarity, plus /health, /info, /metrics and /docs."""
    import torch
    import uvicorn

    from jingpai.reranker.base import ModelLoadError, Reranker
    from jingpai.reranker.registry import UnknownArchitectureError
    from jingpai.reranker.service import ServiceSettings, create_app, resolve_device

    try:
        settings = ServiceSettings(
            model_name=model_name or model_dir.resolve().name,
            model_dir=model_dir,
            device=device,  # type: ignore[arg-type]  # click.Choice keeps it in the Literal
            dtype=dtype,  # type: ignore[arg-type]
            max_batch_tokens=max_batch_tokens,
            max_length=max_length,
            max_docs=max_docs,
            max_body_bytes=max_body_bytes,
            max_query_chars=max_query_chars,
            queue_timeout_ms=queue_timeout_ms,
            batch_wait_ms=batch_wait_ms,
            long_docs=long_docs,  # type: ignore[arg-type]
            max_chunks_per_doc=max_chunks_per_doc,
            threads=threads,
            warmup=not no_warmup,
            expose_model_dir=expose_model_dir,
        )
        if settings.threads is not None:
            torch.set_num_threads(settings.threads)
        model = Reranker.load(model_dir, device=resolve_device(settings.device))
        app = create_app(settings, model)
    except (ValueError, ModelLoadError, UnknownArchitectureError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"serving {model.name} model {settings.model_name} on http://{host}:{port} ({model.device}, "
               f"{app.state.service.dtype})", err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


__all__ = ["serve"]
