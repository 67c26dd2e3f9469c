"""``jingpai demo``: the corpus/dictionary/model steps, and the whole pipeline headless on real engines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from jingpai.keyword_dict import keyword_spans
from jingpai.reranker.base import Reranker
from jingpai.commands.demo import demo
from jingpai.jobs.demo import (
    DEMO_CORPUS,
    DemoError,
    DemoSettings,
    choose_corpora,
    cnews_title,
    convert_cnews,
    prepare_model,
    read_jsonl,
    start_demo,
)
from jingpai.jobs.demo_data import convert_a14
from jingpai.jobs.demo_model import DemoModelError, DemoRecipe, pseudo_pairs, train_demo_model

REPO = Path(__file__).resolve().parents[2]


def quiet(_msg: str) -> None:
    pass


@pytest.fixture(scope="module")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache dir for the module, so the demo dictionary is built once."""
    return tmp_path_factory.mktemp("demo-cache")


# ---------------------------------------------------------------------------------------------- units


def test_shipped_corpus_is_well_formed():
    records = read_jsonl(DEMO_CORPUS)
    assert 150 <= len(records) <= 300
    assert len({r["id"] for r in records}) == len(records)
    for r in records:
        assert set(r) == {"id", "title", "content", "category", "date"}
        assert r["title"].strip() and r["content"].strip() and r["category"].strip()
    titles = " ".join(r["title"] for r in records)
    for name in ("360公司", "Xbox 360", "风光360", "苹果", "小米", "长城"):
        assert name in titles


def test_cnews_title_is_the_first_sentence_cut():
    assert cnews_title("湖人获胜。后面的话") == "湖人获胜"
    assert cnews_title("没有句号的标题") == "没有句号的标题"
    assert cnews_title("长" * 50 + "。") == "长" * 40 + "…"


def test_convert_cnews(tmp_path):
    source = tmp_path / "docs.tsv"
    source.write_text("体育\t湖人获胜！详细报道如下。\n\n财经\t股市上涨。\n", encoding="utf-8")
    assert convert_cnews(source, tmp_path / "out.jsonl") == 2
    records = read_jsonl(tmp_path / "out.jsonl")
    assert records[0] == {"id": "cnews-00001", "title": "湖人获胜", "content": "湖人获胜！详细报道如下。", "category": "体育"}
    assert records[1]["id"] == "cnews-00003"
    source.write_text("体育\t好文章\n没有制表符的一行\n", encoding="utf-8")
    with pytest.raises(DemoError, match=r"docs.tsv:2: expected `label<TAB>article` with both non-empty"):
        convert_cnews(source, tmp_path / "bad.jsonl")


def test_settings_name_the_bad_value():
    with pytest.raises(ValueError, match="port and reranker_port must differ, both are 8080"):
        DemoSettings(port=8080, reranker_port=8080)
    with pytest.raises(ValueError, match="kind must be one of opensearch, elasticsearch, got 'solr'"):
        DemoSettings(kind="solr")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="index must be a lower-case index name"):
        DemoSettings(index="Demo")


def test_cli_rejects_equal_ports():
    result = CliRunner().invoke(demo, ["--port", "9000", "--reranker-port", "9000"])
    assert result.exit_code != 0
    assert "port and reranker_port must differ, both are 9000" in result.output


