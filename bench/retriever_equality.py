"""The jingpai Elasticsearch plugin's ``jingpai`` retriever against the gateway: equality, fail-open and latency, one run.

    python bench/retriever_equality.py [--model DIR] [--dict DIR] [--engine URL] [--queries 1000] [--a14-companies 60]
                                       [--hang-queries 100] [--latency-requests 200] [--rounds 8] [--clients 1,8] [--window 20]

Issue 55's goals, on one Elasticsearch 8.19.21 node with the plugin (``--plugins jingpai``, built from this checkout's
java/elasticsearch-plugin; a free port, stopped afterwards; ``--engine``: a running node with the plugin), every index
on **2 shards** (the window is the global top of both):

1. **Equality.** LCQMC dev: every distinct question (both columns) indexed with ``jingpai index``'s code, the first
   ``--queries`` distinct q1 searched (``match`` on ``text``, top 20). A14 dev: every passage of
   ``zh/a14_stock_news/articles.jsonl`` indexed, each dev company's short name (``entity-meta-dev.tsv``) searched
   (top 20). Each search goes through one gateway (``jingpai gateway``, its own process) and through the retriever
   ``jingpai plugin retriever`` writes (its code: the dictionary uploaded once per index), with the search's query as
   the inner ``standard`` retriever's: ``--mode augment`` against ``?jingpai=augment`` and ``--fusion linear`` / ``rrf``
   against ``?jingpai=rerank&jingpai_fusion=…``. Per mode: pages compared, identical ids + order, the largest score
   difference (goal ≤ 1e-5), the first mismatch (bench/plugin_pipeline.py's comparison; the retriever's jingpai
   object is its X-Jingpai header). One search at a time, as bench/plugin_pipeline.py explains (the reranker's shared
   batches move scores in their last bits).
2. **Fail-open.** The reranker stopped (every LCQMC query, the linear retriever: connection refused) and a reranker
   that accepts connections and never answers (``--hang-queries`` queries, the retriever's ``timeout_ms`` 500): 0
   failed searches, each flagged ``reranked: false`` with its reason, the page in the augmented engine order.
3. **Latency.** Search p50/p90/p99 through the retriever vs the gateway, augmentation alone and rerank (linear), at
   each of ``--clients`` closed-loop clients, the rows taking turns (bench/plugin_pipeline.py's). Goal: retriever
   p50 ≤ gateway p50 (the retriever saves the gateway's hop).

The reranker is the real ``jingpai serve`` app (in this process, fp32) holding ``--model DIR`` (a saved jingpai model),
or by default the tiny random-weight BERT cross-encoder bench/plugin_pipeline.py builds (character vocabulary from
LCQMC *train* questions): it measures the plumbing and the equality, not a production model's cost or quality. The
dictionary (``--dict``, default the LCQMC report rows' ``bench.eval_common.zh_dictionary``) serves both indices.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import json
import socket
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench.common import DATA_DIR, cpu_flags, local_engine, machine  # noqa: E402
from bench.plugin_pipeline import (  # noqa: E402
    IDENTITY, MODES, TIMEOUT_MS, Services, build_model, compare, fail_open, latency, print_equality, print_results,
    read_lcqmc, start_gateway,
)

SHARDS = 2
#: the hanging reranker's deadline: each of those searches waits for it
HANG_TIMEOUT_MS = 500


def read_a14(limit: int) -> tuple[Path, list[str]]:
    """A14's passages file (``{id, text}``) and the first ``limit`` dev companies' short names (file order)."""
    folder = DATA_DIR / "zh" / "a14_stock_news"
    with (folder / "entity-meta-dev.tsv").open(encoding="utf-8") as f:
        names = [row["short_name"] for row in csv.DictReader(f, delimiter="\t")]
    return folder / "articles.jsonl", list(dict.fromkeys(names))[:limit]


@dataclass
class RetrieverServices(Services):
    """The gateway, and the retriever (the comparison's "pipeline" path) of each mode for ``index``."""

    retrievers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def search(self, client: httpx.Client, mode: str, path: str, text: str, size: int) -> dict[str, Any]:
        if path == "gateway":
            return super().search(client, mode, path, text, size)
        retriever = copy.deepcopy(self.retrievers[mode])
        retriever["jingpai"]["retriever"] = {"standard": {"query": {"match": {"text": text}}}}
        resp = client.post(f"{self.engine_url}/{self.index}/_search", json={"retriever": retriever, "size": size}, headers=IDENTITY)
        resp.raise_for_status()
        answer = resp.json()
        answer["jingpai"] = json.loads(resp.headers.get("x-jingpai", "{}"))  # where bench/plugin_pipeline.info reads it
        return answer


def write_retrievers(engine: Any, index: str, reranker_url: str, dict_dir: Path, window: int, *, timeout_ms: int = TIMEOUT_MS,
                     modes: tuple[str, ...] = MODES) -> dict[str, dict[str, Any]]:
    """``jingpai plugin retriever``'s retriever per mode (its code): --mode augment, --fusion linear / rrf; the breaker
    held open-proof as the gateway's (--breaker-failures 1000000), so both paths send every search to the reranker."""
    from jingpai.commands.retriever import write_retriever
    from jingpai.plugin.settings import GatewaySettings

    out = {}
    for mode in modes:
        fusion = "linear" if mode == "augment" else mode
        settings = GatewaySettings(engine_url=engine.url, reranker_url=reranker_url, fusion=fusion, window=window, timeout_ms=timeout_ms,
                                   breaker_failures=1_000_000)
        out[mode] = write_retriever(engine, index, settings, dict_dir=dict_dir, given=("breaker_failures",),
                                    mode="augment" if mode == "augment" else "rerank")["retriever"]
    return out


def index_two_shards(engine: Any, index: str, path: Path, dictionary: Any, tmp: Path) -> int:
    """``path`` (``{id, text}`` JSONL) indexed by ``jingpai index``'s code into ``index`` on 2 shards; documents indexed."""
    from jingpai.indexer.pipeline import IndexSettings, index_corpus

    engine.request("PUT", f"/_index_template/{index}", body={"index_patterns": [f"{index}*"], "priority": 500,
                                                             "template": {"settings": {"number_of_shards": SHARDS, "number_of_replicas": 0}}})
    report = index_corpus(engine, [path], IndexSettings(index=index, text_fields=("text",), id_field="id", quarantine_dir=tmp, progress=False),
                          dictionary=dictionary)
    engine.refresh(index)
    return report.indexed


@contextlib.contextmanager
def hanging_reranker() -> Any:
    """A loopback URL that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def main() -> None:  # long: one run, step by step, as bench/plugin_pipeline.py's
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="saved jingpai model dir (default: a tiny random BERT)")
    ap.add_argument("--dict", dest="dict_dir", type=Path, default=None, help="dictionary dir (default: the LCQMC report rows' one)")
    ap.add_argument("--engine", default=None, help="a running Elasticsearch node with the jingpai plugin (default: start one)")
    ap.add_argument("--queries", type=int, default=1000, help="distinct LCQMC dev q1 compared")
    ap.add_argument("--a14-companies", type=int, default=60, help="A14 dev companies compared (60: all)")
    ap.add_argument("--hang-queries", type=int, default=100, help="searches to a reranker that never answers")
    ap.add_argument("--latency-requests", type=int, default=200, help="timed searches per row and client count")
    ap.add_argument("--rounds", type=int, default=8, help="blocks in which the latency rows take turns")
    ap.add_argument("--clients", default="1,8", help="closed-loop client counts")
    ap.add_argument("--window", type=int, default=20)
    args = ap.parse_args()
    clients = tuple(int(c) for c in args.clients.split(","))
    started = time.monotonic()
    print(f"# jingpai retriever vs gateway — {machine()}; CPU features: {cpu_flags()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
          flush=True)

    from bench.eval_common import ReportSettings, zh_dictionary
    from jingpai.commands.retriever import DICTIONARY_INDEX, require_retriever_plugin
    from jingpai.engine.client import connect
    from jingpai.engine.harness import EngineSettings
    from jingpai.engine.plugins import plugin_fingerprint
    from jingpai.keyword_dict import Dictionary
    from jingpai.reranker.service import ServiceSettings
    from jingpai.reranker.service import create_app as create_service_app
    from jingpai.serving import ServerThread

    docs, queries = read_lcqmc(args.queries)
    a14_path, companies = read_a14(args.a14_companies)
    with tempfile.TemporaryDirectory(prefix="jingpai-bench-retriever-") as tmp, contextlib.ExitStack() as stack:
        tmp_path = Path(tmp)
        dict_dir = args.dict_dir or zh_dictionary(ReportSettings(work_dir=tmp_path / "work"))
        dictionary = Dictionary.load(dict_dir)
        engine_url = stack.enter_context(local_engine("elasticsearch", args.engine, plugins=("jingpai",)))
        fingerprint = plugin_fingerprint(EngineSettings(kind="elasticsearch", plugins=("jingpai",)), "jingpai")
        engine = connect(engine_url)
        stack.callback(engine.close)
        require_retriever_plugin(engine)
        tag = uuid.uuid4().hex[:8]
        lcqmc, a14 = f"bench-retriever-lcqmc-{tag}", f"bench-retriever-a14-{tag}"
        for index in (lcqmc, a14):
            stack.callback(lambda index=index: (engine.raw.indices.delete(index=f"{index}*"), engine.request("DELETE", f"/_index_template/{index}"),
                                                engine.raw.options(ignore_status=404).delete(index=DICTIONARY_INDEX, id=index)))
        corpus = tmp_path / "lcqmc_questions.jsonl"
        corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
        t0 = time.monotonic()
        indexed = {lcqmc: index_two_shards(engine, lcqmc, corpus, dictionary, tmp_path),
                   a14: index_two_shards(engine, a14, a14_path, dictionary, tmp_path)}
        index_s = time.monotonic() - t0
        model, model_desc = build_model(args.model, tmp_path)
        service = ServerThread(create_service_app(ServiceSettings(model_name="bench", device="cpu", dtype="fp32"), model)).start()
        stopped = threading.Event()
        stack.callback(lambda: stopped.is_set() or service.stop())
        gateway_proc, gateway_url = start_gateway(engine_url, service.url, dict_dir, args.window, lcqmc)
        stack.callback(lambda: (gateway_proc.terminate(), gateway_proc.wait(timeout=30)))
        services = {index: RetrieverServices(engine_url, gateway_url, index,
                                             retrievers=write_retrievers(engine, index, service.url, dict_dir, args.window))
                    for index in (lcqmc, a14)}
        plugin = "a running node's jingpai plugin" if args.engine else f"the jingpai plugin built from java/elasticsearch-plugin ({fingerprint})"
        print(f"engine: Elasticsearch {engine.version} ({engine.request('GET', '/_license')['license']['type']} licence) with {plugin}; "
              f"{SHARDS} shards per index; LCQMC: {indexed[lcqmc]} distinct dev questions, A14: {indexed[a14]} passages "
              f"(indexed in {index_s:.0f} s); dictionary {dictionary.version} ({dict_dir}); model: {model_desc}; reranker: jingpai serve "
              f"app, CPU fp32; window {args.window}", flush=True)

        t0 = time.monotonic()
        results, augmented = compare(services[lcqmc], queries, args.window, 1)
        a14_results, _ = compare(services[a14], companies, args.window, 1)
        print(f"(equality: {len(queries)} LCQMC + {len(companies)} A14 queries × 3 modes × 2 paths in {time.monotonic() - t0:.0f} s)",
              flush=True)
        problems: list[str] = []
        t0 = time.monotonic()
        lat = latency(services[lcqmc], queries, requests=args.latency_requests, rounds=args.rounds, clients=clients, size=args.window,
                      problems=problems)
        print(f"(latency: {time.monotonic() - t0:.0f} s)", flush=True)
        with hanging_reranker() as hang_url:
            hanging = RetrieverServices(engine_url, gateway_url, lcqmc, retrievers=write_retrievers(
                engine, lcqmc, hang_url, dict_dir, args.window, timeout_ms=HANG_TIMEOUT_MS, modes=("linear",)))
            t0 = time.monotonic()
            hung = fail_open(hanging, queries[: args.hang_queries], args.window, augmented)
            hang_s = time.monotonic() - t0
        service.stop()
        stopped.set()
        failed_open = fail_open(services[lcqmc], queries, args.window, augmented)

    print_results(results, failed_open, lat, clients, plugin="retriever")
    print_equality(a14_results, f"A14 dev companies (short name), retriever top 20 vs gateway top 20, {len(companies)} companies")
    print(f"\n## fail-open: reranker hanging (accepts, never answers; timeout_ms {HANG_TIMEOUT_MS}), linear retriever: {hung['searches']} "
          f"searches in {hang_s:.0f} s, {hung['failed']} failed, {hung['flagged']} with reranked=false (reasons {hung['reasons']}), "
          f"{hung['engine_order']} in the augmented engine order")
    if problems:
        print(f"WARNING: {len(problems)} timed rerank searches were not reranked: {sorted(set(problems))[:5]}")
    print(f"\ngoals (issue 55): every mode same ids+order with |Δscore| ≤ 1e-5 on LCQMC and A14; reranker stopped or hanging: 0 failed, "
          f"each flagged; retriever p50 ≤ gateway p50 (ratio ≤ 1.00). Total wall time {time.monotonic() - started:.0f} s.")
    ok = (all(r.identical == r.compared and r.bad_scores == 0 for r in (*results.values(), *a14_results.values()))
          and all(f["failed"] == 0 and f["flagged"] == f["searches"] for f in (failed_open, hung)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
