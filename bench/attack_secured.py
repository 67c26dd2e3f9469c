"""``bench/attack.py``'s secured-cluster phase (issue 56): every path through jingpai, as each kind of user of a
secured OpenSearch node, must show nobody a document, field or index name the engine would not.

A node with the security plugin (``jingpai engine up --plugins knn,security``: OpenSearch 2.19.1, TLS, internal
users; or ``--secured-url`` / ``--secured-instance`` to reuse one), an index ``sec-attack`` of real news (every
other document non-public: its title carries :data:`HIDDEN`; every document's ``secret`` field carries
:data:`SECRET`), an index ``sec-forbidden`` no user may read, and the users:

- ``one``: ``sec-attack*`` only; ``dls``: the same with document-level security (public documents only) and
  field-level security (no ``secret``); ``nomap``: may search, not read the mapping; ``nosearch``: may read the
  mapping, not search; and anonymous.

Each user sends the same battery through a gateway (in-process, with the demo UI; the rerank service in-process
too, its request bodies captured): ``_search`` off / augment / rerank, ``_source`` filters, pages past the window,
``_msearch`` naming both indices, the forbidden index and wildcards, the UI's index list and search, metrics and
health. A **disclosure** is a hidden document's id or mark, the secret field's mark, or the forbidden index's name or
its document in an answer to a user not allowed it, or in what reached the reranker during that user's requests;
a **mismatch** is a ``?jingpai=off`` answer (status or hits) not the engine's own for the same user. At the end every
password (and its Basic token) is looked for in every answer, the captured rerank bodies and the logs.
"""

from __future__ import annotations

import base64
import json
import logging
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HIDDEN = "绝密"
SECRET = "SECRETVALUE"
FORBIDDEN_DOC = "禁区文档"
ALIAS, FORBIDDEN = "sec-attack", "sec-forbidden"
PASSWORDS = {"one": "Hq4-Tz8w-Nc2v-Ys6p", "dls": "Jd7-Wq3m-Bx9k-Fr2t", "nomap": "Pm5-Gv8c-Lz3q-Xw6h", "nosearch": "Kc2-Rs9v-Dn4x-Tj7m"}
ROLES = ("one", "dls", "nomap", "nosearch", None)


@dataclass
class SecuredSummary:
    """Requests tried per user, disclosures, mismatches and credentials found (all but the first must be 0)."""

    version: str = ""
    tried: Counter = field(default_factory=Counter)
    disclosures: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    credentials: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: the control: answers to ``one`` (who may see them) holding documents DLS hides from ``dls``, and reranked answers
    control: Counter = field(default_factory=Counter)

    def line(self) -> str:
        per_user = ", ".join(f"{role or 'anonymous'} {self.tried[role or 'anonymous']}" for role in ROLES)
        return (f"secured (OpenSearch {self.version}, security plugin): requests tried per user: {per_user} | disclosures: "
                f"{len(self.disclosures)} | answers not the engine's for that user: {len(self.mismatches)} | credentials in "
                f"outputs: {len(self.credentials)} | control: {self.control['hidden_to_one']} answers to one held documents hidden "
                f"from dls, {self.control['reranked']} answers reranked")

    @property
    def all_failures(self) -> list[str]:
        return [*self.failures, *(f"disclosed {d}" for d in self.disclosures), *(f"mismatch {m}" for m in self.mismatches),
                *(f"credential in {c}" for c in self.credentials)]


def _documents(texts: list[tuple[str, str]], n: int) -> list[dict]:
    docs = []
    for i, (title, content) in enumerate(texts[:n]):
        public = i % 2 == 0
        docs.append({"id": f"s{i:03d}", "title": title if public else f"{HIDDEN}{title}", "content": content, "public": public,
                     "secret": f"{SECRET}{i}"})
    return docs


def _setup(node_url: str, inst: Path, work: Path, docs: list[dict], tag: str) -> dict[str, str]:
    """The indices (as the admin) and the users; ``{role: user name}``."""
    from jingpai.engine.client import EngineAuth, connect
    from jingpai.engine.security import SecurityAdmin, ca_file
    from jingpai.indexer.pipeline import IndexSettings, index_corpus

    admin = SecurityAdmin.of(node_url, inst)
    engine = connect(node_url, auth=EngineAuth(user=admin.user, password=admin.password, ca_file=ca_file(inst)))
    engine.raw.indices.delete(index=f"{ALIAS}*,{FORBIDDEN}", ignore_unavailable=True)
    path = work / "secured.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    report = index_corpus(engine, [path], IndexSettings(index=ALIAS, text_fields=("title", "content"), id_field="id",
                                                        quarantine_dir=work, progress=False))
    if report.indexed != len(docs):
        raise RuntimeError(f"indexed {report.indexed} of {len(docs)} secured documents")
    engine.index_document(FORBIDDEN, "f1", {"title": FORBIDDEN_DOC, "content": docs[0]["content"]}, refresh=True)
    engine.refresh(ALIAS)
    engine.close()
    read = ["read", "indices:admin/mappings/get"]
    grants = {
        "one": {"index_patterns": [f"{ALIAS}*"], "allowed_actions": read},
        "dls": {"index_patterns": [f"{ALIAS}*"], "allowed_actions": read, "dls": json.dumps({"term": {"public": True}}), "fls": ["~secret"]},
        "nomap": {"index_patterns": [f"{ALIAS}*"], "allowed_actions": ["read"]},
        "nosearch": {"index_patterns": [f"{ALIAS}*"], "allowed_actions": ["indices:admin/mappings/get"]},
    }
    users = {role: f"atk-{role}-{tag}" for role in grants}
    for role, grant in grants.items():
        admin.put_user(users[role], PASSWORDS[role])
        admin.put_role(users[role], cluster_permissions=("cluster_composite_ops_ro",), index_permissions=(grant,))
        admin.map_role(users[role], users=(users[role],))
    return users


