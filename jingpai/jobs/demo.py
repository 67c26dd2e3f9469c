"""``jingpai demo``: engine → dictionary → index → reranker → gateway + UI, in one process.

:func:`start_demo` runs the steps and returns a running :class:`DemoStack`; :func:`run_demo` does the same
and then watches its parts until a stop event (the CLI sets it on Ctrl-C / SIGTERM) and shuts everything
down — the engine too when the demo started it. A part that dies meanwhile ends the demo with a
:class:`DemoError` naming it and its log (:mod:`jingpai.jobs.demo_watch`).

Steps (each reported through ``echo``):

1. **engine** — a given ``engine_url``, or a local node started with :mod:`jingpai.engine.harness`.
2. **dictionary** — :func:`jingpai.keyword_dict.build_dictionary` over the THUCNews titles in the data
   directory (when present) plus the shipped demo corpus's categories; cached under the cache dir
   (:mod:`jingpai.jobs.demo_data`).
3. **index** — :func:`jingpai.indexer.pipeline.index_corpus` of ``corpus`` if given, else
   ``<data dir>/zh/cnews_sample/docs.tsv`` if present (converted to JSONL), else the shipped demo
   corpus; the shipped corpus of ambiguous names is always indexed too (``<index>-entities``), and without a
   given corpus the A14 stock-news passages when present (``<index>-a14``).
4. **model** — ``model_dir`` if given; else bge-small-zh-v1.5 zero-shot when ``jingpai models pull bge-small-zh``
   has installed it (:data:`DEMO_PRETRAINED`); else the pretrained USE-multilingual bi-encoder (``use-bi``)
   briefly fine-tuned on pseudo-relevance pairs of the indexed corpus (:mod:`jingpai.jobs.demo_model`)
   and cached. If that fails the demo goes on without a
   reranker and the UI shows a banner (fail-open).
5. **reranker** — :func:`jingpai.reranker.service.create_app` under uvicorn in a thread.
6. **gateway** — :func:`jingpai.plugin.gateway.create_app` with the UI (:mod:`jingpai.ui.app`) under
   uvicorn in a thread, fusing engine and model scores as ``DemoSettings.fusion`` / ``fusion_weight`` say
   (:func:`start_gateway`).

The settings are in :mod:`jingpai.jobs.demo_settings`, the data steps in :mod:`jingpai.jobs.demo_data`.

Example:
    >>> stack = start_demo(DemoSettings(engine_url="http://127.0.0.1:9200", port=0, reranker_port=0))  # doctest: +SKIP
    >>> stack.ui_url                                                                                       # doctest: +SKIP
    'http://127.0.0.1:41234/_jingpai/ui/'
    >>> stack.stop()                                                                                       # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jingpai.jobs.demo_data import (
    DEMO_CORPUS,
    CorpusChoice,
    build_demo_dictionary,
    choose_corpora,
    cnews_title,
    convert_cnews,
    fingerprint,
    index_corpora,
    read_jsonl,
    read_jsonl_or_records,
)
from jingpai.jobs.demo_settings import DEFAULT_WINDOW, PRETRAINED_WINDOW, DemoError, DemoSettings, Echo
from jingpai.jobs.demo_watch import parts, watch
from jingpai.serving import ServerStartError, ServerThread

logger = logging.getLogger(__name__)


@dataclass
class DemoStack:
    """What :func:`start_demo` started; :meth:`stop` shuts it down in reverse order (idempotent)."""

    settings: DemoSettings
    engine_url: str
    indices: list[str] = field(default_factory=list)
    model_dir: Path | None = None
    banner: str | None = None
    engine_settings: Any = None  # harness.EngineSettings when the demo started the engine
    reranker: ServerThread | None = None
    gateway: ServerThread | None = None
    _stopped: bool = False

    @property
    def gateway_url(self) -> str:
        assert self.gateway is not None
        return self.gateway.url

    @property
    def ui_url(self) -> str:
        from jingpai.ui.app import UI_PREFIX

        return f"{self.gateway_url}{UI_PREFIX}/"

    def stop(self, echo: Echo | None = None) -> None:
        if self._stopped:
            return
        self._stopped = True
        say = echo or (lambda _msg: None)
        for name in ("gateway", "reranker"):
            server = getattr(self, name)
            if server is not None:
                say(f"stopping the {name}")
                server.stop()
                setattr(self, name, None)
        if self.engine_settings is not None:
            from jingpai.engine import harness

            say(f"stopping the {self.engine_settings.kind} engine on {self.engine_url}")
            harness.stop(self.engine_settings)
            self.engine_settings = None


# ---------------------------------------------------------------------------------------------- steps


def _step(echo: Echo, number: int, text: str) -> float:
    echo(f"[{number}/6] {text}")
    return time.perf_counter()


def _done(echo: Echo, started: float, text: str) -> None:
    echo(f"      {text} ({time.perf_counter() - started:.1f} s)")


def start_engine(settings: DemoSettings, echo: Echo) -> tuple[str, Any]:
    """``(url, harness settings or None)``: the given engine, or a local node the demo starts (and stops)."""
    from jingpai.engine import harness
    from jingpai.engine.client import EngineConnectionError, detect

    if settings.engine_url:
        try:
            info = detect(settings.engine_url)
        except EngineConnectionError as exc:
            raise DemoError(f"engine step: {exc}") from exc
        echo(f"      using {info.kind} {info.version} at {info.url}")
        return info.url, None
    engine_settings = harness.EngineSettings(
        kind=settings.kind, port=settings.engine_port, cache_dir=settings.resolved_cache_dir / "engines"
    )
    for node in harness.status(engine_settings.cache_dir):
        if node.alive and node.instance_dir == engine_settings.instance_dir:
            # left running by an earlier demo that did not shut down: reuse it (and stop it at the end)
            echo(f"      reusing the {node.kind} node left running on {node.url} (pid {node.pid})")
            return node.url, engine_settings
    echo(f"      starting {settings.kind} on {engine_settings.url} (first run downloads it with Maven; then ~30-60 s)")
    try:
        node = harness.start(engine_settings)
    except harness.EngineError as exc:
        raise DemoError(f"engine step: {exc}") from exc
    return node.url, engine_settings


def prepare_model(settings: DemoSettings, corpora: list[CorpusChoice], dictionary: Any, echo: Echo) -> tuple[Path | None, str | None]:
    """``(model dir, banner)``: the given model, the cached demo model, or a freshly trained one.

    A failure does not stop the demo: it returns ``(None, reason)`` and the UI shows the reason.
    """
    from jingpai.reranker.base import MODEL_FILE

    if not settings.rerank_model:
        echo("      --no-rerank-model: starting without a reranker (the jingpai column shows the engine order)")
        return None, "The demo runs without a rerank model (--no-rerank-model)."
    if settings.model_dir is not None:
        return _given_model(settings.model_dir, echo), None
    pretrained = _pretrained_model(echo)
    if pretrained is not None:
        return pretrained, None
    from jingpai.jobs import demo_model

    corpora = [c for c in corpora if c.origin != "a14"]  # pseudo pairs need titles and categories, which A14 lacks
    paths = [c.path for c in corpora]
    directory = settings.demo_dir / f"model-{fingerprint(paths, dictionary.version + demo_model.RECIPE)}"
    if (directory / MODEL_FILE).is_file():
        echo(f"      cached demo model in {directory}")
        return directory, None
    echo(f"      training the demo model (first run, ≤ {settings.train_budget_s:.0f} s) into {directory}")
    try:
        report = demo_model.train_demo_model(
            [record for c in corpora for record in read_jsonl_or_records(c.path)],
            dictionary,
            directory,
            recipe=demo_model.DemoRecipe(budget_s=settings.train_budget_s, threads=settings.threads or 1),
        )
    except Exception as exc:  # noqa: BLE001 — fail-open: the demo still starts, the UI names the reason
        logger.warning("demo model training failed, starting without a reranker: %s", exc, exc_info=True)
        echo(f"      training failed ({type(exc).__name__}: {exc}); starting without a reranker")
        return None, f"The rerank model could not be trained ({type(exc).__name__}: {exc}); the jingpai column shows the engine order."
    echo(f"      {report}")
    return directory, None


#: the demo's reranker when no ``--model`` is given and ``jingpai models pull`` (the bootstrap) has installed it: untrained,
#: it beats every Chinese model trained on the demo's pseudo pairs, and it needs no first-run training
DEMO_PRETRAINED = "bge-small-zh"


def _pretrained_model(echo: Echo) -> Path | None:
    """The zero-shot :data:`DEMO_PRETRAINED` bi-encoder's folder, or ``None`` (logged) when it is not installed."""
    from jingpai.errors import UserError
    from jingpai.reranker.pretrained import resolve

    try:
        path = resolve(DEMO_PRETRAINED)
    except UserError as exc:  # not installed, or its cached jar fails conversion: the demo still starts
        logger.warning("demo model: %s; training the USE-multilingual demo model instead", exc)
        echo(f"      {DEMO_PRETRAINED} is not installed (`jingpai models pull {DEMO_PRETRAINED}`); training the USE-multilingual demo model instead")
        return None
    echo(f"      using {DEMO_PRETRAINED} zero-shot (the cosine of its CLS vectors) from {path}")
    return path


