"""``jingpai serve``: the real CLI behind real uvicorn on a free loopback port, and its error exits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine.harness import free_port
from jingpai.reranker import registry

DOCS = ["影响中国GDP增长的因素有哪些", "今天天气怎么样"]


@pytest.fixture(scope="module")
def model_dir(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = registry.create("cross", base=str(tiny_bert_dir), max_length=64, device="cpu")
    return model.save(tmp_path_factory.mktemp("cli-served") / "tiny-cross")


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m jingpai serve`` in a subprocess, configured partly through JINGPAI_SERVE_* env vars."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve-log") / "serve.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "JINGPAI_SERVE_MAX_DOCS": "3", "JINGPAI_SERVE_MODEL_NAME": "zh-tiny",
           "JINGPAI_SERVE_EXPOSE_MODEL_DIR": "1"}
    cmd = [sys.executable, "-m", "jingpai", "serve", "--model", str(model_dir), "--port", str(port),
           "--device", "cpu", "--dtype", "fp32", "--threads", "1", "--log-level", "warning"]
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # importing torch + transformers on a busy 2-core box is slow
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jingpai serve exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jingpai serve did not answer /health within 180 s:\n{log.read_text()}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_serve_answers_over_real_http(server: str, model_dir: Path) -> None:
    from jingpai.reranker.base import Reranker

    expected = Reranker.load(model_dir, device="cpu").predict([("中国GDP", d) for d in DOCS])
    r = httpx.post(f"{server}/rerank", json={"query": "中国GDP", "texts": DOCS, "raw_scores": True}, timeout=30)
    assert r.status_code == 200, r.text
    assert {rec["index"]: rec["score"] for rec in r.json()} == pytest.approx(dict(enumerate(expected.tolist())), abs=1e-5)
    info = httpx.get(f"{server}/info", timeout=10).json()
    assert info["model_name"] == "zh-tiny" and info["model_dir"] == str(model_dir)
    assert info["device"] == "cpu" and info["dtype"] == "fp32" and info["limits"]["max_docs"] == 3


def test_serve_takes_limits_from_the_environment(server: str) -> None:
    r = httpx.post(f"{server}/v1/rerank", json={"query": "q", "documents": ["a", "b", "c", "d"]}, timeout=30)
    assert r.status_code == 413
    assert r.json()["message"] == "documents holds 4 documents; the limit is max_docs=3 (--max-docs / JINGPAI_SERVE_MAX_DOCS)"
    metrics = httpx.get(f"{server}/metrics", timeout=10).text
    assert 'jingpai_rerank_requests_total{route="/v1/rerank",status="413"} 1.0' in metrics


def test_serve_requires_a_model() -> None:
    result = CliRunner().invoke(cli, ["serve"], env={"JINGPAI_SERVE_MODEL": None})
    assert result.exit_code == 2
    assert "Missing option '--model'" in result.output


def test_serve_rejects_a_folder_that_is_not_a_saved_model(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--model", str(tmp_path)])
    assert result.exit_code == 1
    assert f"Error: {tmp_path} is not a saved jingpai model: jingpai_model.json is missing" in result.output


def test_serve_rejects_max_length_beyond_the_model(model_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--model", str(model_dir), "--device", "cpu", "--max-length", "1024"])
    assert result.exit_code == 1
    assert "Error: max_length=1024 exceeds the model's max_position_embeddings=256" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_serve_refuses_cuda_without_a_gpu(model_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--model", str(model_dir), "--device", "cuda"])
    assert result.exit_code == 1
    assert "Error: device='cuda' was requested but torch.cuda.is_available() is False; use --device cpu or auto" in result.output


def test_serve_rejects_a_bad_dtype_from_the_environment(model_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--model", str(model_dir)], env={"JINGPAI_SERVE_DTYPE": "int4"})
    assert result.exit_code == 2
    assert "Invalid value for '--dtype'" in result.output and "'int4' is not one of 'auto', 'bf16', 'fp16', 'fp32', 'int8'" in result.output
