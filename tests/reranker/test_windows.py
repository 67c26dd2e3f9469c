"""Window-shaped training (issue 29): windows mined through real engines (both kinds), the in-window loss,
whole-query batches in the training loop, and a USE model that learns to rank a window."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jingpai.engine.client import Engine
from jingpai.jobs.windows import WindowSettings, mine_windows, normalise, paraphrase_components
from jingpai.keyword_dict import Dictionary
from jingpai.reranker import registry
from jingpai.reranker.data import LabeledPair
from jingpai.reranker.losses import in_window_loss
from jingpai.reranker.negatives import NegativeSamplingError
from jingpai.reranker.base import Reranker
from jingpai.reranker.batching import query_groups
from jingpai.reranker.train import TrainSettings, train

Q = "花呗怎么提前还款"
PARAPHRASE = "花呗可以提前还款吗"
PARAPHRASE_OF_PARAPHRASE = "花呗能不能提前还"  # never labelled with Q: only the component says it is one
NEAR_DUPLICATE = "花呗，怎么提前还款？"  # Q up to punctuation, another text in the index
LABELLED_NO = "借呗怎么提前还款"
OTHERS = ["花呗怎么分期还款", "花呗还款日是哪天", "信用卡怎么提前还款", "余额宝怎么转出", "花呗逾期了怎么办", "借呗额度怎么提升"]


def training_pairs() -> list[LabeledPair]:
    return [
        LabeledPair(Q, PARAPHRASE, 1.0),
        LabeledPair(Q, LABELLED_NO, 0.0),
        LabeledPair(PARAPHRASE, PARAPHRASE_OF_PARAPHRASE, 1.0),
        LabeledPair(NEAR_DUPLICATE, "花呗还款", 0.0),
        *(LabeledPair(t, "今天天气怎么样", 0.0) for t in OTHERS),
    ]


def test_windows_keep_labelled_pairs_and_drop_unlabelled_paraphrases(engine: Engine, index_name: str) -> None:
    dictionary = Dictionary.from_scores({"花呗": {"fin": 3.0}, "借呗": {"fin": 2.9}, "提前还款": {"fin": 2.5}, "还款": {"fin": 2.0}})
    settings = WindowSettings(index=index_name, window=10, per_query=3)
    result = mine_windows(training_pairs(), engine=engine, dictionary=dictionary, settings=settings)
    groups: dict[str, list[LabeledPair]] = {}
    for p in result.pairs:
        groups.setdefault(p.query, []).append(p)
    assert set(groups) == {Q, PARAPHRASE}  # the queries with a known paraphrase, nothing else
    mine = groups[Q]
    assert [(p.document, p.label) for p in mine[:2]] == [(PARAPHRASE, 1.0), (LABELLED_NO, 0.0)]
    negatives = [p.document for p in mine[2:]]
    assert 1 <= len(negatives) <= 3 and all(p.label == 0.0 for p in mine[2:])
    assert PARAPHRASE_OF_PARAPHRASE not in negatives and NEAR_DUPLICATE not in negatives and Q not in negatives
    assert set(negatives) <= {*OTHERS, "花呗还款"}  # only indexed texts that are not paraphrases of Q
    assert result.stats["queries"] == 2 and result.stats["paraphrase in window"] == 2
    assert result.stats["skipped: same text up to punctuation"] >= 1
    assert result.stats["skipped: paraphrase of a paraphrase"] >= 1
    # pairs of one query are consecutive: the training loop's whole-query batches rely on nothing else
    order = [p.query for p in result.pairs]
    assert order == sorted(order, key=order.index)


def test_window_settings_and_inputs_are_checked() -> None:
    with pytest.raises(NegativeSamplingError, match="per_query must be >= 1, got 0"):
        WindowSettings(per_query=0)
    with pytest.raises(NegativeSamplingError, match="max_queries must be >= 1 or None, got 0"):
        WindowSettings(max_queries=0)
    with pytest.raises(NegativeSamplingError, match="no query has a pair labelled >= 1.0"):
        mine_windows([LabeledPair("a", "b", 0.0)], engine=None, dictionary=None, settings=WindowSettings())  # type: ignore[arg-type]


def test_components_and_normalisation() -> None:
    c = paraphrase_components(training_pairs())
    assert c[Q] == c[PARAPHRASE] == c[PARAPHRASE_OF_PARAPHRASE] and LABELLED_NO not in c
    assert normalise(NEAR_DUPLICATE) == normalise(Q) and normalise("ＡＢＣ ａ") == "abca"


def test_in_window_loss_pulls_the_paraphrase_up_within_its_window_only() -> None:
    logits = torch.zeros(5, requires_grad=True)
    target = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    groups = torch.tensor([7, 7, 7, 3, 3])  # query 3 has no positive: it teaches nothing and gets no gradient
    in_window_loss(logits, target, groups).backward()
    grad = logits.grad
    assert grad[0] < 0 < grad[1] and grad[1] == grad[2] and grad[3] == grad[4] == 0
    assert float(in_window_loss(torch.tensor([5.0, 0.0]), torch.tensor([1.0, 0.0]), torch.tensor([1, 1]))) < 0.01
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        in_window_loss(logits, target, groups, temperature=0)


def test_query_batching_keeps_each_window_in_one_batch(tiny_bert_dir: Path, tmp_path: Path) -> None:
    pairs = [LabeledPair(f"问题{q}", f"候选{q}-{d}", float(d == 0)) for q in range(12) for d in range(5)]
    model = registry.create("cross", base=str(tiny_bert_dir), max_length=32, device="cpu")
    seen: list[list[str]] = []
    featurize = model.featurize

    def spy(batch):  # records which queries each training batch holds
        seen.append(sorted({q for q, _ in batch}))
        return featurize(batch)

    model.featurize = spy  # type: ignore[method-assign]
    train(model, pairs, None, TrainSettings(epochs=1, batch_size=12, batching="queries", progress=False, lr=1e-4), out_dir=tmp_path)
    assert len(seen) == 6 and all(len(qs) == 2 for qs in seen)  # 12 pairs = two whole windows of 5 … and never split
    assert sorted(q for qs in seen for q in qs) == sorted({p.query for p in pairs})
    assert query_groups(pairs)[1] == [5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="unknown batching 'docs'; expected one of pairs, queries"):
        TrainSettings(batching="docs")  # type: ignore[arg-type]


# the paraphrase shares fewer characters with the query than the window's negatives do: lexical overlap misleads
WINDOWS = [("花呗怎么提前还款", ["蚂蚁花呗能不能早点还清", "花呗怎么分期还款", "借呗怎么提前还款", "花呗提前还款利息"]),
           ("信用卡额度怎么提高", ["如何让信用卡可用额度变多", "信用卡额度怎么查询", "借呗额度怎么提高", "信用卡怎么提高积分"])]


def fit_windows(model: Reranker, *, steps: int, lr: float = 3e-3) -> None:
    """Train ``model``'s trainable parameters on :data:`WINDOWS` (the first document of each is the match)."""
    pairs = [(q, d) for q, docs in WINDOWS for d in docs]
    labels = torch.tensor([float(i == 0) for _, docs in WINDOWS for i in range(len(docs))])
    optimizer = torch.optim.AdamW([p for p in model.net.parameters() if p.requires_grad], lr=lr)
    model.net.train()
    for _ in range(steps):
        loss = model.loss(model.featurize(pairs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_use_kw_learns_to_rank_a_window_with_a_frozen_encoder() -> None:
    torch.manual_seed(0)
    model = registry.create("use-kw", device="cpu", dropout=0.0, contrastive_weight=0.0, listwise_weight=1.0, freeze_encoder=True, layers=1)
    assert not any(p.requires_grad for p in model.net.encoder.parameters())
    fit_windows(model, steps=30)
    for query, docs in WINDOWS:
        assert model.rank(query, docs)[0]["index"] == 0
