"""Keywords of the text a reranker scores, stored at index time (``jingpai index --rerank-keywords``).

A keyword reranker (``kwbert``, ``use-kw``) ranks the dictionary words of each document it scores; finding them means
segmenting the document, most of such a model's host work per pair (docs/service.md). With ``--rerank-keywords`` the
indexer stores, per document, the keywords of exactly the text the gateway sends the reranker by default — the text
fields joined by newlines, cut to :data:`RERANK_CHARS` characters (``doc_text``) — with a digest of that text:

    ``jingpai.rk = {"sha1": <first 16 hex digits of its SHA-1>, "words": [best first, at most top_k]}``

and ``_meta.jingpai.rerank_keywords`` records the fields, the cut, ``top_k`` and the dictionary version. The gateway
sends a hit's words only when the digest of the text it sends equals the stored one (other rerank fields, another
``--doc-chars`` for a longer document: nothing is sent), and the reranker takes them only from its own dictionary
version. Stored keywords are therefore never used for a text they were not found in.

Example:
    >>> rerank_text({"title": "标题", "content": "正文"}, ("title", "content"), chars=512)
    '标题\\n正文'
    >>> text_digest("标题\\n正文")
    '98ad40c9df93dbf6'
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

#: the characters of each document the keywords are found in: the gateway's default ``--doc-chars``
RERANK_CHARS = 512
#: where each document's stored keywords live (not indexed: only read back with the hit)
RERANK_KEYWORDS_FIELD = "jingpai.rk"


@dataclass(frozen=True)
class RerankKeywords:
    """``_meta.jingpai.rerank_keywords``: how an index's stored rerank keywords were found.

    Attributes:
        fields: the text fields joined (in this order, empty ones left out) into the text they were found in.
        chars: that text's cut, in characters.
        top_k: keywords kept per document.
        dict_version: the version of the dictionary that ranked them.
        field: the document field holding them.
    """

    fields: tuple[str, ...]
    chars: int
    top_k: int
    dict_version: str
    field: str = RERANK_KEYWORDS_FIELD

    @classmethod
    def from_dict(cls, data: Mapping) -> RerankKeywords:
        return cls(**{**data, "fields": tuple(data["fields"])})


def rerank_text(texts: Mapping[str, str], fields: tuple[str, ...], *, chars: int) -> str:
    """The text of a document the gateway sends the reranker: its non-empty ``fields`` joined by newlines, cut to
    ``chars`` characters (:func:`jingpai.plugin.gateway.source.doc_text` for string fields)."""
    return "\n".join(texts[f] for f in fields if texts.get(f))[:chars]


def text_digest(text: str) -> str:
    """A short digest of ``text`` (16 hex digits of its SHA-1): what ties stored keywords to the text they are of."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


__all__ = ["RERANK_CHARS", "RERANK_KEYWORDS_FIELD", "RerankKeywords", "rerank_text", "text_digest"]
