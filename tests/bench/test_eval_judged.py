"""The judged section (issue 52 item 3): metrics over judged documents only, the judged share of a top 10, the
reorder protocol, the engine protocol through the real gateway and ``jingpai serve`` on both engines, and
summary.json — on tiny sets written here in the layouts of ../shared/data/zh (entity: A14; search: KUAKE-QTR)
with a tiny random cross-encoder."""

from __future__ import annotations

import dataclasses
import doctest
import json
from pathlib import Path

import pytest

from bench import eval_common, eval_judged, judged_metrics
from bench.eval_common import AUGMENTED_BM25, RAW_BM25, ReportSettings
from bench.judged_metrics import TOP_GRADE_MRR, judged_metrics as metrics_of, judged_share
from bench.report import parse_data_options, write_summary
from jingpai.keyword_dict import build_dictionary
from jingpai.keyword_dict.build import BuildSettings
from jingpai.reranker import registry
from jingpai.reranker.judged import read_judged
from jingpai.reranker.tiny import build_tiny_checkpoint

#: entity layout (A14): two companies and one whose pool holds only grade 0; ``u*`` passages are judged for nobody here
ARTICLES = {
    "p1": "平安银行发布年报，净利润增长百分之十。", "p2": "平安银行股价今日上涨。", "p3": "平安银行附近的早餐店开业。",
    "u1": "平安银行平安银行平安银行平安银行", "v1": "万科公布销售数据。", "v2": "万科物业服务升级。", "u2": "万科万科万科万科",
    "z1": "格力空调销量第一。", "f1": "今天天气很好，我们去公园散步。", "f2": "足球比赛结束了，主队获胜。",
}
META = [("000001", "平安银行", "平安银行股份有限公司"), ("000002", "万科", "万科企业股份有限公司"), ("000651", "格力", "珠海格力电器股份有限公司")]
QRELS = [("000001", "p1", 1), ("000001", "p2", 1), ("000001", "p3", 0), ("000002", "v1", 1), ("000002", "v2", 0), ("000651", "z1", 0)]


def write_entity_set(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "articles.jsonl").write_text("".join(json.dumps({"id": d, "text": t}, ensure_ascii=False) + "\n" for d, t in ARTICLES.items()),
                                           encoding="utf-8")
    (folder / "entity-meta-dev.tsv").write_text("entity_id\tshort_name\tfull_name\tstock_code\ta14_kb_id\n"
                                                + "".join(f"{e}\t{s}\t{f}\t{e}\t0\n" for e, s, f in META), encoding="utf-8")
    (folder / "qrels-dev.tsv").write_text("".join(f"{q}\t{d}\t{g}\n" for q, d, g in QRELS), encoding="utf-8")
    # a train split for the fusion-weight tuning: the first two companies again (a test; the real splits share none)
    (folder / "entity-meta-train.tsv").write_text((folder / "entity-meta-dev.tsv").read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "qrels-train.tsv").write_text("".join(f"{q}\t{d}\t{g}\n" for q, d, g in QRELS[:5]), encoding="utf-8")
    return folder


def write_search_set(folder: Path) -> Path:
    """Search layout (KUAKE-QTR), grades 0–3; query k2 has no grade-3 title."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = {"t1": "感冒发烧怎么办", "t2": "发烧吃什么药", "t3": "感冒的症状", "t4": "头痛的原因", "t5": "头痛怎么缓解"}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "text": t}, ensure_ascii=False) + "\n" for d, t in docs.items()),
                                         encoding="utf-8")
    (folder / "queries-dev.tsv").write_text("k1\t感冒发烧怎么办\nk2\t头痛怎么办\n", encoding="utf-8")
    (folder / "qrels-dev.tsv").write_text("k1\tt1\t3\nk1\tt2\t2\nk1\tt3\t0\nk2\tt4\t1\nk2\tt5\t2\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory):
    """A randomly initialised 1-layer cross-encoder whose vocabulary holds the tiny sets' characters."""
    texts = [*ARTICLES.values(), *(f"{s}（{f}）" for _, s, f in META), "感冒发烧怎么办头痛吃什么药的症状原因缓解"]
    base = build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-base"), texts, hidden_size=32, num_layers=1, max_position=128)
    return registry.create("cross", base=str(base), max_length=64, device="cpu")


