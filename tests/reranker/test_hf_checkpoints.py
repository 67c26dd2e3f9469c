"""Bring-your-own checkpoint: Hugging Face and sentence-transformers cross-encoder directories load as they are.

Every checkpoint is a tiny random model of a real family (BERT, XLM-R, DeBERTa-v2, ModernBERT) built locally
with ``save_pretrained``; jingpai's scores are compared with ``transformers`` run directly on the same pairs
with the same truncation, and with sentence-transformers' ``CrossEncoder(dir).predict``.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from fastapi.testclient import TestClient

from jingpai.cli import cli
from jingpai.reranker.base import ModelLoadError, Reranker
from jingpai.reranker.hf_checkpoint import detect
from jingpai.reranker.models.cross import CrossEncoderReranker
from jingpai.reranker.tiny import FAMILIES, build_tiny_checkpoint
from .conftest import read_tsv_pairs

LONG_DOC = "影响中国GDP增长的因素有哪些，消费投资和出口 " * 6
PAIRS = [
    ("哪些因素会影响中国的GDP", LONG_DOC),  # longer than the checkpoints' 48 tokens: truncation must match
    ("花呗怎么还款", "今天天气怎么样"),
    ("Who wrote The Iron Lady?", "Hugo Young wrote The Iron Lady, a biography of Margaret Thatcher"),
    ("a", "b"),
]
#: the tokens per pair the small checkpoints' tokenizers say (model_max_length)
SMALL = 48
#: transformers classes each family needs; a family whose classes this transformers lacks is skipped
FAMILY_CLASSES = {"bert": "BertConfig", "xlm-roberta": "XLMRobertaConfig", "deberta-v2": "DebertaV2Config", "modernbert": "ModernBertConfig"}
FAST = ["--epochs", "1", "--batch-size", "8", "--lr", "1e-3", "--no-progress", "--config", "max_length=48", "--max-steps", "2"]


def need_family(family: str) -> None:
    import transformers

    if not hasattr(transformers, FAMILY_CLASSES[family]):
        pytest.skip(f"transformers {transformers.__version__} has no {FAMILY_CLASSES[family]}")


@pytest.fixture(scope="module")
def texts(shared_data: Path) -> list[str]:
    """Pair texts plus real training rows, so the tiny vocabularies cover what the tests feed."""
    rows = read_tsv_pairs(shared_data / "zh/afqmc/train.tsv", 40) + read_tsv_pairs(shared_data / "zh/lcqmc/dev.tsv", 40)
    return [t for pair in PAIRS for t in pair] + [t for a, b, _ in rows for t in (a, b)]


@pytest.fixture(scope="module")
def checkpoints(texts: list[str], tmp_path_factory: pytest.TempPathFactory):
    """``checkpoint(family, num_labels, max_position)``: a tiny ``*ForSequenceClassification`` dir, built once."""
    root = tmp_path_factory.mktemp("hf")
    built: dict[tuple, Path] = {}

    def checkpoint(family: str, num_labels: int | None = 1, max_position: int = SMALL) -> Path:
        need_family(family)
        key = (family, num_labels, max_position)
        if key not in built:
            name = f"{family}-{num_labels or 'base'}-{max_position}"
            built[key] = build_tiny_checkpoint(root / name, texts, family=family, num_labels=num_labels, max_position=max_position, seed=1)
        return built[key]

    return checkpoint


def transformers_logits(path: Path, pairs: list[tuple[str, str]], *, max_length: int, drop: tuple[str, ...] = ()) -> torch.Tensor:
    """The logits ``transformers`` gives, run directly (AutoTokenizer + AutoModelForSequenceClassification)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    net = AutoModelForSequenceClassification.from_pretrained(path).eval()
    enc = tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="longest_first",
                    max_length=max_length, return_tensors="pt")
    assert enc["input_ids"].shape[1] == max_length  # PAIRS[0] was cut: the comparison covers truncation
    with torch.no_grad():
        return net(**{k: v for k, v in enc.items() if k not in drop}).logits


def loaded(path: Path, caplog: pytest.LogCaptureFixture) -> tuple[Reranker, str]:
    with caplog.at_level(logging.INFO, logger="jingpai.reranker"):
        model = Reranker.load(path, device="cpu")
    return model, caplog.text


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**data, **changes}))