def _battery(queries: list[str]) -> list[tuple[str, str, dict]]:
    """``(method, path, request kwargs)`` of every request a user sends through the gateway."""
    out: list[tuple[str, str, dict]] = []
    nd = {"content-type": "application/x-ndjson"}
    for q in queries:
        match = {"multi_match": {"query": q, "fields": ["title", "content"]}}
        for mode in ("off", "augment", "rerank"):
            out.append(("POST", f"/{ALIAS}/_search", {"json": {"query": match, "size": 20}, "params": {"jingpai": mode}}))
        out.append(("POST", f"/{ALIAS}/_search", {"json": {"query": match, "size": 5, "_source": ["title", "secret"]}}))
        out.append(("POST", f"/{ALIAS}/_search", {"json": {"query": match, "from": 20, "size": 10}}))
        lines = [{"index": ALIAS}, {"query": match, "size": 10}, {"index": FORBIDDEN}, {"query": match}]
        out.append(("POST", "/_msearch", {"content": "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode(), "headers": nd}))
        for index in (FORBIDDEN, "_all", "sec-*", f"{ALIAS},{FORBIDDEN}"):
            out.append(("POST", f"/{index}/_search", {"json": {"query": match}}))
        out.append(("GET", "/_jingpai/ui/api/search", {"params": {"q": q, "index": ALIAS}}))
        out.append(("GET", "/_jingpai/ui/api/search", {"params": {"q": q, "index": FORBIDDEN}}))
    out += [("GET", "/_jingpai/ui/api/indices", {}), ("GET", f"/{FORBIDDEN}/_mapping", {}), ("GET", "/_jingpai/metrics", {}),
            ("GET", "/_jingpai/health", {}), ("GET", "/_mapping", {}), ("GET", "/_cat/indices", {})]
    return out


class Capture:
    """The rerank service's ASGI app, keeping every request body it was sent (what the gateway disclosed to it)."""

    def __init__(self, app) -> None:  # noqa: ANN001
        self.app, self.state, self.bodies = app, app.state, []

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        chunks: list[bytes] = []

        async def recorded():  # noqa: ANN202
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    self.bodies.append(b"".join(chunks).decode("utf-8", "replace"))
            return message

        await self.app(scope, recorded, send)


def _items(text: str, ids: set[str]) -> set[str]:
    """What a text shows of the things some users may not see: the marks, and documents by id."""
    return {mark for mark in (HIDDEN, SECRET, FORBIDDEN_DOC) if mark in text} | {f"document {i}" for i in ids if f'"{i}"' in text}


def _may_not_see(role: str | None, hidden_ids: set[str], all_ids: set[str]) -> set[str]:
    """What ``role`` may never be shown (the ground truth of the roles, not the engine's answer)."""
    never = {FORBIDDEN_DOC}
    if role == "dls":
        never |= {HIDDEN, SECRET} | {f"document {i}" for i in hidden_ids}
    if role in ("nosearch", None):
        never |= {HIDDEN, SECRET} | {f"document {i}" for i in all_ids}
    return never


def _disclosed(role: str | None, request: str, answer: str, engine: str | None, reranked: str, hidden_ids: set[str],
               all_ids: set[str]) -> set[str]:
    """What the gateway showed ``role``, or sent the reranker for it, that ``role`` may not see; and the forbidden
    index's name when the user did not name it and the engine's own answer to the same request does not either."""
    never = _may_not_see(role, hidden_ids, all_ids)
    found = (_items(answer, all_ids) | _items(reranked, all_ids)) & never
    if FORBIDDEN in answer and FORBIDDEN not in request and (engine is None or FORBIDDEN not in engine):
        found.add(f"the index name {FORBIDDEN}")
    return found


def run(model_dir: Path, texts: list[tuple[str, str]], *, url: str | None = None, instance: Path | None = None,
        queries: int = 6) -> SecuredSummary:
    """The secured phase (starts and stops a node of its own unless ``url`` / ``instance`` name a running one)."""
    from jingpai.engine import harness, security
    from jingpai.plugin.gateway import create_app
    from jingpai.plugin.settings import GatewaySettings
    from jingpai.reranker.base import Reranker
    from jingpai.reranker.service import ServiceSettings
    from jingpai.reranker.service import create_app as create_service_app
    from jingpai.serving import ServerThread, serve
    from jingpai.ui.app import UiSettings, ui_routes

    s = SecuredSummary()
    settings = None if url else harness.EngineSettings(kind="opensearch", port=harness.free_port(), plugins=("knn", "security"))
    logs = logging.getLogger()
    with tempfile.TemporaryDirectory(prefix="jingpai-attack-secured-") as tmp:
        work = Path(tmp)
        handler = logging.FileHandler(work / "phase.log")
        logs.addHandler(handler)
        logs.setLevel(logging.DEBUG)
        try:
            if settings is not None:
                print(f"== secured: starting a node with the security plugin on {settings.url}", flush=True)
                url, instance = harness.start(settings).url, settings.instance_dir
            assert url is not None and instance is not None
            ca = security.ca_file(instance)
            docs = _documents(texts, 80)
            hidden, all_ids = {d["id"] for d in docs if not d["public"]}, {d["id"] for d in docs}
            users = _setup(url, instance, work, docs, str(int(time.time()) % 100000))
            capture = Capture(create_service_app(ServiceSettings(model_name="attack", device="cpu", dtype="fp32", warmup=False),
                                                 Reranker.load(model_dir, device="cpu")))
            with serve(capture) as reranker:
                app = create_app(GatewaySettings(engine_url=url, engine_ca_file=ca, reranker_url=reranker.url, window=20, timeout_ms=30_000),
                                 routes=ui_routes())
                app.state.jingpai_ui = UiSettings(default_index=ALIAS)
                gateway = ServerThread(app).start()
                seen: list[str] = []
                rerank_bodies: list[str] = []
                try:
                    s.version = httpx.get(url, auth=("admin", security.admin_password(instance)), verify=str(ca)).json()["version"]["number"]
                    battery = _battery([t for t, _ in texts[:400:37]][:queries])
                    for role in ROLES:
                        auth = None if role is None else (users[role], PASSWORDS[role])
                        name = role or "anonymous"
                        with httpx.Client(auth=auth, timeout=120, verify=str(ca)) as direct, httpx.Client(auth=auth, timeout=120) as client:
                            for method, path, kwargs in battery:
                                capture.bodies.clear()
                                resp = client.request(method, f"{gateway.url}{path}", **kwargs)
                                s.tried[name] += 1
                                rerank_bodies += capture.bodies
                                s.control["reranked"] += '"reranked":true' in resp.text.replace(" ", "")
                                s.control["hidden_to_one"] += role == "one" and any(f'"{i}"' in resp.text for i in hidden)
                                seen.append(resp.text + json.dumps(dict(resp.headers)))
                                engine = None
                                if not path.startswith("/_jingpai/"):
                                    engine = direct.request(method, f"{url}{path}", **{k: v for k, v in kwargs.items() if k != "params"})
                                request = path + json.dumps(kwargs.get("params") or {}, ensure_ascii=False) + json.dumps(
                                    kwargs.get("json") or {}, ensure_ascii=False) + bytes(kwargs.get("content") or b"").decode()
                                for what in sorted(_disclosed(role, request, resp.text, engine and engine.text, "".join(capture.bodies),
                                                              hidden, all_ids)):
                                    s.disclosures.append(f"{what} to {name}: {method} {path} {kwargs.get('params', '')}")
                                if engine is not None and (kwargs.get("params") or {}).get("jingpai") == "off":
                                    same = engine.status_code == resp.status_code and (
                                        resp.status_code != 200 or engine.json()["hits"] == resp.json()["hits"])
                                    if not same:
                                        s.mismatches.append(f"{name}: {path} engine {engine.status_code}, gateway {resp.status_code}")
                                if resp.status_code >= 500:
                                    s.failures.append(f"{name}: {method} {path} answered {resp.status_code}: {resp.text[:200]}")
                finally:
                    gateway.stop()
            handler.flush()
            outputs = [*seen, *rerank_bodies, (work / "phase.log").read_text(encoding="utf-8", errors="replace")]
            secrets = {**{f"{r} password": p for r, p in PASSWORDS.items()},
                       **{f"{r} token": base64.b64encode(f"{users[r]}:{p}".encode()).decode() for r, p in PASSWORDS.items()}}
            s.credentials += [what for what, secret in secrets.items() if any(secret in text for text in outputs)]
            admin = security.SecurityAdmin.of(url, instance)
            for user in users.values():
                admin.delete_role(user)
                admin.delete_user(user)
        except Exception as exc:  # noqa: BLE001 - a crashed phase is a failure in the summary
            s.failures.append(f"phase crashed: {type(exc).__name__}: {exc}")
            print(f"  CRASH: {type(exc).__name__}: {exc}", flush=True)
        finally:
            logs.removeHandler(handler)
            if settings is not None:
                harness.stop(settings, purge=True)
    return s


__all__ = ["SecuredSummary", "run"]
