"""Indexing throughput: raw ``helpers.bulk`` of the plain documents vs ``jingpai index`` (segmentation,
keywords, quarantine bookkeeping) on the same corpus, engine and batch size, in one run.

    python bench/index_throughput.py [--kind opensearch|elasticsearch] [--engine URL] [--repeat 3] [--dict DIR]
                                     [--rounds N] [--breakdown]

Rows:

- ``raw``: the baseline of issue 4 — the official client's ``helpers.bulk`` (one request at a time) of
  the unaugmented records into a plain index the engine creates on the first request (dynamic mapping:
  its default ``standard`` analyzer, which splits Han text into characters), default index settings,
  then a refresh; plus parsing the JSONL file, which jingpai's run also does.
- ``jingpai``: ``index_corpus`` end to end — reading, segmentation, keywords, quarantine bookkeeping,
  creating the versioned physical index with jingpai's mapping (raw fields with the same analyzer plus
  the segmented, keyword and weight fields), bulk requests (two in flight; the new physical index is
  built with refresh off and no replicas, restored before the alias swap), refresh and alias swap.
- with ``--breakdown``, where jingpai's time goes: ``engine share`` bulk-indexes the documents jingpai
  built (already segmented) into jingpai's mapping the way the raw row does (no client-side work:
  what the extra fields cost the engine), and ``client share`` builds the documents without sending
  them (segmentation, keywords, serialisation: what the client costs).

Goal (issue 4): jingpai ≥ 0.8× raw bulk docs/s. The machine is often shared, so ``--rounds`` repeats
both rows and reports the median ratio; CPU seconds (client process / engine JVM when it runs locally)
are printed where they can be read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DATA_DIR, local_engine, machine  # noqa: E402
from jingpai.engine.client import connect  # noqa: E402
from jingpai.indexer.mapping import read_meta  # noqa: E402
from jingpai.indexer.pipeline import DocumentBuilder, IndexSettings, index_corpus  # noqa: E402


def corpus(repeat: int, out: Path) -> int:
    rows = []
    with (DATA_DIR / "zh" / "cnews_sample" / "docs.tsv").open(encoding="utf-8") as fh:
        base = [line.rstrip("\n").split("\t", 1) for line in fh]
    for r in range(repeat):
        for i, (label, article) in enumerate(base):
            rows.append({"id": f"{r}-{i}", "category": label, "title": article.split("。")[0][:60], "content": article})
    out.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n", encoding="utf-8")
    return len(rows)


def _raw_bulk(engine, index: str, docs: list[dict], batch_size: int, *, mappings: dict | None = None) -> float:
    t0 = time.perf_counter()
    if mappings is not None:
        engine.create_index(index, mappings=mappings)
    for ok, item in engine.bulk(({"_index": index, "_id": d["id"], "_source": d} for d in docs), chunk_size=batch_size):
        assert ok, item
    engine.refresh(index)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=["opensearch", "elasticsearch"], default="opensearch")
    ap.add_argument("--engine", default=None, help="use a running engine instead of starting one")
    ap.add_argument("--repeat", type=int, default=3, help="copies of the 1,000-article corpus")
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--dict", type=Path, default=None, help="dictionary dir (default: build one from thucnews titles)")
    ap.add_argument("--rounds", type=int, default=1, help="measure both rows this many times (median ratio)")
    ap.add_argument("--breakdown", action="store_true", help="also time the engine's and the client's shares of jingpai's run")
    args = ap.parse_args()

    from jingpai.keyword_dict import Dictionary, Segmenter

    with tempfile.TemporaryDirectory() as tmp, local_engine(args.kind, args.engine) as url:
        tmp_path = Path(tmp)
        path = tmp_path / "news.jsonl"
        n = corpus(args.repeat, path)
        mb = path.stat().st_size / 1e6
        if args.dict is not None:
            dictionary = Dictionary.load(args.dict)
        else:
            from bench.dict_fixture import thucnews_dictionary

            dictionary = thucnews_dictionary(tmp_path / "dict")
        engine = connect(url)
        docs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        print(f"machine: {machine()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"engine {engine.kind} {engine.version}; {n} docs, {mb:.1f} MB, batch {args.batch_size}")
        print(f"{'pipeline':<44}{'seconds':>9}{'docs/s':>10}")
        ratios = []
        for _ in range(max(1, args.rounds)):
            engine.delete_index("bench-raw")
            engine.delete_index("bench-jp-*")
            raw_s = _raw_bulk(engine, "bench-raw", docs, args.batch_size)
            # parsing the file is part of jingpai's run, so count it for the baseline too
            t0 = time.perf_counter()
            _ = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
            raw_s += time.perf_counter() - t0

            cpu0 = time.process_time()
            report = index_corpus(
                engine,
                [path],
                IndexSettings(index="bench-jp", id_field="id", batch_size=args.batch_size, quarantine_dir=tmp_path, progress=False),
                dictionary=dictionary,
            )
            jp_cpu = time.process_time() - cpu0
            assert report.indexed == n, report.summary()
            raw_rate, jp_rate = n / raw_s, report.docs_per_s
            print(f"{'raw helpers.bulk (no augmentation)':<44}{raw_s:>9.2f}{raw_rate:>10.0f}")
            print(f"{'jingpai index (seg + keywords)':<44}{report.seconds:>9.2f}{jp_rate:>10.0f}   client CPU {jp_cpu:.2f} s")
            if args.breakdown:
                built = [hit["_source"] for hit in engine.scan(report.physical_index)]
                mappings = next(iter(engine.get_mapping(report.physical_index).values()))["mappings"]
                engine.delete_index("bench-aug")
                aug_s = _raw_bulk(engine, "bench-aug", built, args.batch_size, mappings=mappings)
                engine.delete_index("bench-aug")
                print(f"{'  engine share: raw bulk of built docs':<44}{aug_s:>9.2f}{n / aug_s:>10.0f}")
                meta = read_meta(engine, report.physical_index)
                builder = DocumentBuilder(
                    IndexSettings(index="bench-jp", id_field="id"), meta, dictionary=dictionary, segmenter=Segmenter(dictionary)
                )
                t0, cpu0 = time.perf_counter(), time.process_time()
                for d in docs:
                    builder.build_json(d)
                client_s = time.perf_counter() - t0
                print(f"{'  client share: build docs, no engine':<44}{client_s:>9.2f}{n / client_s:>10.0f}   CPU {time.process_time() - cpu0:.2f} s")
            ratios.append(jp_rate / raw_rate)
            print(f"ratio jingpai/raw: {ratios[-1]:.2f}x (goal >= 0.80x)")
        if len(ratios) > 1:
            print(f"median ratio over {len(ratios)} rounds: {statistics.median(ratios):.2f}x (goal >= 0.80x); "
                  f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        engine.delete_index("bench-raw")
        engine.delete_index("bench-jp-*")


if __name__ == "__main__":
    main()
