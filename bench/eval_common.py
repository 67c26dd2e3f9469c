"""Shared plumbing of the evaluation report (``python -m bench report``): result tables, run context,
data paths, dictionaries and in-process HTTP servers.

Every section module (``bench/eval_*.py``) returns :class:`Table` objects; the report saves each one as
JSON under the results folder and renders ``docs/RESULTS.md`` from all saved tables, so sections run on
different machines (the GPU rows, for example) land in one report, each naming where it ran.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jingpai.serving import serve

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("JINGPAI_DATA_DIR", REPO.parent / "shared" / "data"))
#: the two baseline rows of a question-retrieval table (the report's summary finds them by these labels)
RAW_BM25 = "BM25, raw field (engine direct)"
AUGMENTED_BM25 = "BM25 + dictionary augmentation (gateway, rerank off)"

SECTIONS: tuple[str, ...] = ("retrieval", "hybrid", "judged", "microblog", "qa", "negatives", "speed")
Mode = Literal["quick", "full"]
FirstStage = Literal["ql", "bm25", "both"]
FIRST_STAGES: tuple[str, ...] = ("ql", "bm25", "both")

#: every evaluation data set a report row reads, by its ``--data`` key: default path parts under
#: :data:`DATA_DIR` and the layout a replacement must have. One table, so the CLI validates keys
#: against the same list the sections read through (:meth:`ReportSettings.data_file`).
DATA_KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    "retrieval.lcqmc": (("zh", "lcqmc", "dev.tsv"), "file: q1<TAB>q2<TAB>label (0/1)"),
    "retrieval.afqmc": (("zh", "afqmc", "dev.tsv"), "file: s1<TAB>s2<TAB>label (0/1)"),
    "retrieval.bq": (("zh", "bq", "dev.tsv"), "file: s1<TAB>s2<TAB>label (0/1)"),
    "qa.trecqa": (("en", "trecqa", "raw-test"), "folder: a.toks, b.toks, sim.txt, id.txt"),
    "qa.wikiqa": (("en", "wikiqa", "dev"), "folder: a.toks, b.toks, sim.txt, id.txt"),
    "microblog.2011": (("en", "microblog", "trec-2011"), "folder: a.toks, b.toks, sim.txt, id.txt (TREC run lines)"),
    "microblog.2012": (("en", "microblog", "trec-2012"), "folder: a.toks, b.toks, sim.txt, id.txt (TREC run lines)"),
    "negatives.pawsx": (("zh", "pawsx", "dev.tsv"), "file: id<TAB>s1<TAB>s2<TAB>label with a header line"),
    # the judged sets of section ``judged`` (issue 52): folders read by jingpai.reranker.judged.read_judged
    "a14": (("zh", "a14_stock_news"), "folder: articles.jsonl, entity-meta-dev.tsv, qrels-dev.tsv"),
    "qbqtc": (("zh", "qbqtc"), "folder: corpus.jsonl, queries-dev.tsv, qrels-dev.tsv"),
    "kuake": (("zh", "kuake_qtr"), "folder: corpus.jsonl, queries-dev.tsv, qrels-dev.tsv"),
}
#: the ``--data`` keys without a ``section.`` prefix, by the section that reads them
UNPREFIXED_DATA_KEYS: dict[str, str] = {"a14": "judged", "qbqtc": "judged", "kuake": "judged"}


def data_section(key: str) -> str:
    """The section a ``--data`` key belongs to: its prefix (``retrieval.lcqmc`` → ``retrieval``), or the section
    of an unprefixed key (``a14`` → ``judged``).

    >>> data_section("qa.trecqa"), data_section("kuake")
    ('qa', 'judged')
    """
    return UNPREFIXED_DATA_KEYS.get(key) or key.split(".")[0]


class ReportError(RuntimeError):
    """A report step cannot run (missing data, engine, model); the message names what and why."""


# ---------------------------------------------------------------------------------------------- tables


@dataclass
class Row:
    """One table row: ``cells`` in column order and the command that reruns exactly this row."""

    cells: dict[str, Any]
    command: str


@dataclass
class Table:
    """One result table with the facts a reader needs to trust and rerun it.

    Attributes:
        key: unique id (file name of the saved JSON), e.g. ``retrieval-lcqmc-opensearch``.
        section: one of :data:`SECTIONS`.
        title: heading shown in RESULTS.md.
        columns: cell names in display order.
        rows: the rows.
        meta: ``command``, ``data``, ``engine``, ``model``, ``hardware``, ``date`` (and anything else).
        notes: free-text remarks printed under the table (skips, paper numbers, caveats).
    """

    key: str
    section: str
    title: str
    columns: list[str]
    rows: list[Row] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Table:
        rows = [Row(**r) for r in data.pop("rows")]
        return cls(rows=rows, **data)

    def markdown(self) -> str:
        out = [f"### {self.title}", ""]
        for name in ("command", "data", "engine", "model", "hardware", "date", "mode", "overrides"):
            if self.meta.get(name):
                value = f"`{self.meta[name]}`" if name == "command" else self.meta[name]
                out.append(f"- **{name}**: {value}")
        out += ["", "| " + " | ".join([*self.columns, "rerun"]) + " |", "|" + "---|" * (len(self.columns) + 1)]
        for row in self.rows:
            cells = [fmt(row.cells.get(c, "")) for c in self.columns]
            out.append("| " + " | ".join([*cells, f"`{row.command}`"]) + " |")
        if self.notes:
            out.append("")
            out += [f"> {n}" for n in self.notes]
        return "\n".join(out) + "\n"


def fmt(value: Any) -> str:
    """Display form of a cell: rates to 4 decimals, ``mean ± std`` pairs, text as is."""
    if isinstance(value, float):
        return "n/a" if value != value else f"{value:.4f}"
    if isinstance(value, dict) and "mean" in value:
        if value.get("n", 1) > 1:
            return f"{value['mean']:.4f} ± {value['std']:.4f} (n={value['n']})"
        return f"{value['mean']:.4f}"
    return str(value).replace("|", "\\|")


def mean_std(values: list[float]) -> dict[str, float]:
    """``{"mean", "std", "n"}`` of seed runs (population std over the seeds)."""
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std()), "n": len(values)}


#: engine weights tried for a linear fusion on a tuning set (1.0 — the model weighs nothing — is not reranking)
TUNE_WEIGHTS = tuple(round(i / 10, 1) for i in range(10))
DEFAULT_SEEDS = (0, 1, 2)  # the report's repeated runs; a first seed other than 0 serves other models, so rows name it


def best_weight(curve: dict[float, float]) -> float:
    """The engine weight with the highest metric among ``w < 1`` (the model must weigh something); ties go to
    the larger model weight.

    >>> best_weight({0.0: 0.2, 0.5: 0.3, 0.7: 0.3, 1.0: 0.9})
    0.5
    """
    candidates = [w for w in curve if w < 1.0]
    if not candidates:
        raise ReportError(f"no engine weight below 1 to choose from: {sorted(curve)}")
    return max(candidates, key=lambda w: (round(curve[w], 9), -w))


def save_table(table: Table, results_dir: Path) -> Path:
    """Save ``table`` as JSON, merged into an earlier save of the same key: a row whose rerun command
    matches an earlier row replaces it, other earlier rows stay (so rerunning one row updates only that
    row). Concurrent writers are serialised with a file lock."""
    import fcntl

    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{table.key}.json"
    with (results_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            old = Table.from_json(json.loads(path.read_text(encoding="utf-8")))
            new_rows = {r.command: r for r in table.rows}
            rows = [new_rows.pop(r.command, r) for r in old.rows] + list(new_rows.values())
            notes = list(dict.fromkeys([*old.notes, *table.notes]))
            table = dataclasses.replace(table, rows=rows, notes=[n for n in notes if n])
        path.write_text(json.dumps(table.to_json(), ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def short_hardware(device: str | None) -> str:
    if device and device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(0).replace("NVIDIA ", "")
    return f"CPU ({os.cpu_count()} cores)"


def load_tables(results_dir: Path) -> list[Table]:
    tables = []
    for path in sorted(results_dir.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "section" in data and "rows" in data:
            tables.append(Table.from_json(data))
    return tables


# ---------------------------------------------------------------------------------------------- context


@dataclass(frozen=True)
class ReportSettings:
    """All options of one report run (built from the CLI in one place).

    Attributes:
        mode: ``quick`` (small slices, tiny models: minutes) or ``full`` (whole dev sets).
        results_dir: where each table's JSON goes.
        models_dir: trained model folders are saved/reused here (``out/models`` by default, git-ignored).
        work_dir: scratch files (corpora, runs, dictionaries).
        device: torch device for training/scoring (``cpu``/``cuda``; ``None``: CUDA when available).
        seeds: seeds for the cheap model runs (mean ± std over them).
        engines: ``{kind: url}`` of the engines to use (sections that need one skip without it).
        only: restrict to rows whose id starts with one of these prefixes (``None``: all rows).
        retrain: ignore saved model folders and train again.
        data: ``{key: path}`` replacing the default evaluation data of a row (keys of :data:`DATA_KEYS`,
            ``--data KEY=PATH``); read through :meth:`data_file`.
        epochs, max_steps, batch_size: override these training settings of *every* trained recipe, on top
            of its full/quick settings (``None``: the recipe's own); they let the GPU-sized recipes run,
            shorter, on a CPU, and they are part of each saved model's stamp.
        microblog_first_stage: which first-stage run the microblog section reranks: the provided
            query-likelihood run (``ql``, as the HCAN paper does; needs no engine), BM25 from our engine
            through the gateway (``bm25``) or ``both``.
    """

    mode: Mode = "full"
    results_dir: Path = REPO / "out" / "report"
    models_dir: Path = REPO / "out" / "models"
    work_dir: Path = REPO / "out" / "work"
    device: str | None = None
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    engines: dict[str, str] = field(default_factory=dict)
    only: tuple[str, ...] | None = None
    retrain: bool = False
    data: dict[str, Path] = field(default_factory=dict)
    epochs: int | None = None
    max_steps: int | None = None
    batch_size: int | None = None
    microblog_first_stage: FirstStage = "both"

    def __post_init__(self) -> None:
        # validated once here, so every section can trust the values (the CLI turns these into usage errors)
        if self.mode not in ("quick", "full"):
            raise ValueError(f"unknown mode {self.mode!r}; expected quick or full")
        unknown = sorted(set(self.data) - set(DATA_KEYS))
        if unknown:
            raise ValueError(f"unknown data key(s) {', '.join(unknown)}; valid keys: {', '.join(DATA_KEYS)}")
        for key, path in self.data.items():
            if not Path(path).exists():
                raise ValueError(f"data {key}={path}: the path does not exist (expected a {DATA_KEYS[key][1]})")
        for name in ("epochs", "max_steps", "batch_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")
        if self.microblog_first_stage not in FIRST_STAGES:
            raise ValueError(f"unknown microblog first stage {self.microblog_first_stage!r}; expected one of {', '.join(FIRST_STAGES)}")

    @property
    def quick(self) -> bool:
        return self.mode == "quick"

    def data_file(self, key: str, default_parts: tuple[str, ...] | None = None) -> Path:
        """The evaluation data of ``key`` (a :data:`DATA_KEYS` key, e.g. ``retrieval.lcqmc``): the
        ``--data key=PATH`` given by the user, else ``DATA_DIR/<default_parts>`` (``None``: the parts
        listed in :data:`DATA_KEYS`).

        Raises:
            ReportError: ``key`` is not a known data key, or the default file is missing.
        """
        if key not in DATA_KEYS:
            raise ReportError(f"unknown data key {key!r}; valid keys: {', '.join(DATA_KEYS)}")
        if key in self.data:
            return Path(self.data[key])
        return data_path(*(default_parts or DATA_KEYS[key][0]))

    def data_description(self, key: str, default: str) -> str:
        """A table's ``data`` text for ``key``: ``default`` (the default set's description), or the
        user's path when ``--data`` replaced it (the default's sizes no longer apply)."""
        return f"{self.data[key]} (--data {key}, replacing the default set)" if key in self.data else default

    def train_overrides(self) -> dict[str, int]:
        """The ``--epochs/--max-steps/--batch-size`` overrides as :class:`TrainSettings` fields."""
        names = ("epochs", "max_steps", "batch_size")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def override_args(self, section: str | None = None) -> list[str]:
        """CLI arguments that reproduce this run's overrides (``section``: only its ``--data`` keys)."""
        args = [f"--data {k}={v}" for k, v in self.data.items() if section is None or data_section(k) == section]
        # --microblog-first-stage is left out on purpose: a row's command is also its merge key in
        # save_table, and the default (both) reruns every microblog row, so one row keeps one command
        args += [f"--{n.replace('_', '-')} {v}" for n, v in self.train_overrides().items()]
        return args

    def wants(self, row_id: str) -> bool:
        return self.only is None or any(row_id.startswith(p) or p.startswith(row_id) for p in self.only)

    def command(self, section: str, row_id: str | None = None) -> str:
        """The shell command that reruns ``row_id`` (or the whole section) in this mode."""
        parts = ["python -m bench report", f"--sections {section}"]
        if self.quick:
            parts.append("--quick")
        if row_id:
            parts.append(f"--only {row_id}")
        if self.device == "cuda":
            parts.append("--device cuda")
        if self.seeds[:1] != DEFAULT_SEEDS[:1]:  # the first seed picks the served models (eval_judged); the rest only repeat runs
            parts.append(f"--seeds {','.join(map(str, self.seeds))}")
        parts += self.override_args(section)
        return " ".join(parts)


