"""Score fusion: the formulas, degenerate windows and validation messages."""

from __future__ import annotations

import numpy as np
import pytest

from jingpai.reranker.fusion import FusionError, FusionSpec, fused_order, min_max, ranks_of

ENGINE = [12.0, 8.0, 8.0, 2.0]
MODEL = [0.1, 0.7, 0.9, 0.7]


def test_linear_is_the_weighted_sum_of_min_max_normalised_scores() -> None:
    fused = FusionSpec(mode="linear", weight=0.3).fuse(ENGINE, MODEL)
    engine_norm = [1.0, 0.6, 0.6, 0.0]
    model_norm = [0.0, 0.75, 1.0, 0.75]
    assert fused.tolist() == pytest.approx([0.3 * e + 0.7 * m for e, m in zip(engine_norm, model_norm)])


def test_weight_one_keeps_the_engine_order_and_zero_the_models() -> None:
    for mode in ("linear", "rrf"):
        engine_only = FusionSpec(mode=mode, weight=1.0).fuse(ENGINE, MODEL)
        assert fused_order(engine_only).tolist() == [0, 1, 2, 3]
        model_only = FusionSpec(mode=mode, weight=0.0).fuse(ENGINE, MODEL)
        # the model ties docs 1 and 3 (0.7): the engine's better rank goes first
        assert fused_order(model_only).tolist() == [2, 1, 3, 0]


def test_rrf_uses_one_based_ranks_and_is_classic_rrf_at_half_weight() -> None:
    fused = FusionSpec(mode="rrf", weight=0.5, rrf_k=10).fuse(ENGINE, MODEL)
    engine_ranks = [1, 2, 3, 4]  # 8.0 and 8.0 tie: input order
    model_ranks = [4, 2, 1, 3]
    assert fused.tolist() == pytest.approx([1 / (10 + e) + 1 / (10 + m) for e, m in zip(engine_ranks, model_ranks)])
    weighted = FusionSpec(mode="rrf", weight=0.8, rrf_k=10).fuse(ENGINE, MODEL)
    assert weighted.tolist() == pytest.approx([1.6 / (10 + e) + 0.4 / (10 + m) for e, m in zip(engine_ranks, model_ranks)])


def test_replace_is_the_model_score() -> None:
    assert FusionSpec(mode="replace").fuse(ENGINE, MODEL).tolist() == MODEL


def test_equal_engine_scores_and_a_window_of_one_give_no_nan() -> None:
    equal = FusionSpec(mode="linear", weight=0.5).fuse([3.0, 3.0, 3.0], [0.2, 0.8, 0.5])
    assert equal.tolist() == pytest.approx([0.5, 1.0, 0.75])  # engine all 1: the model decides
    assert FusionSpec().fuse([5.0], [0.3]).tolist() == [1.0]
    assert FusionSpec(mode="rrf", rrf_k=60).fuse([5.0], [0.3]).tolist() == pytest.approx([2 / 61])
    assert min_max([]).tolist() == []


def test_missing_or_nan_engine_scores_fall_back_to_engine_ranks() -> None:
    by_rank = FusionSpec(mode="linear", weight=0.5).fuse([None, None, None], [0.0, 1.0, 0.5])
    assert by_rank.tolist() == pytest.approx([0.5, 0.75, 0.25])  # engine ranks 1..3 → 1, 0.5, 0
    assert FusionSpec().fuse([1.0, float("nan"), 0.5], [0.0, 1.0, 0.5]).tolist() == by_rank.tolist()
    assert FusionSpec().fuse(None, [0.0, 1.0, 0.5]).tolist() == by_rank.tolist()


def test_given_engine_ranks_win_over_the_scores_order() -> None:
    fused = FusionSpec(mode="rrf", rrf_k=1).fuse([1.0, 1.0], [0.5, 0.5], engine_ranks=[2, 1])
    assert fused.tolist() == pytest.approx([1 / 3 + 1 / 3, 1 / 2 + 1 / 2])
    assert ranks_of([0.2, 0.9, 0.2]).tolist() == [2.0, 1.0, 3.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "sum"}, "fusion must be one of replace, linear, rrf, got 'sum'"),
        ({"weight": 1.5}, "fusion_weight must be a number in [0, 1] (the engine's weight), got 1.5"),
        ({"weight": "0.3"}, "fusion_weight must be a number in [0, 1] (the engine's weight), got '0.3'"),
        ({"rrf_k": 0}, "rrf_k must be an integer >= 1, got 0"),
        ({"rrf_k": 2.5}, "rrf_k must be an integer >= 1, got 2.5"),
    ],
)
def test_bad_parameters_name_the_value_and_the_valid_range(kwargs: dict, message: str) -> None:
    with pytest.raises(FusionError) as info:
        FusionSpec(**kwargs)
    assert str(info.value) == message


def test_bad_inputs_are_fusion_errors() -> None:
    with pytest.raises(FusionError, match=r"got 2 engine scores for 3 model scores; expected one per document"):
        FusionSpec().fuse([1.0, 2.0], [0.1, 0.2, 0.3])
    with pytest.raises(FusionError, match="model scores must be a flat list of finite numbers"):
        FusionSpec().fuse([1.0], [np.inf])


def test_describe_names_only_the_parameters_the_mode_uses() -> None:
    assert FusionSpec().describe() == {"mode": "linear", "weight": 0.5}
    assert FusionSpec(mode="rrf", rrf_k=30).describe() == {"mode": "rrf", "weight": 0.5, "rrf_k": 30}
    assert FusionSpec(mode="replace", weight=0.1).describe() == {"mode": "replace"}
    assert FusionSpec().override(fusion_weight=1) == FusionSpec(weight=1.0)
