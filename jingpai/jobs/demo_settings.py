"""What ``jingpai demo`` can be told (:class:`DemoSettings`), its error and its default folders.

Kept apart from the demo's steps so the command builds its options from :class:`DemoSettings` without
importing them (or torch).

>>> DemoSettings(port=0, reranker_port=0).index
'jingpai-demo'
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jingpai.errors import JingpaiError
from jingpai.reranker.fusion import FusionMode, FusionSpec

Echo = Callable[[str], None]


class DemoError(JingpaiError, RuntimeError):
    """A demo step failed; the message names the step and what to do."""


def default_cache_dir() -> Path:
    """``JINGPAI_CACHE_DIR``, else where the engine harness keeps its engines (their parent folder)."""
    from jingpai.engine import harness

    return harness.default_cache_dir().parent


def default_data_dir() -> Path:
    """``JINGPAI_DATA_DIR``, else ``../shared/data`` relative to the current directory."""
    return Path(os.environ.get("JINGPAI_DATA_DIR") or Path("..") / "shared" / "data")


#: engine hits reranked by the demo's own (USE-multilingual) model or a given one
DEFAULT_WINDOW = 50
#: engine hits reranked by the zero-shot bge-small-zh, whose encoding is about 20 times slower than USE-multilingual's
PRETRAINED_WINDOW = 20


@dataclass(frozen=True)
class DemoSettings:
    """Everything ``jingpai demo`` can be told.

    Args:
        kind: engine to start when ``engine_url`` is not given.
        engine_url: use this running Elasticsearch/OpenSearch instead of starting one.
        engine_port: port of the started engine (``None``: the harness default for ``kind``).
        host: interface the reranker and gateway listen on.
        port: gateway (and UI) port; 0 picks a free one.
        reranker_port: reranker service port; 0 picks a free one.
        corpus: corpus file to index (JSONL/CSV/TSV with ``title``/``content``).
        data_dir: shared data folder (THUCNews titles, cnews sample); ``None``: :func:`default_data_dir`.
        cache_dir: dictionaries, converted corpora, trained models, engines; ``None``: :func:`default_cache_dir`.
        model_dir: a saved jingpai reranker (or a Hugging Face / sentence-transformers cross-encoder directory) to serve
            instead of training the demo model.
        rerank_model: ``False`` starts without a reranker (the UI shows the fail-open banner).
        index: alias of the main demo index.
        train_budget_s: wall-clock budget of the first-run model training.
        threads: torch threads for training and serving (``None``: torch's default).
        progress: show progress bars while indexing.
        window: engine hits the gateway reranks; ``None``: :data:`PRETRAINED_WINDOW` with the zero-shot bge-small-zh
            (a BERT: about 3 GFLOP per hit at length 128, so 20 hits take about a second on a 2-core CPU), else
            :data:`DEFAULT_WINDOW`.
        fusion, fusion_weight: how the gateway fuses the engine's and the model's scores (``fusion_weight``
            is the engine's weight); the defaults were measured on the demo's pseudo-relevance tuning
            queries with ``scripts/demo_eval.py`` (docs/demo.md).
    """

    kind: Literal["opensearch", "elasticsearch"] = "opensearch"
    engine_url: str | None = None
    engine_port: int | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    reranker_port: int = 8081
    corpus: Path | None = None
    data_dir: Path | None = None
    cache_dir: Path | None = None
    model_dir: Path | None = None
    rerank_model: bool = True
    index: str = "jingpai-demo"
    train_budget_s: float = 150.0
    threads: int | None = None
    progress: bool = False
    window: int | None = None
    fusion: FusionMode = "linear"
    fusion_weight: float = 0.8

    def __post_init__(self) -> None:
        from jingpai.engine.harness import ENGINE_KINDS

        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"kind must be one of {', '.join(ENGINE_KINDS)}, got {self.kind!r}")
        for name in ("port", "reranker_port"):
            value = getattr(self, name)
            if not 0 <= value <= 65535:
                raise ValueError(f"{name} must be a TCP port 0..65535, got {value!r}")
        if self.port and self.port == self.reranker_port:
            raise ValueError(f"port and reranker_port must differ, both are {self.port}")
        if self.engine_url is not None and not self.engine_url.startswith(("http://", "https://")):
            raise ValueError(f"engine_url must be an http(s) URL, got {self.engine_url!r}")
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", self.index):
            raise ValueError(f"index must be a lower-case index name (a-z, 0-9, . _ -), got {self.index!r}")
        if self.train_budget_s <= 0:
            raise ValueError(f"train_budget_s must be > 0, got {self.train_budget_s!r}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window!r}")
        FusionSpec(mode=self.fusion, weight=self.fusion_weight)  # raises FusionError (a ValueError) naming the bad value

    @property
    def resolved_data_dir(self) -> Path:
        return Path(self.data_dir) if self.data_dir is not None else default_data_dir()

    @property
    def resolved_cache_dir(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir is not None else default_cache_dir()

    @property
    def demo_dir(self) -> Path:
        return self.resolved_cache_dir / "demo"


__all__ = ["DemoError", "DemoSettings", "Echo", "default_cache_dir", "default_data_dir"]
