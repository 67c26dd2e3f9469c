"""``jingpai train`` / ``eval`` / ``negatives`` through click's CliRunner with a tiny checkpoint and real data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine.client import Engine
from jingpai.keyword_dict import Dictionary
from jingpai.reranker.base import Reranker
from jingpai.reranker.data import read_pairs
from jingpai.reranker.evaluate import evaluate_model

FAST = ["--epochs", "1", "--batch-size", "16", "--lr", "1e-3", "--no-progress", "--config", "max_length=64"]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def trained(tiny_bert_dir: Path, shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "cross"
    code, output = invoke(
        "train", "--model", "cross", "--base", tiny_bert_dir, "--train", shared_data / "zh/afqmc/train.tsv",
        "--dev", shared_data / "zh/lcqmc/dev.tsv", "--limit", "48", "--metric", "accuracy", *FAST, "--out", out,
    )
    assert code == 0, output
    assert f"saved cross to {out}" in output and "| accuracy |" in output
    return out


def test_train_writes_model_log_and_settings(trained: Path) -> None:
    assert {"jingpai_model.json", "model.pt", "train_log.jsonl", "train_settings.json"} <= {p.name for p in trained.iterdir()}
    settings = json.loads((trained / "train_settings.json").read_text())
    assert (settings["epochs"], settings["lr"], settings["metric"]) == (1, 1e-3, "accuracy")
    events = [json.loads(line)["event"] for line in (trained / "train_log.jsonl").read_text().splitlines()]
    assert events[0] == "start" and "eval" in events and events[-1] == "end"


def test_eval_json_matches_the_library(trained: Path, shared_data: Path, tmp_path: Path) -> None:
    data = shared_data / "en/trecqa/raw-dev"
    code, output = invoke("eval", "--model", trained, "--data", data, "--limit", "40", "--json",
                          "--write-json", tmp_path / "m.json", "--write-markdown", tmp_path / "m.md")
    assert code == 0, output
    metrics = json.loads(output)
    expected = evaluate_model(Reranker.load(trained, device="cpu"), read_pairs(data, limit=40))
    assert metrics == pytest.approx(expected, nan_ok=True)
    assert json.loads((tmp_path / "m.json").read_text()) == metrics
    assert (tmp_path / "m.md").read_text().startswith("### cross (cross) on raw-dev\n")


def test_eval_markdown_and_trec_files(trained: Path, shared_data: Path, tmp_path: Path) -> None:
    code, output = invoke("eval", "--model", trained, "--data", shared_data / "zh/lcqmc/dev.tsv", "--limit", "30")
    assert code == 0 and "| metric | value |" in output and "| MAP |" in output
    (tmp_path / "qrels").write_text("1 0 a 1\n1 0 b 0\n2 0 c 1\n")
    (tmp_path / "run").write_text("1 Q0 b 1 2.0 x\n1 Q0 a 2 1.0 x\n2 Q0 c 1 1.0 x\n")
    code, output = invoke("eval", "--qrels", tmp_path / "qrels", "--run", tmp_path / "run", "--json")
    assert code == 0, output
    assert json.loads(output)["MRR"] == pytest.approx((0.5 + 1.0) / 2)


def test_cli_errors_are_clear(tiny_bert_dir: Path, shared_data: Path, tmp_path: Path, trained: Path) -> None:
    train_file = shared_data / "zh/afqmc/dev.tsv"
    code, output = invoke("train", "--model", "cross", "--base", tmp_path / "missing", "--train", train_file, "--out", tmp_path / "o")
    assert code == 1 and f"base checkpoint '{tmp_path / 'missing'}' is not a local Hugging Face checkpoint folder" in output
    code, output = invoke("train", "--model", "cross", "--base", tiny_bert_dir, "--train", train_file, "--config", "depth=3",
                          "--out", tmp_path / "o")
    assert code == 1 and "unknown cross config field(s) ['depth']" in output
    code, output = invoke("train", "--model", "gpt", "--train", train_file, "--out", tmp_path / "o")
    assert code == 2 and "'gpt' is not one of" in output
    code, output = invoke("eval", "--model", trained)
    assert code == 2 and "give --model DIR and --data PATH (or --qrels FILE and --run FILE)" in output
    bad = tmp_path / "bad.tsv"
    bad.write_text("q\td\tmaybe\n")
    code, output = invoke("eval", "--model", trained, "--data", bad, "--format", "pairs")
    assert code == 1 and f"{bad}:1: label must be a number, got 'maybe'" in output


def test_train_kwbert_with_dictionary(tiny_bert_dir: Path, shared_data: Path, tmp_path: Path) -> None:
    dictionary = Dictionary.from_scores({"花呗": {"product": 2.0}, "借呗": {"product": 1.5}, "还款": {"action": 1.0}})
    dict_dir = dictionary.save(tmp_path / "dict")
    out = tmp_path / "kw"
    code, output = invoke("train", "--model", "kwbert", "--base", tiny_bert_dir, "--dictionary", dict_dir,
                          "--train", shared_data / "zh/afqmc/train.tsv", "--limit", "32", "--max-steps", "2", *FAST, "--out", out)
    assert code == 0, output
    meta = json.loads((out / "jingpai_model.json").read_text())
    assert meta["architecture"] == "kwbert" and meta["keyword_dict_version"] == dictionary.version


def test_train_bertca_on_three_levels(tiny_bert_dir: Path, shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "ca"
    code, output = invoke("train", "--model", "bertca", "--base", tiny_bert_dir, "--train", shared_data / "zh/stsb/train.tsv",
                          "--dev", shared_data / "zh/stsb/dev.tsv", "--label-mode", "levels3", "--limit", "32", "--metric", "MRR",
                          *FAST, "--config", "decoder=mlp", "--config", "context_hidden=8", "--config", "decoder_hidden=8",
                          "--config", "mlp_hidden=[8]", "--config", "sim=cosine", "--out", out)
    assert code == 0, output
    config = json.loads((out / "jingpai_model.json").read_text())["config"]
    assert (config["decoder"], config["sim"], config["mlp_hidden"]) == ("mlp", "cosine", [8])


def test_negatives_random(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "neg.tsv"
    code, output = invoke("negatives", "--data", shared_data / "zh/afqmc/train.tsv", "--limit", "50", "--strategy", "random",
                          "--per-query", "1", "--out", out)
    assert code == 0, output
    pairs = read_pairs(out, format="pairs")
    positives = [p for p in pairs if p.label == 1]
    negatives = [p for p in pairs if p.label == 0]
    source = read_pairs(shared_data / "zh/afqmc/train.tsv", limit=50)
    assert len(positives) == sum(p.label == 1 for p in source)
    assert len(negatives) == len({p.query for p in source})
    assert f"wrote {len(positives)} positives and {len(negatives)} negatives" in output


@pytest.mark.engine
def test_negatives_keyword_with_engine(engine: Engine, index_name: str, shared_data: Path, tmp_path: Path) -> None:
    dictionary = Dictionary.from_scores({w: {"product": 2.0} for w in ("花呗", "借呗", "余额宝", "信用卡")}
                                        | {w: {"action": 1.0} for w in ("还款", "分期", "额度", "逾期", "账单")})
    dict_dir = dictionary.save(tmp_path / "dict")
    out = tmp_path / "neg.tsv"
    code, output = invoke("negatives", "--data", shared_data / "zh/afqmc/train.tsv", "--limit", "80", "--engine", engine.url,
                          "--index", index_name, "--build-index", "--dict", dict_dir, "--replace-ratio", "1.0", "--out", out)
    assert code == 0, output
    assert engine.count(index_name) > 80
    negatives = [p for p in read_pairs(out, format="pairs") if p.label == 0]
    assert len(negatives) > 20 and "replaced" in output and "retrieved" in output
    code, output = invoke("negatives", "--data", shared_data / "zh/afqmc/train.tsv", "--limit", "5", "--engine", engine.url,
                          "--index", index_name, "--build-index", "--dict", dict_dir, "--out", out)
    assert code == 1 and f"index {index_name!r} exists" in output


def test_train_use_bi_with_holdout_nli_and_entity_negatives(shared_data: Path, tmp_path: Path) -> None:
    dict_dir = Dictionary.from_scores({"花呗": {"product": 3.0}, "借呗": {"product": 2.9}, "余额宝": {"product": 2.8}}).save(tmp_path / "d")
    out = tmp_path / "use-bi"
    code, output = invoke("train", "--model", "use-bi", "--train", shared_data / "zh/afqmc/train.tsv", "--train",
                          shared_data / "zh/nli/ocnli-dev.tsv", "--limit", "120", "--holdout", "0.2", "--entity-negatives", "1.0",
                          "--dictionary", dict_dir, "--max-steps", "2", "--epochs", "1", "--batch-size", "32", "--no-progress", "--out", out)
    assert code == 0, output
    assert "(selected on AUC)" in output and "| AUC |" in output and "| accuracy_pos |" in output
    start = json.loads((out / "train_log.jsonl").read_text().splitlines()[0])
    assert start["dev_pairs"] > 0 and start["train_pairs"] > 200  # 240 read − held out + entity negatives
    assert Reranker.load(out, device="cpu").name == "use-bi"


def test_train_hcan_from_use_word_vectors_and_option_errors(shared_data: Path, tmp_path: Path) -> None:
    data = shared_data / "zh/afqmc/train.tsv"
    code, output = invoke("train", "--model", "hcan", "--init-embeddings", "use", "--train", data, "--limit", "64", "--holdout", "0.25",
                          "--config", "embedding_dim=32", "--max-steps", "1", "--no-progress", "--out", tmp_path / "hcan")
    assert code == 0, output
    code, output = invoke("train", "--model", "cross", "--base", "none", "--init-embeddings", "use", "--train", data, "--limit", "8",
                          "--out", tmp_path / "x")
    assert code != 0 and "--init-embeddings use is for word-level models (hcan, iasm), not 'cross'" in output
    code, output = invoke("train", "--model", "use-bi", "--train", data, "--dev", data, "--holdout", "0.1", "--limit", "8", "--out", tmp_path / "y")
    assert code != 0 and "--holdout and --dev both choose the selection data" in output
    code, output = invoke("train", "--model", "use-bi", "--train", data, "--entity-negatives", "0.5", "--limit", "8", "--out", tmp_path / "z")
    assert code != 0 and "--entity-negatives needs --dictionary" in output


@pytest.mark.engine
def test_negatives_window_then_listwise_training(engine: Engine, index_name: str, shared_data: Path, tmp_path: Path) -> None:
    dict_dir = Dictionary.from_scores({w: {"general": 2.0} for w in ("手机", "电脑", "游戏", "电影", "什么")}).save(tmp_path / "dict")
    out = tmp_path / "windows.tsv"
    code, output = invoke("negatives", "--strategy", "window", "--data", shared_data / "zh/lcqmc/train.tsv", "--limit", "400",
                          "--engine", engine.url, "--index", index_name, "--dict", dict_dir, "--max-queries", "30", "--per-query", "3",
                          "--out", out)
    assert code == 0, output
    pairs = read_pairs(out, format="pairs")
    queries = list(dict.fromkeys(p.query for p in pairs))
    assert len(queries) == 30 and all(any(p.label == 1 for p in pairs if p.query == q) for q in queries)
    assert f"wrote {len(pairs)} pairs to {out} (queries 30, texts indexed" in output and "window negatives" in output
    assert engine.count(index_name) > 400  # the alias of a `jingpai index` build: every distinct text of the 400 pairs
    model_dir = tmp_path / "use-bi"
    code, output = invoke("train", "--model", "use-bi", "--train", out, "--batching", "queries", "--config", "listwise_weight=1.0",
                          "--batch-size", "16", "--max-steps", "2", "--epochs", "1", "--no-progress", "--out", model_dir)
    assert code == 0, output
    assert json.loads((model_dir / "jingpai_model.json").read_text())["config"]["listwise_weight"] == 1.0
    code, output = invoke("negatives", "--strategy", "window", "--data", shared_data / "zh/lcqmc/train.tsv", "--limit", "5",
                          "--engine", engine.url, "--out", out)
    assert code == 2 and "the window strategy needs --index (the alias it builds or reuses) and --dict" in output
