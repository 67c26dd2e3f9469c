"""Pretrained encoders by name: the ONNX → BertModel converter, the catalogue's resolution, the real bge-small-zh jar.

The converter is tested on a tiny random BERT exported to ONNX here (torch's TorchScript exporter, the one that
exported the Maven jars' graphs), and on the real bge-small-zh jar that ``scripts/bootstrap`` fetched and converted.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.reranker import onnx_bert, pretrained
from jingpai.reranker.base import Reranker
from jingpai.reranker.tiny import build_tiny_checkpoint

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

TEXTS = ["我的QQ号被盗了", "花呗怎么还款", "平安银行2023年净利润", "Stock markets fell", "A"]


def export_tiny(tmp: Path, *, lowercase: bool = False) -> tuple[Path, Path, Path]:
    """A tiny BERT with random weights (every tensor distinct) as ``model.onnx`` + a tokenizer.json that
    lowercases or not; returns ``(onnx, tokenizer.json, the original folder)``."""
    from transformers import BertModel

    class Exported(BertModel):
        """BertModel taking the three inputs positionally: the exporter then names nodes ``/encoder/layer.0/…``."""

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001, ANN201
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

    src = build_tiny_checkpoint(tmp / "src", [*onnx_bert.CHECK_SENTENCES, *TEXTS], hidden_size=32, num_layers=2, num_heads=4)
    model = Exported.from_pretrained(src, add_pooling_layer=False, attn_implementation="eager").eval()
    with torch.no_grad():  # random biases and norms: an exporter that folds equal tensors folds none here
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    ids = torch.randint(5, 50, (2, 9))
    path = tmp / "model.onnx"
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(path), input_names=names,
                      output_names=["last_hidden_state"], dynamic_axes={n: {0: "batch", 1: "seq"} for n in names},
                      dynamo=False, opset_version=14)
    spec = json.loads((src / "tokenizer.json").read_text())
    spec["normalizer"]["lowercase"] = lowercase
    tok = tmp / "tokenizer.json"
    tok.write_text(json.dumps(spec, ensure_ascii=False))
    return path, tok, src


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory) -> tuple[Path, Path, Path]:
    return export_tiny(tmp_path_factory.mktemp("tiny-onnx"))


def test_converter_reproduces_onnxruntime_on_a_tiny_bert(tiny_onnx, tmp_path):
    graph, tok, src = tiny_onnx
    out = onnx_bert.convert(graph, tok, tmp_path / "hf", lowercase=True)
    config = json.loads((out / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"], config["intermediate_size"]) == (2, 32, 4, 64)
    assert config["hidden_act"] == "gelu" and config["layer_norm_eps"] == 1e-12
    assert onnx_bert.verify(graph, out) < 1e-5
    # the weights are the exported model's, not merely close: compare with the original checkpoint's shapes
    from safetensors.torch import load_file

    assert set(load_file(out / "model.safetensors")) >= {"encoder.layer.1.attention.self.query.weight", "embeddings.word_embeddings.weight"}


def test_converter_turns_lowercasing_on(tiny_onnx, tmp_path):
    from transformers import AutoTokenizer

    graph, tok, _ = tiny_onnx
    shipped = AutoTokenizer.from_pretrained(onnx_bert.convert(graph, tok, tmp_path / "as-shipped"))
    fixed = AutoTokenizer.from_pretrained(onnx_bert.convert(graph, tok, tmp_path / "fixed", lowercase=True))
    assert "[UNK]" in shipped.tokenize("我的QQ号被盗了")  # the defect of bge-small-zh's tokenizer.json
    assert fixed.tokenize("我的QQ号被盗了")[:4] == ["我", "的", "q", "##q"]


def test_verify_refuses_a_folder_that_computes_something_else(tiny_onnx, tmp_path):
    from safetensors.torch import load_file, save_file

    graph, tok, _ = tiny_onnx
    out = onnx_bert.convert(graph, tok, tmp_path / "hf", lowercase=True)
    weights = load_file(out / "model.safetensors")
    weights["encoder.layer.0.attention.self.query.weight"][0, :] += 0.5  # (a constant shift of a bias before a LayerNorm would cancel)
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(onnx_bert.ConversionError, match=r"does not compute what model.onnx computes: last hidden states differ by .* the conversion is refused"):
        onnx_bert.verify(graph, out)


def test_converter_refuses_a_graph_that_is_no_bert(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), dtype=np.float32), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="/head/MatMul")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    path = tmp_path / "not-bert.onnx"
    onnx.save(helper.make_model(graph), str(path))
    tok = tmp_path / "tokenizer.json"
    shutil.copy(build_tiny_checkpoint(tmp_path / "t", ["a"]) / "tokenizer.json", tok)
    with pytest.raises(onnx_bert.ConversionError, match=r"the graph is no BERT encoder torch exported: it lacks \['embeddings.word_embeddings.weight'"):
        onnx_bert.convert(path, tok, tmp_path / "out")


def test_pull_converts_a_cached_jar_once_and_names_resolve_to_it(tiny_onnx, tmp_path, monkeypatch):
    graph, tok, _ = tiny_onnx
    entry = pretrained.Pretrained("bge-small-zh", "g:tiny-bert:1", "model.onnx", "tokenizer.json", True, "cls", "zh", "MIT")
    monkeypatch.setitem(pretrained.CATALOGUE, "bge-small-zh", entry)  # a jar of the catalogue's layout, built here
    monkeypatch.setenv("JINGPAI_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(pretrained.PretrainedError, match=r"pretrained model 'bge-small-zh' is not installed under .*: run `jingpai models pull bge-small-zh`"):
        pretrained.resolve("bge-small-zh")
    from jingpai.jobs.document_vectors import EmbedderLoadError, load_embedder

    with pytest.raises(EmbedderLoadError, match=r"--vectors bge-small-zh: pretrained model 'bge-small-zh' is not installed under .*: run `jingpai models pull"):
        load_embedder("bge-small-zh")
    jars = tmp_path / "cache" / "models" / "jars"
    jars.mkdir(parents=True)
    with zipfile.ZipFile(jars / entry.jar, "w") as zf:
        zf.write(graph, "model.onnx")
        zf.write(tok, "tokenizer.json")
    folder = pretrained.resolve("bge-small-zh")  # converted on first use
    assert folder == tmp_path / "cache" / "models" / "bge-small-zh" and pretrained.installed("bge-small-zh")
    meta = json.loads((folder / pretrained.MARKER).read_text())
    assert meta["coordinates"] == "g:tiny-bert:1" and meta["max_abs_diff_vs_onnxruntime"] < 1e-5
    result = CliRunner().invoke(cli, ["models", "pull", "bge-small-zh"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == str(folder)
    # the name works where a folder does: a bi-encoder as the folder's pooling says, and a --base
    model = Reranker.load("bge-small-zh")
    assert model.name == "bi" and model.config.pooling == "cls"
    vectors = model.encode(["花呗怎么还款", "平安银行"])
    assert vectors.shape == (2, 32) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    embedder = load_embedder("bge-small-zh")  # `jingpai index --vectors bge-small-zh`: the same zero-shot vectors
    assert embedder.dims == 32 and np.allclose(embedder.encode(["花呗怎么还款", "平安银行"]), vectors, atol=1e-6)
    from jingpai.reranker import registry

    assert registry.create("cross", base="bge-small-zh").config.base == "bge-small-zh"
    from jingpai.jobs.demo import prepare_model
    from jingpai.jobs.demo_settings import DemoSettings

    lines: list[str] = []
    assert prepare_model(DemoSettings(model_dir=Path("bge-small-zh"), port=0, reranker_port=0), [], None, lines.append) == (folder, None)
    assert lines == [f"      using the model in {folder} (sentence-transformers bi-encoder, cls pooling)"]


def test_unknown_names_stay_paths_and_unknown_pulls_are_refused(tmp_path):
    assert pretrained.resolve(tmp_path / "mine") == tmp_path / "mine"
    with pytest.raises(pretrained.PretrainedError, match=r"unknown pretrained model 'bert-base'; expected one of bge-small-en, bge-small-zh"):
        pretrained.entry("bert-base")
    result = CliRunner().invoke(cli, ["models", "pull", "bert-base"])
    assert result.exit_code == 2 and "bge-small-zh" in result.output


REAL = pretrained.folder("bge-small-zh")


@pytest.mark.skipif(not pretrained.installed("bge-small-zh"), reason="bge-small-zh is not installed (scripts/bootstrap runs `jingpai models pull bge-small-zh`)")
def test_the_real_bge_small_zh_matches_onnxruntime_and_lowercases(tmp_path):
    from transformers import AutoTokenizer

    meta = json.loads((REAL / pretrained.MARKER).read_text())
    entry = pretrained.CATALOGUE["bge-small-zh"]
    jar = pretrained.cache_root() / "jars" / entry.jar
    with zipfile.ZipFile(jar) as zf:
        zf.extract(entry.onnx_member, tmp_path)
    assert onnx_bert.verify(tmp_path / entry.onnx_member, REAL) < 1e-4
    assert meta["max_abs_diff_vs_onnxruntime"] < 1e-4
    config = json.loads((REAL / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"], config["vocab_size"]) == (4, 512, 8, 21128)
    tokens = AutoTokenizer.from_pretrained(REAL).tokenize("我的QQ号被盗了")
    assert "[UNK]" not in tokens and "qq" in tokens
    model = Reranker.load("bge-small-zh")
    ranked = model.rank("花呗怎么还款", ["今天天气怎么样", "花呗如何还钱"])
    assert ranked[0]["index"] == 1
