"""Indexing throughput: raw ``helpers.bulk`` of the plain documents vs ``jingpai index`` (segmentation,
keywords, quarantine bookkeeping) on the same corpus, engine and batch size, in one run.

    python bench/index_throughput.py [--kind opensearch|elasticsearch] [--engine URL] [--repeat 3] [--dict DIR]

Goal (issue 4): jingpai ≥ 0.8× raw bulk docs/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DATA_DIR, local_engine, machine  # noqa: E402
from jingpai.engine.client import connect  # noqa: E402
from jingpai.indexer.pipeline import IndexSettings, index_corpus  # noqa: E402


def corpus(repeat: int, out: Path) -> int:
    rows = []
    with (DATA_DIR / "zh" / "cnews_sample" / "docs.tsv").open(encoding="utf-8") as fh:
        base = [line.rstrip("\n").split("\t", 1) for line in fh]
    for r in range(repeat):
        for i, (label, article) in enumerate(base):
            rows.append({"id": f"{r}-{i}", "category": label, "title": article.split("。")[0][:60], "content": article})
    out.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n", encoding="utf-8")
    return len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=["opensearch", "elasticsearch"], default="opensearch")
    ap.add_argument("--engine", default=None, help="use a running engine instead of starting one")
    ap.add_argument("--repeat", type=int, default=3, help="copies of the 1,000-article corpus")
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--dict", type=Path, default=None, help="dictionary dir (default: build one from thucnews titles)")
    args = ap.parse_args()

    from jingpai.keyword_dict import Dictionary

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

        t0 = time.perf_counter()
        for ok, _ in engine.bulk(
            ({"_index": "bench-raw", "_id": d["id"], "_source": d} for d in docs), chunk_size=args.batch_size
        ):
            assert ok
        engine.refresh("bench-raw")
        raw_s = time.perf_counter() - t0
        # parsing the file is part of jingpai's run, so count it for the baseline too
        t0 = time.perf_counter()
        _ = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        raw_s += time.perf_counter() - t0

        report = index_corpus(
            engine,
            [path],
            IndexSettings(index="bench-jp", id_field="id", batch_size=args.batch_size, quarantine_dir=tmp_path, progress=False),
            dictionary=dictionary,
        )
        assert report.indexed == n, report.summary()
        raw_rate, jp_rate = n / raw_s, report.docs_per_s
        print(f"machine: {machine()}; engine {engine.kind} {engine.version}; {n} docs, {mb:.1f} MB, batch {args.batch_size}")
        print(f"{'pipeline':<34}{'seconds':>9}{'docs/s':>10}")
        print(f"{'raw helpers.bulk (no augmentation)':<34}{raw_s:>9.2f}{raw_rate:>10.0f}")
        print(f"{'jingpai index (seg + keywords)':<34}{report.seconds:>9.2f}{jp_rate:>10.0f}")
        print(f"ratio jingpai/raw: {jp_rate / raw_rate:.2f}x (goal >= 0.80x)")
        engine.delete_index("bench-raw")
        engine.delete_index("bench-jp-*")


if __name__ == "__main__":
    main()
