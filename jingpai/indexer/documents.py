"""Source records → engine documents: the text fields checked, segmented and given their keywords.

A :class:`DocumentBuilder` turns the fields of one record into the JSON document the bulk request
carries, with the ``jingpai`` fields :mod:`jingpai.indexer.mapping` owns (segmented text, keywords,
keyword weights, and with ``--vectors`` the document's vector), or raises :class:`Rejection` with the reason
the record is quarantined for (no text field, a reserved or invalid field, a bad id, invalid Unicode, a
document over ``max_doc_bytes``, with vectors: no text to embed).
"""

from __future__ import annotations

import hashlib
import json
from itertools import chain
from typing import TYPE_CHECKING

import orjson

from jingpai.errors import UserError
from jingpai.indexer.mapping import META_KEY, IndexMeta, encode_weights
from jingpai.indexer.rerank_keywords import rerank_text, text_digest

if TYPE_CHECKING:
    from jingpai.indexer.settings import IndexSettings
    from jingpai.keyword_dict import Dictionary, KeywordExtractor, Segmenter


class Rejection(UserError, ValueError):
    """A record that cannot become a document; the message is the quarantine reason.

    Args:
        reason: the quarantine reason.
        kind: the reason without its specifics, for grouping (default: the text before the first ``:``).
    """

    def __init__(self, reason: str, *, kind: str | None = None) -> None:
        super().__init__(reason)
        self.kind = kind or reason.split(":")[0]


