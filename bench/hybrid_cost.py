"""What the semantic first stage costs (issue 32), in one run: ``jingpai index`` throughput with document vectors
against without, and search latency through the gateway with the hybrid first stage against BM25, both before the
same rerank.

    python bench/hybrid_cost.py [--kind elasticsearch|opensearch] [--engine URL] [--embedder DIR] [--reranker DIR]
                                [--corpus questions|news|both] [--docs 8000] [--rounds 3] [--queries 200] [--breakdown]
                                [--vector-index hnsw|flat]

``--embedder`` is a saved bi-encoder (``jingpai train --model use-bi`` output); without it USE-multilingual v3
untrained (``use-bi`` with its pretrained weights: the architecture and cost of every ``use-bi``, trained or not).
``--reranker`` is the model ``jingpai serve`` reranks with (default: the embedder, one service for ``/embed`` and
``/rerank``, as the report runs it). OpenSearch is started with its k-NN plugin.

Corpora (training data only): ``questions`` — ``--docs`` distinct AFQMC *train* questions (short texts: what the
hybrid first stage is for here), ``news`` — the 1,000 THUCNews articles of ``zh/cnews_sample`` (long texts, each
embedded by its first window: ``--vector-chunking first``). Queries: ``--queries`` other AFQMC train questions.

Rows:

- **indexing** (per corpus; the two rows take turns ``--rounds`` times, the median ratio is the result):
  ``jingpai index`` as it runs without vectors (segmentation, keywords, bulk) and with ``--vectors`` (the same plus one
  vector per document, in the same bulk requests). Goal: with ≥ 0.5× the docs/s without, on CPU. A third row indexes
  the same corpus again into a new version (as a dictionary update or ``--rebuild`` does): its vectors are read back
  from the live index, not embedded (jingpai.indexer.vector_reuse). ``--vector-index flat`` indexes the vectors without
  an HNSW graph (exact kNN search). ``--breakdown``
  adds the engine's share: the documents jingpai built, read back and bulk-loaded alone into the same mapping.
- **search latency** (one client, sequential, on the questions index with vectors, the five rows taking turns in
  blocks): the gateway with BM25 alone, hybrid alone (rerank off), BM25 + rerank of the top 20, hybrid + rerank of
  the top 20, and hybrid + rerank of both lists' top 20 (``rerank_window: both``); p50 / p90 / p99 in ms, and the
  medians of the gateway's own ``took_embed_ms`` / ``took_knn_ms``.
  Goal: hybrid + rerank p50 ≤ BM25 + rerank p50 + 20 ms.

The machine (CPU model and the features the speed depends on) is printed first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench.common import DATA_DIR, cpu_flags, local_engine, machine  # noqa: E402

DEPTH = 20
LATENCY_ROWS = (
    ("BM25 (gateway, rerank off)", "augment", False),
    ("hybrid BM25 + kNN (rerank off)", "augment", True),
    (f"BM25 + rerank top {DEPTH}", "rerank", False),
    (f"hybrid + rerank top {DEPTH}", "rerank", True),
    # rerank_window "both": every hit in either list's top DEPTH (up to twice the reranking work)
    (f"hybrid + rerank both lists' top {DEPTH}", "rerank", "both"),
)


def questions(n_docs: int, n_queries: int) -> tuple[list[dict], list[str]]:
    """``n_docs`` distinct AFQMC train questions as documents and ``n_queries`` others as queries (seed 0)."""
    texts: dict[str, None] = {}
    with (DATA_DIR / "zh" / "afqmc" / "train.tsv").open(encoding="utf-8") as fh:
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            for text in parts[:2]:
                texts.setdefault(text.strip(), None)
    pool = [t for t in texts if t]
    random.Random(0).shuffle(pool)
    docs = [{"id": f"q{i}", "text": t} for i, t in enumerate(pool[:n_docs])]
    return docs, pool[n_docs : n_docs + n_queries]


def news() -> list[dict]:
    with (DATA_DIR / "zh" / "cnews_sample" / "docs.tsv").open(encoding="utf-8") as fh:
        return [{"id": f"n{i}", "text": line.rstrip("\n").split("\t", 1)[1]} for i, line in enumerate(fh)]


def load_models(args: argparse.Namespace, tmp: Path):
    """``(embedder, rerank model)``: the saved ones, or untrained USE-multilingual (saved to ``tmp`` so the index
    can name it)."""
    from jingpai.jobs.document_vectors import ModelEmbedder, load_embedder
    from jingpai.reranker import registry
    from jingpai.reranker.base import Reranker

    if args.embedder is not None:
        embedder = load_embedder(args.embedder, device="cpu")
    else:
        model = registry.create("use-bi", device="cpu")
        folder = tmp / "use-bi-untrained"
        model.save(folder)
        embedder = ModelEmbedder(model, folder)
    reranker = Reranker.load(args.reranker, device="cpu") if args.reranker is not None else embedder.model
    return embedder, reranker


def write_jsonl(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    return path


def index_rows(engine, name: str, docs: list[dict], args: argparse.Namespace, embedder, dictionary, tmp: Path) -> float:
    """The indexing rows ``--rounds`` times; the median ratio (with / without vectors). The third row re-indexes the
    same corpus into a new version of the index the second row built (a dictionary update, ``--rebuild``): every
    vector is read back from the live index instead of embedded (``--no-reuse-vectors`` turns that off)."""
    from jingpai.indexer.pipeline import IndexSettings, index_corpus

    path = write_jsonl(tmp / f"{name}.jsonl", docs)
    ratios, reuse_ratios = [], []
    for r in range(args.rounds):
        rates = {}
        for row in ("text", "vectors", "reuse"):
            alias = f"bench-hc-{name}-{'txt' if row == 'text' else 'vec'}"
            if row != "reuse":
                engine.delete_index(f"{alias}-*")
            settings = IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False, quarantine_dir=tmp,
                                     vectors=Path(embedder.model_path) if row != "text" else None, vector_chunking="first", force=True,
                                     rebuild=row == "reuse", vector_index=args.vector_index)
            t0, cpu0 = time.perf_counter(), time.process_time()
            report = index_corpus(engine, [path], settings, dictionary=dictionary, embedder=embedder if row != "text" else None)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            assert report.indexed == len(docs), report.summary()
            assert row != "reuse" or report.vectors_reused == len(docs), report.summary()
            rates[row] = len(docs) / seconds
            label = {"text": "jingpai index (text only)", "vectors": "jingpai index --vectors",
                     "reuse": "--vectors, new version (reused)"}[row]
            print(f"  {name:<9} round {r + 1}  {label:<32}{seconds:>8.2f} s{rates[row]:>9.0f} docs/s   client CPU {cpu:.1f} s")
        ratios.append(rates["vectors"] / rates["text"])
        reuse_ratios.append(rates["reuse"] / rates["text"])
    ratio = statistics.median(ratios)
    print(f"  {name}: with / without vectors, median of {len(ratios)}: {ratio:.2f}x (goal >= 0.50x); "
          f"a new version with the vectors read back / without vectors: {statistics.median(reuse_ratios):.2f}x")
    if args.breakdown:
        engine_share(engine, name, args)
    return ratio


def engine_share(engine, name: str, args: argparse.Namespace) -> None:
    """The engine's part alone: the documents jingpai built (read back from the two indices, vectors included) bulk
    loaded into a copy of each index's mapping, one request at a time, their JSON made before the clock starts."""
    from bench.index_throughput import _raw_bulk

    rates = {}
    for vectors in (False, True):
        physical = engine.alias_targets(f"bench-hc-{name}-{'vec' if vectors else 'txt'}")[0]
        built = [{**hit["_source"], "id": hit["_id"]} for hit in engine.scan(physical)]
        has = sum(1 for d in built if (d.get("jingpai") or {}).get("vector"))
        mappings = next(iter(engine.get_mapping(physical).values()))["mappings"]
        engine.delete_index("bench-hc-engine")
        # OpenSearch refuses a knn_vector field with HNSW parameters in an index created without index.knn
        seconds = _raw_bulk(engine, "bench-hc-engine", built, 500, mappings=mappings, serialized=True,
                            settings=engine.vector_index_settings(index=args.vector_index) if vectors else None)
        engine.delete_index("bench-hc-engine")
        rates[vectors] = len(built) / seconds
        label = f"engine alone, built docs {'with' if vectors else 'without'} vectors"
        print(f"  {name:<9} {label:<45}{seconds:>8.2f} s{rates[vectors]:>9.0f} docs/s   ({has} carry a vector)")
    print(f"  {name}: the engine alone, with / without vectors: {rates[True] / rates[False]:.2f}x")


