"""Query DSL rewrite: widen full-text clauses with the index's dictionary-augmented fields.

Each full-text clause (``match``, ``match_phrase``, ``multi_match``, ``query_string``,
``simple_query_string``) that targets a text field of a jingpai index becomes::

    {"bool": {"should": [<the original clause>,
                         <match on the dictionary-segmented field(s)>,
                         <terms on jingpai.keywords>, <keyword-weight clause(s)>],
              "minimum_should_match": 1}}

so the rest of the query (filters, ``must_not``, function scores) keeps its meaning, documents that
share the query's dictionary keywords are recalled even when the original clause (e.g. a phrase or an
``operator: and`` match) misses them, and documents matching several forms score higher. Clauses under
``must_not`` / ``boosting.negative`` are left alone: widening them would exclude more documents.

Example:
    >>> rewrite = QueryRewriter(meta, dictionary=d, segmenter=Segmenter(d))      # doctest: +SKIP
    >>> result = rewrite({"match": {"content": {"query": "中国GDP", "operator": "and"}}})  # doctest: +SKIP
    >>> result.keywords                                                            # doctest: +SKIP
    [('中国', 2.1), ('GDP', 1.7)]
"""

from __future__ import annotations

import copy
import fnmatch
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# the registry of loaded dictionaries lived here; its name is still importable from this module
from jingpai.plugin.dictionaries import DictionaryStore

if TYPE_CHECKING:
    from jingpai.indexer.mapping import IndexMeta
    from jingpai.keyword_dict import Dictionary, Segmenter

logger = logging.getLogger(__name__)

#: Default boosts of the added clauses, defined once (QueryRewriter and GatewaySettings both use them). They are
#: measured: on AFQMC/LCQMC question retrieval (docs/RESULTS.md) the segmented and keywords clauses at 0.2
#: improve every P@k over plain BM25, while the keyword-weight clause (0: not added) and boosts of 1.0 lower them.
SEG_BOOST: float = 0.2
KEYWORD_BOOST: float = 0.2
WEIGHT_BOOST: float = 0.0

FULL_TEXT_KINDS: tuple[str, ...] = ("match", "match_phrase", "multi_match", "query_string", "simple_query_string")

# compound query → keys whose values are sub-queries that may be widened (negative contexts excluded)
_COMPOUND_CHILDREN: dict[str, tuple[str, ...]] = {
    "bool": ("must", "should", "filter"),
    "dis_max": ("queries",),
    "constant_score": ("filter",),
    "boosting": ("positive",),
    "function_score": ("query",),
    "script_score": ("query",),
}

_QS_FIELD_PREFIX = re.compile(r"(?<![\w.])[\w.*]+:(?=\S)")
_QS_SYNTAX = re.compile(r"\b(?:AND|OR|NOT)\b|[\"()+\-|!{}\[\]^~*?\\/&<>=:]")


@dataclass(frozen=True)
class FullTextClause:
    """One full-text clause found in a query: its kind, query text and the jingpai text fields it targets."""

    kind: str
    text: str
    fields: tuple[str, ...]


@dataclass
class RewriteResult:
    """What :class:`QueryRewriter` found and did."""

    query: Any
    clauses: list[FullTextClause] = field(default_factory=list)
    keywords: list[tuple[str, float]] = field(default_factory=list)
    augmented: int = 0

    @property
    def query_text(self) -> str:
        """The distinct texts of the full-text clauses, in query order, joined by a space (for reranking)."""
        seen: list[str] = []
        for clause in self.clauses:
            if clause.text not in seen:
                seen.append(clause.text)
        return " ".join(seen)


def _strip_boost(name: str) -> str:
    return name.split("^", 1)[0]


def _targets(patterns: Iterable[str] | None, text_fields: tuple[str, ...]) -> tuple[str, ...]:
    """Text fields matched by field patterns (``None``/``*``: all of them, the engine's default field)."""
    if patterns is None:
        return text_fields
    names = [_strip_boost(p) for p in patterns]
    return tuple(f for f in text_fields if any(fnmatch.fnmatchcase(f, p) for p in names))


def _clean_query_string(text: str) -> str:
    """Lucene / simple query-string syntax removed, leaving the words (keywords come from a dictionary)."""
    return " ".join(_QS_SYNTAX.sub(" ", _QS_FIELD_PREFIX.sub(" ", text)).split())


def parse_full_text(kind: str, body: Any, text_fields: tuple[str, ...]) -> FullTextClause | None:
    """The :class:`FullTextClause` of one clause body, or ``None`` when it targets no text field."""
    if not isinstance(body, dict):
        return None
    if kind in ("match", "match_phrase"):
        names = [k for k in body if k not in ("boost", "_name")]
        if len(names) != 1:
            return None
        value = body[names[0]]
        text = value.get("query") if isinstance(value, dict) else value
        targets = _targets([names[0]], text_fields)
    else:
        text = body.get("query")
        if kind == "multi_match":
            patterns = body.get("fields")
        else:
            patterns = body.get("fields") or ([body["default_field"]] if body.get("default_field") else None)
        if isinstance(patterns, str):
            patterns = [patterns]
        targets = _targets(patterns, text_fields)
        if isinstance(text, str) and kind != "multi_match":
            text = _clean_query_string(text)
    if not isinstance(text, str) or not text.strip() or not targets:
        return None
    return FullTextClause(kind=kind, text=text.strip(), fields=targets)


def find_full_text(query: Any, text_fields: tuple[str, ...]) -> list[FullTextClause]:
    """All full-text clauses on ``text_fields`` in positive contexts of a query, in document order."""
    found: list[FullTextClause] = []
    _walk(query, text_fields, lambda clause, kind, body: found.append(clause) or None)
    return found