def test_doctests() -> None:
    assert doctest.testmod(judged_metrics).failed == 0 and doctest.testmod(eval_common).failed == 0


def test_metrics_drop_unjudged_documents_and_count_only_queries_with_a_relevant_one() -> None:
    qrels = {"q1": {"a": 1, "b": 0, "c": 1}, "q2": {"d": 2, "e": 0}, "q3": {"f": 0}}
    with_unjudged = {"q1": ["x", "a", "y", "b", "c"], "q2": ["e", "z", "d"], "q3": ["f"]}
    m = metrics_of(with_unjudged, qrels, ("nDCG@10", "MAP"))
    # q1's condensed list a, b, c: AP (1 + 2/3) / 2; q2's e, d: AP 1/2; q3 (no grade > 0) is not counted
    assert m["queries"] == 2 and m["MAP"] == pytest.approx(((1 + 2 / 3) / 2 + 1 / 2) / 2)
    assert m == metrics_of({"q1": ["a", "b", "c"], "q2": ["e", "d"], "q3": ["f"]}, qrels, ("nDCG@10", "MAP"))
    # counting the unjudged hits as misses (what the metrics must not do) scores lower
    as_misses = metrics_of(with_unjudged, {q: {**j, **{d: 0 for d in "xyz"}} for q, j in qrels.items()}, ("MAP",))
    assert as_misses["MAP"] == pytest.approx(((1 / 2 + 2 / 5) / 2 + 1 / 3) / 2) and as_misses["MAP"] < m["MAP"]
    # a judged document never retrieved is a miss: q1 without c
    assert metrics_of({"q1": ["a"]}, qrels, ("MAP",))["MAP"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"unknown judged metric\(s\) \['P@7'\]"):
        metrics_of(with_unjudged, qrels, ("P@7",))


def test_top_grade_mrr_is_over_the_queries_that_have_the_top_grade() -> None:
    qrels = {"k1": {"t1": 3, "t2": 2, "t3": 0}, "k2": {"t4": 1, "t5": 2}}
    m = metrics_of({"k1": ["t2", "t1", "t3"], "k2": ["t4", "t5"]}, qrels, ("nDCG@3", TOP_GRADE_MRR))
    assert m[TOP_GRADE_MRR] == 0.5 and m["queries"] == 2  # k1 only: its grade-3 title is second
    assert metrics_of({"k1": ["t1"]}, qrels, (TOP_GRADE_MRR,), top_grade=2)[TOP_GRADE_MRR] == 1.0  # grade >= 2 counts


def test_judged_share_is_per_query_over_the_hits_returned() -> None:
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 1}}
    runs = {"q1": ["a", "x", "b", "y"], "q2": ["c", *(f"n{i}" for i in range(12))], "unjudged query": ["a"]}
    assert judged_share(runs, qrels) == pytest.approx((2 / 4 + 1 / 10) / 2)


def test_data_keys_and_rerun_commands(tmp_path: Path) -> None:
    folder = write_entity_set(tmp_path / "a14")
    assert parse_data_options((f"a14={folder}",)) == {"a14": folder}
    settings = ReportSettings(mode="quick", data={"a14": folder, "qa.trecqa": tmp_path})
    assert settings.command("judged", "judged.a14.opensearch.direct") == \
        f"python -m bench report --sections judged --quick --only judged.a14.opensearch.direct --data a14={folder}"
    assert f"a14={folder}" not in settings.command("qa")
    jset = eval_judged.load_set(settings, "a14")
    assert jset.model_text["000002"] == "万科（万科企业股份有限公司）" and jset.queries["000002"] == "万科"


