"""CLI: ``jingpai demo`` — engine, dictionary, index, reranker, gateway and the demo UI in one command."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import click

logger = logging.getLogger(__name__)


@click.command("demo")
@click.option("--kind", type=click.Choice(["opensearch", "elasticsearch"]), default="opensearch", show_default=True,
              help="Engine to start (ignored with --engine-url).")
@click.option("--engine-url", envvar="JINGPAI_DEMO_ENGINE_URL", metavar="URL",
              help="Use this running Elasticsearch/OpenSearch instead of starting one.")
@click.option("--engine-port", type=click.IntRange(1, 65535), default=None, help="Port of the started engine [default: 9200 / 9201 by kind].")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Gateway + UI port (0: a free one).")
@click.option("--reranker-port", type=click.IntRange(0, 65535), default=8081, show_default=True, help="Reranker service port (0: a free one).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface the gateway and reranker listen on.")
@click.option("--corpus", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Corpus to index (JSONL/CSV/TSV with title/content) [default: <data dir>/zh/cnews_sample/docs.tsv, else the shipped demo corpus].")
@click.option("--data-dir", envvar="JINGPAI_DATA_DIR", type=click.Path(file_okay=False, path_type=Path),
              help="Shared data folder (THUCNews titles, cnews sample) [default: ../shared/data].")
@click.option("--cache-dir", envvar="JINGPAI_CACHE_DIR", type=click.Path(file_okay=False, path_type=Path),
              help="Dictionaries, converted corpora, trained models and engines [default: ~/.cache/jingpai, /var/cache/jingpai as root].")
@click.option("--model", "model_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Serve this saved jingpai reranker instead of training the demo model.")
@click.option("--no-rerank-model", is_flag=True, help="Start without a reranker (the UI shows the fail-open banner).")
@click.option("--index", default="jingpai-demo", show_default=True, help="Alias of the main demo index.")
@click.option("--train-budget-s", type=click.FloatRange(min=10), default=150.0, show_default=True,
              help="Wall-clock budget of the first-run model training.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch threads for training and serving.")
def demo(kind: str, engine_url: str | None, engine_port: int | None, port: int, reranker_port: int, host: str, corpus: Path | None,
         data_dir: Path | None, cache_dir: Path | None, model_dir: Path | None, no_rerank_model: bool, index: str,
         train_budget_s: float, threads: int | None) -> None:
    """Start engine, dictionary, index, reranker and gateway, and print the UI URL; Ctrl-C stops everything.

    The first run downloads the engine with Maven and trains a small reranker (a few minutes on 2 CPU
    cores); later runs reuse both from the cache dir.
    """
    from jingpai.ui.demo import DemoError, DemoSettings, run_demo

    try:
        settings = DemoSettings(
            kind=kind,  # type: ignore[arg-type]  # click.Choice keeps it in the Literal
            engine_url=engine_url,
            engine_port=engine_port,
            host=host,
            port=port,
            reranker_port=reranker_port,
            corpus=corpus,
            data_dir=data_dir,
            cache_dir=cache_dir,
            model_dir=model_dir,
            rerank_model=not no_rerank_model,
            index=index,
            train_budget_s=train_budget_s,
            threads=threads,
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc

    _quiet_libraries()
    stop = threading.Event()
    ready = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()
        if not ready.is_set():
            # still starting up: abort the running step; start_demo stops what it started
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_demo(settings, stop=stop, echo=lambda msg: click.echo(msg, err=False), on_ready=lambda _stack: ready.set())
    except DemoError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        click.echo("interrupted during start-up; everything started so far was stopped", err=True)
        raise SystemExit(130) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _quiet_libraries() -> None:
    """Keep the demo's console to its own progress lines: no per-checkpoint load reports or weight bars."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # transformers is a dependency; a broken install shows up later with a clear error
        return
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


__all__ = ["demo"]