def _pretrained_folder() -> Path:
    from jingpai.reranker.pretrained import folder

    return folder(DEMO_PRETRAINED)


def _given_model(model_dir: Path, echo: Echo) -> Path:
    """The folder of ``--model``: a saved jingpai model, a cross-encoder as it is, or a pretrained name / a
    sentence-transformers bi-encoder folder (``bge-small-zh``: its zero-shot ``bi`` model)."""
    from jingpai.errors import UserError
    from jingpai.reranker.hf_checkpoint import detect
    from jingpai.reranker.models.bi import st_pooling
    from jingpai.reranker.pretrained import resolve

    try:
        path = resolve(model_dir)
        pooling = st_pooling(path) if (path / "config.json").is_file() else None
        how = f"sentence-transformers bi-encoder, {pooling} pooling" if pooling else "{0.loader}: {0.reason}".format(detect(path))
    except UserError as exc:
        raise DemoError(f"model step: {exc}") from exc
    echo(f"      using the model in {path} ({how})")
    return path


def _start(server: ServerThread) -> ServerThread:
    try:
        return server.start()
    except ServerStartError as exc:
        raise DemoError(str(exc)) from exc


def start_reranker(settings: DemoSettings, model_dir: Path) -> ServerThread:
    """The reranker service for the saved model in ``model_dir``, in a thread on ``settings.reranker_port``."""
    from jingpai.reranker.base import ModelLoadError, Reranker
    from jingpai.reranker.service import ServiceSettings, create_app

    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)
    try:
        model = Reranker.load(model_dir, device="cpu")
        app = create_app(ServiceSettings(model_name=f"jingpai-demo-{model.name}", model_dir=model_dir, device="cpu", threads=settings.threads), model)
    except (ModelLoadError, ValueError) as exc:
        raise DemoError(f"reranker step: cannot serve {model_dir}: {exc}") from exc
    return _start(ServerThread(app, settings.reranker_port, host=settings.host, name="reranker"))


