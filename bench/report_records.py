"""The saved records behind docs/RESULTS.md (issue 57): one JSON file per topic under ``docs/results/tables/``.

Each file is ``{"title": str, "records": [record, …]}``; a record is one measured (or quoted) number set:

- ``id`` (unique across every file), ``dataset`` (a key of :data:`SPLITS`), ``split`` (one of that data set's report
  splits — never a training split), ``role`` (one of :data:`ROLES`), ``system`` (what ran, in words),
  ``metrics`` (``{name: number | {"mean", "std", "n"}}``), ``date``, ``issue`` (int or null), ``source`` (where the
  full table is: docs/results/history.md §…, docs/models.md, …) and ``command`` (what reruns it);
- optional: ``model`` (the recipe / model id), ``use`` (the command that trains or serves it), ``engine``,
  ``protocol``, ``queries``, ``seeds``, ``hardware``, ``note``, ``params``, ``models`` (latency rows: the model ids
  they time), ``over`` (id of the first stage a rerank row reorders, when not the data set's BM25 row),
  ``supersedes`` (ids this record replaces in the report: they stay in their file, the page quotes this one),
  ``current`` (``false``: kept for the record, never quoted as the current best), ``headline`` (``false``: never
  picked for the headline table), ``comparable`` (``false``: a quoted figure on other data).

A full ``python -m bench report`` run imports its judged tables here too (:func:`records_from_tables`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.eval_common import AUGMENTED_BM25, RAW_BM25, REPO, ReportError

TABLES_DIR = REPO / "docs" / "results" / "tables"
#: the file a full report run writes its judged tables' records to (:func:`records_from_tables`)
IMPORTED_FILE = "report-judged.json"

#: every data set a record may name, with the splits a quality number may come from (the data README's report
#: splits; the papers' figures are quoted on their own test sets). ``speed`` rows measure no quality.
SPLITS: dict[str, tuple[str, ...]] = {
    "a14": ("dev",), "qbqtc": ("dev",), "kuake": ("dev",),
    "lcqmc": ("dev", "test"), "bq": ("dev",), "afqmc": ("dev",),
    "trecqa": ("raw-test",), "wikiqa": ("dev",),
    "microblog2011": ("test",), "microblog2012": ("test",),
    "stsb": ("test",), "pawsx": ("dev",), "kwpaper": ("test",),
    "speed": ("n/a",),
}
#: what a record is: first stages (bm25, augmented, knn, hybrid, hybrid-bm25), reranked results (rerank,
#: hybrid+rerank), other references (baseline: random order, majority class, a provided run), quoted papers,
#: pair classifiers, label diagnostics and speed rows
ROLES: tuple[str, ...] = ("bm25", "augmented", "knn", "hybrid", "hybrid-bm25", "rerank", "hybrid+rerank", "baseline", "paper",
                          "classifier", "labels", "latency", "end-to-end", "overhead", "throughput", "peak")
REQUIRED: dict[str, type | tuple[type, ...]] = {"id": str, "dataset": str, "split": str, "role": str, "system": str, "metrics": dict,
                                                 "date": str, "issue": (int, type(None)), "source": str, "command": str}
OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "model": str, "use": str, "engine": str, "protocol": str, "queries": int, "seeds": int, "hardware": str, "note": str,
    "params": dict, "models": list, "over": str, "supersedes": (str, list), "current": bool, "headline": bool, "comparable": bool,
    "device": str, "table": str,
}


class RecordError(ReportError):
    """A saved record is malformed or refers to one that does not exist; the message names the file, record and field."""


def value(cell: Any) -> float | None:
    """A metric cell as a number: the mean of ``{"mean", "std", "n"}``, the number itself, else ``None``."""
    if isinstance(cell, dict) and isinstance(cell.get("mean"), (int, float)):
        return float(cell["mean"])
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        return float(cell)
    return None


def _type_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def check_record(record: Any, where: str) -> dict[str, Any]:
    """``record`` validated (fields, types, data set, split, role, metric cells); a :class:`RecordError` names ``where``
    and the bad field otherwise."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(record).__name__}")
    where = f"{where} ({record.get('id')!r})" if isinstance(record.get("id"), str) else where
    for name, kind in REQUIRED.items():
        if name not in record:
            raise RecordError(f"{where}: missing field {name!r} (required: {', '.join(REQUIRED)})")
        if not isinstance(record[name], kind) or isinstance(record[name], bool):
            raise RecordError(f"{where}: field {name!r} must be {_type_name(kind)}, got {record[name]!r}")
    for name, cell in record.items():
        if name in REQUIRED:
            continue
        if name not in OPTIONAL:
            raise RecordError(f"{where}: unknown field {name!r} (known: {', '.join([*REQUIRED, *OPTIONAL])})")
        if not isinstance(cell, OPTIONAL[name]):
            raise RecordError(f"{where}: field {name!r} must be {_type_name(OPTIONAL[name])}, got {cell!r}")
    if record["dataset"] not in SPLITS:
        raise RecordError(f"{where}: unknown dataset {record['dataset']!r} (known: {', '.join(SPLITS)})")
    if record["split"] not in SPLITS[record["dataset"]]:
        raise RecordError(f"{where}: split {record['split']!r} is not a report split of {record['dataset']} "
                          f"(expected {' or '.join(SPLITS[record['dataset']])}; training or selection splits are never quoted as quality)")
    if record["role"] not in ROLES:
        raise RecordError(f"{where}: unknown role {record['role']!r} (known: {', '.join(ROLES)})")
    if not record["metrics"]:
        raise RecordError(f"{where}: 'metrics' is empty")
    for name, cell in record["metrics"].items():
        if value(cell) is None:
            raise RecordError(f"{where}: metric {name!r} must be a number or {{\"mean\", \"std\", \"n\"}}, got {cell!r}")
    if not record["command"].strip():
        raise RecordError(f"{where}: 'command' is empty (every number needs the command that reruns it)")
    return record


