"""The gateway in front of a secured OpenSearch node (the security plugin, TLS, internal users): every search goes to
the engine with the client's own identity, so each user gets through the gateway exactly what the engine gives that
user directly, and nothing the engine hides (documents, fields, other indices) shows up in hits, keywords, the rerank
request sent to ``jingpai serve``, errors or ``/_jingpai/metrics``; no password shows up anywhere.

The users and the ``secured`` fixture: tests/plugin/secured.py.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from tests.plugin.secured import HIDDEN_MARK, PASSWORDS, QUERY, SECRET_MARK, WINDOW, Secured


def _ids(resp: httpx.Response) -> list[str]:
    return [h["_id"] for h in resp.json()["hits"]["hits"]]


def _search(s: Secured, role: str | None, body: dict, index: str | None = None, **params) -> tuple[httpx.Response, httpx.Response]:
    """The search as ``role`` to the engine directly, and through the gateway with the gateway's ``params``."""
    path = f"/{index or s.alias}/_search"
    return s.call(s.node.url, "POST", path, role, json=body), s.call(s.gateway_url, "POST", path, role, json=body, params=params)


@pytest.mark.parametrize("role", ["one", "dls", "nomap", "nosearch", None])
def test_each_identity_gets_what_the_engine_gives_it(secured: Secured, role: str | None) -> None:
    s = secured
    body = {"query": QUERY, "size": WINDOW}
    direct, off = _search(s, role, body, jingpai="off")
    assert off.status_code == direct.status_code
    _, reranked = _search(s, role, body)
    _, augmented = _search(s, role, body, jingpai="augment")
    _, beyond = _search(s, role, {"query": QUERY, "from": WINDOW, "size": 10})
    _, deeper = _search(s, role, {"query": QUERY, "size": WINDOW + 10}, jingpai="augment")
    _, filtered = _search(s, role, {"query": QUERY, "size": 5, "_source": ["title"]})
    if direct.status_code != 200:
        # refused: the engine's own refusal, whatever the gateway would have done
        assert role in ("nosearch", None)
        assert direct.status_code == (401 if role is None else 403)
        for resp in (off, reranked, augmented, beyond, filtered):
            assert resp.status_code == direct.status_code and resp.text == direct.text
        if role is None:
            assert reranked.headers["www-authenticate"] == direct.headers["www-authenticate"]
        return
    assert off.json()["hits"] == direct.json()["hits"]
    assert reranked.status_code == augmented.status_code == beyond.status_code == filtered.status_code == 200
    info = reranked.json()["jingpai"]
    if role == "nomap":  # the gateway could not read the mapping: the engine's answer, unchanged
        assert info["reranked"] is False and info["reason"] == "not_a_jingpai_index"
        assert reranked.json()["hits"] == direct.json()["hits"]
        return
    assert info["reranked"] is True and info["augmented"] is True
    # reranking reorders the window the engine gave this user, never adds to it
    assert sorted(_ids(reranked)) == sorted(_ids(augmented))
    assert _ids(beyond) == _ids(deeper)[WINDOW:WINDOW + 10]
    assert all(set(h["_source"]) <= {"title"} for h in filtered.json()["hits"]["hits"])
    if role == "dls":
        for resp in (off, reranked, augmented, beyond, filtered):
            assert set(_ids(resp)) <= s.visible, _ids(resp)
            assert all("secret" not in h["_source"] for h in resp.json()["hits"]["hits"])
    else:
        assert set(_ids(deeper)) - s.visible  # one sees the whole index: the dls user's view is narrower


def test_msearch_answers_each_search_as_the_engine_does_for_that_user(secured: Secured) -> None:
    s = secured

    def payload(size: int) -> bytes:
        lines = [{"index": s.alias}, {"query": QUERY, "size": size}, {"index": s.other}, {"query": QUERY}]
        return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()

    ndjson = {"content-type": "application/x-ndjson"}
    for role in ("one", "dls"):
        direct = s.call(s.node.url, "POST", "/_msearch", role, content=payload(10), headers=ndjson)
        off = s.call(s.gateway_url, "POST", "/_msearch", role, content=payload(10), headers=ndjson, params={"jingpai": "off"})
        through = s.call(s.gateway_url, "POST", "/_msearch", role, content=payload(10), headers=ndjson)
        window = s.call(s.gateway_url, "POST", "/_msearch", role, content=payload(WINDOW), headers=ndjson, params={"jingpai": "augment"})
        assert direct.status_code == off.status_code == through.status_code == window.status_code == 200
        assert off.json()["responses"][0]["hits"] == direct.json()["responses"][0]["hits"]
        mine, others = through.json()["responses"]
        # the other index: the engine's own refusal of that one search, in every mode
        assert others["status"] == direct.json()["responses"][1]["status"] == off.json()["responses"][1]["status"] == 403
        assert others["error"] == direct.json()["responses"][1]["error"]
        assert mine["jingpai"]["reranked"] is True
        reranked = {h["_id"] for h in mine["hits"]["hits"]}
        assert len(reranked) == 10 and reranked <= {h["_id"] for h in window.json()["responses"][0]["hits"]["hits"]}
        if role == "dls":
            assert reranked <= s.visible