def test_choose_corpora(tmp_path):
    empty = DemoSettings(data_dir=tmp_path / "none", cache_dir=tmp_path / "cache")
    (only,) = choose_corpora(empty, quiet)
    assert (only.path, only.index, only.origin) == (DEMO_CORPUS, "jingpai-demo", "shipped")

    cnews = tmp_path / "data" / "zh" / "cnews_sample" / "docs.tsv"
    cnews.parent.mkdir(parents=True)
    cnews.write_text("体育\t湖人获胜。\n", encoding="utf-8")
    main, extra = choose_corpora(DemoSettings(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache"), quiet)
    assert main.origin == "cnews" and main.id_field == "id" and read_jsonl(main.path)[0]["category"] == "体育"
    assert (extra.path, extra.index) == (DEMO_CORPUS, "jingpai-demo-entities")

    given = tmp_path / "mine.jsonl"
    given.write_text(json.dumps({"title": "t", "content": "c"}) + "\n", encoding="utf-8")
    main, _ = choose_corpora(DemoSettings(corpus=given, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache"), quiet)
    assert (main.path, main.origin, main.id_field) == (given, "given", None)

    # the A14 passages join when present, before the shipped corpus (the UI opens on the last) and only without --corpus
    a14 = tmp_path / "data" / "zh" / "a14_stock_news" / "articles.jsonl"
    a14.parent.mkdir(parents=True)
    a14.write_text(json.dumps({"id": "a14_1", "text": " 中国长城发布年报 "}, ensure_ascii=False) + "\n", encoding="utf-8")
    main, passages, extra = choose_corpora(DemoSettings(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache"), quiet)
    assert (main.origin, passages.origin, passages.index, extra.origin) == ("cnews", "a14", "jingpai-demo-a14", "shipped")
    assert read_jsonl(passages.path) == [{"id": "a14_1", "content": "中国长城发布年报"}]
    assert [c.origin for c in choose_corpora(DemoSettings(corpus=given, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache"), quiet)] \
        == ["given", "shipped"]


def test_convert_a14_names_the_bad_line(tmp_path):
    source = tmp_path / "articles.jsonl"
    source.write_text('{"id": "a", "text": "好"}\n{"id": "b"}\n', encoding="utf-8")
    with pytest.raises(DemoError, match=r"articles.jsonl:2: expected an object with a string `id` and a non-empty string `text`"):
        convert_a14(source, tmp_path / "out.jsonl")
    source.write_text("{oops\n", encoding="utf-8")
    with pytest.raises(DemoError, match=r"articles.jsonl:1: not JSON"):
        convert_a14(source, tmp_path / "out.jsonl")


def test_demo_model_is_bge_zero_shot_when_installed_else_the_trained_fallback(tmp_path, monkeypatch):
    from jingpai.reranker.pretrained import installed

    if not installed("bge-small-zh"):
        pytest.skip("bge-small-zh is not installed (scripts/bootstrap runs `jingpai models pull bge-small-zh`)")
    lines: list[str] = []
    settings = DemoSettings(data_dir=tmp_path / "no-data", cache_dir=tmp_path / "cache")
    path, banner = prepare_model(settings, [], None, lines.append)
    assert banner is None and (path / "config.json").is_file()
    assert lines == [f"      using bge-small-zh zero-shot (the cosine of its CLS vectors) from {path}"]
    assert Reranker.load(path, device="cpu").name.startswith("bi")

    # without it (an empty cache) the demo says so and falls back to training its USE-multilingual model
    monkeypatch.setenv("JINGPAI_CACHE_DIR", str(tmp_path / "empty"))
    import jingpai.jobs.demo_model as demo_model

    def no_training(*_args, **_kwargs):
        raise RuntimeError("training skipped in this test")

    monkeypatch.setattr(demo_model, "train_demo_model", no_training)
    lines.clear()
    dictionary = type("D", (), {"version": "v"})()
    path, banner = prepare_model(settings, [], dictionary, lines.append)
    assert path is None and "training skipped in this test" in banner
    assert lines[0] == "      bge-small-zh is not installed (`jingpai models pull bge-small-zh`); training the USE-multilingual demo model instead"


def test_pseudo_pairs_have_one_positive_and_other_category_negatives(demo_dictionary):
    dictionary, _ = demo_dictionary
    records = read_jsonl(DEMO_CORPUS)
    train, dev = pseudo_pairs(records, dictionary, DemoRecipe(negatives_per_query=3))
    assert train and dev
    category_of = {f"{r['title']}": r["category"] for r in records}
    by_qid = defaultdict(list)
    for pair in train + dev:
        by_qid[pair.qid].append(pair)
    assert not {p.qid for p in train} & {p.qid for p in dev}
    for qid, pairs in by_qid.items():
        positives = [p for p in pairs if p.label == 1.0]
        assert len(positives) == 1, qid
        query, document = positives[0].query, positives[0].document
        if qid.endswith("q0"):
            # the entity the positive's title starts with
            assert document.split("\n")[0].startswith(query)
        else:
            words = query.split(" ")
            assert len(words) == 2 and all(w in dictionary for w in words)
            assert keyword_spans(document, words), (query, document)
        pos_cat = category_of[positives[0].document.split("\n")[0]]
        for neg in pairs:
            if neg.label == 0.0:
                assert category_of[neg.document.split("\n")[0]] != pos_cat


def test_pseudo_pairs_need_enough_documents(demo_dictionary):
    dictionary, _ = demo_dictionary
    with pytest.raises(DemoModelError, match=r"only 1 documents have a title/content and two dictionary keywords; need at least 10"):
        pseudo_pairs(read_jsonl(DEMO_CORPUS)[:1], dictionary)


@pytest.mark.slow
def test_demo_model_trains_saves_and_loads(demo_dictionary, tmp_path):
    dictionary, _ = demo_dictionary
    summary = train_demo_model(read_jsonl(DEMO_CORPUS), dictionary, tmp_path / "model", recipe=DemoRecipe(budget_s=8, max_docs=80))
    assert summary.startswith("trained the demo ")
    model = Reranker.load(tmp_path / "model", device="cpu")
    assert model.keyword_dict_version == dictionary.version
    scores = model.predict([("苹果 手机", "苹果发布新款手机"), ("苹果 手机", "小米粥养胃")])
    assert scores.shape == (2,)
    log = [json.loads(line) for line in (tmp_path / "model" / "train_log.jsonl").read_text().splitlines()]
    assert log[0]["event"] == "start" and log[0]["architecture"] == "use-bi"
    # a tiny budget either finishes its calibrated steps or is cut by the deadline guard; both keep a model
    assert ("dev MAP" in summary) or ("stopped by the time budget" in summary)


# ---------------------------------------------------------------------------------------------- end to end


def headless_settings(engine, cache: Path, tmp_path: Path, model_dir: Path) -> DemoSettings:
    """The demo on a test engine: free ports, a fresh index, the shipped corpus only (no data dir), a given model."""
    return DemoSettings(
        engine_url=engine.url, port=0, reranker_port=0, data_dir=tmp_path / "no-data", cache_dir=cache,
        model_dir=model_dir, index=f"test-demo-{os.urandom(4).hex()}",
    )



@pytest.mark.engine
def test_start_demo_serves_the_ui_and_stops(engine, tiny_model_dir, demo_cache, tmp_path):
    settings = headless_settings(engine, demo_cache, tmp_path, tiny_model_dir)
    index = settings.index
    lines: list[str] = []
    stack = start_demo(settings, echo=lines.append)
    ui_url = stack.ui_url
    try:
        assert [line for line in lines if line.startswith("[")] == [
            "[1/6] engine", "[2/6] dictionary", "[3/6] index", "[4/6] model", "[5/6] reranker", "[6/6] gateway",
        ]
        assert stack.indices == [index] and stack.engine_settings is None
        page = httpx.get(stack.ui_url, timeout=30)
        assert page.status_code == 200 and "jingpai" in page.text
        data = httpx.get(f"{stack.ui_url}api/search", params={"q": "苹果 手机", "index": index}, timeout=60).json()
        assert data["reranked"] is True and data["banner"] is None
        assert len(data["engine"]["hits"]) == 10 and len(data["jingpai"]["hits"]) == 10
        assert httpx.get(f"{stack.ui_url}api/indices", timeout=30).json()["default"] == index
    finally:
        stack.stop(lines.append)
        engine.raw.indices.delete(index=f"{index}*")
    assert lines[-2:] == ["stopping the gateway", "stopping the reranker"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(ui_url, timeout=5)


@pytest.mark.engine
def test_cli_demo_without_model_runs_until_sigint(engine, demo_cache, tmp_path):
    from jingpai.engine.harness import free_port

    index = f"test-demo-{os.urandom(4).hex()}"
    port = free_port()
    cmd = [
        sys.executable, "-m", "jingpai", "demo", "--engine-url", engine.url, "--port", str(port), "--reranker-port", "0",
        "--no-rerank-model", "--data-dir", str(tmp_path / "no-data"), "--cache-dir", str(demo_cache), "--index", index,
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    output: list[str] = []
    try:
        deadline = time.monotonic() + 150
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line.rstrip("\n"))
            if "jingpai demo is ready: open" in line or time.monotonic() > deadline:
                break
        assert any(f"open http://127.0.0.1:{port}/_jingpai/ui/" in line for line in output), "\n".join(output)
        data = httpx.get(f"http://127.0.0.1:{port}/_jingpai/ui/api/search", params={"q": "苹果", "index": index}, timeout=60).json()
        assert data["reranked"] is False
        assert data["banner"].startswith("The demo runs without a rerank model (--no-rerank-model).")
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        output += rest.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
        engine.raw.indices.delete(index=f"{index}*")
    assert proc.returncode == 0, "\n".join(output)
    assert output[-3:] == ["shutting down…", "stopping the gateway", "stopped"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/_jingpai/ui/", timeout=5)


@pytest.mark.engine
def test_demo_says_which_part_died_and_exits(tiny_model_dir, demo_cache, tmp_path):
    """Issue #30 item 4: the demo's own engine node is killed while the demo runs; the demo names it and
    its log, stops the reranker and the gateway, and ends with a DemoError (``jingpai demo`` exits 1)."""
    import threading

    from jingpai.engine import harness
    from jingpai.jobs.demo import run_demo

    # the demo's engine cache is the harness's own, where the session's engines were unpacked (no download)
    engines = demo_cache / "engines"
    if not engines.exists():
        engines.symlink_to(harness.default_cache_dir().resolve(), target_is_directory=True)
    settings = DemoSettings(engine_port=harness.free_port(), port=0, reranker_port=0, data_dir=tmp_path / "no-data",
                            cache_dir=demo_cache, model_dir=tiny_model_dir, index=f"test-demo-{os.urandom(4).hex()}")
    node = harness.EngineSettings(kind=settings.kind, port=settings.engine_port, cache_dir=engines)
    stop, ready, lines, failure = threading.Event(), threading.Event(), [], []

    def run() -> None:
        try:
            run_demo(settings, stop=stop, echo=lines.append, on_ready=lambda _stack: ready.set())
        except DemoError as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert ready.wait(300), "\n".join(lines)
        (info,) = [n for n in harness.status(engines) if n.instance_dir == node.instance_dir]
        os.killpg(info.pid, signal.SIGKILL)
        thread.join(30)
        assert not thread.is_alive(), "the demo kept running with a dead engine"
    finally:
        stop.set()
        thread.join(60)
        harness.stop(node, purge=True)
    assert [str(e) for e in failure] == [(
        f"the opensearch engine on {node.url} (pid {info.pid}) died; its log: {info.log_file}. "
        "The demo stops: run `jingpai demo` again to start it afresh"
    )]
    assert lines[-4:] == ["stopping the gateway", "stopping the reranker", f"stopping the opensearch engine on {node.url}", "stopped"]


def test_dead_server_is_named_with_where_its_log_is():
    from jingpai.jobs.demo_watch import parts
    from jingpai.serving import ServerThread

    async def app(scope, receive, send):  # a bare ASGI app: the watcher looks at the server, not the app
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    server = ServerThread(app, 0, name="reranker").start()
    (part,) = parts(None, "http://127.0.0.1:1", [server, None])
    assert part.alive()
    server._server.should_exit = True  # told to exit by anyone but DemoStack.stop: its thread ends
    server._thread.join(10)
    assert not part.alive()
    assert part.death() == (f"the reranker on {server.url} stopped; its log: the demo's own output above "
                            "(`jingpai -v demo` adds jingpai's log lines)")
    server.stop()


# ---------------------------------------------------------------------------------------------- demo quality

#: Apple phone stories of the shipped corpus: 4 whose title is about an Apple phone, plus the iPhone
#: assembly in India (050) and the trade-in of old phones (052) — the corpus holds no other
APPLE_PHONES = {"demo-043", "demo-044", "demo-049", "demo-050", "demo-052", "demo-160"}
#: stories about the 360 security company (not Xbox 360, 风光360 or 360° panoramas)
COMPANY_360 = {f"demo-{n:03d}" for n in [*range(1, 15), 156, 157, 158]}


def test_entity_story_sets_match_the_corpus():
    records = {r["id"]: r for r in read_jsonl(DEMO_CORPUS)}
    assert all(records[i]["title"].startswith("360公司") or "360公司" in records[i]["title"] for i in COMPANY_360)
    assert all("苹果" in records[i]["title"] and "手机" in records[i]["title"] + records[i]["content"] for i in APPLE_PHONES)
    assert {i for i, r in records.items() if r["title"].startswith("360公司")} <= COMPANY_360


@pytest.fixture(scope="module")
def demo_model_dir(demo_dictionary, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's default model (USE bi-encoder fine-tuned on the shipped corpus's pseudo pairs), with a
    fixed step count so it is the same model on every machine."""
    dictionary, _ = demo_dictionary
    out = tmp_path_factory.mktemp("demo-use-model") / "model"
    train_demo_model(read_jsonl(DEMO_CORPUS), dictionary, out, recipe=DemoRecipe(budget_s=900, max_steps=40, threads=2))
    return out


@pytest.mark.slow
@pytest.mark.engine
def test_demo_model_and_gateway_put_the_right_entity_on_top(engine, demo_model_dir, demo_cache, tmp_path):
    settings = headless_settings(engine, demo_cache, tmp_path, demo_model_dir)
    index = settings.index
    stack = start_demo(settings, echo=quiet)
    try:
        for query, wanted in (("苹果 手机", APPLE_PHONES), ("360公司", COMPANY_360)):
            data = httpx.get(f"{stack.ui_url}api/search", params={"q": query, "index": index}, timeout=120).json()
            assert data["reranked"] is True and data["model"] == "jingpai-demo-use-bi"
            assert data["fusion"] == {"mode": settings.fusion, "weight": settings.fusion_weight}
            top5 = [h["id"] for h in data["jingpai"]["hits"][:5]]
            assert set(top5) <= wanted, (query, top5, [h["id"] for h in data["engine"]["hits"][:5]])
    finally:
        stack.stop()
        engine.raw.indices.delete(index=f"{index}*")