def load_records(tables_dir: Path = TABLES_DIR) -> list[dict[str, Any]]:
    """Every record of every ``*.json`` under ``tables_dir`` (files by name, records in file order), each with its
    file name as ``table``; ids unique, ``over`` / ``supersedes`` naming existing ids."""
    if not tables_dir.is_dir():
        raise RecordError(f"{tables_dir}: no such folder of saved tables (expected docs/results/tables/*.json)")
    records: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for path in sorted(tables_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RecordError(f"{path.name}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict) or not isinstance(data.get("records"), list):
            raise RecordError(f"{path.name}: expected {{\"title\": …, \"records\": [ … ]}}")
        for i, raw in enumerate(data["records"]):
            record = dict(check_record(raw, f"{path.name}: record {i}"))
            if record["id"] in seen:
                raise RecordError(f"{path.name}: record {i}: id {record['id']!r} is used twice (also in {seen[record['id']]})")
            seen[record["id"]] = path.name
            record["table"] = path.name
            records.append(record)
    for record in records:
        refs = [record["over"]] if "over" in record else []
        refs += [record["supersedes"]] if isinstance(record.get("supersedes"), str) else record.get("supersedes", [])
        for ref in refs:
            if ref not in seen:
                raise RecordError(f"{record['table']}: record {record['id']!r} refers to {ref!r}, which no saved table holds")
    return records


def current(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records the report may quote as current: not ``current: false`` and not superseded by another record."""
    records = list(records)
    gone = set()
    for r in records:
        sup = r.get("supersedes", [])
        gone.update([sup] if isinstance(sup, str) else sup)
    return [r for r in records if r.get("current", True) and r["id"] not in gone]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def _role(system: str) -> str:
    """The role of a judged table's row, from its method label (bench/eval_judged.py)."""
    if system in (RAW_BM25, "BM25 (bm25s, jieba tokens)"):
        return "bm25"
    if system == AUGMENTED_BM25:
        return "augmented"
    if system.startswith("hybrid + rerank"):
        return "hybrid+rerank"
    if system.startswith("+ rerank") or "(model score alone)" in system or "linear fusion" in system:
        return "rerank"
    return "baseline"


def _model(system: str) -> str | None:
    """The model id in a judged row's method label: ``KEY (model score alone)``, ``BM25 + KEY, linear …``,
    ``+ rerank top N, KEY, …``."""
    for pattern in (r"^\+ rerank top \d+, ([^,]+),", r"^BM25 \+ ([^,]+), linear", r"^(\S+) \(model score alone\)$"):
        match = re.match(pattern, system)
        if match:
            return match.group(1)
    return None


def records_from_tables(tables: Sequence[Any]) -> list[dict[str, Any]]:
    """Records of the report's judged tables (:func:`bench.judged_metrics.summary_records`), for :data:`IMPORTED_FILE`."""
    from bench.judged_metrics import summary_records

    out = []
    for r in summary_records(tables):
        metrics = {k: v for k, v in r["metrics"].items() if value(v) is not None}
        if not metrics or r["dataset"] not in SPLITS:
            continue
        record = {"id": f"report.{r['dataset']}.{r['engine']}.{_slug(r['system'])}", "dataset": r["dataset"], "split": r["split"],
                  "role": _role(r["system"]), "system": r["system"], "metrics": metrics, "engine": r["engine"],
                  "protocol": r["protocol"], "date": r["date"] or "unknown", "issue": 52,
                  "source": f"python -m bench report --sections judged ({r['mode']} mode): out/report/ judged tables", "command": r["command"]}
        if isinstance(r.get("queries"), int):
            record["queries"] = r["queries"]
        if _model(r["system"]):
            record["model"] = _model(r["system"])
        out.append(check_record(record, f"{IMPORTED_FILE}: {r['system']!r}"))
    return out


def save_imported(tables: Sequence[Any], tables_dir: Path = TABLES_DIR) -> Path | None:
    """Write the judged tables' records to ``tables_dir / IMPORTED_FILE`` (replacing the last import); ``None`` if none."""
    records = records_from_tables(tables)
    if not records:
        return None
    path = tables_dir / IMPORTED_FILE
    tables_dir.mkdir(parents=True, exist_ok=True)
    title = "Imported by python -m bench report from its judged tables (each run replaces this file)"
    path.write_text(json.dumps({"title": title, "records": records}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path
