"""The demo's reranker: a tiny ``cross`` model trained on pseudo-relevance pairs of the indexed corpus.

No pretrained checkpoint can be downloaded, so the demo builds a small random BERT whose character
vocabulary covers the corpus (:func:`jingpai.reranker.tiny.build_tiny_checkpoint`) and trains it with
the project's training loop (:func:`jingpai.reranker.train.train`) on pairs made from the corpus and the
keyword dictionary:

- **query**: a document's top dictionary keywords (two of them, e.g. ``360 安全``);
- **positive**: that document's title + lead;
- **hard negatives**: documents of *other* categories that share one of the query's keywords — the
  「360公司」 vs Xbox 360 vs 风光360 situation — topped up with random documents of other categories.

It runs within a wall-clock budget (the number of optimizer steps is set from a timed calibration
batch), so the first ``jingpai demo`` on 2 CPU cores finishes training in a few minutes; the result is
cached. The same pairs can be written with :func:`write_pairs` and trained with ``jingpai train`` (see
docs/demo.md for the command line).

Example:
    >>> summary = train_demo_model(records, dictionary, "cache/demo/model")   # doctest: +SKIP
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary
    from jingpai.reranker.data import LabeledPair

logger = logging.getLogger(__name__)

#: bump when the recipe changes, so cached demo models are retrained
RECIPE = "demo-cross-1"


class DemoModelError(RuntimeError):
    """The demo model cannot be trained (too few usable documents, bad records)."""


@dataclass(frozen=True)
class DemoRecipe:
    """How the demo model is made.

    Args:
        budget_s: wall-clock budget of the optimizer steps (calibrated on the machine).
        threads: torch threads while training (``None``: torch's default). One thread by default: on a
            busy 2-core machine more threads oversubscribe the cores and a step gets many times slower.
        queries_per_doc: pseudo queries made from each document.
        negatives_per_query: negatives per query (hard ones first, then random).
        keywords_top_k: keywords extracted per document to form queries from.
        lead_chars: characters of content after the title in each document text.
        max_docs: documents used at most (a seeded sample of larger corpora).
        dev_fraction: share of documents whose queries form the dev set (model selection, early stop).
        hidden_size, num_layers, num_heads, intermediate_size: tiny BERT sizes.
        max_length: tokens per (query, document) pair.
        batch_size: pairs per step.
        lr: peak learning rate (random init needs a larger one than fine-tuning).
        seed: data sampling, weight init and shuffling.
    """

    architecture: Literal["cross", "hcan"] = "cross"
    budget_s: float = 150.0
    threads: int | None = 1
    queries_per_doc: int = 2
    negatives_per_query: int = 3
    keywords_top_k: int = 6
    lead_chars: int = 160
    max_docs: int = 2000
    dev_fraction: float = 0.05
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_length: int = 64
    batch_size: int = 32
    lr: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.budget_s <= 0:
            raise ValueError(f"budget_s must be > 0, got {self.budget_s!r}")
        for name in ("queries_per_doc", "negatives_per_query", "keywords_top_k", "lead_chars", "max_docs", "batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if not 0.0 < self.dev_fraction < 0.5:
            raise ValueError(f"dev_fraction must be in (0, 0.5), got {self.dev_fraction!r}")


def doc_text(record: dict, lead_chars: int) -> str:
    """Title + the start of the content: what the gateway sends the reranker for a hit."""
    title = str(record.get("title") or "").strip()
    content = " ".join(str(record.get("content") or "").split())[:lead_chars]
    return f"{title}\n{content}" if title else content


def pseudo_pairs(
    records: Sequence[dict], dictionary: Dictionary, recipe: DemoRecipe | None = None
) -> tuple[list[LabeledPair], list[LabeledPair]]:
    """``(train, dev)`` labelled pairs made from the corpus and the dictionary (see the module docstring).

    Each query has one positive (label 1) and up to ``negatives_per_query`` negatives (label 0), all
    sharing one ``qid``, so dev metrics (MAP) rank the positive among its negatives.

    Raises:
        DemoModelError: fewer than 10 documents with a title/content and two dictionary keywords, or
            only one category.
    """
    from jingpai.keyword_dict import Segmenter, extract_keywords
    from jingpai.reranker.data import LabeledPair

    recipe = recipe or DemoRecipe()
    rng = random.Random(recipe.seed)
    records = list(records)
    if len(records) > recipe.max_docs:
        records = rng.sample(records, recipe.max_docs)
    segmenter = Segmenter(dictionary)
    docs: list[tuple[str, str, list[str]]] = []  # (category, text, keywords)
    for record in records:
        text = doc_text(record, recipe.lead_chars)
        if not text:
            continue
        full = f"{record.get('title') or ''}\n{record.get('content') or ''}"
        keywords = [w for w, _ in extract_keywords(full, dictionary, top_k=recipe.keywords_top_k, segmenter=segmenter)]
        if len(keywords) >= 2:
            docs.append((str(record.get("category") or ""), text, keywords))
    if len(docs) < 10:
        raise DemoModelError(f"only {len(docs)} documents have a title/content and two dictionary keywords; need at least 10")
    if len({cat for cat, _, _ in docs}) < 2:
        raise DemoModelError("the corpus has a single category: hard negatives need documents of other categories")
    by_keyword: dict[str, list[int]] = defaultdict(list)
    for i, (_, _, keywords) in enumerate(docs):
        for word in keywords:
            by_keyword[word].append(i)
    order = list(range(len(docs)))
    rng.shuffle(order)
    dev_docs = set(order[: max(2, int(len(docs) * recipe.dev_fraction))])
    train_pairs: list[LabeledPair] = []
    dev_pairs: list[LabeledPair] = []
    for i, (category, text, keywords) in enumerate(docs):
        for n in range(recipe.queries_per_doc):
            # the first query is the two best keywords; later ones pair the best with a random other one
            second = keywords[1] if n == 0 else rng.choice(keywords[1:])
            words = [keywords[0], second]
            query = " ".join(words)
            qid = f"d{i}q{n}"
            hard = sorted({j for w in words for j in by_keyword[w] if docs[j][0] != category})
            rng.shuffle(hard)
            negatives = hard[: recipe.negatives_per_query]
            tries = 0
            while len(negatives) < recipe.negatives_per_query and tries < 50:
                j = rng.randrange(len(docs))
                tries += 1
                if docs[j][0] != category and j not in negatives:
                    negatives.append(j)
            target = dev_pairs if i in dev_docs else train_pairs
            target.append(LabeledPair(query=query, document=text, label=1.0, qid=qid, docid=f"doc{i}"))
            target.extend(LabeledPair(query=query, document=docs[j][1], label=0.0, qid=qid, docid=f"doc{j}") for j in negatives)
    return train_pairs, dev_pairs


def write_pairs(pairs: Sequence[LabeledPair], path: str | Path) -> Path:
    """Write pairs as ``query<TAB>document<TAB>label`` (the ``pairs`` format ``jingpai train`` reads)."""
    from jingpai.reranker.data import write_pairs as write

    return write(pairs, path)


def _calibrated_steps(model, pairs: Sequence[LabeledPair], recipe: DemoRecipe) -> int:
    """Optimizer steps that fit the budget, from the time of a few real forward/backward passes."""
    import torch

    sample = list(pairs[: recipe.batch_size])
    batch = model.to_device(model.featurize([(p.query, p.document) for p in sample]))
    labels = torch.tensor([p.label for p in sample], dtype=torch.float32)
    model.net.train()
    model.loss(batch, labels).backward()  # warm-up: lazy initialisation is not a step's cost
    started = time.perf_counter()
    rounds = 3
    for _ in range(rounds):
        model.loss(batch, labels).backward()
    model.net.zero_grad(set_to_none=True)
    per_step = (time.perf_counter() - started) / rounds
    # keep a quarter of the budget for evaluations, saving and the slower longest batches
    return max(20, int(recipe.budget_s * 0.75 / max(per_step, 1e-4)))


def train_demo_model(records: Sequence[dict], dictionary: Dictionary, out_dir: str | Path, *, recipe: DemoRecipe | None = None) -> str:
    """Train the demo ``cross`` model into ``out_dir`` and return a one-line summary.

    Raises:
        DemoModelError: see :func:`pseudo_pairs`.
        jingpai.reranker.train.TrainingError: the training loop failed.
    """
    import torch

    recipe = recipe or DemoRecipe()
    previous_threads = torch.get_num_threads()
    if recipe.threads:
        torch.set_num_threads(recipe.threads)
    try:
        return _train(records, dictionary, Path(out_dir), recipe)
    finally:
        torch.set_num_threads(previous_threads)


def _train(records: Sequence[dict], dictionary: Dictionary, out: Path, recipe: DemoRecipe) -> str:
    from jingpai.reranker import registry
    from jingpai.reranker.tiny import build_tiny_checkpoint
    from jingpai.reranker.train import TrainSettings, train

    started = time.perf_counter()
    train_pairs, dev_pairs = pseudo_pairs(records, dictionary, recipe)
    partial = out.with_name(out.name + ".partial")
    with tempfile.TemporaryDirectory(prefix="jingpai-demo-base-") as tmp:
        texts = [p.document for p in train_pairs + dev_pairs] + [p.query for p in train_pairs + dev_pairs]
        if recipe.architecture == "hcan":
            from jingpai.reranker.models.hcan import HcanConfig, HcanReranker

            config = HcanConfig(
                encoder="deep", num_layers=2, filters=recipe.hidden_size, hidden=recipe.hidden_size, mlp_hidden=recipe.hidden_size,
                embedding_dim=recipe.hidden_size, max_query_words=8, max_doc_words=recipe.max_length, seed=recipe.seed,
            )
            model = HcanReranker.build(list(dict.fromkeys(texts)), config, device="cpu")
        else:
            base = build_tiny_checkpoint(
                tmp, texts, hidden_size=recipe.hidden_size, num_layers=recipe.num_layers, num_heads=recipe.num_heads,
                intermediate_size=recipe.intermediate_size, max_position=max(128, recipe.max_length), seed=recipe.seed,
            )
            model = registry.create("cross", base=str(base), max_length=recipe.max_length, device="cpu")
        steps = _calibrated_steps(model, train_pairs, recipe)
        per_epoch = max(1, -(-len(train_pairs) // recipe.batch_size))
        settings = TrainSettings(
            epochs=max(1, -(-steps // per_epoch)),
            batch_size=recipe.batch_size,
            lr=recipe.lr,
            warmup_ratio=0.05,
            seed=recipe.seed,
            max_steps=steps,
            eval_every=max(50, steps // 6),
            metric="MAP",
            patience=3,
            progress=False,
        )
        result = train(model, train_pairs, dev_pairs, settings, out_dir=partial)
    result.model.keyword_dict_version = dictionary.version
    result.model.save(partial)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    partial.replace(out)
    summary = (
        f"trained the demo {recipe.architecture} model in {time.perf_counter() - started:.0f} s: {len(train_pairs)} train / {len(dev_pairs)} dev pairs, "
        f"{result.steps} steps, dev MAP {result.best_metric:.3f} (step {result.best_step}) → {out}"
    )
    logger.info(summary)
    return summary


__all__ = ["RECIPE", "DemoModelError", "DemoRecipe", "doc_text", "pseudo_pairs", "train_demo_model", "write_pairs"]