def torch_device(settings: ReportSettings) -> str:
    import torch

    return settings.device or ("cuda" if torch.cuda.is_available() else "cpu")


def hardware(device: str | None = None) -> str:
    """CPU model and cores, plus the GPU when ``device`` is CUDA."""
    from bench.common import cpu_name

    text = f"{cpu_name()}, {os.cpu_count()} cores"
    if device and device.startswith("cuda"):
        import torch

        text += f"; GPU {torch.cuda.get_device_name(0)}"
    return text


def today() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def class_balance_note(what: str, metrics: dict[str, float]) -> str | None:
    """A table note when one class of ``what`` (e.g. ``hcan seed 0 on PAWS-X``) is below 10 % accuracy:
    a collapsed model can still show a high overall accuracy, so the report says so next to it."""
    from jingpai.reranker.evaluate import class_balance_warning

    warning = class_balance_warning(metrics)
    return f"⚠ {what}: {warning}" if warning else None


def base_meta(settings: ReportSettings, section: str, *, data: str, model: str, engine: str = "none", device: str | None = None) -> dict[str, str]:
    meta = {
        "command": settings.command(section),
        "data": data,
        "engine": engine,
        "model": model,
        "hardware": hardware(device),
        "date": f"{today()} (commit {git_commit()})",
        "mode": settings.mode,
    }
    overrides = settings.train_overrides()
    if overrides:  # shortened/changed training: the reader must not compare these rows with the recipe's own
        meta["overrides"] = ", ".join(f"{k}={v}" for k, v in overrides.items()) + " on every trained recipe (rows are not the recipes' own runs)"
    return meta