# ------------------------------------------------------------------------------- plain HF checkpoints


@pytest.mark.parametrize("family", FAMILIES)
def test_one_logit_checkpoint_scores_as_transformers_and_sentence_transformers(family, checkpoints, caplog) -> None:
    path = checkpoints(family)
    model, log = loaded(path, caplog)
    assert isinstance(model, CrossEncoderReranker) and detect(path).loader == "transformers"
    assert f"loading {path} with the transformers loader: no jingpai_model.json; config.json names" in log
    assert "ForSequenceClassification" in type(model.net).__name__
    # sentence-transformers' CrossEncoder applies sigmoid to a one-logit head by default: so does jingpai
    assert (model.config.max_length, model.config.num_logits, model.config.activation, model.num_labels) == (SMALL, 1, "sigmoid", 2)
    expected = torch.sigmoid(transformers_logits(path, PAIRS, max_length=SMALL)[:, 0]).numpy()
    np.testing.assert_allclose(model.predict(PAIRS), expected, atol=1e-5)
    CrossEncoder = pytest.importorskip("sentence_transformers").CrossEncoder
    np.testing.assert_allclose(model.predict(PAIRS), CrossEncoder(str(path), device="cpu").predict(PAIRS), atol=1e-5)


def test_two_logit_classifier_scores_the_probability_of_label_1(checkpoints, tmp_path, caplog) -> None:
    path = checkpoints("bert", num_labels=2)
    model, log = loaded(path, caplog)
    assert (model.config.num_logits, model.config.activation, model.num_labels) == (2, "sigmoid", 2)
    assert "softmax probability of label 1" in log
    expected = transformers_logits(path, PAIRS, max_length=SMALL).softmax(-1)[:, 1].numpy()
    scores = model.predict(PAIRS)
    np.testing.assert_allclose(scores, expected, atol=1e-5)
    assert ((scores > 0) & (scores < 1)).all()
    CrossEncoder = pytest.importorskip("sentence_transformers").CrossEncoder
    np.testing.assert_allclose(scores, CrossEncoder(str(path), device="cpu").predict(PAIRS, apply_softmax=True)[:, 1], atol=1e-5)
    again = Reranker.load(model.save(tmp_path / "saved"), device="cpu")  # a jingpai save keeps the 2-logit head
    assert (again.config.num_logits, again.config.activation) == (2, "sigmoid")
    np.testing.assert_allclose(again.predict(PAIRS), scores, atol=1e-6)


