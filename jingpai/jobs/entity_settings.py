"""The options of one entity-scoring run (``jingpai index score-entities``): light, so the CLI can read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

EntitySource = Literal["keywords", "title-keywords"]
ENTITY_SOURCES: tuple[str, ...] = get_args(EntitySource)


@dataclass(frozen=True)
class EntityScoreSettings:
    """Options of one ``jingpai index score-entities`` run.

    Args:
        index: alias or index built by ``jingpai index``.
        entities: ``keywords`` — the document's stored ``jingpai.keywords`` (best first);
            ``title-keywords`` — dictionary keywords of the title (needs the dictionary).
        title_field: field whose entities are scored (``None``: the index's first text field).
        body_field: field they are scored against (``None``: the index's second text field).
        max_entities: entities scored per document (best first).
        batch_size: documents per model batch and per bulk request.
        model_batch_size: pairs (or encodings) per forward pass.
        progress: log progress every ``batch_size`` documents at INFO level.
    """

    index: str
    entities: EntitySource = "keywords"
    title_field: str | None = None
    body_field: str | None = None
    max_entities: int = 10
    batch_size: int = 64
    model_batch_size: int = 32
    progress: bool = True

    def __post_init__(self) -> None:
        if self.entities not in ENTITY_SOURCES:
            raise ValueError(f"unknown entity source {self.entities!r}; expected one of {', '.join(ENTITY_SOURCES)}")
        for name in ("max_entities", "batch_size", "model_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


__all__ = ["ENTITY_SOURCES", "EntityScoreSettings", "EntitySource"]
