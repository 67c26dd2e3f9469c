"""CLI: ``jingpai demo`` — engine, dictionary, index, reranker, gateway and the demo UI in one command.

The options come from :class:`~jingpai.jobs.demo_settings.DemoSettings` (environment variables
``JINGPAI_DEMO_<OPTION>``; ``--data-dir`` and ``--cache-dir`` also read ``JINGPAI_DATA_DIR`` /
``JINGPAI_CACHE_DIR``). Importing this module does not import torch.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import click

from jingpai.commands.base import JingpaiCommand
from jingpai.commands.options import MODEL_DIR, Opt, settings_from, settings_options
from jingpai.jobs.demo_settings import DemoSettings

logger = logging.getLogger(__name__)

#: how DemoSettings' fields look on the command line (defaults and types come from DemoSettings)
DEMO_OPTIONS: dict[str, Opt] = {
    "kind": Opt(help="Engine to start (ignored with --engine-url)."),
    "engine_url": Opt(metavar="URL", help="Use this running Elasticsearch/OpenSearch instead of starting one."),
    "engine_port": Opt(type=click.IntRange(1, 65535), help="Port of the started engine [default: 9200 / 9201 by kind]."),
    "port": Opt(type=click.IntRange(0, 65535), help="Gateway + UI port (0: a free one)."),
    "reranker_port": Opt(type=click.IntRange(0, 65535), help="Reranker service port (0: a free one)."),
    "host": Opt(help="Interface the gateway and reranker listen on."),
    "corpus": Opt(type=click.Path(exists=True, dir_okay=False, path_type=Path),
                  help="Corpus to index (JSONL/CSV/TSV with title/content) [default: <data dir>/zh/cnews_sample/docs.tsv, "
                       "else the shipped demo corpus]."),
    "data_dir": Opt(type=click.Path(file_okay=False, path_type=Path), env_aliases=("JINGPAI_DATA_DIR",),
                    help="Shared data folder (THUCNews titles, cnews sample) [default: ../shared/data]."),
    "cache_dir": Opt(type=click.Path(file_okay=False, path_type=Path), env_aliases=("JINGPAI_CACHE_DIR",),
                     help="Dictionaries, converted corpora, trained models and engines [default: ~/.cache/jingpai, "
                          "/var/cache/jingpai as root]."),
    "model_dir": Opt(flag="--model", type=MODEL_DIR,
                     help="Serve this saved jingpai reranker (or a Hugging Face / sentence-transformers cross-encoder directory) instead of training the demo model."),
    "rerank_model": Opt(flag="--no-rerank-model", negate=True, help="Start without a reranker (the UI shows the fail-open banner)."),
    "index": Opt(help="Alias of the main demo index."),
    "train_budget_s": Opt(type=click.FloatRange(min=10), help="Wall-clock budget of the first-run model training."),
    "threads": Opt(type=click.IntRange(min=1), help="Torch threads for training and serving."),
}


@click.command("demo", cls=JingpaiCommand)
@settings_options("demo", DemoSettings, DEMO_OPTIONS)
def demo(**values) -> None:
    """Start engine, dictionary, index, reranker and gateway, and print the UI URL; Ctrl-C stops everything.

    The first run downloads the engine with Maven and trains a small reranker (a few minutes on 2 CPU
    cores); later runs reuse both from the cache dir.
    """
    from jingpai.jobs.demo import run_demo

    try:
        settings = settings_from(DemoSettings, values, DEMO_OPTIONS)
    except ValueError as exc:  # DemoSettings' checks (e.g. --port equal to --reranker-port)
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


__all__ = ["DEMO_OPTIONS", "demo"]
