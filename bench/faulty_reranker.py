"""Faulty-reranker attack (issue 53): a reranker that answers wrongly in every way must never break, stall or
silently corrupt a search — through the gateway, and inside the engine (the OpenSearch plugin's pipeline).

    python bench/faulty_reranker.py [--timeout-ms 3000] [--cases infinity,trickle_one_byte_per_200ms,...]

Also run by ``bench/attack.py`` as its faulty-reranker phase (printed in its summary). Everything is on loopback
and started here: a disposable OpenSearch node with the jingpai plugin (the harness, built from this checkout), a
30-document corpus indexed twice by ``jingpai index`` (one index for the gateway, one with the plugin's default
pipeline), the stand-in reranker (``bench/standin_reranker.py``: every case of ``tests/vectors/rerank_answers.json``)
and ``jingpai gateway --mode rerank`` as a subprocess. Both sides get a breaker that never opens (1,000 failures),
so every case is really sent, and ``timeout_ms``.

For each case, on each side: the HTTP status, ``reranked`` and the reason, whether the page is the engine's order (the
same search with ``ext.jingpai.mode: augment``), and the search's wall time, which must stay within ``timeout_ms`` +
100 ms. While the stand-in answers 40 MB bodies (the two padded cases, ``--rss-searches`` searches each), the
gateway's RSS is sampled every 20 ms: its peak must stay within 50 MB of its RSS before them (the plugin's node's RSS
is reported alongside: a JVM's heap moves for its own reasons, so that one is a note, not a check).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench.common import machine, wait_http  # noqa: E402
from bench.standin_reranker import StandIn, load_cases  # noqa: E402
from jingpai.engine import harness  # noqa: E402

JINGPAI = [sys.executable, "-m", "jingpai"]
QUERY = {"query": {"match": {"content": "中国经济"}}, "size": 10}
TOPICS = ["中国经济", "银行利率", "股票投资", "GDP增长", "经济增长", "外贸出口"]
#: the slack the goal allows a search over ``timeout_ms``
SLACK_MS = 100
RSS_LIMIT_MB = 50.0
PADDED = ("padded_40mb", "padded_40mb_chunked")


@dataclass
class Row:
    side: str
    case: str
    status: int
    reranked: bool | None
    reason: str | None
    expected: str
    engine_order: bool
    elapsed_ms: float

    def ok(self, timeout_ms: int) -> bool:
        want_reranked = self.expected == "scores"
        reason_ok = self.reranked if want_reranked else (self.reranked is False and self.reason == self.expected)
        return self.status == 200 and bool(reason_ok) and (want_reranked or self.engine_order) and self.elapsed_ms <= timeout_ms + SLACK_MS


@dataclass
class Report:
    timeout_ms: int
    rows: list[Row] = field(default_factory=list)
    rss: dict[str, tuple[float, float]] = field(default_factory=dict)  # side -> (before, peak) MB
    failures: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"{'side':<8}{'case':<30}{'status':>7}  {'reranked':<9}{'reason':<26}{'engine order':<13}{'ms':>8}  ok"]
        for r in self.rows:
            out.append(f"{r.side:<8}{r.case:<30}{r.status:>7}  {r.reranked!s:<9}{r.reason or '-':<26}{'yes' if r.engine_order else 'no':<13}"
                       f"{r.elapsed_ms:>8.0f}  {'ok' if r.ok(self.timeout_ms) else 'FAIL'}")
        for side, (before, peak) in self.rss.items():
            out.append(f"{side} RSS while answering 40 MB bodies: {before:.0f} MB before, peak {peak:.0f} MB (+{peak - before:.1f} MB)")
        return out

    def summary(self) -> str:
        worst = {side: max((r.elapsed_ms for r in self.rows if r.side == side), default=0.0) for side in ("gateway", "plugin")}
        good = sum(r.ok(self.timeout_ms) for r in self.rows)
        rss = ", ".join(f"{side} RSS +{peak - before:.1f} MB" for side, (before, peak) in self.rss.items())
        return (f"faulty reranker: {good} of {len(self.rows)} searches right (200, engine order, reason); slowest gateway "
                f"{worst['gateway']:.0f} ms, plugin {worst['plugin']:.0f} ms (timeout_ms {self.timeout_ms}); {rss}")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def corpus(path: Path) -> None:
    """30 short news-like documents, each holding 经济 (so the query's window holds 20 hits)."""
    lines = []
    for i in range(30):
        topic, other = TOPICS[i % len(TOPICS)], TOPICS[(i * 5 + 1) % len(TOPICS)]
        lines.append(json.dumps({"id": f"d{i:02d}", "title": f"{topic}观察第{i}期",
                                 "content": f"本期关注{topic}与中国经济，兼谈{other}，第{i}号评论。"}, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def index(engine_url: str, alias: str, path: Path, work: Path) -> None:
    subprocess.run([*JINGPAI, "index", str(path), "--index", alias, "--engine", engine_url, "--id-field", "id", "--text-fields",
                    "title,content", "--quarantine-dir", str(work / "quarantine"), "--no-progress"], check=True, capture_output=True, timeout=600)
    httpx.post(f"{engine_url}/{alias}/_refresh", timeout=60, trust_env=False)


def ids(resp: dict) -> list[str]:
    return [h["_id"] for h in resp.get("hits", {}).get("hits", [])]


def one(client: httpx.Client, url: str, side: str, case: str, expected: str) -> Row:
    """One search of ``case``: the timed one, then its engine order (ext.jingpai.mode augment) to compare with."""
    started = time.perf_counter()
    resp = client.post(url, json=QUERY)
    elapsed = (time.perf_counter() - started) * 1000
    data = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
    info = data.get("jingpai") or data.get("ext", {}).get("jingpai") or {}
    reference = client.post(url, json={**QUERY, "ext": {"jingpai": {"mode": "augment"}}}).json()
    return Row(side, case, resp.status_code, info.get("reranked"), info.get("reason"), expected, bool(ids(data)) and ids(data) == ids(reference),
               elapsed)


def padded_rss(client: httpx.Client, url: str, pid: int, standin: StandIn, searches: int) -> tuple[float, float]:
    """(RSS before, peak RSS) of ``pid`` over ``searches`` searches of each padded case, sampled every 20 ms."""
    standin.use("valid_best_first")
    client.post(url, json=QUERY)  # warm: the first search's allocations are not the attack's
    before, peak, stop = rss_mb(pid), [0.0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mb(pid))
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for case in PADDED:
            standin.use(case)
            for _ in range(searches):
                client.post(url, json=QUERY)
    finally:
        stop.set()
        sampler.join(timeout=5)
    return before, max(peak[0], before)


def side_cases(report: Report, side: str, url: str, pid: int, standin: StandIn, cases: list[str], rss_searches: int) -> None:
    vectors = load_cases()
    print(f"  [{side}] {len(cases)} cases against the stand-in at {standin.url}", flush=True)
    with httpx.Client(timeout=300, trust_env=False) as client:
        for case in cases:
            standin.use(case)
            expected = vectors[case]["expected"]
            row = one(client, url, side, case, expected.get("reason", "scores"))
            report.rows.append(row)
            print(f"    {case:<30} {row.status} reranked={row.reranked} reason={row.reason} engine order={row.engine_order} "
                  f"{row.elapsed_ms:.0f} ms {'ok' if row.ok(report.timeout_ms) else 'FAIL'}", flush=True)
            if not row.ok(report.timeout_ms):
                report.failures.append(f"{side} {case}: {row}")
        if rss_searches:
            report.rss[side] = padded_rss(client, url, pid, standin, rss_searches)


def run(timeout_ms: int = 3000, cases: list[str] | None = None, rss_searches: int = 10) -> Report:
    """The faulty-reranker attack on both sides; see the module's docstring."""
    cases = cases or list(load_cases())
    report = Report(timeout_ms)
    engine = harness.EngineSettings(kind="opensearch", port=harness.free_port(), plugins=("jingpai",))
    with tempfile.TemporaryDirectory(prefix="jingpai-faulty-") as tmp, StandIn() as standin:
        work = Path(tmp)
        print(f"== faulty reranker: a disposable OpenSearch node with the jingpai plugin on {engine.url}", flush=True)
        node = harness.start(engine)
        gateway = None
        try:
            docs = work / "docs.jsonl"
            corpus(docs)
            index(engine.url, "faulty-gw", docs, work)
            index(engine.url, "faulty-plugin", docs, work)
            port = harness.free_port()
            gateway = subprocess.Popen([*JINGPAI, "gateway", "--engine", engine.url, "--reranker", standin.url, "--port", str(port),
                                        "--mode", "rerank", "--timeout-ms", str(timeout_ms), "--breaker-failures", "1000"],
                                       stdout=(work / "gateway.log").open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
            wait_http(f"http://127.0.0.1:{port}/")
            subprocess.run([*JINGPAI, "plugin", "pipeline", "--index", "faulty-plugin", "--reranker", standin.url, "--engine", engine.url,
                            "--timeout-ms", str(timeout_ms), "--breaker-failures", "1000"], check=True, capture_output=True, timeout=300)
            side_cases(report, "gateway", f"http://127.0.0.1:{port}/faulty-gw/_search", gateway.pid, standin, cases, rss_searches)
            side_cases(report, "plugin", f"{engine.url}/faulty-plugin/_search", node.pid, standin, cases, rss_searches)
        finally:
            if gateway is not None:
                gateway.kill()
                gateway.wait(timeout=30)
            harness.stop(engine, purge=True)
    if "gateway" in report.rss:
        before, peak = report.rss["gateway"]
        if peak - before > RSS_LIMIT_MB:
            report.failures.append(f"gateway RSS grew {peak - before:.0f} MB (limit {RSS_LIMIT_MB:.0f}) while answering 40 MB bodies")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout-ms", type=int, default=3000)
    parser.add_argument("--cases", default="", help="comma-separated case names (default: every case of the vectors)")
    parser.add_argument("--rss-searches", type=int, default=10, help="searches of each padded case while RSS is sampled")
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    report = run(args.timeout_ms, [c for c in args.cases.split(",") if c] or None, args.rss_searches)
    print("\n".join(["", *report.lines(), "", report.summary(), *(f"FAIL: {f}" for f in report.failures)]))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