def test_a_model_without_token_types_gets_none(checkpoints, tmp_path) -> None:
    """ModernBERT takes no token_type_ids: a tokenizer that makes them must not pass them on."""
    path = tmp_path / "modernbert-with-token-types"
    shutil.copytree(checkpoints("modernbert"), path)
    edit_json(path / "tokenizer_config.json", model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    model = Reranker.load(path, device="cpu")
    assert "token_type_ids" in model.tokenizer.model_input_names and "token_type_ids" not in model.featurize(PAIRS)
    expected = torch.sigmoid(transformers_logits(path, PAIRS, max_length=SMALL, drop=("token_type_ids",))[:, 0]).numpy()
    np.testing.assert_allclose(model.predict(PAIRS), expected, atol=1e-5)


def test_save_of_a_loaded_checkpoint_reloads_as_jingpai(checkpoints, tmp_path, caplog) -> None:
    model = Reranker.load(checkpoints("xlm-roberta"), device="cpu")
    saved = model.save(tmp_path / "saved")
    again, log = loaded(saved, caplog)
    assert f"loading {saved} with the jingpai loader: jingpai_model.json is present" in log
    assert again.config == model.config and again.config.max_length == SMALL
    np.testing.assert_allclose(again.predict(PAIRS), model.predict(PAIRS), atol=1e-6)


@pytest.mark.parametrize(("model_max_length", "expected"), [(10**30, 512), (1000, 512), (100, 100)])
def test_max_length_is_capped_at_the_usable_positions(model_max_length, expected, checkpoints, tmp_path, caplog) -> None:
    """XLM-R's 514 position embeddings take 512 tokens (positions start after the padding index)."""
    path = tmp_path / "xlmr"
    shutil.copytree(checkpoints("xlm-roberta", max_position=512), path)
    edit_json(path / "tokenizer_config.json", model_max_length=model_max_length)
    model, log = loaded(path, caplog)
    assert model.config.max_length == expected
    if expected != model_max_length:
        assert "max_position_embeddings 514 - 2 (positions start after the padding index)" in log


# ------------------------------------------------------------------------------- sentence-transformers


@pytest.mark.parametrize(("activation", "expected"), [(None, "sigmoid"), ("Identity", "identity"), ("Sigmoid", "sigmoid")])
def test_sentence_transformers_directory_scores_as_cross_encoder_predict(activation, expected, checkpoints, tmp_path, caplog) -> None:
    CrossEncoder = pytest.importorskip("sentence_transformers").CrossEncoder
    kwargs = {} if activation is None else {"activation_fn": getattr(torch.nn, activation)()}
    directory = tmp_path / "st"
    CrossEncoder(str(checkpoints("xlm-roberta")), device="cpu", max_length=24, **kwargs).save(str(directory))
    model, log = loaded(directory, caplog)
    assert detect(directory).loader == "sentence-transformers"
    assert "with the sentence-transformers loader: config_sentence_transformers.json says model_type CrossEncoder" in log
    assert (model.config.max_length, model.config.activation) == (24, expected)
    reference = CrossEncoder(str(directory), device="cpu")
    assert reference.max_seq_length == 24
    np.testing.assert_allclose(model.predict(PAIRS), reference.predict(PAIRS), atol=1e-5)


@pytest.mark.parametrize("key", ["sentence_transformers", "sbert_ce_default_activation_function"])
def test_older_sentence_transformers_config_keys(key, checkpoints, tmp_path) -> None:
    """v4 kept the activation in config.json's ``sentence_transformers`` block, older versions in its own key."""
    directory = tmp_path / "old-st"
    shutil.copytree(checkpoints("bert"), directory)
    config = json.loads((directory / "config.json").read_text())
    identity = "torch.nn.modules.linear.Identity"
    config[key] = {"activation_fn": identity, "version": "4.1.0"} if key == "sentence_transformers" else identity
    (directory / "config.json").write_text(json.dumps(config))
    model = Reranker.load(directory, device="cpu")
    assert (detect(directory).loader, model.config.activation, model.num_labels) == ("sentence-transformers", "identity", 1)
    np.testing.assert_allclose(model.predict(PAIRS), transformers_logits(directory, PAIRS, max_length=SMALL)[:, 0].numpy(), atol=1e-5)
    CrossEncoder = pytest.importorskip("sentence_transformers").CrossEncoder
    np.testing.assert_allclose(model.predict(PAIRS), CrossEncoder(str(directory), device="cpu").predict(PAIRS), atol=1e-5)


# ------------------------------------------------------------------------------- refusals


def test_directories_that_are_no_cross_encoder_are_refused_with_the_reason(checkpoints, tmp_path) -> None:
    with pytest.raises(ModelLoadError, match=r"is not a saved jingpai model: jingpai_model.json is missing, and it is no Hugging Face"):
        Reranker.load(tmp_path, device="cpu")
    with pytest.raises(ModelLoadError, match=r"names architectures \['XLMRobertaModel'\], no \*ForSequenceClassification"):
        Reranker.load(checkpoints("xlm-roberta", num_labels=None), device="cpu")
    three = tmp_path / "three"
    build_tiny_checkpoint(three, ["abc"], num_labels=3, max_position=SMALL)
    with pytest.raises(ModelLoadError, match=r"has a 3-label head; a reranker needs 1 logit"):
        Reranker.load(three, device="cpu")
    bi = tmp_path / "bi"
    shutil.copytree(checkpoints("bert"), bi)
    edit_json(bi / "config_sentence_transformers.json", model_type="SentenceTransformer")
    with pytest.raises(ModelLoadError, match=r"is a sentence-transformers SentenceTransformer model, not a CrossEncoder"):
        Reranker.load(bi, device="cpu")
    edit_json(bi / "config_sentence_transformers.json", model_type="CrossEncoder", activation_fn="torch.nn.modules.activation.Tanh")
    with pytest.raises(ModelLoadError, match=r"activation_fn is 'torch.nn.modules.activation.Tanh'; jingpai applies only"):
        Reranker.load(bi, device="cpu")
    headless = tmp_path / "headless"
    shutil.copytree(checkpoints("bert", num_labels=None), headless)
    edit_json(headless / "config.json", architectures=["BertForSequenceClassification"])
    with pytest.raises(ModelLoadError, match=r"lacks weights \['classifier.bias', 'classifier.weight'\]"):
        Reranker.load(headless, device="cpu")


def test_a_model_class_other_than_cross_refuses_a_checkpoint(checkpoints) -> None:
    from jingpai.reranker.models.kwbert import KeywordBertReranker

    with pytest.raises(ModelLoadError, match=r"holds a Hugging Face cross-encoder \(loaded as 'cross'\), not 'kwbert'"):
        KeywordBertReranker.load(checkpoints("bert"), device="cpu")


# ------------------------------------------------------------------------------- serve / eval / train


def test_service_serves_a_checkpoint_with_its_own_max_length(checkpoints) -> None:
    from jingpai.reranker.service import ServiceSettings, create_app

    model = Reranker.load(checkpoints("xlm-roberta", max_position=512), device="cpu")
    assert model.config.max_length == 512  # model_max_length 512, capped at 514 - 2 positions: the same
    expected = model.predict([(PAIRS[0][0], d) for _, d in PAIRS])
    with TestClient(create_app(ServiceSettings(model_name="byo", dtype="fp32", warmup=False), model)) as client:
        info = client.get("/info").json()
        assert info["limits"]["max_length"] == 512 and info["architecture"] == "cross" and info["score"] == "sigmoid(logit)"
        assert info["token_ids_once"] is True  # XLM-R's pair template, replayed on the measured ids
        r = client.post("/rerank", json={"query": PAIRS[0][0], "texts": [d for _, d in PAIRS]})
        assert r.status_code == 200, r.text
        assert {rec["index"]: rec["score"] for rec in r.json()} == pytest.approx(dict(enumerate(expected.tolist())), abs=1e-5)


@pytest.mark.parametrize("num_labels", [1, 2])
def test_tei_raw_scores_are_the_logits_transformers_gives(num_labels, checkpoints) -> None:
    """TEI answers raw_scores: true with a one-logit head's logit and false with its sigmoid; a two-logit head
    has no one logit, so both answer the probability of label 1 (the score ``predict`` gives)."""
    from jingpai.reranker.service import ServiceSettings, create_app

    path = checkpoints("bert", num_labels=num_labels)
    query, docs = PAIRS[0][0], [d for _, d in PAIRS]
    logits = transformers_logits(path, [(query, d) for d in docs], max_length=SMALL)
    probability = torch.sigmoid(logits[:, 0]) if num_labels == 1 else logits.softmax(-1)[:, 1]
    raw = logits[:, 0] if num_labels == 1 else probability
    model = Reranker.load(path, device="cpu")
    with TestClient(create_app(ServiceSettings(dtype="fp32", warmup=False), model)) as client:
        for raw_scores, expected in ((True, raw), (False, probability)):
            r = client.post("/rerank", json={"query": query, "texts": docs, "raw_scores": raw_scores})
            assert r.status_code == 200, r.text
            assert {rec["index"]: rec["score"] for rec in r.json()} == pytest.approx(dict(enumerate(expected.tolist())), abs=1e-5)
        assert client.get("/info").json()["score"] == ("sigmoid(logit)" if num_labels == 1 else "probability")
    assert model.config.activation == "sigmoid"  # the service changed its own copy only


def test_eval_runs_on_a_checkpoint(checkpoints, shared_data) -> None:
    from jingpai.reranker.data import read_pairs

    path = checkpoints("deberta-v2")
    data = shared_data / "zh/lcqmc/dev.tsv"
    result = CliRunner().invoke(cli, ["eval", "--model", str(path), "--data", str(data), "--limit", "30", "--json", "--device", "cpu"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)  # transformers draws its weight-loading bar on stderr
    pairs = read_pairs(data, limit=30)
    scores = Reranker.load(path, device="cpu").predict([(p.query, p.document) for p in pairs])
    gold = np.array([p.label > 0 for p in pairs])
    # the scores are probabilities (sigmoid), so accuracy thresholds them at 0.5
    assert metrics["accuracy"] == pytest.approx(float(((scores > 0.5) == gold).mean()))


@pytest.mark.parametrize(("architecture", "family", "extra"), [
    ("cross", "xlm-roberta", []),
    ("cross", "modernbert", []),
    ("kwbert", "xlm-roberta", []),
    ("bertca", "deberta-v2", ["--config", "decoder=mlp", "--config", "context_hidden=8", "--config", "decoder_hidden=8",
                              "--config", "mlp_hidden=[8]", "--config", "sim=cosine", "--label-mode", "levels3"]),
])
def test_train_from_a_non_bert_base(architecture, family, extra, checkpoints, shared_data, tmp_path) -> None:
    base = checkpoints(family, num_labels=None)
    out = tmp_path / architecture
    data = shared_data / ("zh/stsb/train.tsv" if architecture == "bertca" else "zh/afqmc/train.tsv")
    result = CliRunner().invoke(cli, ["train", "--model", architecture, "--base", str(base), "--train", str(data), "--limit", "16",
                                      *FAST, *extra, "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    model = Reranker.load(out, device="cpu")
    assert model.name == architecture and type(model.net).__name__ != "BertModel"
    backbone = model.net if architecture == "cross" else model.net.backbone
    assert backbone.config.model_type == family
    scores = model.predict(PAIRS[:2])
    assert scores.shape == (2,) and np.isfinite(scores).all()


@pytest.mark.parametrize("family", ["deberta-v2", "modernbert"])
def test_kwbert_names_the_layout_it_needs(family, checkpoints) -> None:
    from jingpai.reranker import registry

    with pytest.raises(ModelLoadError, match=r"kwbert copies the backbone's last layer and needs BERT's layer layout .* "
                                             r"Train cross or bertca on this checkpoint instead"):
        registry.create("kwbert", base=str(checkpoints(family, num_labels=None)), device="cpu")


def test_train_from_a_finished_cross_encoder_keeps_its_head(checkpoints, shared_data, tmp_path) -> None:
    """A finished cross-encoder is a --base too: fine-tuning starts from its one-logit head, not a new one."""
    from jingpai.reranker import registry

    base = checkpoints("bert")
    before = Reranker.load(base, device="cpu")
    fresh = registry.create("cross", base=str(base), max_length=SMALL, device="cpu")
    assert torch.equal(fresh.net.classifier.weight, before.net.classifier.weight)
    np.testing.assert_allclose(torch.sigmoid(torch.from_numpy(fresh.predict(PAIRS))).numpy(), before.predict(PAIRS), atol=1e-5)


def test_demo_serves_a_checkpoint(checkpoints, tmp_path) -> None:
    """``jingpai demo --model DIR``: the model step takes the directory, the reranker step serves it over real HTTP."""
    import httpx

    from jingpai.jobs.demo import DemoError, prepare_model, start_reranker
    from jingpai.jobs.demo_settings import DemoSettings

    path = checkpoints("xlm-roberta")
    settings = DemoSettings(model_dir=path, port=0, reranker_port=0, cache_dir=tmp_path, threads=1)
    lines: list[str] = []
    assert prepare_model(settings, [], None, lines.append) == (path, None)
    assert lines == [f"      using the model in {path} (transformers: no jingpai_model.json; config.json names "
                     "XLMRobertaForSequenceClassification)"]
    with pytest.raises(DemoError, match=r"model step: .* is not a saved jingpai model: jingpai_model.json is missing"):
        prepare_model(DemoSettings(model_dir=tmp_path, port=0, reranker_port=0), [], None, lines.append)
    server = start_reranker(settings, path)
    try:
        docs = [d for _, d in PAIRS]
        r = httpx.post(f"{server.url}/rerank", json={"query": PAIRS[0][0], "texts": docs}, timeout=60)
        assert r.status_code == 200, r.text
        info = httpx.get(f"{server.url}/info", timeout=10).json()
        assert info["limits"]["max_length"] == SMALL and info["score"] == "sigmoid(logit)"
        expected = Reranker.load(path, device="cpu").predict([(PAIRS[0][0], d) for d in docs])
        # the demo serves with dtype auto: bf16 on a CPU that has it
        tolerance = 1e-5 if info["dtype"] == "fp32" else 1e-2
        assert {rec["index"]: rec["score"] for rec in r.json()} == pytest.approx(dict(enumerate(expected.tolist())), abs=tolerance)
    finally:
        server.stop()