def test_reorder_protocol_on_both_layouts(tmp_path: Path, tiny_model) -> None:
    settings = ReportSettings(mode="full", data={"a14": write_entity_set(tmp_path / "a14"), "kuake": write_search_set(tmp_path / "kuake")},
                              seeds=(0, 1), results_dir=tmp_path / "r", work_dir=tmp_path / "w", device="cpu")
    a14 = eval_judged.reorder_table(settings, "a14", eval_judged.load_set(settings, "a14"), {"tiny": tiny_model})
    rows = {r.cells["method"]: r.cells for r in a14.rows}
    assert list(rows) == ["BM25 (bm25s, jieba tokens)", "tiny (model score alone)", "BM25 + tiny, linear fusion w=0.5", "random order (seeds 0,1)"]
    assert all(c["queries"] == 2 for c in rows.values())  # 格力's pool holds only grade 0
    assert rows["random order (seeds 0,1)"]["nDCG@10"]["n"] == 2
    assert a14.columns == ["method", "queries", "nDCG@10", "MAP"]
    kuake = eval_judged.reorder_table(settings, "kuake", eval_judged.load_set(settings, "kuake"), {})
    bm25 = kuake.rows[0].cells
    # BM25 puts the title equal to the query first: k1's grade-3 title, so MRR of the top grade (k1 only) is 1
    assert kuake.columns[2:] == ["nDCG@3", "nDCG@10", TOP_GRADE_MRR] and bm25[TOP_GRADE_MRR] == 1.0
    # the rerun command repeats every --data of the section
    assert kuake.rows[0].command == (f"python -m bench report --sections judged --only judged.kuake.reorder.bm25 --data a14={tmp_path / 'a14'} "
                                     f"--data kuake={tmp_path / 'kuake'}")


def test_engine_protocol_through_the_gateway_and_serve(engine_urls: dict[str, str], tmp_path: Path, tiny_model, monkeypatch) -> None:
    import httpx

    dict_dir = tmp_path / "dict"
    build_dictionary({"finance": ["平安银行发布年报", "万科销售增长"] * 5, "life": ["今天天气很好", "足球比赛结束"] * 5},
                     settings=BuildSettings(min_score=0.1, min_df=1)).save(dict_dir)
    monkeypatch.setitem(eval_judged.SETS, "a14", dataclasses.replace(eval_judged.SETS["a14"], dictionary=lambda s: dict_dir, window=10))
    settings = ReportSettings(mode="full", data={"a14": write_entity_set(tmp_path / "a14")}, results_dir=tmp_path / "r",
                              work_dir=tmp_path / "w", device="cpu", engines=engine_urls)
    jset = eval_judged.load_set(settings, "a14")
    tuning, tuned = read_judged(tmp_path / "a14", "train"), {}
    tables = [eval_judged.engine_table(settings, "a14", kind, url, jset, {"tiny": tiny_model}, tuned=tuned, tuning=tuning)
              for kind, url in engine_urls.items()]
    assert set(tuned) == {"tiny"} and 0.0 <= tuned["tiny"] < 1.0  # tuned once, on the first engine, used on both
    assert sum(any(n.startswith("Tuned on") for n in t.notes) for t in tables) == 1
    for table, (kind, url) in zip(tables, engine_urls.items(), strict=True):
        assert not [n for n in table.notes if "not reranked" in n], table.notes
        rows = {r.cells["method"]: r.cells for r in table.rows}
        assert list(rows) == [RAW_BM25, AUGMENTED_BM25, "+ rerank top 10, tiny, replace (model score alone)", "+ rerank top 10, tiny, linear fusion w=0.5",
                              f"+ rerank top 10, tiny, linear fusion w={tuned['tiny']:g} (tuned on held-out train queries)"]
        assert table.rows[-1].command.split(" --data")[0].endswith(f"--only judged.a14.{kind}.rerank.tiny.tuned")
        # 平安银行 retrieves p1, p2, p3 and u1 (judged for nobody), 万科 v1, v2 and u2, 格力 only z1
        assert all(c[eval_judged.jm.JUDGED_SHARE] == pytest.approx((3 / 4 + 2 / 3 + 1) / 3) for c in rows.values())
        raw = {q: [h["_id"] for h in httpx.post(f"{url}/report-judged-a14-full/_search", json={"query": {"match": {"text": t}}, "size": 10})
                   .json()["hits"]["hits"]] for q, t in jset.queries.items()}
        assert raw["000001"][0] == "u1"  # the unjudged passage is BM25's first hit, and it is dropped
        assert {k: rows[RAW_BM25][k] for k in ("queries", "nDCG@10", "MAP")} == metrics_of(raw, jset.qrels, ("nDCG@10", "MAP"))
        assert table.meta["engine_kind"] == kind and table.rows[0].command.endswith(f"--only judged.a14.{kind}.direct --data a14={tmp_path / 'a14'}")
    line = eval_judged.summary_lines(tables[0])[0]
    assert line.startswith(f"{tables[0].title}: nDCG@10 of {AUGMENTED_BM25} ") and f"{RAW_BM25} " in line
    path = write_summary(tables, tmp_path / "results" / "summary.json")
    records = json.loads(path.read_text(encoding="utf-8"))["records"]
    assert len(records) == 5 * len(engine_urls)
    first = records[0]
    assert (first["dataset"], first["split"], first["protocol"], first["system"]) == ("a14", "dev", "engine", RAW_BM25)
    assert set(first["metrics"]) == {"nDCG@10", "MAP", "judged@10"} and first["command"] == tables[0].rows[0].command


