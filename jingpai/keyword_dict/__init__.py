"""Domain keyword dictionaries: PMI/entropy new-word discovery, diff-idf per domain, fusion, segmentation.

Example:
    >>> from jingpai.keyword_dict import Dictionary, extract_keywords
    >>> d = Dictionary.from_scores({"中国": {"politics": 1.2}, "GDP": {"finance": 3.0}})
    >>> [w for w, _ in extract_keywords("哪些因素会影响中国的GDP", d)]
    ['GDP', '中国']
"""

from jingpai.keyword_dict.build import BuildError, BuildSettings, build_dictionary
from jingpai.keyword_dict.dictionary import Dictionary, DictionaryError, Entry
from jingpai.keyword_dict.discovery import Candidate, DiscoverySettings, discover
from jingpai.keyword_dict.keywords import KeywordExtractor
from jingpai.keyword_dict.segment import Segmenter, extract_keywords, keyword_spans, keywords_from_tokens

__all__ = [
    "BuildError",
    "BuildSettings",
    "Candidate",
    "Dictionary",
    "DictionaryError",
    "DiscoverySettings",
    "Entry",
    "KeywordExtractor",
    "Segmenter",
    "build_dictionary",
    "discover",
    "extract_keywords",
    "keyword_spans",
    "keywords_from_tokens",
]
