"""The retrieval section's two protocols (no engine): the paper's P@k with one relevant item per positive
pair, and P@k / MRR with every known paraphrase relevant; their summary lines; the pair-classification
table's row ids; and BQ dev as a retrieval data set with its own dictionary."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from bench import eval_common, eval_retrieval
from bench.eval_common import AUGMENTED_BM25, RAW_BM25, ReportSettings, Row, Table
from bench.eval_retrieval import RetrievalSet, both_protocols, one_relevant_ceiling, paraphrase_qrels
from bench.report import summarize
from jingpai.reranker.data import read_pairs


def test_doctests_of_the_protocol_functions() -> None:
    result = doctest.testmod(eval_retrieval)
    assert result.attempted >= 4 and result.failed == 0


def test_paraphrase_qrels_take_both_directions_and_skip_negatives_and_self_pairs() -> None:
    pairs = [("怎么还款", "如何还款", 1), ("还款方式", "怎么还款", 1.0), ("怎么还款", "怎么借款", 0), ("借款", "借款", 1)]
    assert paraphrase_qrels(pairs) == {"怎么还款": {"如何还款": 1, "还款方式": 1}, "还款方式": {"怎么还款": 1}}
    # a query judged from the whole split, though it is only ever the second column of a positive pair
    assert paraphrase_qrels(pairs, ["如何还款", "怎么借款"]) == {"如何还款": {"怎么还款": 1}, "怎么借款": {}}


def test_both_protocols_are_scored_from_one_search_per_distinct_q1() -> None:
    # q1 "a" has two pairs (b, c) and a reverse-direction paraphrase d; q1 "e" one pair (f)
    rset = RetrievalSet(corpus=Path("unused"), ids={}, pairs=[("a", "b"), ("a", "c"), ("e", "f")],
                        relevant={"a": {"b": 1, "c": 1, "d": 1}, "e": {"f": 1}}, ceiling=(0.0, 0.0))
    runs = {"a": ["d", "x", "c", "b"], "e": ["x", "y", "z", "w", "v", "u", "t", "s", "r", "q"]}
    cells = both_protocols(runs, rset)
    assert cells["queries"] == 3
    # paper: b at 4, c at 3, f missing → P@1 0, P@3 1/3, P@5 2/3
    assert cells["P@1"] == 0.0 and cells["P@3"] == pytest.approx(1 / 3) and cells["P@5"] == pytest.approx(2 / 3) and cells["P@10"] == pytest.approx(2 / 3)
    # every paraphrase relevant: "a" finds d first, "e" finds nothing
    assert cells["P@1 (all)"] == 0.5 and cells["P@10 (all)"] == 0.5 and cells["MRR (all)"] == 0.5
    assert rset.queries == ["a", "e"]


def test_lcqmc_dev_one_relevant_ceiling(shared_data: Path) -> None:
    pairs = read_pairs(shared_data / "zh/lcqmc/dev.tsv")
    perfect, best = one_relevant_ceiling([(p.query, p.document, p.label) for p in pairs])
    # the issue's figure: 35 % of the queries have another paraphrase of q1, so even a perfect ranker stops near .806
    assert perfect == pytest.approx(0.806, abs=0.001) and best == pytest.approx(0.860, abs=0.001)


def test_bq_dev_is_a_retrieval_set_with_its_own_dictionary(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(eval_common, "DATA_DIR", shared_data)
    settings = ReportSettings(mode="quick", work_dir=tmp_path)
    assert settings.data_file("retrieval.bq") == shared_data / "zh/bq/dev.tsv"
    assert eval_retrieval.DICTIONARIES["bq"][0] is eval_common.zh_bq_dictionary
    assert eval_retrieval.DICTIONARIES["lcqmc"][0] is eval_retrieval.DICTIONARIES["afqmc"][0] is eval_common.zh_dictionary
    rset = eval_retrieval.build_corpus("bq", settings)
    assert len(rset.pairs) == 40 and set(rset.queries) == {q for q, _ in rset.pairs}
    assert all(t in rset.relevant[q] for q, t in rset.pairs)
    assert rset.corpus.is_file() and len(rset.ids) > 40


def test_bq_dictionary_is_built_from_bq_train_questions(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(eval_common, "DATA_DIR", shared_data)
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(eval_common, "jingpai_cli", lambda *args: calls.append(args) or "")
    settings = ReportSettings(mode="quick", work_dir=tmp_path)
    out = eval_common.zh_bq_dictionary(settings)
    assert out == tmp_path / "dict-zh-bq"
    args = calls[0]
    domain = args[args.index("--domain") + 1]
    assert domain.startswith("bq=")
    questions = Path(domain.removeprefix("bq=")).read_text(encoding="utf-8").splitlines()
    assert len(questions) == 10_000 and len(set(questions)) == len(questions)  # quick: 10k distinct train questions


def _row(method: str, paper: float, every: float | None) -> Row:
    cells: dict = {"method": method, **{f"P@{k}": paper for k in (1, 3, 5, 10)}}
    if every is not None:
        cells.update({f"P@{k} (all)": every for k in (1, 3, 5, 10)}, **{"MRR (all)": every})
    return Row(cells=cells, command=method)


def test_summary_compares_rows_under_both_protocols_and_reads_old_tables() -> None:
    table = Table(key="retrieval-bq-opensearch", section="retrieval", title="BQ", columns=[],
                  rows=[_row(RAW_BM25, 0.10, 0.20), _row(AUGMENTED_BM25, 0.12, 0.19), _row("rerank", 0.11, 0.30)])
    old = Table(key="retrieval-lcqmc-opensearch", section="retrieval", title="LCQMC", columns=[],
                rows=[_row(RAW_BM25, 0.10, None), _row(AUGMENTED_BM25, 0.12, None)])
    lines = summarize([table, old])
    assert lines[0] == (f"BQ: {AUGMENTED_BM25} vs raw BM25: P@1 +0.020, P@3 +0.020, P@5 +0.020, P@10 +0.020 (the paper's shape, every P@k "
                        "improves, holds); every paraphrase relevant: P@1 -0.010, P@3 -0.010, P@5 -0.010, P@10 -0.010, MRR -0.010 "
                        "(every P@k improves: does not hold).")
    assert lines[1].endswith("(below augmented BM25 at some P@k); every paraphrase relevant: P@1 +0.110, P@3 +0.110, P@5 +0.110, "
                             "P@10 +0.110, MRR +0.110 (every P@k ≥ augmented BM25).")
    assert lines[2] == f"LCQMC: {AUGMENTED_BM25} vs raw BM25: P@1 +0.020, P@3 +0.020, P@5 +0.020, P@10 +0.020 (the paper's shape, every P@k improves, holds)."


def test_pair_classification_rows_have_their_own_rerun_commands() -> None:
    # save_table merges rows by command: one command per (model, data set) row keeps every row
    settings = ReportSettings(mode="quick", only=("retrieval.models.zh-use-bi.bq",))
    assert settings.wants("retrieval.models") and settings.wants("retrieval.models.zh-use-bi")
    assert settings.wants("retrieval.models.zh-use-bi.bq") and not settings.wants("retrieval.models.zh-use-bi.lcqmc")
    assert settings.command("retrieval", "retrieval.models.zh-use-bi.bq").endswith("--only retrieval.models.zh-use-bi.bq")
    assert "BERT-base" in eval_retrieval.PUBLISHED_ACCURACY and "not confirmed here" in eval_retrieval.PUBLISHED_ACCURACY


def test_first_stage_recall_counts_the_pair_target_and_every_paraphrase() -> None:
    from bench.eval_hybrid import DEPTH, recall
    from bench.eval_retrieval import RetrievalSet

    rset = RetrievalSet(corpus=None, ids={}, pairs=[("a", "b"), ("a", "c"), ("d", "e")],  # type: ignore[arg-type]
                        relevant={"a": {"b": 1, "c": 1}, "d": {"e": 1, "f": 1}}, ceiling=(1.0, 1.0))
    filler = [f"x{i}" for i in range(DEPTH)]
    runs = {"a": ["b", *filler], "d": [*filler, "e"]}  # c missed; e just below the first stage's depth
    assert recall(runs, rset) == {f"hit@{DEPTH}": 1 / 3, f"R@{DEPTH} (all)": (1 / 2 + 0) / 2}


def test_unjudged_at_1_bounds_the_true_p1_of_each_row() -> None:
    # "a": its first hit x was never paired with it (a paraphrase nobody labelled, or not); "e": its first hit g is a
    # judged non-match (wrong for sure); the row's true P@1 lies between P@1 (all) and P@1 (all) + unjudged@1
    rset = RetrievalSet(corpus=Path("unused"), ids={}, pairs=[("a", "b"), ("e", "f")],
                        relevant={"a": {"b": 1}, "e": {"f": 1}}, ceiling=(0.0, 0.0), judged={"a": {"b"}, "e": {"f", "g"}})
    cells = both_protocols({"a": ["x", "b"], "e": ["g", "f"]}, rset)
    assert cells["P@1 (all)"] == 0.0 and cells["unjudged@1"] == 0.5
    assert both_protocols({"a": ["b", "x"], "e": ["f"]}, rset)["unjudged@1"] == 0.0


def test_build_corpus_judges_every_pair_of_the_split(tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "zh" / "lcqmc"
    data.mkdir(parents=True)
    (data / "dev.tsv").write_text("怎么还款\t如何还款\t1\n怎么还款\t怎么借款\t0\n还款方式\t怎么还款\t1\n", encoding="utf-8")
    monkeypatch.setattr(eval_common, "DATA_DIR", tmp_path)
    settings = ReportSettings(mode="full", work_dir=tmp_path / "work")
    rset = eval_retrieval.build_corpus("lcqmc", settings)
    q = rset.ids["怎么还款"]
    assert rset.judged[q] == {rset.ids[t] for t in ("如何还款", "怎么借款", "还款方式")}
