"""Indexing throughput: raw ``helpers.bulk`` of the plain documents vs ``jingpai index`` (segmentation,
keywords, quarantine bookkeeping) on the same corpus, engine and batch size, in one run.

    python bench/index_throughput.py [--kind opensearch|elasticsearch] [--engine URL] [--repeat 3] [--dict DIR]
                                     [--rounds N] [--breakdown]
    python bench/index_throughput.py --spark [--master local[2]] [--spark-writer auto|connector|bulk]
                                     [--vectors MODEL [--vector-chunking first|mean]]

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

With ``--spark`` (issue 19): the local path and ``jingpai index --spark`` (``--master``, default
``local[2]``) on the same corpus at 1× and 4× ``--repeat``, in one run: seconds, docs/s, the Spark/local
time ratio (goal: ≤ 3× at 1×, closer at 4×; the session's JVM start-up is printed apart and not counted)
and the 4×/1× time ratio of each path (goal ≤ 4.4×). With ``--vectors MODEL`` both paths also embed every
document with that saved bi-encoder (locally in this process; with Spark in each Python worker, which loads
the model from its folder once): what ``jingpai index --spark --vectors`` costs against the local path.

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

import orjson

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


def _raw_bulk(engine, index: str, docs: list[dict], batch_size: int, *, mappings: dict | None = None,
              settings: dict | None = None, serialized: bool = False) -> float:
    """Seconds to bulk-load ``docs`` (each with its ``id``) into ``index``. ``serialized``: each document's JSON is made
    before the clock starts (orjson), so that only the requests and the engine are timed, not the client's ``json``."""
    sources = [orjson.dumps(d).decode() for d in docs] if serialized else docs
    t0 = time.perf_counter()
    if mappings is not None:
        engine.create_index(index, mappings=mappings, settings=settings)
    actions = ({"_index": index, "_id": d["id"], "_source": source} for d, source in zip(docs, sources, strict=True))
    for ok, item in engine.bulk(actions, chunk_size=batch_size):
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
    ap.add_argument("--spark", action="store_true", help="compare the local path with index --spark at 1x and 4x")
    ap.add_argument("--master", default="local[2]", help="with --spark: Spark master")
    ap.add_argument("--spark-writer", default="auto", choices=["auto", "connector", "bulk"])
    ap.add_argument("--vectors", type=Path, default=None, help="with --spark: embed documents with this saved bi-encoder")
    ap.add_argument("--vector-chunking", default="mean", choices=["first", "mean"])
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
        if args.spark:
            spark_rows(args, engine, dictionary, tmp_path)
            return
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


def spark_rows(args: argparse.Namespace, engine, dictionary, tmp_path: Path) -> None:  # noqa: ANN001
    """Local path vs ``index --spark`` at 1x and 4x ``--repeat`` (see the module docstring)."""
    from bench.common import cpu_flags
    from jingpai.engine.connectors import connector_for, ensure_connector_jars
    from jingpai.indexer.spark_index import choose_writer, index_corpus_spark
    from jingpai.indexer.spark_settings import SparkIndexSettings
    from jingpai.spark import spark_session

    spark_settings = SparkIndexSettings(master=args.master, writer=args.spark_writer)
    settings = IndexSettings(index="bench-sp", id_field="id", batch_size=args.batch_size, quarantine_dir=tmp_path, progress=False,
                             vectors=args.vectors, vector_chunking=args.vector_chunking)
    writer = choose_writer(engine, settings, spark_settings)
    print(f"machine: {machine()}; CPU flags: {cpu_flags()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    embedder = None
    if args.vectors is not None:
        from jingpai.jobs.document_vectors import load_embedder

        embedder = load_embedder(args.vectors)
        print(f"vectors: {embedder.model_id} ({embedder.dims}-d), chunking {args.vector_chunking}; every run embeds every document")
    t0 = time.perf_counter()
    jars = ensure_connector_jars(connector_for(engine.kind)) if writer == "connector" else []
    session = spark_session(app_name="bench index", master=args.master, jars=jars)
    print(f"engine {engine.kind} {engine.version}; spark {session.version} on {args.master}, writer {writer}; "
          f"session start-up {time.perf_counter() - t0:.1f} s (not counted below)")
    print(f"{'input':<8}{'docs':>7}{'MB':>6}{'local s':>9}{'docs/s':>8}{'spark s':>9}{'docs/s':>8}{'spark/local':>13}")
    times: dict[str, list[float]] = {"local": [], "spark": []}
    for scale in (1, 4):
        path = tmp_path / f"news-{scale}x.jsonl"
        n = corpus(args.repeat * scale, path)
        engine.delete_index("bench-sp-*")
        local = index_corpus(engine, [path], settings, dictionary=dictionary, embedder=embedder)
        engine.delete_index("bench-sp-*")
        spark = index_corpus_spark(engine, [path], settings, spark_settings, dictionary=dictionary, embedder=embedder, spark=session)
        assert local.indexed == spark.indexed == n, (local.summary(), spark.summary())
        assert local.vectors_embedded == spark.vectors_embedded == (n if embedder is not None else 0), (local.summary(), spark.summary())
        times["local"].append(local.seconds)
        times["spark"].append(spark.seconds)
        print(f"{scale}x{'':<6}{n:>7}{path.stat().st_size / 1e6:>6.1f}{local.seconds:>9.2f}{local.docs_per_s:>8.0f}"
              f"{spark.seconds:>9.2f}{spark.docs_per_s:>8.0f}{spark.seconds / local.seconds:>12.2f}x")
    session.stop()
    for name, (one, four) in times.items():
        print(f"{name}: 4x input took {four / one:.2f}x the 1x time (goal <= 4.4x)")
    print(f"goal spark/local at 1x <= 3x: {times['spark'][0] / times['local'][0]:.2f}x; at 4x: {times['spark'][1] / times['local'][1]:.2f}x")
    engine.delete_index("bench-sp-*")


if __name__ == "__main__":
    main()