def test_another_index_and_wildcards_answer_as_the_engine_does(secured: Secured) -> None:
    s = secured
    for index in (s.other, "_all", "sec-*"):
        direct, through = _search(s, "one", {"query": QUERY}, index=index)
        assert through.status_code == direct.status_code
        if direct.status_code == 200:
            assert sorted(_ids(through)) == sorted(_ids(direct))
        else:
            assert through.text == direct.text
        if s.other not in direct.text:
            assert s.other not in through.text


def test_two_users_at_once_never_share_metadata_or_results(secured: Secured) -> None:
    s = secured

    def one_search(role: str) -> tuple[str, dict]:
        resp = s.call(s.gateway_url, "POST", f"/{s.alias}/_search", role, json={"query": QUERY, "size": 10})
        assert resp.status_code == 200
        return role, resp.json()

    roles = ["one", "nomap", "dls"] * 6
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(one_search, roles))
    for role, data in answers:
        assert data["jingpai"]["reranked"] is (role != "nomap"), (role, data["jingpai"])
        if role == "dls":
            assert {h["_id"] for h in data["hits"]["hits"]} <= s.visible


def test_nothing_hidden_reaches_the_reranker_the_answers_or_the_metrics(secured: Secured) -> None:
    s = secured
    s.capture.bodies.clear()
    s.seen.clear()
    _search(s, "dls", {"query": QUERY, "size": WINDOW})
    _search(s, "dls", {"query": QUERY, "size": 5, "_source": ["title"]})
    s.both("POST", "/_msearch", "dls", content=(json.dumps({"index": s.alias}) + "\n" + json.dumps({"query": QUERY}) + "\n").encode(),
           headers={"content-type": "application/x-ndjson"})
    metrics = s.call(s.gateway_url, "GET", "/_jingpai/metrics", None)
    health = s.call(s.gateway_url, "GET", "/_jingpai/health", None)
    assert metrics.status_code == health.status_code == 200
    assert s.capture.bodies, "the dls user's searches were reranked"
    for text in [*s.capture.bodies, *s.seen]:
        assert HIDDEN_MARK not in text and SECRET_MARK not in text
    for text in (metrics.text, health.text):
        assert s.alias not in text and s.other not in text and HIDDEN_MARK not in text


def test_no_password_in_any_output(secured: Secured, caplog: pytest.LogCaptureFixture, tmp_path, capfd: pytest.CaptureFixture) -> None:
    s = secured
    caplog.set_level(logging.DEBUG)
    s.seen.clear()
    s.capture.bodies.clear()
    for role in PASSWORDS:
        _search(s, role, {"query": QUERY, "size": 5})
        s.both("POST", "/_msearch", role, content=(json.dumps({"index": s.alias}) + "\n{}\n").encode(),
               headers={"content-type": "application/x-ndjson"})
    # wrong passwords and an unknown user too: the refusals must not echo them
    for auth in (("dls-nobody", "Zz9-Qq8-Ww7-Ee6"), (s.users["dls"], "Zz9-Qq8-Ww7-Ee6")):
        wrong = httpx.post(f"{s.gateway_url}/{s.alias}/_search", json={"query": QUERY}, auth=auth, timeout=60)
        assert wrong.status_code == 401
        s.seen.append(wrong.text + json.dumps(dict(wrong.headers)))
    s.seen.append(s.call(s.gateway_url, "GET", "/_jingpai/metrics", None).text)
    # the CLI indexing as the admin, with a record it quarantines: the file and the index's _meta stay clean
    corpus_file = tmp_path / "docs.jsonl"
    corpus_file.write_text(json.dumps({"id": "a1", "title": "中国经济", "content": "经济增长"}, ensure_ascii=False) + "\n{not json\n",
                           encoding="utf-8")
    name = f"sec-cli-{uuid.uuid4().hex[:6]}"
    env = {"JINGPAI_ENGINE_USER": "admin", "JINGPAI_ENGINE_PASSWORD": s.node.admin.password, "JINGPAI_ENGINE_CA_FILE": str(s.node.ca_file)}
    result = CliRunner().invoke(cli, ["index", str(corpus_file), "--index", name, "--engine", s.node.url, "--id-field", "id",
                                      "--quarantine-dir", str(tmp_path / "q"), "--no-progress", "--force"], env=env)
    assert result.exit_code == 0, result.output
    quarantined = [p.read_text(encoding="utf-8") for p in (tmp_path / "q").rglob("*") if p.is_file()]
    assert quarantined, "the bad record was quarantined"
    admin = s.node.admin_engine()
    meta = json.dumps(admin.get_mapping(name), ensure_ascii=False)
    admin.raw.indices.delete(index=f"{name}*")
    admin.close()
    captured = capfd.readouterr()
    outputs = [*s.seen, *s.capture.bodies, caplog.text, result.output, *quarantined, meta, captured.out, captured.err]
    secrets = [*PASSWORDS.values(), s.node.admin.password]
    secrets += [base64.b64encode(f"{user}:{PASSWORDS[role]}".encode()).decode() for role, user in s.users.items()]
    secrets.append(base64.b64encode(f"admin:{s.node.admin.password}".encode()).decode())
    for text in outputs:
        for secret in secrets:
            assert secret not in text