def start_gateway(settings: DemoSettings, engine_url: str, reranker_url: str | None, dict_dir: Path, banner: str | None, default_index: str,
                  *, window: int | None = None) -> ServerThread:
    """The gateway (with the UI, opening on ``default_index`` and showing ``banner``) in a thread on ``settings.port``,
    reranking ``window`` hits (``None``: ``settings.window``, else :data:`DEFAULT_WINDOW`)."""
    from jingpai.plugin.gateway import create_app
    from jingpai.plugin.settings import GatewaySettings
    from jingpai.ui.app import UiSettings, ui_routes

    gateway_settings = GatewaySettings(
        engine_url=engine_url,
        reranker_url=reranker_url,
        host=settings.host,
        port=settings.port,
        dict_dirs=(dict_dir,),
        window=window or settings.window or DEFAULT_WINDOW,
        fusion=settings.fusion,
        fusion_weight=settings.fusion_weight,
        # a loaded 2-core laptop must not turn every demo search into a fail-open one
        timeout_ms=3000,
    )
    # the one place the demo creates the gateway app
    app = create_app(gateway_settings, routes=ui_routes())
    app.state.jingpai_ui = UiSettings(default_index=default_index, banner=banner)
    return _start(ServerThread(app, settings.port, host=settings.host, name="gateway"))


