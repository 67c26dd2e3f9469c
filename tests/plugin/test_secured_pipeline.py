"""The jingpai OpenSearch plugin's search pipelines (``jingpai_keywords`` / ``jingpai_rerank``) on the secured node, as
each user of tests/plugin/secured.py: a search through the pipeline holds exactly the hits the engine gives that user
for the same (augmented) query without it — reranked, never widened — and nothing the engine hides from the user
reaches the hits, the rerank request the node sends to ``jingpai serve`` (captured) or an error; and writing the
pipeline (``jingpai plugin pipeline``) as a user without the permissions it needs fails with the one it lacks.

The secured node runs the plugin (``engine up --plugins jingpai,knn,security``: the harness builds it for 2.19.1);
skipped, with the reason, where Maven or Java is missing (tests/conftest.py: opensearch_secured).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine.client import Engine
from jingpai.indexer.mapping import read_meta
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.keyword_dict import Segmenter
from jingpai.plugin.augment import QueryRewriter
from tests.plugin.secured import HIDDEN_MARK, PASSWORDS, QUERY, SECRET_MARK, WINDOW, Secured, documents

#: generous: the node calls the tiny CPU reranker on a loaded machine, and a timeout would fail open (then not reranked)
TIMEOUT_MS = 60_000
PIPER_PASSWORD = "Wf6-Hs2n-Qk8d-Mv3x"


def _env(s: Secured, user: str | None, password: str | None) -> dict[str, str | None]:
    return {"JINGPAI_ENGINE_CA_FILE": str(s.node.ca_file), "JINGPAI_ENGINE_USER": user, "JINGPAI_ENGINE_PASSWORD": password,
            "JINGPAI_PLUGIN_ENGINE_USER": None, "JINGPAI_PLUGIN_ENGINE_PASSWORD": None}


def _write(s: Secured, index: str, user: str, password: str, *extra: str):
    args = ["plugin", "pipeline", "--index", index, "--dict", str(s.dict_dir), "--engine", s.node.url, *extra]
    return CliRunner().invoke(cli, args, env=_env(s, user, password))


@pytest.fixture(scope="module")
def piped(secured: Secured, dictionary, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Engine]]:
    """``(index, admin engine)``: the secured documents under ``<alias>-pipe`` (the users' roles on ``<alias>*`` cover
    it; the shared index keeps no default pipeline, which the other secured tests compare against), with the rerank
    pipeline ``jingpai plugin pipeline`` writes as its default and the augment-only one beside it, both written by the
    admin."""
    s = secured
    admin = s.node.admin_engine()
    if "jingpai" not in admin.modules():
        pytest.skip("the secured node has no jingpai plugin (Maven or Java missing: tests/conftest.py, opensearch_secured)")
    tmp = tmp_path_factory.mktemp("secured-pipe")
    index = f"{s.alias}-pipe"
    path = tmp / "docs.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents()), encoding="utf-8")
    settings = IndexSettings(index=index, text_fields=("title", "content"), id_field="id", quarantine_dir=tmp, progress=False)
    assert index_corpus(admin, [path], settings, dictionary=dictionary[0]).indexed == len(documents())
    admin.refresh(index)
    for extra in (("--mode", "augment", "--name", f"{index}-augment"),
                  ("--reranker", s.reranker_url, "--window", str(WINDOW), "--timeout-ms", str(TIMEOUT_MS), "--name", f"{index}-rerank")):
        result = _write(s, index, "admin", s.node.admin.password, *extra)
        assert result.exit_code == 0, result.output
        assert s.node.admin.password not in result.output
    assert admin.get_index_settings(index).get("index.search.default_pipeline") == f"{index}-rerank"
    yield index, admin
    admin.request("DELETE", f"/_search/pipeline/{index}-*")  # each holds the inline dictionary: do not leave them behind
    admin.raw.indices.delete(index=f"{index}*")
    admin.close()


def _augmented(admin: Engine, index: str, dictionary) -> dict:
    """QUERY as ``jingpai_keywords`` rewrites it (the gateway's rewriter, which the processor is pinned to in
    tests/plugin/test_pipeline_node.py): what the engine is asked without any pipeline, as the reference."""
    d = dictionary[0]
    return QueryRewriter(read_meta(admin, index), dictionary=d, segmenter=Segmenter(d))(QUERY).query


def _ids(resp) -> list[str]:
    return [h["_id"] for h in resp.json()["hits"]["hits"]]


@pytest.mark.parametrize("role", ["one", "dls", "nomap", "nosearch", None])
def test_the_pipeline_reranks_what_the_engine_gives_the_user(secured: Secured, piped, dictionary, role: str | None) -> None:
    s, (index, admin) = secured, piped
    path = f"/{index}/_search"
    reference = s.call(s.node.url, "POST", path, role, params={"search_pipeline": "_none"},
                       json={"query": _augmented(admin, index, dictionary), "size": WINDOW})
    s.capture.bodies.clear()
    reranked = s.call(s.node.url, "POST", path, role, json={"query": QUERY, "size": WINDOW})
    augmented = s.call(s.node.url, "POST", path, role, params={"search_pipeline": f"{index}-augment"}, json={"query": QUERY, "size": WINDOW})
    # a _source filter leaving the rerank fields out, and ext.jingpai asking the reranker for the field FLS hides
    widened = s.call(s.node.url, "POST", path, role, json={"query": QUERY, "size": 5, "_source": ["title"],
                                                           "ext": {"jingpai": {"fields": ["title", "content", "secret"]}}})
    answers = (reranked, augmented, widened)
    if reference.status_code != 200:
        assert role in ("nosearch", None)
        assert reference.status_code == (401 if role is None else 403)
        for resp in answers:  # refused before any processor ran: the engine's own refusal, nothing sent to the reranker
            assert resp.status_code == reference.status_code, resp.text
            assert HIDDEN_MARK not in resp.text and SECRET_MARK not in resp.text and "jingpai" not in resp.text
        assert s.capture.bodies == []
        return
    for resp in answers:
        assert resp.status_code == 200, resp.text
    engine = _ids(reference)
    assert _ids(augmented) == engine  # the augmentation is the engine's own search for this user
    assert reranked.json()["ext"]["jingpai"]["reranked"] is True, reranked.json()["ext"]
    assert sorted(_ids(reranked)) == sorted(engine)  # reranked: the window the engine gave this user, reordered
    assert all(set(h["_source"]) == {"title"} for h in widened.json()["hits"]["hits"])  # the fold's fields taken out again
    assert len(s.capture.bodies) == 2  # the default pipeline's two searches reached the reranker, the augment one did not
    if role == "dls":
        assert set(engine) <= s.visible
        for text in [*(resp.text for resp in answers), *s.capture.bodies]:
            assert HIDDEN_MARK not in text and SECRET_MARK not in text
    else:
        # the control: these users may see the documents and the field DLS and FLS hide, and they reach the reranker
        assert set(engine) - s.visible
        assert HIDDEN_MARK in s.capture.bodies[0] and SECRET_MARK in s.capture.bodies[1]


@pytest.fixture(scope="module")
def piper(secured: Secured) -> Iterator[str]:
    """A user who may search and read the mappings of ``<alias>*`` (the ``one`` user's rights) and nothing else; the test
    grants it the pipeline's permissions one by one."""
    s, name = secured, f"piper-{secured.alias}"
    s.node.admin.put_user(name, PIPER_PASSWORD)
    yield name
    s.node.admin.delete_role(name)
    s.node.admin.delete_user(name)


def test_writing_a_pipeline_needs_its_permissions_and_names_the_missing_one(secured: Secured, piped, piper: str) -> None:
    s, (index, admin), name = secured, piped, piper
    index_actions = ["read", "indices:admin/mappings/get"]
    # (cluster permissions, index permissions): each step lacks the next one the command needs
    steps = [
        ((), index_actions, "cluster:monitor/nodes/info"),
        (("cluster:monitor/nodes/info",), ["read"], "indices:admin/mappings/get"),
        (("cluster:monitor/nodes/info",), index_actions, "cluster:admin/search/pipeline/put"),
        (("cluster:monitor/nodes/info", "cluster:admin/search/pipeline/put"), index_actions, "indices:admin/settings/update"),
    ]
    target = f"{index}-by-{name}"
    for cluster, actions, missing in steps:
        s.node.admin.put_role(name, cluster_permissions=cluster, index_permissions=({"index_patterns": [f"{s.alias}*"], "allowed_actions": actions},))
        s.node.admin.map_role(name, users=(name,))
        result = _write(s, index, name, PIPER_PASSWORD, "--mode", "augment", "--name", target)
        assert result.exit_code == 1, result.output
        assert f"refused user '{name}' the permission" in result.output and f"no permissions for [{missing}]" in result.output, result.output
        assert PIPER_PASSWORD not in result.output
    # with them all (docs/security.md's list) the user writes it, and the index's default pipeline becomes it
    s.node.admin.put_role(name, cluster_permissions=steps[-1][0], index_permissions=(
        {"index_patterns": [f"{s.alias}*"], "allowed_actions": [*index_actions, "indices:admin/settings/update"]},))
    s.node.admin.map_role(name, users=(name,))
    result = _write(s, index, name, PIPER_PASSWORD, "--mode", "augment", "--name", target)
    assert result.exit_code == 0, result.output
    assert admin.get_index_settings(index).get("index.search.default_pipeline") == target
    admin.put_index_settings(index, {"index.search.default_pipeline": f"{index}-rerank"})  # as the fixture left it
