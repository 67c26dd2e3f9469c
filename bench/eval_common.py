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
SECTIONS: tuple[str, ...] = ("retrieval", "microblog", "qa", "negatives", "speed")
Mode = Literal["quick", "full"]


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
        for name in ("command", "data", "engine", "model", "hardware", "date", "mode"):
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
    """

    mode: Mode = "full"
    results_dir: Path = REPO / "out" / "report"
    models_dir: Path = REPO / "out" / "models"
    work_dir: Path = REPO / "out" / "work"
    device: str | None = None
    seeds: tuple[int, ...] = (0, 1, 2)
    engines: dict[str, str] = field(default_factory=dict)
    only: tuple[str, ...] | None = None
    retrain: bool = False

    @property
    def quick(self) -> bool:
        return self.mode == "quick"

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


def base_meta(settings: ReportSettings, section: str, *, data: str, model: str, engine: str = "none", device: str | None = None) -> dict[str, str]:
    return {
        "command": settings.command(section),
        "data": data,
        "engine": engine,
        "model": model,
        "hardware": hardware(device),
        "date": f"{today()} (commit {git_commit()})",
        "mode": settings.mode,
    }


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


def zh_dictionary(settings: ReportSettings) -> Path:
    """The Chinese dictionary built with ``jingpai dict build``: THUCNews titles (10 news domains) plus
    AFQMC train questions as a finance customer-service domain (diff-idf of each domain vs the others)."""
    out = settings.work_dir / "dict-zh"
    if (out / "meta.json").exists():
        return out
    questions = read_tsv_column(data_path("zh", "afqmc", "train.tsv"), (0, 1))
    # quick mode: a smaller corpus (10k questions, one THUCNews part) keeps the build to seconds
    afqmc = write_lines(settings.work_dir / "corpora" / "afqmc_train_questions.txt", questions[:10_000] if settings.quick else questions)
    titles = data_path("zh", "thucnews_titles")
    parts = ("part1.tsv",) if settings.quick else ("part1.tsv", "part2.tsv")
    jingpai_cli(
        "dict", "build", *[arg for part in parts for arg in ("--labelled", str(titles / part))],
        "--label-column", "1", "--text-column", "0", "--label-names", str(titles / "classes.txt"),
        "--domain", f"afqmc={afqmc}", "--out", str(out),
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
    """The real ``jingpai serve`` app for ``model`` on a loopback port (fp32, no warm-up)."""
    from jingpai.reranker.service import ServiceSettings, create_app

    settings = ServiceSettings(model_name=name, device="cpu" if model.device.type == "cpu" else "cuda", dtype="fp32", warmup=False)
    with serving(create_app(settings, model)) as url:
        yield url


@contextmanager
def gateway(engine_url: str, *, reranker_url: str | None, dict_dirs: tuple[Path, ...], window: int) -> Iterator[str]:
    """The real ``_search`` gateway (``jingpai gateway``) in front of ``engine_url``."""
    from jingpai.plugin.gateway import create_app
    from jingpai.plugin.settings import GatewaySettings

    settings = GatewaySettings(
        engine_url=engine_url, reranker_url=reranker_url, window=window, max_window=max(500, window),
        dict_dirs=dict_dirs, timeout_ms=120_000, meta_ttl_s=3600.0,
    )
    with serving(create_app(settings)) as url:
        yield url