def _walk(node: Any, text_fields: tuple[str, ...], visit) -> Any:
    """Depth-first over positive query contexts; ``visit(clause, kind, body)`` may return a replacement."""
    if not isinstance(node, dict) or len(node) != 1:
        return node
    ((kind, body),) = node.items()
    if kind in FULL_TEXT_KINDS:
        clause = parse_full_text(kind, body, text_fields)
        if clause is None:
            return node
        replacement = visit(clause, kind, body)
        return replacement if replacement is not None else node
    children = _COMPOUND_CHILDREN.get(kind)
    if not children or not isinstance(body, dict):
        return node
    new_body = dict(body)
    for key in children:
        child = body.get(key)
        if isinstance(child, list):
            new_body[key] = [_walk(c, text_fields, visit) for c in child]
        elif isinstance(child, dict):
            new_body[key] = _walk(child, text_fields, visit)
    return {kind: new_body}


def _encode_word(word: str, encoding: str) -> str:
    # mirrors jingpai.indexer.mapping.encode_weights, which wrote the document side
    word = word.replace(" ", "_")
    return word.replace(".", "_") if encoding == "rank_features" else word


class QueryRewriter:
    """Widens the full-text clauses of queries against one jingpai index.

    Args:
        meta: the index's field roles (:func:`jingpai.indexer.mapping.read_meta`).
        dictionary: the dictionary the index was built with (``None``: segmentation-only augmentation,
            for indices built without a dictionary).
        segmenter: segmenter of that dictionary.
        keywords_top_k: keywords taken per clause.
        seg_boost: boost of the segmented-field clause (default :data:`SEG_BOOST`).
        keyword_boost: boost of the keywords-field clause (default :data:`KEYWORD_BOOST`).
        weight_boost: boost of the keyword-weight clause(s) (0: not added; default :data:`WEIGHT_BOOST`).
    """

    def __init__(
        self,
        meta: IndexMeta,
        *,
        dictionary: Dictionary | None,
        segmenter: Segmenter,
        keywords_top_k: int = 10,
        seg_boost: float = SEG_BOOST,
        keyword_boost: float = KEYWORD_BOOST,
        weight_boost: float = WEIGHT_BOOST,
    ) -> None:
        self.meta = meta
        self.dictionary = dictionary
        self.segmenter = segmenter
        self.keywords_top_k = keywords_top_k
        self.extractor = None
        if dictionary is not None:
            # imported here: keyword_dict loads numpy and jieba, which a gateway without dictionaries never needs
            from jingpai.keyword_dict.keywords import KeywordExtractor

            self.extractor = KeywordExtractor(dictionary, top_k=keywords_top_k, segmenter=segmenter)
        self.seg_boost = seg_boost
        self.keyword_boost = keyword_boost
        self.weight_boost = weight_boost

    def keywords(self, text: str) -> list[tuple[str, float]]:
        """The query's dictionary keywords with their weights, best first (none without a dictionary)."""
        return self.extractor.weighted(text) if self.extractor is not None else []

    def augmentation_clauses(self, clause: FullTextClause) -> tuple[list[dict], list[tuple[str, float]]]:
        """The should-clauses added next to one full-text clause, and the keywords they use."""
        added: list[dict] = []
        seg_fields = [self.meta.seg_fields[f] for f in clause.fields if f in self.meta.seg_fields]
        seg_text = " ".join(t for t in self.segmenter.cut(clause.text) if t.strip())
        if seg_fields and seg_text:
            added.append({"multi_match": {"query": seg_text, "fields": seg_fields, "boost": self.seg_boost}})
        keywords = self.keywords(clause.text)
        if keywords:
            words = [w for w, _ in keywords]
            added.append({"terms": {self.meta.keywords_field: words, "boost": self.keyword_boost}})
            if self.weight_boost > 0 and self.meta.weight_encoding == "rank_features":
                top = max(w for _, w in keywords) or 1.0
                added.extend(
                    {
                        "rank_feature": {
                            "field": f"{self.meta.weights_field}.{_encode_word(word, 'rank_features')}",
                            "boost": self.weight_boost * max(weight / top, 1e-3),
                        }
                    }
                    for word, weight in keywords
                )
            elif self.weight_boost > 0:
                added.append(
                    {
                        "match": {
                            self.meta.weights_field: {
                                "query": " ".join(_encode_word(w, "term_frequency") for w in words),
                                "boost": self.weight_boost,
                            }
                        }
                    }
                )
        return added, keywords

    def __call__(self, query: Any) -> RewriteResult:
        """Rewrite ``query`` (not modified in place); the result lists the clauses found and keywords used."""
        result = RewriteResult(query=query)
        seen_keywords: dict[str, float] = {}

        def visit(clause: FullTextClause, kind: str, body: Any) -> dict | None:
            result.clauses.append(clause)
            added, keywords = self.augmentation_clauses(clause)
            for word, weight in keywords:
                seen_keywords[word] = max(weight, seen_keywords.get(word, 0.0))
            if not added:
                return None
            result.augmented += 1
            original = {kind: copy.deepcopy(body)}
            return {"bool": {"should": [original, *added], "minimum_should_match": 1}}

        result.query = _walk(query, self.meta.text_fields, visit)
        result.keywords = sorted(seen_keywords.items(), key=lambda kv: -kv[1])
        return result


__all__ = [
    "FULL_TEXT_KINDS",
    "DictionaryStore",
    "FullTextClause",
    "QueryRewriter",
    "RewriteResult",
    "find_full_text",
    "parse_full_text",
]
