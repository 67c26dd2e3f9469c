"""The secured OpenSearch node's users, index and gateway that the secured tests share (the ``secured`` session
fixture of tests/plugin/conftest.py runs :func:`secured_cluster`).

Users: ``one`` (one index, with its mapping), ``dls`` (the same index with document-level security hiding the
non-public half and field-level security hiding ``secret``), ``nomap`` (may search but not read the mapping: the
gateway cannot tell it is a jingpai index), ``nosearch`` (may read the mapping, not search), and anonymous.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.attack_secured import Capture  # the rerank service recording what it was sent: one class for the attack script and the tests
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.plugin.gateway import create_app
from jingpai.plugin.settings import GatewaySettings
from jingpai.reranker.service import create_app as create_service_app
from jingpai.serving import ServerThread, serve
from jingpai.ui.app import UiSettings, ui_routes
from tests.conftest import SecuredNode
from tests.plugin.conftest import corpus

PASSWORDS = {"one": "Hq4-Tz8w-Nc2v-Ys6p", "dls": "Jd7-Wq3m-Bx9k-Fr2t", "nomap": "Pm5-Gv8c-Lz3q-Xw6h", "nosearch": "Kc2-Rs9v-Dn4x-Tj7m"}
HIDDEN_MARK = "绝密"  # in the title of every non-public document (dls may not see them)
SECRET_MARK = "SECRETVALUE"  # the `secret` field of every document (dls may not see it)
QUERY = {"match": {"content": "中国经济增长"}}
WINDOW = 20


@dataclass
class Secured:
    node: SecuredNode
    alias: str
    other: str
    gateway_url: str
    users: dict[str, str]  # role → user name
    capture: Capture
    visible: set[str]  # the ids the dls user may see
    reranker_url: str
    dict_dir: Path
    seen: list[str] = field(default_factory=list)  # every gateway answer's text, for the leak checks

    def auth(self, role: str | None) -> tuple[str, str] | None:
        return None if role is None else (self.users[role], PASSWORDS[role])

    def call(self, url: str, method: str, path: str, role: str | None, **kwargs) -> httpx.Response:
        verify = self.node.auth().ssl_context() if url.startswith("https") else True
        resp = httpx.request(method, f"{url}{path}", auth=self.auth(role), verify=verify, timeout=120, **kwargs)
        if url == self.gateway_url:
            self.seen.append(resp.text)
        return resp

    def both(self, method: str, path: str, role: str | None, **kwargs) -> tuple[httpx.Response, httpx.Response]:
        """The same request to the engine directly and through the gateway, as ``role``."""
        return self.call(self.node.url, method, path, role, **kwargs), self.call(self.gateway_url, method, path, role, **kwargs)


def documents() -> list[dict]:
    docs = []
    for i, doc in enumerate(corpus()):
        public = i % 2 == 0
        title = doc["title"] if public else f"{HIDDEN_MARK}{doc['title']}"
        docs.append({**doc, "title": title, "public": public, "secret": f"{SECRET_MARK}{doc['id']}"})
    return docs


def secured_cluster(node: SecuredNode, dictionary, rerank_model, service_settings, tmp: Path) -> Iterator[Secured]:
    """The body of the ``secured`` session fixture (tests/plugin/conftest.py): the index, the users, the captured
    rerank service and the gateway (with the demo UI's routes, as ``jingpai gateway --ui`` serves them)."""
    d, dict_dir = dictionary
    tag = uuid.uuid4().hex[:6]
    alias, other = f"sec-gw-{tag}", f"sec-other-{tag}"
    admin = node.admin_engine()
    path = tmp / "docs.jsonl"
    docs = documents()
    path.write_text("\n".join(json.dumps(doc, ensure_ascii=False) for doc in docs) + "\n", encoding="utf-8")
    report = index_corpus(admin, [path], IndexSettings(index=alias, text_fields=("title", "content"), id_field="id",
                                                         quarantine_dir=tmp, progress=False), dictionary=d)
    assert report.indexed == len(docs)
    admin.refresh(alias)
    admin.index_document(other, "x1", {"content": "中国经济增长 另一个索引的文档"}, refresh=True)
    read = ["read", "indices:admin/mappings/get"]
    grants = {
        "one": {"index_patterns": [f"{alias}*"], "allowed_actions": read},
        "dls": {"index_patterns": [f"{alias}*"], "allowed_actions": read, "dls": json.dumps({"term": {"public": True}}),
                "fls": ["~secret"]},
        "nomap": {"index_patterns": [f"{alias}*"], "allowed_actions": ["read"]},
        "nosearch": {"index_patterns": [f"{alias}*"], "allowed_actions": ["indices:admin/mappings/get"]},
    }
    users = {role: f"{role}-{tag}" for role in grants}
    for role, grant in grants.items():
        node.admin.put_user(users[role], PASSWORDS[role])
        # cluster_composite_ops_ro: _msearch (indices:data/read/msearch) is a cluster-level action; no index access
        node.admin.put_role(users[role], cluster_permissions=("cluster_composite_ops_ro",), index_permissions=(grant,))
        node.admin.map_role(users[role], users=(users[role],))
    capture = Capture(create_service_app(service_settings, rerank_model))
    with serve(capture) as reranker:
        settings = GatewaySettings(engine_url=node.url, engine_ca_file=node.ca_file, reranker_url=reranker.url, window=WINDOW,
                                   dict_dirs=(dict_dir,), timeout_ms=20_000)
        app = create_app(settings, routes=ui_routes())
        app.state.jingpai_ui = UiSettings(default_index=alias)  # as `jingpai demo` sets it
        gateway = ServerThread(app).start()
        visible = {doc["id"] for doc in docs if doc["public"]}
        yield Secured(node=node, alias=alias, other=other, gateway_url=gateway.url, users=users, capture=capture, visible=visible,
                      reranker_url=reranker.url, dict_dir=dict_dir)
        gateway.stop()
    for role in grants:
        node.admin.delete_role(users[role])
        node.admin.delete_user(users[role])
    admin.raw.indices.delete(index=f"{alias}*")
    admin.delete_index(other)
    admin.close()