def start_demo(settings: DemoSettings, *, echo: Echo = print) -> DemoStack:
    """Run every step and return the running stack (stop it with :meth:`DemoStack.stop`).

    Raises:
        DemoError: a step failed (what was started is stopped again first).
    """
    from jingpai.engine.client import connect

    stack: DemoStack | None = None
    try:
        t = _step(echo, 1, "engine")
        engine_url, engine_settings = start_engine(settings, echo)
        stack = DemoStack(settings=settings, engine_url=engine_url, engine_settings=engine_settings)
        _done(echo, t, f"engine ready at {engine_url}")

        t = _step(echo, 2, "dictionary")
        dictionary, dict_dir = build_demo_dictionary(settings, echo)
        _done(echo, t, f"dictionary {dictionary.version} in {dict_dir}")

        t = _step(echo, 3, "index")
        corpora = choose_corpora(settings, echo)
        engine = connect(engine_url)
        try:
            index_corpora(engine, corpora, dictionary, settings, echo)
        finally:
            engine.close()
        stack.indices = [c.index for c in corpora]
        _done(echo, t, f"indexed {', '.join(stack.indices)}")

        t = _step(echo, 4, "model")
        stack.model_dir, stack.banner = prepare_model(settings, corpora, dictionary, echo)
        _done(echo, t, f"model {stack.model_dir or '(none)'}")

        t = _step(echo, 5, "reranker")
        if stack.model_dir is not None:
            stack.reranker = start_reranker(settings, stack.model_dir)
            _done(echo, t, f"reranker serving on {stack.reranker.url}")
        else:
            _done(echo, t, "no reranker (fail-open: the UI shows a banner)")

        t = _step(echo, 6, "gateway")
        default_index = corpora[-1].index if corpora[-1].origin == "shipped" else corpora[0].index
        window = settings.window or (PRETRAINED_WINDOW if stack.model_dir is not None and stack.model_dir == _pretrained_folder() else DEFAULT_WINDOW)
        stack.gateway = start_gateway(
            settings, engine_url, stack.reranker.url if stack.reranker else None, dict_dir, stack.banner, default_index, window=window
        )
        _done(echo, t, f"gateway on {stack.gateway.url}, reranking the top {window} hits (point Elasticsearch/OpenSearch clients here)")
        return stack
    except BaseException:
        if stack is not None:
            stack.stop(echo)
        raise


def run_demo(settings: DemoSettings, *, stop: threading.Event, echo: Echo = print, on_ready: Callable[[DemoStack], None] | None = None) -> None:
    """:func:`start_demo`, print the UI URL, watch the parts until ``stop`` is set, shut everything down.

    Raises:
        DemoError: a step failed, or a part the demo started died while it ran (:mod:`jingpai.jobs.demo_watch`:
            the message names the part and its log); the other parts are stopped first.
    """
    stack = start_demo(settings, echo=echo)
    try:
        echo("")
        echo(f"jingpai demo is ready: open {stack.ui_url}")
        echo(f"  try 「360公司」 or 「苹果 手机」 on index {stack.indices[-1]}; Ctrl-C stops everything")
        if on_ready is not None:
            on_ready(stack)
        watch(parts(stack.engine_settings, stack.engine_url, [stack.reranker, stack.gateway]), stop)
    finally:
        echo("shutting down…")
        stack.stop(echo)
        echo("stopped")


__all__ = [
    "DEMO_CORPUS",
    "CorpusChoice",
    "DemoError",
    "DemoSettings",
    "DemoStack",
    "ServerThread",
    "build_demo_dictionary",
    "choose_corpora",
    "cnews_title",
    "convert_cnews",
    "index_corpora",
    "prepare_model",
    "read_jsonl",
    "run_demo",
    "start_demo",
    "start_engine",
    "start_gateway",
    "start_reranker",
]
