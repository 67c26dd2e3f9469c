"""bench/label_coverage.py: BM25's first hit per q1 and what the split's labels say of it."""

from __future__ import annotations

from pathlib import Path

from bench.label_coverage import first_hits, read_pairs

PAIRS = [
    ("怎么提高借款额度", "借款额度怎么提高", 1),
    ("怎么提高借款额度", "怎么取消借款", 0),
    ("还款日期可以更改吗", "可以更改还款日期吗", 1),
    ("如何更换绑定的银行卡", "绑定手机号怎么换", 1),
    ("更换绑定的银行卡", "人工客服电话", 0),
]


def test_first_hit_is_the_nearest_other_question(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{a}\t{b}\t{c}\n" for a, b, c in PAIRS), encoding="utf-8")
    assert read_pairs(path) == PAIRS
    hits = first_hits(PAIRS)
    assert list(hits) == ["怎么提高借款额度", "还款日期可以更改吗", "如何更换绑定的银行卡"]  # distinct q1 of a positive pair
    assert hits["怎么提高借款额度"] == "借款额度怎么提高"
    assert hits["还款日期可以更改吗"] == "可以更改还款日期吗"
    # never itself; the unpaired "更换绑定的银行卡" shares more words than the labelled "绑定手机号怎么换": unjudged
    assert hits["如何更换绑定的银行卡"] == "更换绑定的银行卡"