def latency_rows(gateway_url: str, index: str, queries: list[str]) -> dict[str, float]:
    """Every latency row over ``queries`` (one client), in blocks that take turns; p50 per row."""
    times: dict[str, list[float]] = {label: [] for label, _, _ in LATENCY_ROWS}
    took: dict[str, list[float]] = {"took_embed_ms": [], "took_knn_ms": []}
    failures = []
    block = max(1, len(queries) // 5)
    with httpx.Client(timeout=60, trust_env=False) as client:
        for warm in queries[:10]:  # the first searches load models and caches
            for _, mode, hybrid in LATENCY_ROWS:
                client.post(f"{gateway_url}/{index}/_search", params={"jingpai": mode}, json=body(warm, hybrid))
        for start in range(0, len(queries), block):
            for label, mode, hybrid in LATENCY_ROWS:
                for text in queries[start : start + block]:
                    t0 = time.perf_counter()
                    resp = client.post(f"{gateway_url}/{index}/_search", params={"jingpai": mode}, json=body(text, hybrid))
                    times[label].append((time.perf_counter() - t0) * 1000)
                    info = resp.json().get("jingpai", {}) if resp.status_code == 200 else {}
                    if resp.status_code != 200 or (hybrid and not info.get("hybrid", {}).get("applied")) or (mode == "rerank" and not info.get("reranked")):
                        failures.append(f"{label}: HTTP {resp.status_code} {str(info)[:200]}")
                    if hybrid and mode == "augment":
                        for key in took:
                            if info.get("hybrid", {}).get(key) is not None:
                                took[key].append(info["hybrid"][key])
    print(f"  {'row':<36}{'p50':>9}{'p90':>9}{'p99':>9}   ms, {len(queries)} queries, 1 client")
    p50 = {}
    for label, values in times.items():
        q = statistics.quantiles(values, n=100)
        p50[label] = statistics.median(values)
        print(f"  {label:<36}{p50[label]:>9.1f}{q[89]:>9.1f}{q[98]:>9.1f}")
    print("  hybrid's own steps (median ms): " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in took.items() if v))
    if failures:
        print(f"  {len(failures)} searches failed or fell back, e.g. {failures[:3]}")
    return p50


