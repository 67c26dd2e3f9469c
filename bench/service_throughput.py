"""Rerank service throughput: ``jingpai serve``'s batching engine vs one request at a time, in one run.

    python bench/service_throughput.py [--model DIR] [--size minilm|base] [--device auto|cpu|cuda]
        [--data short|long] [--max-length 128] [--requests 32] [--docs 20] [--concurrency 8]

Rows (same model, same requests, same process):

* ``naive fp32``: ``model.predict`` on each request's pairs, one request after another — what a
  handler without cross-request batching does. The baseline.
* ``service fp32, 1 client``: the real app in-process (JSON, validation, token counting, batching
  engine) through httpx's ASGI transport, one request at a time: the service's own overhead.
* ``service fp32, N clients``: N concurrent closed-loop clients; the engine merges their pairs into
  token-budgeted, length-sorted batches.
* ``service bf16`` (CPU; ``fp16``/``bf16`` on GPU): the same under autocast. On a CPU without AMX /
  AVX512-BF16 bf16 is emulated and slower — the ``auto`` dtype then picks fp32.

Without ``--model`` a randomly initialised BERT of MiniLM-L6 shape (``--size base``: BERT-base) with a
character vocabulary from the data is built and saved as a ``cross`` model: speed does not depend on
the weights. ``--data short`` uses LCQMC question pairs, ``long`` SOHU news (query: a sentence, documents:
articles truncated to ``--max-length``).

Goal (issue 6): batched service ≥ naive per-request scoring; bf16 ≥ fp32 where the CPU has native bf16.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DATA_DIR, machine  # noqa: E402

SIZES = {
    "minilm": {"hidden_size": 384, "num_layers": 6, "num_heads": 12, "intermediate_size": 1536},
    "base": {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 3072},
}


def workload(kind: str, n_requests: int, n_docs: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    """``n_requests`` (query, documents) requests built from real shared data."""
    rng = random.Random(seed)
    if kind == "short":
        rows = [line.rstrip("\n").split("\t") for line in (DATA_DIR / "zh/lcqmc/dev.tsv").open(encoding="utf-8")]
        queries = [r[0] for r in rows]
        pool = [r[1] for r in rows]
    else:
        recs = [json.loads(line) for line in (DATA_DIR / "zh/sohu/dc-test.jsonl").open(encoding="utf-8")]
        queries = [r["sentence1"][:40] for r in recs]
        pool = [r["sentence2"] for r in recs]
    return [(rng.choice(queries), rng.sample(pool, n_docs)) for _ in range(n_requests)]


def build_model(size: str, texts: list[str], directory: Path, max_length: int, device: str) -> Path:
    import torch

    from jingpai.reranker import registry
    from jingpai.reranker.tiny import build_tiny_checkpoint

    base = build_tiny_checkpoint(directory / "base", texts, max_position=512, **SIZES[size])
    torch.manual_seed(0)
    return registry.create("cross", base=str(base), max_length=max_length, device=device).save(directory / "model")


def naive(model, requests: list[tuple[str, list[str]]]) -> float:
    t0 = time.perf_counter()
    for query, docs in requests:
        model.predict([(query, d) for d in docs], batch_size=len(docs))
    return time.perf_counter() - t0


def service(model, settings, requests: list[tuple[str, list[str]]], concurrency: int) -> tuple[float, float]:
    """Seconds to answer ``requests`` with ``concurrency`` closed-loop clients, and mean pairs per batch."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from jingpai.reranker.service import create_app

    app = create_app(settings, model)

    async def go() -> tuple[float, float]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench", timeout=None) as c:
            for query, docs in requests[:2]:  # warm-up
                (await c.post("/rerank", json={"query": query, "texts": docs})).raise_for_status()
            before = await c.get("/metrics")
            queue = list(requests)

            async def client() -> None:
                while queue:
                    query, docs = queue.pop()
                    (await c.post("/rerank", json={"query": query, "texts": docs})).raise_for_status()

            t0 = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(concurrency)))
            seconds = time.perf_counter() - t0
            after = await c.get("/metrics")

        def totals(text: str) -> tuple[float, float]:
            vals = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}
            return vals["jingpai_rerank_batch_pairs_sum"], vals["jingpai_rerank_batch_pairs_count"]

        (p0, b0), (p1, b1) = totals(before.text), totals(after.text)
        await app.state.service.close()
        return seconds, (p1 - p0) / max(b1 - b0, 1)

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="a saved jingpai model (default: build a random one)")
    ap.add_argument("--size", choices=sorted(SIZES), default="minilm")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--data", choices=["short", "long"], default="short")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-batch-tokens", type=int, default=None, help="default: the service's (4096 on a CPU, 16384 on a GPU)")
    args = ap.parse_args()

    import torch

    from jingpai.reranker.base import Reranker
    from jingpai.reranker.service import ServiceSettings, TextMeasure, cpu_has_native_bf16, resolve_device

    device = resolve_device(args.device)
    requests = workload(args.data, args.requests, args.docs)
    n_pairs = sum(len(d) for _, d in requests)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model is None:
            texts = [q for q, _ in requests] + [d for _, docs in requests for d in docs]
            model_dir = build_model(args.size, texts, Path(tmp), args.max_length, device)
        else:
            model_dir = args.model
        model = Reranker.load(model_dir, device=device)
        model.net.eval()
        measure = TextMeasure(model)
        tokens = 0
        for query, docs in requests:
            q = measure.lengths([query])[0]
            tokens += sum(min(q + d + measure.pair_overhead, args.max_length) for d in measure.lengths(docs))
        params = sum(p.numel() for name, p in model.net.named_parameters() if "embeddings" not in name)

        def settings(dtype: str) -> ServiceSettings:
            return ServiceSettings(
                dtype=dtype, max_length=args.max_length, max_batch_tokens=args.max_batch_tokens, queue_timeout_ms=3_600_000, warmup=False
            )

        low = "bf16" if device == "cpu" or torch.cuda.is_bf16_supported() else "fp16"
        naive(model, requests[:2])  # warm-up
        rows: list[tuple[str, float, float | None]] = [("naive fp32, one request at a time", naive(model, requests), None)]
        for label, dtype, conc in (
            ("service fp32, 1 client", "fp32", 1),
            (f"service fp32, {args.concurrency} clients", "fp32", args.concurrency),
            (f"service {low}, {args.concurrency} clients", low, args.concurrency),
        ):
            seconds, per_batch = service(model, settings(dtype), requests, conc)
            rows.append((label, seconds, per_batch))

    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    print(f"machine: {machine()}; device {device}{f' ({gpu})' if gpu else ''}; torch threads {torch.get_num_threads()}; "
          f"CPU native bf16: {cpu_has_native_bf16()}")
    print(f"model: {model.name} {args.size if args.model is None else model_dir} ({params / 1e6:.1f}M non-embedding params); "
          f"data {args.data}; {len(requests)} requests × {args.docs} docs = {n_pairs} pairs, "
          f"{tokens / n_pairs:.0f} tokens/pair (max_length {args.max_length})")
    print(f"{'run':<36}{'seconds':>9}{'pairs/s':>10}{'TFLOP/s':>9}{'pairs/batch':>13}")
    for label, seconds, per_batch in rows:
        tflops = 2 * params * tokens / seconds / 1e12  # dense matmul FLOPs of the encoder (attention scores excluded)
        print(f"{label:<36}{seconds:>9.2f}{n_pairs / seconds:>10.1f}{tflops:>9.3f}{per_batch or 0:>13.1f}")
    rate = {label: n_pairs / s for label, s, _ in rows}
    base, single, batched, lowp = (rate[r[0]] for r in rows)
    print(f"service (batched) / naive: {batched / base:.2f}x   service 1 client / naive: {single / base:.2f}x   "
          f"{low} / fp32 (service): {lowp / batched:.2f}x")


if __name__ == "__main__":
    main()