def gpu_recipe_skip(settings: ReportSettings, device: str, *, gpu_sized: bool) -> bool:
    """Whether a GPU-sized recipe is skipped: only in full mode on a CPU *without* ``--epochs``/``--max-steps``
    (with them the recipe runs, shortened, on the CPU; quick mode is always small)."""
    shortened = settings.epochs is not None or settings.max_steps is not None
    return gpu_sized and device == "cpu" and not settings.quick and not shortened


def gpu_skip_note(settings: ReportSettings, section: str, row_id: str, what: str, *, steps: int | None = None) -> str:
    """The note of a skipped GPU-sized row: its size and the two ways to run it."""
    size = f" (the full recipe is about {steps:,} optimizer steps)" if steps else ""
    return (f"{what}: skipped on CPU{size} — rerun on a GPU with `{settings.command(section, row_id)} --device cuda`, or on this CPU with "
            f"shortened training, e.g. `{settings.command(section, row_id)} --max-steps 200` (its time grows with the steps; "
            f"the row is then marked as not the recipe's own run).")


def data_path(*parts: str) -> Path:
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        raise ReportError(f"data {path} is missing; set JINGPAI_DATA_DIR to the shared data folder")
    return path


# ---------------------------------------------------------------------------------------------- dictionaries


def read_tsv_column(path: Path, columns: tuple[int, ...], *, skip_header: bool = False) -> list[str]:
    texts: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if skip_header and n == 0:
                continue
            parts = line.rstrip("\n").split("\t")
            texts.extend(parts[c] for c in columns if c < len(parts) and parts[c].strip())
    return texts


