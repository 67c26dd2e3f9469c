"""The probe batch a service checks a changed forward pass against before it serves it (bf16 weights:
:func:`~jingpai.reranker.service.model_copy.cast_weights_if_faithful`; a compiled graph:
:func:`~jingpai.reranker.service.compiling.compile_scores`; joined token ids:
:class:`~jingpai.reranker.service.measuring.TextMeasure`), and how far its scores may move.

Constants only, in a module of their own so each of those imports them without importing the others.
"""

from __future__ import annotations

#: pairs that exercise a model's whole input path (CJK, Latin, digits, an empty-ish document)
PROBE_PAIRS = [("苹果 手机 价格", "苹果公司发布新款 iPhone 手机，售价 5999 元起。"), ("what is bm25", "BM25 is a ranking function."), ("深度学习", "。")]
#: largest score change the cast may cause; bf16 weights move a cross-encoder's logits by ~1e-3
PROBE_TOLERANCE = 0.02

__all__ = ["PROBE_PAIRS", "PROBE_TOLERANCE"]