class DocumentBuilder:
    """Turns source records into engine documents with the fields :mod:`jingpai.indexer.mapping` owns."""

    def __init__(
        self,
        settings: IndexSettings,
        meta: IndexMeta,
        *,
        dictionary: Dictionary | None = None,
        segmenter: Segmenter,
    ) -> None:
        self.settings = settings
        self.meta = meta
        self.dictionary = dictionary
        self.segmenter = segmenter
        self.keywords = None if dictionary is None else _extractor(dictionary, settings.keywords_top_k, segmenter)

    def doc_id(self, fields: dict) -> str:
        id_field = self.settings.id_field
        if id_field is None:
            canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
            return hashlib.sha1(canonical.encode("utf-8")).hexdigest()
        value = fields.get(id_field)
        if value is None or value == "":
            raise Rejection(f"missing id field {id_field!r}")
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise Rejection(f"id field {id_field!r} must be a string or integer, got {type(value).__name__}")
        return str(value)

    def doc_id_or_none(self, fields: dict) -> str | None:
        """:meth:`doc_id`, or ``None`` for a record without a valid id (it is quarantined when its document is built)."""
        try:
            return self.doc_id(fields)
        except Rejection:
            return None

    def build(self, fields: dict) -> tuple[str, dict]:
        """``(id, document)`` or :class:`Rejection`."""
        doc_id, document, _ = self._build(fields)
        return doc_id, document

    def build_json(self, fields: dict, *, record_bytes: int | None = None, vector: list[float] | None = None) -> tuple[str, str]:
        """``(id, document as JSON)`` or :class:`Rejection`: :meth:`build` serialised once, the form the
        size limit is checked on and the bulk request carries (the clients pass JSON strings through).
        ``record_bytes``: the record's size in its file, quoted when the document is over the limit.
        ``vector``: the document's unit vector (:class:`~jingpai.indexer.vectors.DocumentVectors`), required
        when the index has vectors (``meta.vector_field``): a record without one is rejected."""
        doc_id, _, source = self._build(fields, record_bytes, vector)
        return doc_id, source

    def _build(self, fields: dict, record_bytes: int | None = None, vector: list[float] | None = None) -> tuple[str, dict, str]:
        try:
            return self._augment(fields, record_bytes, vector)
        except UnicodeEncodeError as exc:
            # JSON escapes can smuggle in lone surrogates ("\ud800"), which neither the segmenter nor
            # the engines accept as text
            raise _bad_unicode(fields) from exc

    def _augment(self, fields: dict, record_bytes: int | None, vector: list[float] | None) -> tuple[str, dict, str]:
        if META_KEY in fields:
            raise Rejection(f"field {META_KEY!r} is reserved for jingpai's own fields")
        texts: dict[str, str] = {}
        for name in self.settings.text_fields:
            value = fields.get(name)
            if value is None or value == "":
                continue
            if not isinstance(value, str):
                raise Rejection(f"text field {name!r} must be a string, got {type(value).__name__}")
            texts[name] = value
        if not texts:
            raise Rejection(f"missing text field: none of {', '.join(self.settings.text_fields)} is present and non-empty")
        doc_id = self.doc_id(fields)
        if self.meta.vector_field is not None and vector is None:
            raise self._no_vector(texts)
        tokens = {name: self.segmenter.cut(text) for name, text in texts.items()}
        extra: dict = {"seg": {name: " ".join(toks) for name, toks in tokens.items()}}
        if self.keywords is not None:
            # the segmentation just made is reused: cutting the text again would double the CPU cost
            weights = dict(self.keywords.weighted_tokens(chain.from_iterable(tokens.values())))
            extra["keywords"] = list(weights)
            encoded = encode_weights(weights, self.meta.weight_encoding)
            if encoded:
                extra["kw"] = encoded
        else:
            extra["keywords"] = []
        if self.meta.rerank_keywords is not None and self.keywords is not None:
            extra["rk"] = self._rerank_keywords(texts, tokens)
        document = {**fields, META_KEY: extra}
        source = json.dumps(document, ensure_ascii=False)
        if vector is not None:
            # a 512-d vector is most of the document and ~98 % of json.dumps' time for it (~250 µs, as long as the
            # segmentation); orjson writes the same shortest round-trip floats 15x faster. jingpai's object is the
            # document's last member, so the source ends in "}}" and the vector goes in as that object's last member
            source = source[:-2] + ', "vector": ' + orjson.dumps(vector).decode() + "}}"
            extra["vector"] = vector
        size = len(source.encode("utf-8"))
        if size > self.settings.max_doc_bytes:
            record = record_bytes if record_bytes is not None else len(json.dumps(fields, ensure_ascii=False).encode("utf-8"))
            raise Rejection(
                f"document is {size} bytes with jingpai's fields (the record alone is {record} bytes), over the limit of "
                f"{self.settings.max_doc_bytes} (--max-doc-bytes)",
                kind="document over --max-doc-bytes",
            )
        return doc_id, document, source


    def _rerank_keywords(self, texts: dict[str, str], tokens: dict[str, list[str]]) -> dict:
        """``jingpai.rk``: the keywords of the text the gateway sends the reranker (:mod:`~jingpai.indexer.rerank_keywords`)."""
        spec = self.meta.rerank_keywords
        assert spec is not None and self.keywords is not None
        text = rerank_text(texts, spec.fields, chars=spec.chars)
        present = [f for f in spec.fields if texts.get(f)]
        if len(present) == 1 and len(texts[present[0]]) <= spec.chars:
            # the whole of one field: its segmentation is already made (the extractor's own cut differs only in
            # whitespace tokens, which are never dictionary words)
            weighted = self.keywords.weighted_tokens(tokens[present[0]])
        else:
            weighted = self.keywords.weighted(text)
        return {"sha1": text_digest(text), "words": [word for word, _ in weighted]}

    def _no_vector(self, texts: dict[str, str]) -> Rejection:
        names = ", ".join(texts)
        if not any(text.strip() for text in texts.values()):
            return Rejection(f"no text to embed: the text field(s) {names} hold only whitespace", kind="no text to embed")
        return Rejection(
            f"no vector: model {self.meta.vector_model} gave a zero vector for the text of {names}", kind="no vector",
        )


def _extractor(dictionary: Dictionary, top_k: int, segmenter: Segmenter) -> KeywordExtractor:
    from jingpai.keyword_dict import KeywordExtractor  # imported when needed: it loads the segmenter's backend

    return KeywordExtractor(dictionary, top_k=top_k, segmenter=segmenter)


def _bad_unicode(fields: dict) -> Rejection:
    for name, value in fields.items():
        text = json.dumps(value, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return Rejection(f"field {name!r} is not valid Unicode text: lone surrogate {text[exc.start:exc.end]!r}")
    return Rejection("document is not valid Unicode text: lone surrogate")


__all__ = ["DocumentBuilder", "Rejection"]
