"""Measure the demo's reranking on its own pseudo-relevance queries, through the real gateway.

Runs the demo's steps (:func:`jingpai.jobs.demo.start_demo`: dictionary, index, model — cached or trained —
and the reranker service) against a running engine, rebuilds the demo's pseudo-relevance splits
(:func:`jingpai.jobs.demo_pairs.pseudo_splits`) and, per demo index, measures with ``jingpai tune``'s
machinery (:func:`jingpai.plugin.tune.run_tune`: one rerank per query, every fusion computed offline
with the gateway's own fusion module):

- **tuning** queries (train + dev: what the model saw) → every fusion × window; the best row (by
  ``--metric``) is what the demo's gateway defaults should be (``DemoSettings.fusion*``);
- **held-out** queries (documents kept out of training, selection and negatives) → engine order,
  augmented order, ``replace`` and the demo's configured fusion.

A query's relevant document is the one it was made from (pseudo relevance).

Usage::

    jingpai engine up --port 9290
    python scripts/demo_eval.py --engine-url http://127.0.0.1:9290 --cache-dir /tmp/jp-demo [--zero-shot]
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
import time
from pathlib import Path

from jingpai.plugin import tune
from jingpai.reranker.fusion import FusionSpec
from jingpai.jobs import demo, demo_model


def _print_rows(title: str, rows: list[tune.TuneRow], n: int) -> None:
    print(f"\n## {title} ({n} queries)")
    print("| setting | " + " | ".join(tune.METRICS) + " |")
    print("|---|" + "---|" * len(tune.METRICS))
    for row in rows:
        print(f"| {row.label()} | " + " | ".join(f"{row.metrics[m]:.3f}" for m in tune.METRICS) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine-url", required=True)
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=None, help="default: the demo's (../shared/data)")
    parser.add_argument("--zero-shot", action="store_true", help="serve the pretrained use-bi untrained instead of the demo model")
    parser.add_argument("--model-dir", type=Path, default=None, help="serve this saved model instead of the demo model")
    parser.add_argument("--metric", default="MRR", choices=tune.METRICS)
    parser.add_argument("--tuning-limit", type=int, default=400, help="tuning queries measured at most (a seeded sample)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory(prefix="jingpai-demo-eval-") as tmp:
        model_dir = args.model_dir
        if args.zero_shot:
            from jingpai.reranker import registry

            model_dir = registry.create("use-bi", device="cpu").save(Path(tmp) / "use-bi-zero-shot")
        settings = demo.DemoSettings(
            engine_url=args.engine_url, port=0, reranker_port=0, cache_dir=args.cache_dir, data_dir=args.data_dir,
            model_dir=model_dir, threads=args.threads,
        )
        started = time.perf_counter()
        stack = demo.start_demo(settings, echo=print)
        print(f"demo ready in {time.perf_counter() - started:.0f} s")
        try:
            dictionary, dict_dir = demo.build_demo_dictionary(settings, lambda _m: None)
            corpora = demo.choose_corpora(settings, lambda _m: None)
            records = [r for c in corpora for r in demo.read_jsonl_or_records(c.path)]
            splits = demo_model.pseudo_splits(records, dictionary)
            index_of = {str(r["id"]): c.index for c in corpora for r in demo.read_jsonl_or_records(c.path)}
            configured = FusionSpec(mode=settings.fusion, weight=settings.fusion_weight)
            for choice in corpora:
                def on_index(pairs):  # noqa: ANN001, ANN202 — the queries whose document is in this index
                    return [q for q in demo_model.retrieval_queries(pairs) if index_of.get(next(iter(q.relevant))) == choice.index]

                tuning = on_index(splits.train + splits.dev)
                random.Random(0).shuffle(tuning)
                tuning = tuning[: args.tuning_limit]
                held_out = on_index(splits.holdout)
                base = tune.TuneSettings(
                    engine_url=stack.engine_url, index=choice.index, reranker_url=stack.reranker.url if stack.reranker else "",
                    dict_dirs=(dict_dir,), windows=(20, settings.window), metric=args.metric,
                )
                fields = ("title", "content")
                t = time.perf_counter()
                rows = tune.run_tune(base, tuning, text_field=fields)
                best = tune.best_row(rows, args.metric)
                by_mode = [r for r in rows if r.window is None or (r.window == settings.window and r.fusion in ("replace", "linear"))]
                _print_rows(f"{choice.index}: tuning queries, linear over weights at window {settings.window} "
                            f"({time.perf_counter() - t:.0f} s); best of the whole grid by {args.metric}: {best.label()}",
                            by_mode + ([best] if best not in by_mode else []), len(tuning))
                t = time.perf_counter()
                rows = tune.run_tune(
                    tune.TuneSettings(**{**base.__dict__, "windows": (settings.window,), "weights": (configured.weight,), "rrf_ks": (60,)}),
                    held_out, text_field=fields,
                )
                shown = [r for r in rows if r.window is None or r.fusion == "replace" or (r.fusion == configured.mode and r.weight == configured.weight)]
                _print_rows(f"{choice.index}: HELD-OUT queries ({time.perf_counter() - t:.0f} s), demo fusion {configured.describe()}",
                            shown, len(held_out))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
