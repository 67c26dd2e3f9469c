"""Section 5 — speed: runs the bench/ scripts (each measures its own baseline in the same run) and
collects their ratio lines into one table with the machine they ran on. The full output of each script
is kept in the results folder (``speed-<name>.txt``)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time

from bench.eval_common import REPO, ReportSettings, Row, Table, base_meta, hardware

logger = logging.getLogger(__name__)

#: name -> (script, full-mode args, quick-mode args, goal); ``{os}`` / ``{es}`` are engine URLs
BENCHES: dict[str, tuple[str, list[str], list[str], str]] = {
    "dict_build": ("bench/dict_build.py", [], ["--workers", "2"], "≥ 3 MB/s on 2 cores; 4× data ≤ 4.4× time"),
    "segmentation": ("bench/segmentation.py", [], ["--docs", "100"], "rjieba faster than jieba, identical tokens"),
    "index_throughput": ("bench/index_throughput.py", ["--engine", "{os}", "--repeat", "3"], ["--engine", "{os}", "--repeat", "1"],
                         "jingpai index ≥ 0.8× raw bulk docs/s"),
    "service_throughput": ("bench/service_throughput.py", ["--device", "cpu"], ["--device", "cpu", "--requests", "8", "--concurrency", "4"],
                           "batched service ≥ naive per-request scoring"),
    "gateway_latency": ("bench/gateway_latency.py", ["--engine", "{os}", "--requests", "400"], ["--engine", "{os}", "--requests", "40"],
                        "rerank off Δp50 ≤ 2 ms, Δp99 ≤ 10 ms; rerank top 20 p50 ≤ 250 ms (production model)"),
}
#: per bench: the lines of its output that carry its results and ratios
KEY_LINES: dict[str, re.Pattern[str]] = {
    "dict_build": re.compile(r"^(corpus|\d+x\s)"),
    "segmentation": re.compile(r"^HMM (on|off)\s*:"),
    "index_throughput": re.compile(r"^(raw helpers|jingpai index|ratio)"),
    "service_throughput": re.compile(r"/ naive"),
    "gateway_latency": re.compile(r"^(path|direct engine|gateway)"),
}


def run(settings: ReportSettings) -> list[Table]:
    os_url = settings.engines.get("opensearch") or settings.engines.get("elasticsearch")
    table = Table(
        key="speed", section="speed", title=f"Speed ratios from the bench/ scripts ({settings.mode})",
        columns=["benchmark", "goal", "result (ratio lines of its output)", "seconds"],
        meta=base_meta(settings, "speed", data="see each script's docstring (cnews_sample, LCQMC, THUCNews)",
                       engine=f"opensearch at {os_url}" if os_url else "none", model="scripts' own (random-weight MiniLM-shaped cross for service/gateway)",
                       device="cpu"),
        notes=[f"machine: {hardware()}; load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1/5/15 min) when the section "
               "started — the cores were shared with other jobs, so ratios vary between runs; each ratio compares to a baseline "
               "measured in the same run. Full outputs: out/report/speed-*.txt."],
    )
    out_dir = settings.results_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, (script, full_args, quick_args, goal) in BENCHES.items():
        row_id = f"speed.{name}"
        if not settings.wants(row_id):
            continue
        args = [a.format(os=os_url or "") for a in (quick_args if settings.quick else full_args)]
        if "{os}" in " ".join(quick_args + full_args) and not os_url:
            table.notes.append(f"{name}: skipped — needs an engine URL")
            continue
        cmd = [sys.executable, script, *args]
        started = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - started
        (out_dir / f"speed-{name}.txt").write_text(f"$ {' '.join(cmd[1:])}\n{proc.stdout}\n{proc.stderr[-3000:]}", encoding="utf-8")
        if proc.returncode != 0:
            result = f"FAILED (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1][:200] if proc.stderr.strip() else ''}"
        else:
            lines = [" ".join(ln.split()) for ln in proc.stdout.splitlines() if KEY_LINES[name].search(ln)]
            result = "<br>".join(lines[-6:]) or proc.stdout.strip().splitlines()[-1]
        table.rows.append(Row(cells={"benchmark": name, "goal": goal, "result (ratio lines of its output)": result, "seconds": f"{seconds:.0f}"},
                              command=f"python {script} {' '.join(args)}".strip()))
    return [table]
