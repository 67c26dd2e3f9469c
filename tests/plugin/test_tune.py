"""``jingpai tune`` on a tiny real index on both engines, with the tiny real reranker service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from jingpai.engine.client import Engine
from jingpai.indexer.pipeline import IndexSettings, index_corpus
from jingpai.commands.tune import tune
from jingpai.plugin.tune import LabelledQuery, TuneError, queries_from_trec
from jingpai.plugin.settings import GatewaySettings, load_config_file

pytestmark = pytest.mark.engine

GROUPS = [
    ["中国GDP增长多少", "中国经济增长速度是多少", "GDP增长率是多少"],
    ["银行利率上调了吗", "银行利率是不是提高了", "利率上升对银行有什么影响"],
    ["股票投资怎么入门", "新手如何投资股票", "股票市场怎么投资"],
    ["明天北京天气怎么样", "北京明天会下雨吗"],
]


def pairs_file(path: Path) -> Path:
    lines = []
    for group in GROUPS:
        for i, q1 in enumerate(group):
            for q2 in group[i + 1 :]:
                lines.append(f"{q1}\t{q2}\t1")
    for a, b in zip(GROUPS, GROUPS[1:]):
        lines.append(f"{a[0]}\t{b[0]}\t0")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def question_index(engine: Engine, index_name: str, dictionary, tmp_path: Path) -> str:
    questions = [q for group in GROUPS for q in group]
    corpus = tmp_path / "questions.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"t{n}", "text": q}, ensure_ascii=False) + "\n" for n, q in enumerate(questions)),
                      encoding="utf-8")
    settings = IndexSettings(index=index_name, text_fields=("text",), id_field="id", quarantine_dir=tmp_path, progress=False)
    assert index_corpus(engine, [corpus], settings, dictionary=dictionary[0]).indexed == len(questions)
    engine.refresh(index_name)
    return index_name


def direct_engine_metrics(engine: Engine, index: str, pairs: Path) -> dict[str, float]:
    """P@1, P@10 and MRR of the engine's own BM25 order, computed here by hand."""
    ids = {q: f"t{n}" for n, q in enumerate(q for group in GROUPS for q in group)}
    p1 = p10 = rr = 0.0
    n = 0
    for line in pairs.read_text(encoding="utf-8").splitlines():
        q1, q2, label = line.split("\t")
        if label != "1":
            continue
        body = {"query": {"bool": {"must": [{"match": {"text": q1}}], "must_not": [{"ids": {"values": [ids[q1]]}}]}}, "size": 10}
        ranked = [h["_id"] for h in engine.search(index, body)["hits"]["hits"]]
        hit = [doc == ids[q2] for doc in ranked]
        p1 += hit[0] if hit else 0.0
        p10 += sum(hit) / 10
        rr += 1 / (hit.index(True) + 1) if any(hit) else 0.0
        n += 1
    return {"P@1": p1 / n, "P@10": p10 / n, "MRR": rr / n}


