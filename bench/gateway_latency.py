"""Gateway latency: direct engine vs the gateway with reranking off vs the gateway reranking the top 20,
8 concurrent clients on loopback, in one run on the same index and queries.

    python bench/gateway_latency.py [--kind opensearch|elasticsearch] [--engine URL] [--model DIR]
                                    [--requests 400] [--concurrency 8] [--window 20]

``--model`` is a saved jingpai model directory (``jingpai train`` output, e.g. the packaged MiniLM
cross-encoder); without it a tiny random BERT is built locally, which measures the plumbing but not a
production model's inference cost.

Rows: direct engine (the client as it is: httpx asks for gzip), direct engine uncompressed
(``Accept-Encoding: identity``: what the gateway asks the engine for), a bare relay on the gateway's server and
engine client (``bench/relay_floor.py``: the floor under the gateway), the gateway with ``?jingpai=off``
(proxying only), the gateway reranking the top ``--window`` hits. The first four take turns in ``--rounds``
blocks (drift on a shared machine hits them alike); the gateway's and the relay's own CPU per request are
printed with the Δp50 each alone predicts when every core is busy (closed loop: clients / cores × CPU per request).

Goals (issue 7): gateway with rerank off p50 ≤ direct + 2 ms, p99 ≤ direct + 10 ms; with rerank of the
top 20 on CPU p50 ≤ 250 ms on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench.common import DATA_DIR, local_engine, machine  # noqa: E402
from jingpai.engine.client import connect  # noqa: E402
from jingpai.indexer.pipeline import IndexSettings, index_corpus  # noqa: E402


def corpus(out: Path) -> list[str]:
    rows, titles = [], []
    with (DATA_DIR / "zh" / "cnews_sample" / "docs.tsv").open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            label, article = line.rstrip("\n").split("\t", 1)
            title = article.split("。")[0][:60]
            rows.append({"id": str(i), "category": label, "title": title, "content": article[:2000]})
            titles.append(title[:12])
    out.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return titles


failures: list[str] = []


def run(url: str, index: str, queries: list[str], *, n: int, concurrency: int, params: dict, headers: dict | None = None,
        reranks: bool = False) -> list[float]:
    """Latencies (ms) of ``n`` searches from ``concurrency`` clients; with ``reranks``, answers not reranked are
    counted in ``failures`` (only then is an answer parsed: that costs the client's CPU, which the rows share)."""
    client = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=concurrency * 2))

    def one(i: int) -> float:
        body = {"query": {"match": {"content": queries[i % len(queries)]}}, "size": 10}
        started = time.perf_counter()
        resp = client.post(f"{url}/{index}/_search", json=body, params=params, headers=headers)
        resp.raise_for_status()
        if reranks and not resp.json()["jingpai"]["reranked"]:
            failures.append(resp.json()["jingpai"]["reason"])
        return (time.perf_counter() - started) * 1000

    for i in range(concurrency * 2):  # warm connections and caches
        one(i)
    with ThreadPoolExecutor(concurrency) as pool:
        latencies = list(pool.map(one, range(n)))
    client.close()
    return latencies


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=["opensearch", "elasticsearch"], default="opensearch")
    ap.add_argument("--engine", default=None, help="use a running engine instead of starting one")
    ap.add_argument("--model", type=Path, default=None, help="saved jingpai model dir (default: a tiny random BERT)")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=4, help="blocks in which the direct and gateway paths take turns")
    args = ap.parse_args()

    from jingpai.reranker import registry
    from jingpai.reranker.base import Reranker
    from jingpai.reranker.service import ServiceSettings
    from jingpai.reranker.service import create_app as create_service_app
    from jingpai.reranker.tiny import build_tiny_checkpoint
    from jingpai.engine.harness import free_port
    from jingpai.serving import ServerThread

    with tempfile.TemporaryDirectory() as tmp, local_engine(args.kind, args.engine) as engine_url:
        tmp_path = Path(tmp)
        titles = corpus(tmp_path / "news.jsonl")
        engine = connect(engine_url)
        index = f"bench-gw-{int(time.time())}"
        index_corpus(engine, [tmp_path / "news.jsonl"], IndexSettings(index=index, quarantine_dir=tmp_path, progress=False, id_field="id"))
        engine.refresh(index)
        if args.model:
            model, model_desc = Reranker.load(args.model, device="cpu"), str(args.model)
        else:
            base = build_tiny_checkpoint(tmp_path / "tiny", titles, seed=0)
            model, model_desc = registry.create("cross", base=str(base), max_length=128, device="cpu"), "tiny random BERT (plumbing only)"
        service = ServerThread(create_service_app(ServiceSettings(model_name="bench", device="cpu"), model)).start()
        # the gateway runs in its own process (as deployed), so the load generator's threads do not share its GIL
        port = free_port()
        gateway_proc = subprocess.Popen(
            [sys.executable, "-m", "jingpai", "gateway", "--engine", engine_url, "--reranker", service.url, "--port", str(port),
             "--window", str(args.window), "--timeout-ms", "10000"],
            cwd=Path(__file__).resolve().parents[1],
        )
        gateway_url = f"http://127.0.0.1:{port}"
        # the floor: the same server and engine client with nothing of the gateway in between (bench/relay_floor.py)
        relay_port = free_port()
        relay_proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("relay_floor.py")), engine_url, str(relay_port)])
        relay_url = f"http://127.0.0.1:{relay_port}"
        for url, proc, what in ((gateway_url, gateway_proc, "the gateway"), (relay_url, relay_proc, "the bare relay")):
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.post(f"{url}/{index}/_search", json={"size": 0}, timeout=2).raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit(f"{what} did not start")
                    time.sleep(0.2)
        try:
            # the three compared paths take turns in --rounds blocks, so drift (engine warm-up, another job's
            # load on a shared machine) hits each path alike instead of whichever ran last
            kw = {"n": max(1, args.requests // args.rounds), "concurrency": args.concurrency}
            direct, direct_identity, off, relay = [], [], [], []
            off_cpu_s = relay_cpu_s = 0.0
            for _ in range(args.rounds):
                direct += run(engine_url, index, titles, params={}, **kw)
                direct_identity += run(engine_url, index, titles, params={}, headers={"accept-encoding": "identity"}, **kw)
                cpu0 = process_cpu_s(relay_proc.pid)
                relay += run(relay_url, index, titles, params={}, **kw)
                relay_cpu_s += process_cpu_s(relay_proc.pid) - cpu0
                cpu0 = process_cpu_s(gateway_proc.pid)
                off += run(gateway_url, index, titles, params={"jingpai": "off"}, **kw)
                off_cpu_s += process_cpu_s(gateway_proc.pid) - cpu0
            # each process's own CPU per request (warm-up requests included): with every core busy (engine,
            # clients, gateway), a closed loop of C clients on K cores waits about C/K times this
            off_cpu_ms = off_cpu_s * 1000 / (args.rounds * (kw["n"] + 2 * args.concurrency))
            relay_cpu_ms = relay_cpu_s * 1000 / (args.rounds * (kw["n"] + 2 * args.concurrency))
            rerank = run(gateway_url, index, titles, params={}, n=max(args.requests // 4, 40), concurrency=args.concurrency,
                         reranks=True)
        finally:
            for proc in (gateway_proc, relay_proc):
                proc.terminate()
                proc.wait(timeout=30)
            service.stop()
            engine.raw.indices.delete(index=f"{index}*")
            engine.close()

    print(f"# gateway latency — {machine()}; engine {args.kind}; {args.concurrency} concurrent clients; model {model_desc}")
    print(f"{'path':<30}{'p50 ms':>10}{'p99 ms':>10}{'Δp50 ms':>10}{'Δp99 ms':>10}{'p50 ratio':>11}"
          f"{'Δp50 vs unc.':>14}{'Δp99 vs unc.':>14}")
    d50, d99 = pct(direct, 50), pct(direct, 99)
    u50, u99 = pct(direct_identity, 50), pct(direct_identity, 99)
    rows = (("direct engine", direct), ("direct engine, uncompressed", direct_identity),
            ("bare relay (floor)", relay), ("gateway, rerank off", off), (f"gateway, rerank top {args.window}", rerank))
    for name, lat in rows:
        p50, p99 = pct(lat, 50), pct(lat, 99)
        print(f"{name:<30}{p50:>10.2f}{p99:>10.2f}{p50 - d50:>10.2f}{p99 - d99:>10.2f}{p50 / d50:>10.2f}x"
              f"{p50 - u50:>14.2f}{p99 - u99:>14.2f}")
    cores = os.cpu_count() or 1
    for name, cpu_ms in (("gateway, rerank off", off_cpu_ms), ("bare relay (floor)", relay_cpu_ms)):
        print(f"process CPU per request, {name}: {cpu_ms:.2f} ms; with {args.concurrency} closed-loop clients on "
              f"{cores} busy cores that alone predicts Δp50 ≈ {args.concurrency / cores * cpu_ms:.1f} ms")
    print("(bare relay: bench/relay_floor.py, the gateway's server and engine client with nothing of the gateway in\n"
          " between; what it adds, the gateway cannot go below without another HTTP server or client)")
    if failures:
        print(f"WARNING: {len(failures)} rerank requests were not reranked: {sorted(set(failures))}")
    print("(httpx clients send Accept-Encoding: gzip, so the engine compresses its answers to direct requests; the gateway\n"
          " asks the engine for uncompressed answers, which it reads anyway, and answers uncompressed: the second row\n"
          " is the direct baseline without compression)")
    print("goals: rerank off Δp50 ≤ 2 ms, Δp99 ≤ 10 ms against the engine answering uncompressed (issue 21: the 'vs unc.'\n"
          "columns); rerank top 20 p50 ≤ 250 ms (2-core CPU, production model)")


if __name__ == "__main__":
    main()
