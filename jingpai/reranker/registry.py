"""The explicit name → architecture registry. Models are picked by name only; nothing is guessed.

Add a line to :data:`ARCHITECTURES` for each new model module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jingpai.errors import UserError

if TYPE_CHECKING:
    from jingpai.reranker.base import Reranker

#: architecture name -> "module:ClassName" (imported on first use)
ARCHITECTURES: dict[str, str] = {
    "cross": "jingpai.reranker.models.cross:CrossEncoderReranker",
    "bi": "jingpai.reranker.models.bi:BiEncoderReranker",
    "kwbert": "jingpai.reranker.models.kwbert:KeywordBertReranker",
    "bertca": "jingpai.reranker.models.bertca:BertCAReranker",
    "tita": "jingpai.reranker.models.tita:TitaReranker",
    "use-tita": "jingpai.reranker.models.use_tita:UseTitaReranker",
    "hcan": "jingpai.reranker.models.hcan:HcanReranker",
    "iasm": "jingpai.reranker.models.iasm:IasmReranker",
    "use-bi": "jingpai.reranker.models.use_bi:UseBiEncoderReranker",
    "use-kw": "jingpai.reranker.models.use_kw:UseKeywordReranker",
    "use-esim": "jingpai.reranker.models.use_esim:UseEsimReranker",
}


class UnknownArchitectureError(UserError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


def names() -> list[str]:
    return sorted(ARCHITECTURES)


def get(name: str) -> type[Reranker]:
    """The model class registered as ``name``.

    Raises:
        UnknownArchitectureError: ``name`` is not registered (the message lists the valid names).
    """
    target = ARCHITECTURES.get(name)
    if target is None:
        raise UnknownArchitectureError(f"unknown model architecture {name!r}; expected one of {', '.join(names()) or '(none registered)'}")
    module_name, cls_name = target.split(":")
    return getattr(importlib.import_module(module_name), cls_name)


def create(name: str, *, device: str | None = None, **config: Any) -> Reranker:
    """A new, untrained model of architecture ``name`` built from config keyword arguments."""
    cls = get(name)
    return cls(cls.config_class(**config), device=device)