def test_tune_measures_the_grid_and_writes_loadable_settings(engine: Engine, question_index: str, reranker_url: str,
                                                             dictionary, tmp_path: Path) -> None:
    pairs = pairs_file(tmp_path / "pairs.tsv")
    out = tmp_path / "out"
    result = CliRunner().invoke(tune, [
        "--engine", engine.url, "--index", question_index, "--reranker", reranker_url, "--dict", str(dictionary[1]),
        "--pairs", str(pairs), "--windows", "2,5", "--weights", "0,0.5,1", "--rrf-k", "10,60", "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "tune.json").read_text())
    labels = [(r["fusion"], r["window"], r["weight"], r["rrf_k"]) for r in rows]
    expected = [("engine", None, None, None), ("augmented", None, None, None)]
    for window in (2, 5):
        expected += [("replace", window, None, None)] + [("linear", window, w, None) for w in (0.0, 0.5, 1.0)]
        expected += [("rrf", window, w, k) for k in (10, 60) for w in (0.0, 0.5, 1.0)]
    assert labels == expected
    metrics = ("P@1", "P@3", "P@5", "P@10", "MRR", "nDCG@10", "MAP")
    assert all(0.0 <= r[m] <= 1.0 for r in rows for m in metrics)
    by_label = {(r["fusion"], r["window"], r["weight"], r["rrf_k"]): r for r in rows}
    engine_row = by_label[("engine", None, None, None)]
    direct = direct_engine_metrics(engine, question_index, pairs)
    assert {m: engine_row[m] for m in direct} == pytest.approx(direct)
    # the engine's weight 1 serves the (augmented) engine order exactly
    for window in (2, 5):
        assert {m: by_label[("linear", window, 1.0, None)][m] for m in metrics} == {m: by_label[("augmented", None, None, None)][m] for m in metrics}
    assert "jingpai tune" in result.output and "nDCG@10" in result.output
    assert (out / "tune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    written = GatewaySettings(**load_config_file(out / "gateway.toml"))
    best_p1 = max(r["P@1"] for r in rows if r["window"] is not None)
    assert written.engine_url == engine.url and written.reranker_url == reranker_url
    chosen = [r for r in rows if (r["fusion"], r["window"], r["weight"], r["rrf_k"]) ==
              (written.fusion, written.window, None if written.fusion == "replace" else written.fusion_weight,
               written.rrf_k if written.fusion == "rrf" else None)]
    assert len(chosen) == 1 and chosen[0]["P@1"] == pytest.approx(best_p1)


def test_tune_needs_one_kind_of_labels(tmp_path: Path) -> None:
    result = CliRunner().invoke(tune, ["--engine", "http://127.0.0.1:1", "--index", "x", "--reranker", "http://127.0.0.1:2"])
    assert result.exit_code != 0 and "give either --pairs FILE, or --qrels FILE with --queries FILE" in result.output
    result = CliRunner().invoke(tune, [
        "--engine", "http://127.0.0.1:1", "--index", "x", "--reranker", "http://127.0.0.1:2",
        "--pairs", str(pairs_file(tmp_path / "p.tsv")), "--metric", "F1",
    ])
    assert result.exit_code != 0 and "--metric must be one of P@1, P@3, P@5, P@10, MRR, nDCG@10, MAP, got 'F1'" in result.output


def test_trec_labels_become_queries_and_bad_lines_are_named(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("1 0 d1 1\n1 0 d2 0\n2 0 d3 2\n3 0 d4 0\n")
    queries = tmp_path / "queries.tsv"
    queries.write_text("1\t中国GDP\n2\t银行利率\n3\t天气\n")
    assert queries_from_trec(qrels, queries) == [
        LabelledQuery("1", "中国GDP", {"d1": 1}), LabelledQuery("2", "银行利率", {"d3": 2}),
    ]
    queries.write_text("1 中国GDP\n")
    with pytest.raises(TuneError, match=r"queries.tsv:1: expected 'qid<TAB>query text', got '1 中国GDP'"):
        queries_from_trec(qrels, queries)


def test_never_worse_keeps_only_settings_at_least_the_baseline_at_every_cutoff() -> None:
    from jingpai.plugin.tune import TuneRow, best_row, never_worse

    def row(fusion: str, weight: float | None, p1: float, p3: float, mrr: float) -> TuneRow:
        metrics = {"P@1": p1, "P@3": p3, "P@5": 0.5, "P@10": 0.2, "MRR": mrr, "nDCG@10": mrr, "MAP": mrr}
        return TuneRow(fusion, None if fusion == "augmented" else 20, weight, None, metrics)

    augmented = row("augmented", None, 0.60, 0.30, 0.70)
    bold = row("linear", 0.5, 0.65, 0.29, 0.75)  # best MRR, but loses P@3 to the augmented order
    safe = row("linear", 0.8, 0.61, 0.30, 0.71)
    rows = [row("engine", None, 0.5, 0.3, 0.6), augmented, bold, safe]
    assert never_worse(safe, augmented) and not never_worse(bold, augmented)
    assert best_row(rows, "MRR") is bold
    assert best_row(rows, "MRR", never_worse_than="augmented") is safe
    # when nothing qualifies, the best overall is still chosen
    assert best_row([augmented, bold], "MRR", never_worse_than="augmented") is bold
    with pytest.raises(TuneError, match="never_worse_than must name a baseline row"):
        best_row(rows, "MRR", never_worse_than="replace")


def test_a_gain_within_two_standard_errors_is_flagged_with_the_queries_that_would_resolve_it() -> None:
    from jingpai.commands.tune import _noise_warnings
    from jingpai.plugin.tune import TuneRow
    from jingpai.plugin.tune_noise import noise_margin, noise_warning

    def row(fusion: str, weight: float | None, p10: float) -> TuneRow:
        return TuneRow(fusion, None if fusion == "augmented" else 20, weight, None, {"P@10": p10})

    augmented, small, large = row("augmented", None, 0.427), row("linear", 0.3, 0.477), row("linear", 0.1, 0.527)
    assert noise_margin(100) == pytest.approx(0.1) and noise_margin(10_000) == pytest.approx(0.01)
    # AFQMC's tuning set: 205 queries, a gain of 0.05 P@10 is inside 2 SE (0.070) ...
    warning = noise_warning(small, augmented, "P@10", 205)
    assert warning == ("linear, window 20, w 0.3 beats augmented by 0.0500 P@10 on 205 queries, less than two standard errors "
                       "(0.0698): the choice may not carry over to other queries; tune on more held-out queries "
                       "(about 400 would resolve a gain this size)")
    # ... a gain of 0.10 is not, and neither are a loss or a tie (nothing to doubt)
    assert noise_warning(large, augmented, "P@10", 205) is None
    assert noise_warning(augmented, small, "P@10", 205) is None and noise_warning(small, small, "P@10", 205) is None
    # the same 0.05 on 1,000 queries is outside 2 SE (0.032)
    assert noise_warning(small, augmented, "P@10", 1000) is None
    with pytest.raises(TuneError, match="n_queries must be >= 1, got 0"):
        noise_margin(0)
    # the command checks both choices it writes: BM25 + rerank over augmented, hybrid + rerank over BM25 + rerank
    hybrid = TuneRow("linear", 20, 0.8, None, {"P@10": 0.45})  # loses to BM25 + rerank: nothing to doubt
    warnings = _noise_warnings([row("engine", None, 0.4), augmented, small], small, hybrid, metric="P@10", n_queries=205)
    assert len(warnings) == 1 and warnings[0].startswith("linear, window 20, w 0.3 beats augmented by 0.0500")
    warnings = _noise_warnings([augmented, small], small, row("linear", 0.8, 0.50), metric="P@10", n_queries=205)
    assert [w.split(" by ")[1][:6] for w in warnings] == ["0.0500", "0.0230"]


def test_a_faulty_reranker_leaves_tuning_the_augmented_order(engine: Engine, question_index: str, dictionary, caplog) -> None:
    """Issue 53 on `jingpai tune`'s path (the gateway's app, as tune runs it): a reranker scoring Infinity made the
    gateway answer 500, which stopped tuning with a TuneError; now each query is logged as not reranked
    (reranker_bad_response) and its rows use the augmented order."""
    import logging

    from bench.standin_reranker import StandIn
    from jingpai.plugin.gateway import create_app
    from jingpai.plugin.tune import TuneSettings, fetch_runs
    from jingpai.serving import serve

    queries = [LabelledQuery(f"q{i}", group[0], {"t0": 1}) for i, group in enumerate(GROUPS)]
    with StandIn("infinity") as standin:
        settings = TuneSettings(engine_url=engine.url, index=question_index, reranker_url=standin.url, dict_dirs=(dictionary[1],),
                                windows=(10,), concurrency=1)
        gateway = GatewaySettings(engine_url=engine.url, reranker_url=standin.url, dict_dirs=(dictionary[1],), breaker_failures=100)
        with serve(create_app(gateway)) as gw, caplog.at_level(logging.WARNING, logger="jingpai.plugin.tune"):
            runs = fetch_runs(gw.url, settings, queries, text_field="text")
    assert [r.window for r in runs] == [None] * len(queries)
    assert all(r.augmented for r in runs)  # every query still has its order
    assert [m.getMessage() for m in caplog.records if m.name == "jingpai.plugin.tune"] == [
        f"query q{i} was not reranked (reranker_bad_response): its fusion rows use the augmented order" for i in range(len(queries))
    ]
