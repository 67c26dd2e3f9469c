"""Readers for every shared-data format, on the real files, and their error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from jingpai.reranker.data import DataFormatError, LabeledPair, bucket3, detect_format, read_many, read_pairs, write_pairs


def test_pairs_tsv(shared_data: Path) -> None:
    pairs = read_pairs(shared_data / "zh/afqmc/train.tsv", format="pairs", limit=50)
    assert len(pairs) == 50
    assert pairs[0] == LabeledPair("蚂蚁借呗等额还款可以换成先息后本吗", "借呗有先息到期还本吗", 0.0)
    lcqmc = read_pairs(shared_data / "zh/lcqmc/dev.tsv")
    assert len(lcqmc) == 8802 and {p.label for p in lcqmc} == {0.0, 1.0}
    assert detect_format(shared_data / "zh/oppo/dev.tsv") == "pairs"


def test_pawsx_skips_header_and_keeps_id(shared_data: Path) -> None:
    pairs = read_pairs(shared_data / "zh/pawsx/dev.tsv")
    assert len(pairs) == 2000
    assert pairs[0].docid == "4" and pairs[0].query.startswith("Four Rivers 委员会") and pairs[0].label == 1.0
    assert detect_format(shared_data / "zh/pawsx/dev.tsv") == "pawsx"


def test_stsb_graded_and_bucketed(shared_data: Path) -> None:
    path = shared_data / "zh/stsb/dev.tsv"
    assert detect_format(path) == "stsb"
    raw = read_pairs(path, limit=300)
    levels = read_pairs(path, label_mode="levels3", limit=300)
    binary = read_pairs(path, label_mode="binary", limit=300)
    assert raw[0].label == 5.0 and raw[2].label == 2.0
    assert [p.label for p in levels[:3]] == [2.0, 2.0, 1.0]
    assert {p.label for p in levels} == {0.0, 1.0, 2.0}
    assert all(b.label == float(lv.label == 2.0) for b, lv in zip(binary, levels, strict=True))
    assert [bucket3(s, scale=5) for s in range(6)] == [0, 0, 1, 1, 2, 2]


def test_sohu_jsonl(shared_data: Path) -> None:
    pairs = read_pairs(shared_data / "zh/sohu/dc-test.jsonl", label_mode="levels3")
    assert len(pairs) == 500 and {p.label for p in pairs} == {0.0, 1.0, 2.0}
    assert len(pairs[0].document) > len(pairs[0].query) / 2


def test_qa_folders_with_query_ids(shared_data: Path) -> None:
    train = read_pairs(shared_data / "en/trecqa/train")
    assert len(train) == 4718 and train[0].qid == "1" and train[0].docid is None
    assert train[0].query.startswith("who is the author of the book")
    test = read_pairs(shared_data / "en/trecqa/raw-test")
    assert (test[0].qid, test[0].docid, test[0].label) == ("32.1", "54566", 1.0)
    assert len({p.qid for p in test}) > 60
    wiki = read_pairs(shared_data / "en/wikiqa/dev", format="qa")
    assert len(wiki) == 1130 and wiki[0].qid == "2"


def test_microblog_runs(shared_data: Path) -> None:
    path = shared_data / "en/microblog/trec-2011"
    assert detect_format(path) == "microblog"
    pairs = read_pairs(path, limit=5)
    assert pairs[0] == LabeledPair("bbc world service staff cuts", "bbc news - bbc world service cuts to be outlined to staff", 1.0, "1", "30198105513140224")


def test_read_many_concatenates(shared_data: Path) -> None:
    pairs = read_many([shared_data / "zh/afqmc/train.tsv", shared_data / "zh/lcqmc/dev.tsv"], limit=3)
    assert len(pairs) == 6 and pairs[3].query == "开初婚未育证明怎么弄？"


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    pairs = [LabeledPair("a\tb", "c\nd", 1.0), LabeledPair("花呗", "借呗", 0.0)]
    back = read_pairs(write_pairs(pairs, tmp_path / "out.tsv"), format="pairs")
    assert back == [LabeledPair("a b", "c d", 1.0), LabeledPair("花呗", "借呗", 0.0)]


@pytest.mark.parametrize(
    ("name", "content", "fmt", "message"),
    [
        ("bad.tsv", "a\tb\t1\nonly two\tcols\n", "pairs", r"bad.tsv:2: expected 3 tab-separated columns \(s1, s2, label\), found 2"),
        ("bad.tsv", "a\tb\tyes\n", "pairs", r"bad.tsv:1: label must be a number, got 'yes'"),
        ("bad.tsv", "a\tb\t7\n", "stsb", r"bad.tsv:1: label 7 is outside 0..5 for format 'stsb'"),
        ("bad.tsv", "a\tb\t1\n", "pawsx", r"bad.tsv:1: expected a header line starting with 'id<TAB>'"),
        ("bad.jsonl", '{"sentence1": "a", "sentence2": "b", "label": "5"}\n{"sentence1": "a"}\n', "sohu",
         r"bad.jsonl:2: missing field\(s\) \['sentence2', 'label'\]"),
        ("bad.jsonl", "not json\n", "sohu", r"bad.jsonl:1: expected a JSON object per line"),
    ],
)
def test_bad_lines_name_file_line_and_expectation(tmp_path: Path, name: str, content: str, fmt: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        read_pairs(path, format=fmt)  # type: ignore[arg-type]


#: a BQ-shaped file (s1<TAB>s2<TAB>label, 0/1; invented bank questions), its fifth line replaced by a bad one
BQ_LINES = ["额度什么时候能恢复\t还款后额度多久恢复\t1", "怎么修改绑定的银行卡\t贷款利息怎么算\t0", "可以提前还款吗\t能不能提前把钱还了\t1",
            "申请失败是什么原因\t为什么一直申请不了\t1", "LINE5", "借款到账要多久\t手机号换了怎么办\t0", "每月几号扣款\t还款日是哪天\t1",
            "我的账户被冻结了\t怎么开通这个功能\t0"]


@pytest.mark.parametrize(("line5", "message"), [
    ("为什么不能借款\t0", r"bq.tsv:5: expected 3 tab-separated columns \(s1, s2, label\), found 2"),
    ("为什么不能借款\t借不了钱怎么回事\t2",
     r"bq.tsv:5: label 2 is outside 0..1 for format 'pairs'; graded 0-5 scores are read with --format stsb"),
    ("为什么不能借款\t借不了钱怎么回事\tyes", r"bq.tsv:5: label must be a number, got 'yes'"),
    ("为什么不能借款\t借不了钱怎么回事\tnan", r"bq.tsv:5: label must be a finite number, got 'nan'"),
])
def test_bq_shaped_file_with_a_bad_line_names_file_and_line(tmp_path: Path, line5: str, message: str) -> None:
    # what `jingpai train --train bq.tsv` reads (format auto): one stray "2" must not turn the file into STS-B scores
    path = tmp_path / "bq.tsv"
    path.write_text("\n".join(line5 if line == "LINE5" else line for line in BQ_LINES) + "\n", encoding="utf-8")
    assert detect_format(path) == "pairs"
    with pytest.raises(DataFormatError, match=message):
        read_pairs(path)


def test_lcqmc_and_bq_training_files_read_as_they_are(shared_data: Path) -> None:
    for rel, size in (("zh/lcqmc/train.tsv", 238_355), ("zh/bq/train.tsv", 100_000), ("zh/bq/dev.tsv", 5_000)):
        assert detect_format(shared_data / rel) == "pairs"
        pairs = read_pairs(shared_data / rel)
        assert len(pairs) == size and {p.label for p in pairs} == {0.0, 1.0}
        assert all(p.query and p.document for p in pairs)


def test_bad_qa_folders(tmp_path: Path) -> None:
    folder = tmp_path / "qa"
    folder.mkdir()
    (folder / "a.toks").write_text("q\nq\n")
    (folder / "b.toks").write_text("d1\nd2\n")
    (folder / "sim.txt").write_text("1\n0\n")
    with pytest.raises(DataFormatError, match=r"qa: missing id.txt; a qa folder needs a.toks, b.toks, sim.txt, id.txt"):
        read_pairs(folder, format="qa")
    (folder / "id.txt").write_text("1\n")
    with pytest.raises(DataFormatError, match=r"line counts differ: \{'a.toks': 2, 'b.toks': 2, 'sim.txt': 2, 'id.txt': 1\}"):
        read_pairs(folder, format="qa")
    (folder / "id.txt").write_text("1\n1 0\n")
    with pytest.raises(DataFormatError, match=r"id.txt:2: expected 'qid' or 'qid 0 docid rel', found 2 fields"):
        read_pairs(folder, format="qa")
    with pytest.raises(DataFormatError, match=r"id.txt:1: expected a TREC run line 'qid Q0 docid rank score tag', found 1 fields"):
        read_pairs(folder, format="microblog")


def test_unknown_format_and_missing_path(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="unknown data format 'csv'; expected one of auto, pairs, pawsx, stsb, nli, sohu, qa, microblog"):
        read_pairs(tmp_path, format="csv")  # type: ignore[arg-type]
    with pytest.raises(DataFormatError, match="unknown label mode 'x'; expected one of raw, binary, levels3"):
        read_pairs(tmp_path, label_mode="x")  # type: ignore[arg-type]
    with pytest.raises(DataFormatError, match=f"{tmp_path / 'nope.tsv'} does not exist"):
        read_pairs(tmp_path / "nope.tsv")


def test_nli_entailment_is_a_match_contradiction_not_and_neutral_is_skipped(shared_data: Path, tmp_path: Path) -> None:
    path = shared_data / "zh/nli/ocnli-dev.tsv"
    assert detect_format(path) == "nli"
    pairs = read_pairs(path)
    assert len(pairs) == 947 + 900 and {p.label for p in pairs} == {0.0, 1.0}
    assert pairs[0] == LabeledPair("身上裹一件工厂发的棉大衣,手插在袖筒里", "身上至少一件衣服", 1.0)
    bad = tmp_path / "bad.tsv"
    bad.write_text("前提\t假设\tentailment\n前提\t假设\tmaybe\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad.tsv:2: NLI label must be one of entailment, contradiction, neutral, got 'maybe'"):
        read_pairs(bad, format="nli")


def test_holdout_splits_by_query_and_is_seeded() -> None:
    from jingpai.reranker.data import holdout

    pairs = [LabeledPair(f"q{i % 50}", f"d{i}", float(i % 2)) for i in range(500)]
    train, held = holdout(pairs, 0.1, seed=3)
    assert len(train) + len(held) == 500
    assert {p.query for p in held}.isdisjoint({p.query for p in train}) and len({p.query for p in held}) == 5
    assert holdout(pairs, 0.1, seed=3) == (train, held)
    with pytest.raises(DataFormatError, match="holdout fraction must be in \\(0, 1\\), got 1.5"):
        holdout(pairs, 1.5)
