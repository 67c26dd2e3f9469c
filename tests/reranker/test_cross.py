"""The tiny checkpoint builder and the ``cross`` baseline (real HF modules, tiny configs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.reranker import registry
from jingpai.reranker.base import ModelLoadError, Reranker
from jingpai.reranker.models.cross import CrossEncoderReranker
from jingpai.reranker.tiny import build_tiny_checkpoint

PAIRS = [
    ("哪些因素会影响中国的GDP", "影响中国GDP增长的因素有哪些"),
    ("花呗怎么还款", "今天天气怎么样"),
    ("who is the author of the iron lady", "hugo young wrote the iron lady , a biography of margaret thatcher"),
]


def test_tiny_checkpoint_loads_through_auto_classes(tiny_bert_dir: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = AutoModel.from_pretrained(tiny_bert_dir)
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 2
    tokens = tokenizer.tokenize("中国GDP stock")
    assert tokens == ["中", "国", "g", "##d", "##p", "s", "##t", "##o", "##c", "##k"]
    assert tokenizer.unk_token not in tokenizer.tokenize(PAIRS[0][0] + PAIRS[2][1])


def test_tiny_checkpoint_is_deterministic_per_seed(tmp_path: Path) -> None:
    from transformers import AutoModel

    a = AutoModel.from_pretrained(build_tiny_checkpoint(tmp_path / "a", ["中文 text"], seed=3))
    b = AutoModel.from_pretrained(build_tiny_checkpoint(tmp_path / "b", ["中文 text"], seed=3))
    c = AutoModel.from_pretrained(build_tiny_checkpoint(tmp_path / "c", ["中文 text"], seed=4))
    wa, wb, wc = (m.embeddings.word_embeddings.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_tiny_checkpoint_rejects_bad_head_count(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="hidden_size=30 must be a multiple of num_heads=4"):
        build_tiny_checkpoint(tmp_path, ["x"], hidden_size=30, num_heads=4)


@pytest.fixture(scope="module")
def cross(tiny_bert_dir: Path) -> CrossEncoderReranker:
    torch.manual_seed(0)
    model = registry.create("cross", base=str(tiny_bert_dir), max_length=64, device="cpu")
    assert isinstance(model, CrossEncoderReranker)
    return model


def test_predict_is_batch_independent_and_ordered(cross: CrossEncoderReranker) -> None:
    together = cross.predict(PAIRS, batch_size=8)
    one_by_one = np.array([cross.predict([p])[0] for p in PAIRS])
    assert together.shape == (3,) and together.dtype == np.float32
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    assert len(set(np.round(together, 6))) == 3  # distinct inputs, distinct scores


def test_rank_sorts_by_score(cross: CrossEncoderReranker) -> None:
    docs = [d for _, d in PAIRS]
    scores = cross.predict([(PAIRS[0][0], d) for d in docs])
    ranked = cross.rank(PAIRS[0][0], docs, top_k=2, return_documents=True)
    assert [r["index"] for r in ranked] == list(np.argsort(-scores)[:2])
    assert ranked[0]["text"] == docs[ranked[0]["index"]]


def test_save_load_gives_identical_scores_without_base(cross: CrossEncoderReranker, tiny_bert_dir: Path, tmp_path: Path) -> None:
    # train a step so the saved head differs from any fresh initialisation
    batch = cross.featurize(PAIRS)
    opt = torch.optim.SGD(cross.net.parameters(), lr=0.1)
    cross.net.train()
    cross.loss(batch, torch.tensor([1, 0, 1])).backward()
    opt.step()
    before = cross.predict(PAIRS)
    cross.keyword_dict_version = None
    saved = cross.save(tmp_path / "m")
    assert (saved / "backbone" / "config.json").exists()
    loaded = Reranker.load(saved, device="cpu")
    assert isinstance(loaded, CrossEncoderReranker)
    np.testing.assert_array_equal(loaded.predict(PAIRS), before)


def test_graded_labels_are_soft_targets(tiny_bert_dir: Path) -> None:
    model = registry.create("cross", base=str(tiny_bert_dir), max_label=5.0, device="cpu")
    batch = model.featurize(PAIRS[:2])
    model.net.eval()
    logits = model.scores(batch).detach()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor([1.0, 0.4]))
    torch.testing.assert_close(model.loss(batch, torch.tensor([5.0, 2.0])).detach(), expected)


def test_bad_base_path_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-checkpoint"
    with pytest.raises(ModelLoadError, match=f"base checkpoint '{missing}' is not a local Hugging Face checkpoint folder"):
        registry.create("cross", base=str(missing))
    with pytest.raises(ModelLoadError, match="'cross' needs a base checkpoint"):
        registry.create("cross")


@pytest.mark.parametrize("max_length", [8, 24, 128])
def test_pair_encoder_matches_the_tokenizer_call(tiny_bert_dir: Path, max_length: int) -> None:
    from transformers import AutoTokenizer

    from jingpai.reranker.models.cross import PairEncoder

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    pairs = [*PAIRS, ("", "空"), ("长" * 200, "短"), ("a [SEP] b", "[PAD] 中国 GDP " * 30)]
    ours = PairEncoder(tokenizer)(pairs, max_length=max_length)
    theirs = dict(tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="longest_first",
                            max_length=max_length, return_tensors="pt"))
    assert ours.keys() == theirs.keys()
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name