def body(text: str, hybrid: bool | str) -> dict:
    """One search of the latency rows (``hybrid``: off, on, or on with that ``rerank_window``)."""
    spec = {"enabled": True, "k": DEPTH, **({"rerank_window": hybrid} if isinstance(hybrid, str) else {})}
    return {"query": {"match": {"text": text}}, "size": DEPTH, "_source": False, "ext": {"jingpai": {"hybrid": spec if hybrid else False}}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=["elasticsearch", "opensearch"], default="elasticsearch")
    ap.add_argument("--engine", default=None, help="a running engine (OpenSearch with its k-NN plugin) instead of starting one")
    ap.add_argument("--embedder", type=Path, default=None, help="saved bi-encoder (default: untrained USE-multilingual use-bi)")
    ap.add_argument("--reranker", type=Path, default=None, help="saved rerank model (default: the embedder)")
    ap.add_argument("--dict", type=Path, default=None, help="dictionary dir (default: build one from THUCNews titles)")
    ap.add_argument("--corpus", choices=["questions", "news", "both"], default="both")
    ap.add_argument("--docs", type=int, default=8000, help="questions indexed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--vector-index", choices=["hnsw", "flat"], default="hnsw",
                    help="how the indexing rows' vectors are indexed (jingpai index --vector-index)")
    ap.add_argument("--breakdown", action="store_true", help="also bulk-load the built documents alone: the engine's share")
    ap.add_argument("--no-latency", action="store_true", help="indexing rows only")
    args = ap.parse_args()

    import torch

    from bench.eval_common import gateway, rerank_service
    from jingpai.engine.client import connect
    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.keyword_dict import Dictionary

    print(f"machine: {machine()}; CPU features: {cpu_flags()}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    plugins = ("knn",) if args.kind == "opensearch" else ()
    with tempfile.TemporaryDirectory() as tmp_dir, local_engine(args.kind, args.engine, plugins=plugins) as url, ExitStack() as stack:
        tmp = Path(tmp_dir)
        if args.dict is not None:
            dict_dir = args.dict
        else:
            from bench.dict_fixture import thucnews_dictionary

            dict_dir = tmp / "dict"
            thucnews_dictionary(dict_dir)
        dictionary = Dictionary.load(dict_dir)
        embedder, reranker = load_models(args, tmp)
        engine = connect(url)
        docs, queries = questions(args.docs, args.queries)
        print(f"engine {engine.kind} {engine.version}; embedder {embedder.model_id} ({embedder.dims}-d); reranker {reranker.name}; "
              f"vector index {args.vector_index}")
        print("indexing:")
        for name, corpus in (("questions", docs), ("news", news())):
            if args.corpus in (name, "both"):
                index_rows(engine, name, corpus, args, embedder, dictionary, tmp)
        if args.no_latency:
            return
        alias = "bench-hc-search"
        engine.delete_index(f"{alias}-*")
        report = index_corpus(engine, [write_jsonl(tmp / "search.jsonl", docs)],
                              IndexSettings(index=alias, text_fields=("text",), id_field="id", progress=False, quarantine_dir=tmp,
                                            vectors=Path(embedder.model_path), vector_chunking="first", force=True,
                                            vector_index=args.vector_index),
                              dictionary=dictionary, embedder=embedder)
        engine.refresh(alias)
        embed_url = stack.enter_context(rerank_service(embedder.model, name="embedder"))
        rerank_url = embed_url if args.reranker is None else stack.enter_context(rerank_service(reranker, name="reranker"))
        gw = stack.enter_context(gateway(url, reranker_url=rerank_url, dict_dirs=(dict_dir,), window=DEPTH, embed_url=embed_url))
        print(f"search latency ({report.indexed} questions with vectors):")
        p50 = latency_rows(gw, alias, queries)
        delta = p50[LATENCY_ROWS[3][0]] - p50[LATENCY_ROWS[2][0]]
        print(f"  hybrid + rerank p50 - BM25 + rerank p50: {delta:+.1f} ms (goal <= +20 ms)")


if __name__ == "__main__":
    main()
