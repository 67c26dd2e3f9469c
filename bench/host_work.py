"""Host work per pair of the rerank service and of ``predict``, per model family, stage and length (issue 54).

    python bench/host_work.py [--families minilm,bge-cross,bge-bi,use-bi,use-kw,kwbert,bertca]
        [--lengths 64,128,256] [--requests 8] [--docs 20] [--rounds 3] [--dictionary DIR]
        [--baseline CHECKOUT] [--turns 2] [--throughput FAMILY@LENGTH]

Everything the host computes for a pair before the forward pass, in CPU time (``time.process_time``: every
thread of the process, the tokenizer's Rust threads included), in µs per pair, on real pairs (short news
texts against news articles of ``zh/sohu/dc-test``, the same as ``rerank_throughput``'s). No forward pass runs:
host work does not depend on the weights, so the models are untrained (a fresh head on the MiniLM and
bge-small-zh checkpoints; use-* on the packaged USE weights).

Stages (each timed alone, best of ``--rounds``; per-text caches are cleared before every round, so every
text is new, as a fresh request's documents are):

* ``measure`` — the service's :class:`~jingpai.reranker.service.TextMeasure` counting and cutting the query
  and the documents (``cut_request``: one read of both; ``cut_encodings`` of each on code without it);
* ``prepare`` — the service's whole request preparation (``RerankService._prepare``: measure, cut, pairs,
  joined token ids where the model reads them);
* ``input`` — the model input of the prepared pairs (``featurize_encodings`` of the joined token ids, else
  ``featurize`` of the cut texts), in batches of ``--batch`` pairs;
* ``serve`` — ``prepare + input``: the service's host work per pair;
* ``serve-warm`` — the serve stage again right after it, each request's documents under the next request's
  query: every document was seen by the previous request, every query is new. The per-text caches (keywords,
  piece maps) still hold the documents, as they do in a search service whose popular results come back for many
  queries; the cold ``serve`` figure is the one without any repeat;
* ``serve-indexed`` — keyword models only: the cold serve stage with each document's keywords given as
  ``jingpai index --rerank-keywords`` stores them and the gateway sends them (the top 20 by the model's own
  dictionary, found before the clock starts; handing them to the model is timed), caches cleared: what a document
  costs that the model has never seen but the index has;
* ``predict`` — ``featurize`` of the whole pairs in ``predict``'s length-sorted batches of ``--batch``.

``--checkpoint DIR`` measures the ``minilm`` family on another checkpoint folder; one with only a tokenizer and a
config (what travels to a lent GPU machine, bench/gpu_prepare.sh) gets random weights.

``--baseline CHECKOUT`` runs the same stages on another checkout's code (e.g. ``git worktree add
/tmp/old <commit>``) in a child process, alternating with this checkout ``--turns`` times; each cell is the
best of its turns, and the table gives both and their ratio. ``--json`` prints the cells as one JSON object
(what the parent reads of the child).

``--throughput FAMILY@LENGTH`` measures only the serve stage's host work with one process per core at once (every
core busy featurizing, as the goal's "host throughput" reads), in pairs/s of wall time; with ``--baseline`` the
two checkouts alternate.

Goal (issue 54): serve ≤ 60 µs per pair at length 256 for the BERT-family cross-encoders, ≤ 100 µs for
use-kw and kwbert; host throughput ≥ 10,000 pairs/s with all cores featurizing.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

FAMILIES = ("minilm", "bge-cross", "bge-bi", "use-bi", "use-kw", "kwbert", "bertca")
STAGES = ("measure", "prepare", "input", "serve", "serve-warm", "serve-indexed", "predict")
#: the goal per family at length 256 (µs of CPU time per pair, the serve stage)
GOALS = {"minilm": 60, "bge-cross": 60, "bge-bi": 60, "kwbert": 100, "use-kw": 100}

Pair = tuple[str, str]
Request = tuple[str, list[str]]


def build(family: str, length: int, dictionary: str | None, checkpoint: str | None = None):
    """An untrained model of ``family`` with ``max_length`` ``length`` (the family's per-text length for use-*);
    ``checkpoint``: the ``minilm`` family's folder instead of the packaged MiniLM (a tokenizer and config without
    weights is given random BERT-base-shaped ones, as on a lent GPU machine)."""
    from jingpai.reranker import registry

    if family == "minilm":
        from bench.rerank_throughput import checkpoint_dir

        path = Path(checkpoint) if checkpoint else checkpoint_dir()
        if not any((path / name).is_file() for name in ("model.safetensors", "pytorch_model.bin")):
            path = Path(_random_weights(str(path)))
        return registry.create("cross", base=str(path), max_length=length, device="cpu")
    if family == "bge-cross":
        return registry.create("cross", base="bge-small-zh", max_length=length, device="cpu")
    if family == "bge-bi":
        return registry.create("bi", base="bge-small-zh", max_length=length, device="cpu")
    if family == "use-bi":
        return registry.create("use-bi", max_length=length, device="cpu")
    if family == "use-kw":
        return registry.create("use-kw", max_length=length, dictionary=dictionary, device="cpu")
    if family == "kwbert":
        return registry.create("kwbert", base="bge-small-zh", max_length=length, dictionary=dictionary, device="cpu")
    if family == "bertca":
        return registry.create("bertca", base="bge-small-zh", max_length=length, device="cpu")
    raise SystemExit(f"unknown family {family!r}; expected some of {', '.join(FAMILIES)}")


@functools.lru_cache(maxsize=4)
def _random_weights(folder: str) -> str:
    """A copy of a tokenizer-and-config folder with random weights of one layer (host work reads no weights)."""
    import shutil
    import tempfile

    from transformers import AutoConfig, AutoModel

    out = Path(tempfile.mkdtemp(prefix="jingpai-host-work-"))
    AutoModel.from_config(AutoConfig.from_pretrained(folder, local_files_only=True, num_hidden_layers=1)).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (Path(folder) / name).is_file():
            shutil.copy(Path(folder) / name, out / name)
    return str(out)


def clear_caches(model) -> None:
    """Forget every per-text result the model keeps (so each round's texts are new to it)."""
    for holder in (model, type(model)):
        for name in dir(holder):
            attr = getattr(holder, name, None)
            if callable(getattr(attr, "cache_clear", None)):
                attr.cache_clear()
    clear = getattr(model, "clear_text_caches", None)
    if callable(clear):
        clear()
    # compiled regular expressions are cached by pattern: code that compiles one per text (keyword spans did)
    # would find last round's and look cheaper than on a fresh request's documents
    re.purge()


def cpu_seconds(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def measure_family(model, requests: Sequence[Request], *, rounds: int, batch: int) -> dict[str, float]:
    """µs of CPU time per pair of each stage (best of ``rounds``)."""
    from jingpai.reranker.service import RerankService, ServiceMetrics, ServiceSettings

    settings = ServiceSettings(dtype="fp32", warmup=False, max_length=model.config.max_length, queue_timeout_ms=3_600_000)
    service = RerankService(model, settings, ServiceMetrics(), copy_model=False)
    m = service.measure
    n = sum(len(docs) for _, docs in requests)
    pairs_all = [(q, d) for q, docs in requests for d in docs]
    best = dict.fromkeys(STAGES, float("inf"))

    def measure() -> None:
        for query, docs in requests:
            if hasattr(m, "cut_request"):  # one read of the query and its documents (a baseline checkout may lack it)
                m.cut_request(query, docs, doc_cap=lambda q: max(service.max_length, q + 1), most=max(service.max_length, len(query) + 1))  # noqa: B023
                continue
            (q_tokens, _end, q_more, _), = m.cut_encodings([query], cap=1 << 30)
            m.cut_encodings(docs, cap=max(service.max_length, q_tokens + q_more + 1))

    def prepare(given: Sequence[Request] = requests) -> list:
        return [service._prepare(q, docs, truncate=True, chunks=1, doc_tokens=None, docs_field="texts") for q, docs in given]

    rotated = [(requests[(i + 1) % len(requests)][0], docs) for i, (_q, docs) in enumerate(requests)]

    def model_input(prepared: list) -> None:
        for pairs, _lengths, _owner, encodings in prepared:
            for start in range(0, len(pairs), batch):
                if encodings is None:
                    service.model.featurize(pairs[start : start + batch])
                else:
                    service.model.featurize_encodings(encodings[start : start + batch])

    def predict_input() -> None:
        order = sorted(range(len(pairs_all)), key=lambda i: len(pairs_all[i][0]) + len(pairs_all[i][1]))
        for start in range(0, len(order), batch):
            service.model.featurize([pairs_all[i] for i in order[start : start + batch]])

    # what the index stores per document (jingpai.indexer.rerank_keywords), found here before any clock runs
    dictionary = getattr(service.model, "dictionary", None)
    stored = None
    if dictionary is not None and hasattr(service.model, "give_keywords"):
        from jingpai.keyword_dict import KeywordExtractor

        index_keywords = KeywordExtractor(dictionary, top_k=20)
        stored = [[index_keywords.words(d) for d in docs] for _, docs in requests]

    def indexed() -> None:
        for (query, docs), words in zip(requests, stored, strict=True):
            service.model.give_keywords(docs, words, version=dictionary.version, top_k=20)
            model_input([service._prepare(query, docs, truncate=True, chunks=1, doc_tokens=None, docs_field="texts")])

    for _ in range(rounds):
        clear_caches(service.model)
        best["measure"] = min(best["measure"], cpu_seconds(measure))
        clear_caches(service.model)
        t0 = time.process_time()
        prepared = prepare()
        prep = time.process_time() - t0
        # the model input of cold texts: caches cleared, the prepared pairs kept
        clear_caches(service.model)
        inp = cpu_seconds(lambda: model_input(prepared))  # noqa: B023
        best["prepare"], best["input"] = min(best["prepare"], prep), min(best["input"], inp)
        best["serve"] = min(best["serve"], prep + inp)
        # warm: the documents are last round's (caches kept), each under another request's query
        t0 = time.process_time()
        model_input(prepare(rotated))
        best["serve-warm"] = min(best["serve-warm"], time.process_time() - t0)
        clear_caches(service.model)
        if stored is not None:
            best["serve-indexed"] = min(best["serve-indexed"], cpu_seconds(indexed))
            clear_caches(service.model)
        best["predict"] = min(best["predict"], cpu_seconds(predict_input))
    return {k: v / n * 1e6 if v != float("inf") else float("nan") for k, v in best.items()}


def measure_all(families: Sequence[str], lengths: Sequence[int], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """``{"family@length": {stage: µs/pair}}``; a family that cannot be built here is reported, not measured."""
    import torch

    from bench.rerank_throughput import workload

    torch.manual_seed(0)
    requests = workload("sohu", args.requests, args.docs, seed=1)
    out: dict[str, dict[str, float]] = {}
    for family in families:
        for length in lengths:
            try:
                model = build(family, length, args.dictionary, args.checkpoint)
            except Exception as exc:  # noqa: BLE001 - a family missing here is said, the rest still measured
                print(f"{family} at {length}: not built ({type(exc).__name__}: {exc})", file=sys.stderr)
                break
            model.net.eval()
            out[f"{family}@{length}"] = measure_family(model, requests, rounds=args.rounds, batch=args.batch)
            del model
    return out


def http_layer(requests: Sequence[Request], *, rounds: int) -> dict[str, float]:
    """µs of CPU time per pair of the TEI route's JSON work around the service: the request body parsed into
    its pydantic model, the answer built and serialised as FastAPI does with a ``response_model`` (validated
    into ``list[TeiRank]``, then dumped to JSON bytes)."""
    from pydantic import TypeAdapter

    from jingpai.reranker.service.schemas import TeiRank, TeiRerankRequest

    bodies = [json.dumps({"query": q, "texts": docs, "raw_scores": True}, ensure_ascii=False).encode() for q, docs in requests]
    answer = TypeAdapter(list[TeiRank])
    n = sum(len(docs) for _, docs in requests)
    best = {"parse": float("inf"), "answer": float("inf")}
    for _ in range(rounds):
        parsed = []
        best["parse"] = min(best["parse"], cpu_seconds(lambda: parsed.extend(TeiRerankRequest.model_validate_json(b) for b in bodies)))  # noqa: B023

        def respond() -> None:
            for req in parsed:  # noqa: B023
                ranks = [TeiRank(index=i, score=0.5 - i * 1e-3) for i in range(len(req.texts))]
                answer.dump_json(answer.validate_python(ranks))

        best["answer"] = min(best["answer"], cpu_seconds(respond))
    return {k: v / n * 1e6 for k, v in best.items()}


def _throughput_worker(family: str, length: int, dictionary: str | None, checkpoint: str | None, source: str, rounds: int,
                       batch: int, ready, go) -> float:  # noqa: ANN001 - multiprocessing events
    """One process's serve-stage host work (prepare + input, caches cleared each round) after ``go``; its CPU seconds."""
    sys.path.insert(0, source)
    import torch

    from bench.rerank_throughput import workload
    from jingpai.reranker.service import RerankService, ServiceMetrics, ServiceSettings

    torch.set_num_threads(1)
    model = build(family, length, dictionary, checkpoint)
    model.net.eval()
    settings = ServiceSettings(dtype="fp32", warmup=False, max_length=model.config.max_length, queue_timeout_ms=3_600_000)
    service = RerankService(model, settings, ServiceMetrics(), copy_model=False)
    requests = workload("sohu", 8, 20, seed=1)
    ready.set()
    go.wait()
    t0 = time.process_time()
    for _ in range(rounds):
        clear_caches(service.model)
        for query, docs in requests:
            pairs, _lengths, _owner, encodings = service._prepare(query, docs, truncate=True, chunks=1, doc_tokens=None, docs_field="texts")
            for start in range(0, len(pairs), batch):
                if encodings is None:
                    service.model.featurize(pairs[start : start + batch])
                else:
                    service.model.featurize_encodings(encodings[start : start + batch])
    return time.process_time() - t0


def host_throughput(family: str, length: int, args: argparse.Namespace, *, workers: int, source: str) -> tuple[float, float]:
    """Pairs/s of the serve stage's host work with ``workers`` processes at once (every core busy featurizing): of
    the wall time, and of each process's own CPU time (what the cores give where nothing else runs on them)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("spawn")
    manager = ctx.Manager()
    ready = [manager.Event() for _ in range(workers)]
    go = manager.Event()
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futures = [pool.submit(_throughput_worker, family, length, args.dictionary, args.checkpoint, source, args.rounds, args.batch,
                               ready[i], go) for i in range(workers)]
        for event in ready:
            event.wait()
        t0 = time.perf_counter()
        go.set()
        cpu = [f.result() for f in futures]
        wall = time.perf_counter() - t0
    pairs = workers * args.rounds * 8 * 20
    return pairs / wall, pairs / (sum(cpu) / workers)


def child(checkout: str, args: argparse.Namespace, families: Sequence[str]) -> dict[str, dict[str, float]]:
    """The stages measured on ``checkout``'s jingpai in a child process (this file, that code)."""
    cmd = [sys.executable, __file__, "--json", "--source", checkout, "--families", ",".join(families), "--lengths", args.lengths,
           "--requests", str(args.requests), "--docs", str(args.docs), "--rounds", str(args.rounds), "--batch", str(args.batch)]
    if args.dictionary:
        cmd += ["--dictionary", args.dictionary]
    if args.checkpoint:
        cmd += ["--checkpoint", args.checkpoint]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--lengths", default="64,128,256")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="pairs per model-input call (a forward pass's batch)")
    ap.add_argument("--dictionary", default=None, help="keyword dictionary folder for use-kw and kwbert (default: none, every token a keyword)")
    ap.add_argument("--checkpoint", default=None, help="the minilm family's checkpoint folder (default: the packaged MiniLM)")
    ap.add_argument("--baseline", default=None, help="another checkout whose code is measured alongside (a child process)")
    ap.add_argument("--turns", type=int, default=2, help="alternations with --baseline; each cell is the best of its turns")
    ap.add_argument("--throughput", default=None, metavar="FAMILY@LENGTH",
                    help="only: pairs/s of the serve stage's host work with every core featurizing (one process a core), e.g. minilm@256")
    ap.add_argument("--source", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the cells as one JSON object")
    args = ap.parse_args()
    root = Path(args.source or Path(__file__).resolve().parents[1]).resolve()
    sys.path.insert(0, str(root))
    families = [f for f in args.families.split(",") if f]
    lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    if args.throughput:
        family, length = args.throughput.split("@")
        workers = os.cpu_count() or 1
        for _ in range(args.turns if args.baseline else 1):
            for label, source in ((("base", args.baseline),) if args.baseline else ()) + (("this", str(root)),):
                wall, cpu = host_throughput(family, int(length), args, workers=workers, source=source)
                print(f"host throughput {family}@{length} ({label}, {workers} processes, load average {os.getloadavg()[0]:.1f}): "
                      f"{wall:.0f} pairs/s of wall time, {cpu:.0f} pairs/s of the processes' CPU time", flush=True)
        return
    if args.json:
        print(json.dumps(measure_all(families, lengths, args)))
        return

    import torch

    from bench.common import cpu_flags, machine

    print(f"machine: {machine()}; CPU flags: {cpu_flags()}; torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}; "
          f"{args.requests} requests × {args.docs} docs (zh/sohu dc-test), batches of {args.batch}, best of {args.rounds} rounds"
          + (f" × {args.turns} turns" if args.baseline else ""))
    print("µs of CPU time per pair (all threads); serve = prepare + input (the service, every text new), serve-warm = the "
          "same documents under new queries (per-text caches hold them), serve-indexed = serve with the documents' keywords "
          "from the index (keyword models; nan: none), predict = featurize of whole pairs")
    ours: dict[str, dict[str, float]] = {}
    theirs: dict[str, dict[str, float]] = {}
    for _ in range(args.turns if args.baseline else 1):
        if args.baseline:
            for key, cells in child(args.baseline, args, families).items():
                theirs[key] = {s: min(v, theirs.get(key, {}).get(s, float("inf"))) for s, v in cells.items()}
        for key, cells in measure_all(families, lengths, args).items():
            ours[key] = {s: min(v, ours.get(key, {}).get(s, float("inf"))) for s, v in cells.items()}
    head = f"{'family':<11}{'len':>5}" + "".join(f"{s:>{max(11, len(s) + 1)}}" for s in STAGES)
    if args.baseline:
        head += f"{'base serve':>12}{'base pred':>11}{'serve ×':>9}{'pred ×':>8}"
    print(head)
    for key, cells in ours.items():
        family, length = key.split("@")
        line = f"{family:<11}{length:>5}" + "".join(f"{cells.get(s, float('nan')):>{max(11, len(s) + 1)}.1f}" for s in STAGES)
        if key in theirs:
            base = theirs[key]
            line += f"{base['serve']:>12.1f}{base['predict']:>11.1f}{base['serve'] / cells['serve']:>8.1f}x{base['predict'] / cells['predict']:>7.1f}x"
        goal = GOALS.get(family)
        if goal is not None and length == "256":
            line += (f"   goal serve ≤ {goal}: {'met' if cells['serve'] <= goal else 'missed'} cold, "
                     f"{'met' if cells['serve-warm'] <= goal else 'missed'} with the documents seen before"
                     + ("" if cells["serve-indexed"] != cells["serve-indexed"] else
                        f", {'met' if cells['serve-indexed'] <= goal else 'missed'} cold with the index's keywords"))
        print(line)
    from bench.rerank_throughput import workload

    http = http_layer(workload("sohu", args.requests, args.docs, seed=1), rounds=args.rounds)
    print(f"TEI /rerank JSON work per pair (request parsed: {http['parse']:.1f} µs, answer validated and dumped: "
          f"{http['answer']:.1f} µs); uvicorn's own share is in rerank_throughput --serve-ratio")


if __name__ == "__main__":
    main()
