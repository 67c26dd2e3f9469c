"""Domain keyword dictionaries: PMI/entropy new-word discovery, diff-idf per domain, fusion, segmentation.

Example:
    >>> from jingpai.keyword_dict import Dictionary, extract_keywords
    >>> d = Dictionary.from_scores({"中国": {"politics": 1.2}, "GDP": {"finance": 3.0}})
    >>> [w for w, _ in extract_keywords("哪些因素会影响中国的GDP", d)]
    ['GDP', '中国']
"""

from jingpai.lazy import lazy_exports

#: public name -> module that defines it; imported on first use, so that reading the settings (every
#: ``jingpai … --help``) does not import numpy and jieba
_EXPORTS = {
    "BuildError": "build", "build_dictionary": "build",
    "BuildSettings": "settings", "DiscoverySettings": "settings",
    "Dictionary": "dictionary", "DictionaryError": "dictionary", "Entry": "dictionary",
    "Candidate": "discovery", "discover": "discovery",
    "KeywordExtractor": "keywords",
    "Segmenter": "segment", "extract_keywords": "segment", "keyword_spans": "segment", "keywords_from_tokens": "segment",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

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
