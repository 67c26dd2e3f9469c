"""The demo model's data: pseudo-relevance pairs made from the indexed corpus and the keyword dictionary.

- **query**: the entity its title starts with (``360公司``, ``Xbox 360``, ``风光360``), or the document's
  two top dictionary keywords (``浏览器 安全``);
- **positive**: that document's title + lead;
- **hard negatives**: documents of *other* categories that share one of the query's keywords — the
  「360公司」 vs Xbox 360 vs 风光360 situation — topped up with random documents of other categories.

A share of the documents (``holdout_fraction``) is held out of training *and* model selection: their
queries (:attr:`PseudoSplits.holdout`) measure the demo's reranking against the engine order
(:func:`retrieval_queries`, ``scripts/demo_eval.py``). :class:`DemoRecipe` holds the options of the
pairs and of the training (:mod:`jingpai.jobs.demo_model`).

Example:
    >>> splits = pseudo_splits(records, dictionary)            # doctest: +SKIP
    >>> write_pairs(splits.train, "demo_train.tsv")            # doctest: +SKIP
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from jingpai.errors import UserError

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary
    from jingpai.plugin.tune import LabelledQuery
    from jingpai.reranker.data import LabeledPair


#: peak learning rate per architecture when :attr:`DemoRecipe.lr` is not set
DEFAULT_LR: dict[str, float] = {"use-bi": 5e-5, "cross": 1e-3, "hcan": 1e-3}


class DemoModelError(UserError, RuntimeError):
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


class _Doc(NamedTuple):
    """A usable corpus document: what its pairs are made of."""

    category: str
    text: str
    keywords: list[str]
    head: str
    head_words: list[str]
    docid: str


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
    from jingpai.reranker.data import LabeledPair

    recipe = recipe or DemoRecipe()
    rng = random.Random(recipe.seed)
    records = list(records)
    if len(records) > recipe.max_docs:
        records = rng.sample(records, recipe.max_docs)
    docs = _documents(records, dictionary, recipe)
    order = list(range(len(docs)))
    rng.shuffle(order)
    n_dev = max(2, int(len(docs) * recipe.dev_fraction))
    n_holdout = int(len(docs) * recipe.holdout_fraction)
    dev_docs = set(order[:n_dev])
    holdout_docs = set(order[n_dev : n_dev + n_holdout])
    by_keyword: dict[str, list[int]] = defaultdict(list)
    for i, doc in enumerate(docs):
        for word in set(doc.keywords) | set(doc.head_words):
            by_keyword[word].append(i)
    splits = PseudoSplits([], [], [])
    for i, doc in enumerate(docs):
        held_out = i in holdout_docs
        target = splits.holdout if held_out else splits.dev if i in dev_docs else splits.train

        def usable(j: int, category: str = doc.category, held_out: bool = held_out) -> bool:
            # a held-out document must not reach training even as a negative
            return docs[j].category != category and (held_out or j not in holdout_docs)

        for n in range(recipe.queries_per_doc):
            query, words = _query(doc, n, rng)
            qid = f"d{i}q{n}"
            negatives = _negatives(len(docs), words, by_keyword, usable, rng, recipe.negatives_per_query)
            target.append(LabeledPair(query=query, document=doc.text, label=1.0, qid=qid, docid=doc.docid))
            target.extend(LabeledPair(query=query, document=docs[j].text, label=0.0, qid=qid, docid=docs[j].docid) for j in negatives)
    return splits


def _documents(records: Sequence[dict], dictionary: Dictionary, recipe: DemoRecipe) -> list[_Doc]:
    """The records with a text and at least two dictionary keywords (``DemoModelError`` when too few)."""
    from jingpai.keyword_dict import KeywordExtractor, Segmenter

    segmenter = Segmenter(dictionary)
    extractor = KeywordExtractor(dictionary, top_k=recipe.keywords_top_k, segmenter=segmenter)
    docs: list[_Doc] = []
    for record in records:
        text = doc_text(record, recipe.lead_chars)
        if not text:
            continue
        title = str(record.get("title") or "")
        full = f"{title}\n{record.get('content') or ''}"
        keywords = extractor.words(full)
        if len(keywords) >= 2:
            head, head_words = title_head(title, segmenter)
            docid = str(record["id"]) if record.get("id") not in (None, "") else f"doc{len(docs)}"
            docs.append(_Doc(str(record.get("category") or ""), text, keywords, head, head_words, docid))
    if len(docs) < 10:
        raise DemoModelError(f"only {len(docs)} documents have a title/content and two dictionary keywords; need at least 10")
    if len({d.category for d in docs}) < 2:
        raise DemoModelError("the corpus has a single category: hard negatives need documents of other categories")
    return docs


def _query(doc: _Doc, n: int, rng: random.Random) -> tuple[str, list[str]]:
    """The ``n``-th pseudo query of ``doc`` and its words."""
    if n == 0 and doc.head:
        # the entity a title starts with, as users type it: 「360公司」, 「Xbox 360」, 「风光360」
        return doc.head, doc.head_words
    # the two best keywords, or the best with a random other one
    second = doc.keywords[1] if n <= 1 else rng.choice(doc.keywords[1:])
    words = [doc.keywords[0], second]
    return " ".join(words), words


def _negatives(
    n_docs: int, words: list[str], by_keyword: dict[str, list[int]], usable: Callable[[int], bool], rng: random.Random, wanted: int
) -> list[int]:
    """Up to ``wanted`` negative documents: usable ones sharing a query word first, then random usable ones."""
    hard = sorted({j for w in words for j in by_keyword[w] if usable(j)})
    rng.shuffle(hard)
    negatives = hard[:wanted]
    tries = 0
    while len(negatives) < wanted and tries < 50:
        j = rng.randrange(n_docs)
        tries += 1
        if usable(j) and j not in negatives:
            negatives.append(j)
    return negatives


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


__all__ = [
    "DEFAULT_LR", "DemoModelError", "DemoRecipe", "PseudoSplits", "doc_text", "pseudo_pairs", "pseudo_splits", "retrieval_queries",
    "title_head", "write_pairs",
]
