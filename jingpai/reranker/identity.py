"""A saved model's identity: ``<folder name>@<12 hex>``, a SHA-256 over its config and weights files.

``jingpai index --vectors`` records it with the index (the model that embedded the documents) and ``jingpai serve``
reports it in ``/info`` (``vector_model``, the model it loaded), so the gateway can refuse to search an index's
vectors with query vectors of another model. Two folders holding the same files have the same digest: compare
:func:`digest`, not the whole identity.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: files that make a model what it is (config and weights); logs and reports next to them are not hashed
MODEL_FILE_SUFFIXES = (".json", ".pt", ".bin", ".safetensors", ".model", ".txt")
LOG_NAMES = ("train_log.jsonl",)


def model_id(path: Path) -> str:
    """``<folder name>@<12 hex>``: SHA-256 over the names and bytes of the folder's config and weights files."""
    sha = hashlib.sha256()
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in MODEL_FILE_SUFFIXES and p.name not in LOG_NAMES)
    for file in files:
        sha.update(file.name.encode() + b"\0")
        with file.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                sha.update(block)
    return f"{path.resolve().name}@{sha.hexdigest()[:12]}"


def digest(identity: str) -> str:
    """The files' part of an identity (what two copies of a model share).

    >>> digest("zh-gpu-emb-s0@1fe640341cd9"), digest("/models/emb@1fe640341cd9") == digest("emb-copy@1fe640341cd9")
    ('1fe640341cd9', True)
    """
    return identity.rsplit("@", 1)[-1]


__all__ = ["LOG_NAMES", "MODEL_FILE_SUFFIXES", "digest", "model_id"]
