"""``jingpai demo``: engine → dictionary → index → reranker → gateway + UI, in one process.

:func:`start_demo` runs the steps and returns a running :class:`DemoStack`; :func:`run_demo` does the same
and then waits for a stop event (the CLI sets it on Ctrl-C / SIGTERM) and shuts everything down — the
engine too when the demo started it.

Steps (each reported through ``echo``):

1. **engine** — a given ``engine_url``, or a local node started with :mod:`jingpai.engine.harness`.
2. **dictionary** — :func:`jingpai.keyword_dict.build_dictionary` over the THUCNews titles in the data
   directory (when present) plus the shipped demo corpus's categories; cached under the cache dir.
3. **index** — :func:`jingpai.indexer.pipeline.index_corpus` of ``corpus`` if given, else
   ``<data dir>/zh/cnews_sample/docs.tsv`` if present (converted to JSONL), else the shipped demo
   corpus; the shipped corpus of ambiguous names is always indexed too (``<index>-entities``).
4. **model** — ``model_dir`` if given; else the pretrained USE-multilingual bi-encoder (``use-bi``)
   briefly fine-tuned on pseudo-relevance pairs of the indexed corpus (:mod:`jingpai.ui.demo_model`)
   and cached. If that fails the demo goes on without a
   reranker and the UI shows a banner (fail-open).
5. **reranker** — :func:`jingpai.reranker.service.create_app` under uvicorn in a thread.
6. **gateway** — :func:`jingpai.plugin.gateway.create_app` (which serves the UI) under uvicorn in a thread,
   fusing engine and model scores as ``DemoSettings.fusion`` / ``fusion_weight`` say.

Example:
    >>> stack = start_demo(DemoSettings(engine_url="http://127.0.0.1:9200", port=0, reranker_port=0))  # doctest: +SKIP
    >>> stack.ui_url                                                                                       # doctest: +SKIP
    'http://127.0.0.1:41234/_jingpai/ui/'
    >>> stack.stop()                                                                                       # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jingpai.reranker.fusion import FusionMode, FusionSpec
from jingpai.serving import ServerStartError, ServerThread

logger = logging.getLogger(__name__)

DEMO_CORPUS = Path(__file__).resolve().parent / "demo_corpus" / "news.jsonl"
#: bump when the dictionary recipe changes, so cached dictionaries are rebuilt
DICT_RECIPE = "demo-dict-1"
CNEWS = Path("zh") / "cnews_sample" / "docs.tsv"
THUCNEWS = Path("zh") / "thucnews_titles"

Echo = Callable[[str], None]


class DemoError(RuntimeError):
    """A demo step failed; the message names the step and what to do."""


def default_cache_dir() -> Path:
    """``JINGPAI_CACHE_DIR``, else where the engine harness keeps its engines (their parent folder)."""
    from jingpai.engine import harness

    return harness.default_cache_dir().parent


def default_data_dir() -> Path:
    """``JINGPAI_DATA_DIR``, else ``../shared/data`` relative to the current directory."""
    return Path(os.environ.get("JINGPAI_DATA_DIR") or Path("..") / "shared" / "data")


@dataclass(frozen=True)
class DemoSettings:
    """Everything ``jingpai demo`` can be told.

    Args:
        kind: engine to start when ``engine_url`` is not given.
        engine_url: use this running Elasticsearch/OpenSearch instead of starting one.
        engine_port: port of the started engine (``None``: the harness default for ``kind``).
        host: interface the reranker and gateway listen on.
        port: gateway (and UI) port; 0 picks a free one.
        reranker_port: reranker service port; 0 picks a free one.
        corpus: corpus file to index (JSONL/CSV/TSV with ``title``/``content``).
        data_dir: shared data folder (THUCNews titles, cnews sample); ``None``: :func:`default_data_dir`.
        cache_dir: dictionaries, converted corpora, trained models, engines; ``None``: :func:`default_cache_dir`.
        model_dir: a saved jingpai reranker to serve instead of training the demo model.
        rerank_model: ``False`` starts without a reranker (the UI shows the fail-open banner).
        index: alias of the main demo index.
        train_budget_s: wall-clock budget of the first-run model training.
        threads: torch threads for training and serving (``None``: torch's default).
        progress: show progress bars while indexing.
        window: engine hits the gateway reranks.
        fusion, fusion_weight: how the gateway fuses the engine's and the model's scores (``fusion_weight``
            is the engine's weight); the defaults were measured on the demo's pseudo-relevance tuning
            queries with ``scripts/demo_eval.py`` (docs/demo.md).
    """

    kind: Literal["opensearch", "elasticsearch"] = "opensearch"
    engine_url: str | None = None
    engine_port: int | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    reranker_port: int = 8081
    corpus: Path | None = None
    data_dir: Path | None = None
    cache_dir: Path | None = None
    model_dir: Path | None = None
    rerank_model: bool = True
    index: str = "jingpai-demo"
    train_budget_s: float = 150.0
    threads: int | None = None
    progress: bool = False
    window: int = 50
    fusion: FusionMode = "linear"
    fusion_weight: float = 0.8

    def __post_init__(self) -> None:
        from jingpai.engine.harness import ENGINE_KINDS

        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"kind must be one of {', '.join(ENGINE_KINDS)}, got {self.kind!r}")
        for name in ("port", "reranker_port"):
            value = getattr(self, name)
            if not 0 <= value <= 65535:
                raise ValueError(f"{name} must be a TCP port 0..65535, got {value!r}")
        if self.port and self.port == self.reranker_port:
            raise ValueError(f"port and reranker_port must differ, both are {self.port}")
        if self.engine_url is not None and not self.engine_url.startswith(("http://", "https://")):
            raise ValueError(f"engine_url must be an http(s) URL, got {self.engine_url!r}")
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", self.index):
            raise ValueError(f"index must be a lower-case index name (a-z, 0-9, . _ -), got {self.index!r}")
        if self.train_budget_s <= 0:
            raise ValueError(f"train_budget_s must be > 0, got {self.train_budget_s!r}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window!r}")
        FusionSpec(mode=self.fusion, weight=self.fusion_weight)  # raises FusionError (a ValueError) naming the bad value

    @property
    def resolved_data_dir(self) -> Path:
        return Path(self.data_dir) if self.data_dir is not None else default_data_dir()

    @property
    def resolved_cache_dir(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir is not None else default_cache_dir()

    @property
    def demo_dir(self) -> Path:
        return self.resolved_cache_dir / "demo"


# ---------------------------------------------------------------------------------------------- servers


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


def _fingerprint(paths: Iterable[Path], extra: str = "") -> str:
    digest = hashlib.sha1(extra.encode())
    for path in paths:
        stat = path.stat()
        digest.update(f"{path.resolve()}:{stat.st_size}:{int(stat.st_mtime)}".encode())
    return digest.hexdigest()[:12]


def read_jsonl(path: Path) -> list[dict]:
    """Records of a JSONL file.

    Raises:
        DemoError: a line is not a JSON object (file and line named).
    """
    records = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DemoError(f"{path}:{number}: malformed JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise DemoError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            records.append(record)
    return records


def build_demo_dictionary(settings: DemoSettings, echo: Echo) -> tuple[Any, Path]:
    """``(Dictionary, directory)``: THUCNews title domains (if present) + the shipped corpus's categories, cached."""
    from jingpai.keyword_dict import Dictionary, DictionaryError, build_dictionary
    from jingpai.keyword_dict.corpus import LabelledSpec, read_labelled

    titles = settings.resolved_data_dir / THUCNEWS
    sources = [DEMO_CORPUS]
    has_titles = (titles / "part1.tsv").is_file() and (titles / "classes.txt").is_file()
    if has_titles:
        sources += [titles / "part1.tsv", titles / "classes.txt"]
    directory = settings.demo_dir / f"dict-{_fingerprint(sources, DICT_RECIPE)}"
    if (directory / "meta.json").exists():
        try:
            dictionary = Dictionary.load(directory)
            echo(f"      cached dictionary {dictionary.version} ({len(dictionary)} words) from {directory}")
            return dictionary, directory
        except DictionaryError as exc:
            logger.warning("cached dictionary at %s is unusable (%s); rebuilding it", directory, exc)
    domains: dict[str, list[str]] = {}
    if has_titles:
        spec = LabelledSpec(label_column=1, text_column=0, label_names=titles / "classes.txt")
        domains.update(read_labelled(titles / "part1.tsv", spec))
        echo(f"      THUCNews titles: {sum(len(v) for v in domains.values())} titles in {len(domains)} domains from {titles}")
    else:
        logger.info("no THUCNews titles at %s; building the dictionary from the demo corpus only", titles)
        echo(f"      no THUCNews titles at {titles}: using the demo corpus's categories only")
    for record in read_jsonl(DEMO_CORPUS):
        domains.setdefault(str(record["category"]), []).append(f"{record['title']}\n{record['content']}")
    build_logger = logging.getLogger("jingpai.keyword_dict.build")
    level = build_logger.level
    # the shipped corpus's categories hold 3-37 documents each: the per-domain "coarse scores" warnings are
    # expected here, so the console gets one note instead of one warning per category
    build_logger.setLevel(logging.ERROR)
    try:
        dictionary = build_dictionary(domains)
    finally:
        build_logger.setLevel(level)
    small = sorted(name for name, docs in domains.items() if len(docs) < 20)
    if small:
        logger.info("demo dictionary: domains %s have < 20 documents; their diff-idf scores are coarse", small)
    dictionary.save(directory)
    echo(f"      built dictionary {dictionary.version}: {len(dictionary)} words in {len(dictionary.domain_names())} domains")
    return dictionary, directory


_SENTENCE_END = re.compile(r"[。！？!?]")


def cnews_title(article: str, *, max_chars: int = 40) -> str:
    """A title for a cnews article: its first sentence, cut to ``max_chars`` characters."""
    match = _SENTENCE_END.search(article)
    first = article[: match.start()] if match else article
    first = first.strip()
    return first if len(first) <= max_chars else first[:max_chars] + "…"


def convert_cnews(source: Path, target: Path) -> int:
    """Write ``label<TAB>article`` lines of the cnews sample as JSONL ``{id, title, content, category}``.

    Returns:
        The number of documents written.

    Raises:
        DemoError: a line without a tab or with an empty label/article (file and line named).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    count = 0
    with source.open(encoding="utf-8") as fh, partial.open("w", encoding="utf-8") as out:
        for number, line in enumerate(fh, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            label, sep, article = line.partition("\t")
            if not sep or not label.strip() or not article.strip():
                raise DemoError(f"{source}:{number}: expected `label<TAB>article` with both non-empty")
            record = {"id": f"cnews-{number:05d}", "title": cnews_title(article.strip()), "content": article.strip(), "category": label.strip()}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    partial.replace(target)
    return count


@dataclass(frozen=True)
class CorpusChoice:
    """One corpus to index: file, index alias, id field and where it came from."""

    path: Path
    index: str
    id_field: str | None
    origin: Literal["given", "cnews", "shipped"]


def choose_corpora(settings: DemoSettings, echo: Echo) -> list[CorpusChoice]:
    """The main corpus (given / cnews sample / shipped) and, when that is not it, the shipped one too."""
    from jingpai.indexer.readers import CorpusError, SourceRecord, read_corpus

    cnews = settings.resolved_data_dir / CNEWS
    if settings.corpus is not None:
        path = Path(settings.corpus)
        try:
            first = next((r for r in read_corpus(path) if isinstance(r, SourceRecord)), None)
        except CorpusError as exc:
            raise DemoError(f"index step: {exc}") from exc
        if first is None:
            raise DemoError(f"index step: corpus {path} holds no readable record")
        main = CorpusChoice(path, settings.index, "id" if "id" in first.fields else None, "given")
    elif cnews.is_file():
        target = settings.demo_dir / "corpora" / f"cnews-{_fingerprint([cnews])}.jsonl"
        if not target.exists():
            count = convert_cnews(cnews, target)
            echo(f"      converted {count} cnews articles from {cnews}")
        main = CorpusChoice(target, settings.index, "id", "cnews")
    else:
        main = CorpusChoice(DEMO_CORPUS, settings.index, "id", "shipped")
    choices = [main]
    if main.origin != "shipped":
        choices.append(CorpusChoice(DEMO_CORPUS, f"{settings.index}-entities", "id", "shipped"))
    return choices


def index_corpora(engine: Any, corpora: list[CorpusChoice], dictionary: Any, settings: DemoSettings, echo: Echo) -> None:
    """Index each corpus with the demo dictionary (resuming into an existing physical index)."""
    from jingpai.indexer.pipeline import IndexingError, IndexSettings, index_corpus
    from jingpai.indexer.readers import CorpusError

    for choice in corpora:
        index_settings = IndexSettings(
            index=choice.index, id_field=choice.id_field, quarantine_dir=settings.demo_dir / "quarantine", progress=settings.progress
        )
        try:
            report = index_corpus(engine, [choice.path], index_settings, dictionary=dictionary)
        except (IndexingError, CorpusError) as exc:
            raise DemoError(f"index step ({choice.path}): {exc}") from exc
        echo(f"      {choice.index} ← {choice.path} ({choice.origin}): {report.summary()}")
        if report.rejected:
            echo(f"      {report.rejected} records rejected, see {report.quarantine_file}")


def prepare_model(settings: DemoSettings, corpora: list[CorpusChoice], dictionary: Any, echo: Echo) -> tuple[Path | None, str | None]:
    """``(model dir, banner)``: the given model, the cached demo model, or a freshly trained one.

    A failure does not stop the demo: it returns ``(None, reason)`` and the UI shows the reason.
    """
    from jingpai.reranker.base import MODEL_FILE

    if not settings.rerank_model:
        echo("      --no-rerank-model: starting without a reranker (the jingpai column shows the engine order)")
        return None, "The demo runs without a rerank model (--no-rerank-model)."
    if settings.model_dir is not None:
        if not (Path(settings.model_dir) / MODEL_FILE).is_file():
            raise DemoError(f"model step: {settings.model_dir} is not a saved jingpai model ({MODEL_FILE} missing)")
        echo(f"      using the model in {settings.model_dir}")
        return Path(settings.model_dir), None
    from jingpai.ui import demo_model

    paths = [c.path for c in corpora]
    directory = settings.demo_dir / f"model-{_fingerprint(paths, dictionary.version + demo_model.RECIPE)}"
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


def read_jsonl_or_records(path: Path) -> list[dict]:
    """Corpus records of any format the indexer reads (bad lines are skipped: the indexer quarantines them)."""
    from jingpai.indexer.readers import SourceRecord, read_corpus

    return [r.fields for r in read_corpus(path) if isinstance(r, SourceRecord)]


def _start(server: ServerThread) -> ServerThread:
    try:
        return server.start()
    except ServerStartError as exc:
        raise DemoError(str(exc)) from exc


def start_reranker(settings: DemoSettings, model_dir: Path) -> ServerThread:
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


def start_gateway(settings: DemoSettings, engine_url: str, reranker_url: str | None, dict_dir: Path, banner: str | None, default_index: str) -> ServerThread:
    from jingpai.plugin.gateway import create_app
    from jingpai.plugin.settings import GatewaySettings
    from jingpai.ui.app import UiSettings, ui_routes

    gateway_settings = GatewaySettings(
        engine_url=engine_url,
        reranker_url=reranker_url,
        host=settings.host,
        port=settings.port,
        dict_dirs=(dict_dir,),
        window=settings.window,
        fusion=settings.fusion,
        fusion_weight=settings.fusion_weight,
        # a loaded 2-core laptop must not turn every demo search into a fail-open one
        timeout_ms=3000,
    )
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
        stack.gateway = start_gateway(
            settings, engine_url, stack.reranker.url if stack.reranker else None, dict_dir, stack.banner, default_index
        )
        _done(echo, t, f"gateway on {stack.gateway.url} (point Elasticsearch/OpenSearch clients here)")
        return stack
    except BaseException:
        if stack is not None:
            stack.stop(echo)
        raise


def run_demo(settings: DemoSettings, *, stop: threading.Event, echo: Echo = print, on_ready: Callable[[DemoStack], None] | None = None) -> None:
    """:func:`start_demo`, print the UI URL, wait until ``stop`` is set, shut everything down."""
    stack = start_demo(settings, echo=echo)
    try:
        echo("")
        echo(f"jingpai demo is ready: open {stack.ui_url}")
        echo(f"  try 「360公司」 or 「苹果 手机」 on index {stack.indices[-1]}; Ctrl-C stops everything")
        if on_ready is not None:
            on_ready(stack)
        while not stop.wait(0.5):
            pass
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
    "run_demo",
    "start_demo",
]