def test_a_model_trained_elsewhere_is_adopted_by_its_recipe(tmp_path: Path, tiny_model) -> None:
    from click.testing import CliRunner

    from bench.__main__ import bench
    from bench.eval_models import get_model

    trained = tiny_model.save(tmp_path / "trained-elsewhere")
    args = ["train", "a14-bge-cross", "--adopt", str(trained), "--models-dir", str(tmp_path / "models"), "--work-dir", str(tmp_path / "w")]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output
    folder = Path(json.loads(result.output.strip().splitlines()[-1])["folder"])
    assert folder == tmp_path / "models" / "a14-bge-cross-s0"
    model, info = get_model("a14-bge-cross", ReportSettings(models_dir=tmp_path / "models", device="cpu"))
    assert info["trained_now"] is False and info["adopted_from"] == str(trained) and type(model) is type(tiny_model)
    assert CliRunner().invoke(bench, ["train", "a14-bge-cross", "zh-bge-zeroshot", "--adopt", str(trained)]).exit_code == 2
    bad = CliRunner().invoke(bench, ["train", "a14-bge-cross", "--adopt", str(tmp_path / "models"), "--models-dir", str(tmp_path / "m2")])
    assert bad.exit_code != 0 and "holds no saved jingpai model" in str(bad.exception or bad.output)


def test_fusion_weights_are_tuned_on_training_queries_no_recipe_trains_on(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    from bench.eval_models import RECIPES, read_recipe_data

    monkeypatch.setattr(eval_common, "DATA_DIR", shared_data)
    settings = ReportSettings(mode="full", work_dir=tmp_path)
    tuning = eval_judged.tuning_set(settings, "a14")
    trained_on = {p.query for p in read_recipe_data(RECIPES["a14-bge-bertca"], settings)[0]}
    assert 15 <= len(tuning.qrels) <= 25 and not set(tuning.model_text.values()) & trained_on  # 10 % of A14's 207 train companies
    assert not set(tuning.qrels) & set(eval_judged.load_set(settings, "a14").qrels)  # no dev company
    assert all(d in tuning.docs for judged in tuning.qrels.values() for d in judged)