def write_lines(path: Path, texts: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(" ".join(t.split()) for t in texts) + "\n", encoding="utf-8")
    return path


def jingpai_cli(*args: str) -> str:
    """Run the real ``jingpai`` CLI in a subprocess (as a reader would) and return its stdout."""
    cmd = [sys.executable, "-m", "jingpai", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ReportError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


#: what each Chinese dictionary of the report is built from (shown in the tables that use it)
ZH_DICTIONARY_SOURCES = "jingpai dict build: THUCNews titles 10 domains + AFQMC train questions"
ZH_BQ_DICTIONARY_SOURCES = "jingpai dict build: THUCNews titles 10 domains + BQ train questions"


def _zh_domain_dictionary(settings: ReportSettings, out: Path, domain: str, questions: list[str]) -> Path:
    """``jingpai dict build`` of THUCNews titles (10 news domains) plus ``questions`` as the domain ``domain``
    (diff-idf of each domain vs the others) into ``out``; an existing build there is reused."""
    if (out / "meta.json").exists():
        return out
    # quick mode: a smaller corpus (10k questions, one THUCNews part) keeps the build to seconds
    corpus = write_lines(settings.work_dir / "corpora" / f"{domain}_train_questions.txt", questions[:10_000] if settings.quick else questions)
    titles = data_path("zh", "thucnews_titles")
    parts = ("part1.tsv",) if settings.quick else ("part1.tsv", "part2.tsv")
    jingpai_cli(
        "dict", "build", *[arg for part in parts for arg in ("--labelled", str(titles / part))],
        "--label-column", "1", "--text-column", "0", "--label-names", str(titles / "classes.txt"),
        "--domain", f"{domain}={corpus}", "--out", str(out),
    )
    return out


def zh_dictionary(settings: ReportSettings) -> Path:
    """The Chinese dictionary built with ``jingpai dict build``: THUCNews titles (10 news domains) plus
    AFQMC train questions as a finance customer-service domain (diff-idf of each domain vs the others).
    The LCQMC and AFQMC rows and every recipe with ``dictionary="zh"`` use it."""
    out = settings.work_dir / "dict-zh"
    if (out / "meta.json").exists():
        return out
    return _zh_domain_dictionary(settings, out, "afqmc", read_tsv_column(data_path("zh", "afqmc", "train.tsv"), (0, 1)))


def zh_bq_dictionary(settings: ReportSettings) -> Path:
    """The dictionary of the BQ rows, built like :func:`zh_dictionary` with BQ *train* questions (both
    columns, distinct) as the bank customer-service domain instead of AFQMC's: each data set's rows
    augment with a dictionary of their own domain, learnt from training text only (BQ dev is a report split)."""
    out = settings.work_dir / "dict-zh-bq"
    if (out / "meta.json").exists():
        return out
    questions = list(dict.fromkeys(read_tsv_column(data_path("zh", "bq", "train.tsv"), (0, 1))))
    return _zh_domain_dictionary(settings, out, "bq", questions)


def a14_dictionary(settings: ReportSettings) -> Path:
    """The A14 keyword models' dictionary: new words over every A14 passage (the corpus all its splits share; no
    judgment or company list is read) as the domain ``a14`` against THUCNews part 1's titles, built with ``jingpai
    dict build`` exactly as docs/models.md shows. It knows 59 of the 60 dev short names as words, found unsupervised."""
    out = settings.work_dir / "dict-zh-a14"
    if (out / "meta.json").exists():
        return out
    titles = data_path("zh", "thucnews_titles")
    jingpai_cli(
        "dict", "build", "--domain", f"a14={data_path('zh', 'a14_stock_news', 'articles.jsonl')}", "--text-field", "text",
        "--labelled", str(titles / "part1.tsv"), "--label-column", "1", "--text-column", "0",
        "--label-names", str(titles / "classes.txt"), "--out", str(out),
    )
    return out


def en_dictionary(settings: ReportSettings) -> Path:
    """An English dictionary from the TrecQA/WikiQA training questions+answers and the Microblog tweets
    (three domains), built with ``jingpai dict build``; used by ``kwbert`` on the English sets."""
    out = settings.work_dir / "dict-en"
    if (out / "meta.json").exists():
        return out
    corpora = settings.work_dir / "corpora"
    specs = []
    for name, folder in (("trecqa", ("en", "trecqa", "train")), ("wikiqa", ("en", "wikiqa", "train")), ("microblog", ("en", "microblog", "trec-2011"))):
        d = data_path(*folder)
        lines = list(dict.fromkeys((d / "a.toks").read_text(encoding="utf-8").splitlines() + (d / "b.toks").read_text(encoding="utf-8").splitlines()))
        specs += ["--domain", f"{name}={write_lines(corpora / f'{name}_en.txt', lines)}"]
    jingpai_cli("dict", "build", *specs, "--min-count", "3", "--out", str(out))
    return out


# ---------------------------------------------------------------------------------------------- servers


@contextmanager
def serving(app: Any) -> Iterator[str]:
    with serve(app) as server:
        yield server.url


@contextmanager
def rerank_service(model: Any, *, name: str) -> Iterator[str]:
    """The real ``jingpai serve`` app for ``model`` on a loopback port (fp32, no warm-up, a 10-minute queue wait)."""
    from jingpai.reranker.service import ServiceSettings, create_app

    # the report measures quality, not latency: on a slow or shared CPU a request queued behind the others' 100-hit windows
    # must wait its turn instead of being answered 429 (which the gateway turns into a fail-open, unreranked row)
    settings = ServiceSettings(model_name=name, device="cpu" if model.device.type == "cpu" else "cuda", dtype="fp32", warmup=False,
                               queue_timeout_ms=600_000)
    with serving(create_app(settings, model)) as url:
        yield url


@contextmanager
def gateway(engine_url: str, *, reranker_url: str | None, dict_dirs: tuple[Path, ...], window: int,
            embed_url: str | None = None, **hybrid: Any) -> Iterator[str]:
    """The real ``_search`` gateway (``jingpai gateway``) in front of ``engine_url``; ``embed_url`` (a ``jingpai
    serve`` with a bi-encoder) and ``hybrid`` (``hybrid_fusion=…``, ``hybrid_weight=…``) for hybrid search on
    indices with vectors."""
    from jingpai.plugin.gateway import create_app
    from jingpai.plugin.settings import GatewaySettings

    settings = GatewaySettings(
        engine_url=engine_url, reranker_url=reranker_url, window=window, max_window=max(500, window),
        dict_dirs=dict_dirs, timeout_ms=120_000, meta_ttl_s=3600.0, embed_url=embed_url, embed_timeout_ms=60_000, **hybrid,
    )
    with serving(create_app(settings)) as url:
        yield url
