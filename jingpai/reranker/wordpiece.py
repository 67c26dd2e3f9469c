"""BERT WordPiece token ids without per-token Python (:class:`WordPieceIds`).

The Rust tokenizer of a BERT-family model costs about 2.5 µs of CPU time per token on a 2-core CPU (it
builds every token's string, offsets and word ids), and ``predict`` used to tokenize each whole document
before cutting it: at length 256 that was 600-1,800 µs per pair, ten times a small model's forward pass
on a GPU. :class:`WordPieceIds` gives the same token ids as that tokenizer for BERT's WordPiece pipeline
(``BertNormalizer`` + ``BertPreTokenizer`` + ``WordPiece``: MiniLM, bge-small-zh, Chinese BERT) in array
operations over a request's texts at once:

* every character of the text is classed once per tokenizer configuration by the Rust normalizer and
  pre-tokenizer themselves (:func:`char_classes`): whitespace (dropped), an isolated one-token word
  (CJK characters and punctuation: its id from a table), part of a longer word, or unknown;
* a text's characters become one numpy array (UTF-32), classes and ids come from table lookups, and only
  the longer words (Latin words, numbers) are looked up by string in a cache filled by the Rust tokenizer;
* only a prefix of each long text is read (grown where it holds too few tokens), so a 100 kB document
  costs what its first ``cap`` tokens cost.

A text holding a character outside the Basic Multilingual Plane, a character the classes do not cover, or
an added token's text (``[SEP]`` typed into a query) goes through the Rust tokenizer as before: the result
is the same, only slower. Words are independent under BERT's pre-tokenizer (the normalizer works per
character, the pre-tokenizer splits on whitespace, punctuation and CJK characters, WordPiece reads one
word at a time), so a text's ids are the concatenation of its words' ids: tests pin them against the
tokenizer on real text.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from jingpai.reranker.featurize import TextIds, rust_ids

logger = logging.getLogger(__name__)

#: character classes (:func:`char_classes`)
SPACE, SINGLE, WORD, OTHER = 0, 1, 2, 3
#: characters read of a long text at first, per token wanted: of an ASCII text, and of any other (CJK: about
#: one a token); grown 4x for the texts it is too short for
PREFIX_CHARS_PER_TOKEN = {"ascii": 6.0, "other": 1.5}
#: words kept in a tokenizer's word cache before it is cleared (about 100 bytes each)
WORD_CACHE_SIZE = 200_000


def _config_key(backend: Any) -> dict[str, Any] | None:
    """The tokenizer's normalizer/pre-tokenizer/model settings if it is BERT's WordPiece pipeline, else ``None``."""
    try:
        data = json.loads(backend.to_str())
    except Exception:  # noqa: BLE001 - any tokenizer we cannot read takes the Rust path
        return None
    norm, pre, model = data.get("normalizer") or {}, data.get("pre_tokenizer") or {}, data.get("model") or {}
    if (norm.get("type") != "BertNormalizer" or not norm.get("clean_text") or not norm.get("handle_chinese_chars")
            or pre.get("type") != "BertPreTokenizer" or model.get("type") != "WordPiece"):
        return None
    return {"normalizer": norm, "pre_tokenizer": pre}


@functools.lru_cache(maxsize=8)
def _classes_for(key: str) -> np.ndarray:
    from tokenizers import Tokenizer

    conf = json.loads(key)
    # a throwaway tokenizer with the same normalizer and pre-tokenizer (the vocabulary does not class characters)
    tok = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": conf["normalizer"],
        "pre_tokenizer": conf["pre_tokenizer"], "post_processor": None, "decoder": None,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                  "vocab": {"[UNK]": 0}},
    }))
    table = np.full(0x10000, OTHER, dtype=np.uint8)
    for cp in range(0x10000):
        if not 0xD800 <= cp < 0xE000:  # surrogates: never in a well-formed text
            table[cp] = probe_class(tok, cp)
    return table


def probe_class(tok: Any, cp: int) -> int:
    """The class of character ``cp`` under ``tok``'s normalizer and pre-tokenizer, from the words of ``x<c>x``."""
    words = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(f"x{chr(cp)}x"))]
    if words == ["x", "x"]:
        return SPACE
    if len(words) == 1:
        return WORD  # glued to its neighbours (letters, digits, marks, symbols, removed controls)
    if len(words) == 3 and words[0] == "x" and words[2] == "x":
        return SINGLE
    return OTHER


def char_classes(backend: Any) -> np.ndarray | None:
    """``uint8 [65536]`` class of every BMP character under ``backend``'s BERT normalizer and pre-tokenizer:
    :data:`SPACE` (separates words, dropped), :data:`SINGLE` (a word of its own: CJK characters,
    punctuation), :data:`WORD` (part of the word around it), :data:`OTHER` (none of these in the probe
    ``x<c>x``: such a text takes the Rust tokenizer). Computed once per configuration (about 0.5 s) by the
    tokenizer's own normalizer and pre-tokenizer. ``None``: not BERT's WordPiece pipeline."""
    conf = _config_key(backend)
    return None if conf is None else _classes_for(json.dumps(conf, sort_keys=True))


class WordPieceIds:
    """Token ids of texts as a BERT WordPiece tokenizer makes them (no special tokens), in array operations.

    Args:
        tokenizer: a ``transformers`` fast tokenizer or a ``tokenizers.Tokenizer``.

    Use :meth:`create`, which returns ``None`` for tokenizers of another kind (callers keep the Rust path).
    Thread-safe: the word cache is a dict (atomic updates) and the tokenizer copy is never reconfigured; a
    deep copy (the service's copy of a model) shares it.

    Example:
        >>> wp = WordPieceIds.create(tokenizer)                          # doctest: +SKIP
        >>> wp.encode(["影响中国GDP的因素"], cap=256)[0].ids             # doctest: +SKIP
        array([2512, 1510,  704, 1744, 9474, 4638, 1728, 5162])
    """

    def __init__(self, backend: Any, classes: np.ndarray) -> None:
        from tokenizers import Tokenizer

        # an own copy, never truncating or padding (its settings are per-object state)
        self._tok = Tokenizer.from_str(backend.to_str())
        self._tok.no_truncation()
        self._tok.no_padding()
        self._added = tuple(t.content for t in self._tok.get_added_tokens_decoder().values() if t.content)
        singles = np.flatnonzero(classes == SINGLE)
        encs = self._tok.encode_batch_fast([chr(int(c)) for c in singles], add_special_tokens=False)
        self._single_id = np.full(0x10000, -1, dtype=np.int64)
        classes = classes.copy()
        for cp, enc in zip(singles.tolist(), encs, strict=True):
            if len(enc.ids) == 1:
                self._single_id[cp] = enc.ids[0]
            else:  # a character that is its own word but not one token (a decomposition): the Rust path
                classes[cp] = OTHER
        self._classes = classes
        #: characters outside the BMP met so far: ``cp -> (class, id of a SINGLE)``, probed one by one
        self._astral: dict[int, tuple[int, int]] = {}
        self._words: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> WordPieceIds:
        # shared, not copied: read-only tables and a word cache any thread may fill (a copied model keeps it)
        return self

    @classmethod
    def create(cls, tokenizer: Any) -> WordPieceIds | None:
        """A :class:`WordPieceIds` for ``tokenizer`` (cached on a ``transformers`` tokenizer object), or
        ``None`` where it is not BERT's WordPiece pipeline."""
        backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        if not hasattr(backend, "to_str"):
            return None
        # one per tokenizer object (its Rust backend is the same object for its life)
        cached = getattr(tokenizer, "_jingpai_wordpiece", None)
        if cached is not None and cached[0] is backend:
            return cached[1]
        classes = char_classes(backend)
        made = None if classes is None else cls(backend, classes)
        if made is None:
            logger.info("tokenizer %s is not BERT's WordPiece pipeline: texts are tokenized by the Rust tokenizer", type(tokenizer).__name__)
        try:
            tokenizer._jingpai_wordpiece = (backend, made)
        except AttributeError:
            pass  # a tokenizers.Tokenizer takes no attributes: built again next time
        return made

    def clear_cache(self) -> None:
        """Forget the cached words (a benchmark's cold start)."""
        self._words.clear()

    # ------------------------------------------------------------------ encoding

    def encode(self, texts: Sequence[str], *, cap: int, offsets: bool = False) -> list[TextIds | None]:
        """Per text: its first ``cap`` token ids (no special tokens), its token count (exact up to
        ``cap + 1``), whether it has more than ``cap``, and with ``offsets`` each kept token's span; ``None``
        for a text the tokenizer refuses (a lone surrogate)."""
        out: list[TextIds | None] = [None] * len(texts)
        todo = list(range(len(texts)))
        want = min(cap, 1 << 24)
        chars = {i: int(PREFIX_CHARS_PER_TOKEN["ascii" if texts[i][: 6 * want + 64].isascii() else "other"] * want) + 64 for i in todo}
        rust: list[int] = []
        while todo:
            todo = self._encode_prefixes(texts, todo, chars, cap, offsets, out, rust)
            for i in todo:
                chars[i] *= 4
        if rust:
            for i, read in zip(rust, rust_ids(self._tok, [texts[i] for i in rust], cap=cap, offsets=offsets), strict=True):
                out[i] = read
        return out

    # long: the one vectorised pass over a request's prefixes; its steps share the arrays they build
    def _encode_prefixes(self, texts: Sequence[str], todo: list[int], chars: dict[int, int], cap: int, offsets: bool,
                         out: list[TextIds | None], rust: list[int]) -> list[int]:
        """Encode ``texts[todo]`` from their first ``chars[i]`` characters; returns those whose prefix held too
        few settled tokens (to retry longer); appends those the tables cannot read to ``rust``."""
        pieces: list[str] = []
        kept: list[int] = []
        for i in todo:
            text = texts[i]
            if self._added and any(a in text for a in self._added):
                rust.append(i)
                continue
            pieces.append(text[: chars[i]])
            kept.append(i)
        if not kept:
            return []
        # one array over every prefix, separated by a space (never part of a word)
        joined = " ".join(pieces)
        try:
            cp = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
        except UnicodeEncodeError:  # a lone surrogate somewhere: each text on its own
            if len(kept) == 1:
                rust.append(kept[0])
                return []
            retry = []
            for i in kept:
                retry += self._encode_prefixes(texts, [i], chars, cap, offsets, out, rust)
            return retry
        lens = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        starts = np.concatenate([[0], np.cumsum(lens + 1)[:-1]])  # each prefix's first character in ``joined``
        wide = cp >= 0x10000
        cls = self._classes[np.where(wide, 0, cp)]
        if wide.any():
            cls[wide] = self._astral_info(cp[wide])[0]
        other = np.flatnonzero(cls == OTHER)
        bad_text = np.zeros(len(kept), dtype=bool)
        if len(other):
            bad_text[np.searchsorted(starts, other, side="right") - 1] = True
        word = cls == WORD
        prev_word = np.concatenate([[False], word[:-1]])
        next_word = np.concatenate([word[1:], [False]])
        run_start = np.flatnonzero(word & ~prev_word)
        run_end = np.flatnonzero(word & ~next_word) + 1
        single = np.flatnonzero(cls == SINGLE)
        # segments in text order: single characters (one token each) and word runs (their cached ids)
        seg_pos = np.concatenate([single, run_start])
        order = np.argsort(seg_pos, kind="stable")
        seg_pos = seg_pos[order]
        is_run = order >= len(single)
        words = [joined[s:e] for s, e in zip(run_start.tolist(), run_end.tolist(), strict=True)]
        entries = self._lookup(words)
        run_counts = np.fromiter((len(e[0]) for e in entries), dtype=np.int64, count=len(entries))
        counts = np.ones(len(seg_pos), dtype=np.int64)
        counts[is_run] = run_counts[order[is_run] - len(single)]
        seg_text = np.searchsorted(starts, seg_pos, side="right") - 1
        # a word touching the end of a cut prefix may go on past it: it and what follows are not settled
        prefix_cut = np.fromiter((len(texts[i]) > chars[i] for i in kept), dtype=bool, count=len(kept))
        seg_end = seg_pos + 1
        seg_end[is_run] = run_end[order[is_run] - len(single)]
        unsettled = is_run & prefix_cut[seg_text] & (seg_end == (starts + lens)[seg_text])
        # token ids of every segment, flattened in order
        run_ids = np.fromiter(itertools.chain.from_iterable(e[0] for e in entries), dtype=np.int64, count=int(run_counts.sum()))
        single_cp = cp[single]
        single_ids = self._single_id[np.minimum(single_cp, 0xFFFF)]
        if wide.any():
            far = single_cp >= 0x10000
            single_ids[far] = self._astral_info(single_cp[far])[1]
        tok_ids = _scatter(single_ids, run_ids, run_counts, order, is_run, counts)
        if offsets:
            run_rel_s = np.fromiter(itertools.chain.from_iterable(e[1] for e in entries), dtype=np.int64, count=len(run_ids))
            run_rel_e = np.fromiter(itertools.chain.from_iterable(e[2] for e in entries), dtype=np.int64, count=len(run_ids))
            run_base = np.repeat(run_start, run_counts)
            tok_s = _scatter(single, run_base + run_rel_s, run_counts, order, is_run, counts)
            tok_e = _scatter(single + 1, run_base + run_rel_e, run_counts, order, is_run, counts)
        tok_text = np.repeat(seg_text, counts)
        # per text: the tokens before its first unsettled segment
        first_bad = np.full(len(kept), np.iinfo(np.int64).max)
        if unsettled.any():
            np.minimum.at(first_bad, seg_text[unsettled], np.cumsum(counts)[unsettled] - counts[unsettled])
        bounds = np.searchsorted(tok_text, np.arange(len(kept) + 1))
        retry: list[int] = []
        for t, i in enumerate(kept):
            if bad_text[t]:
                rust.append(i)
                continue
            lo, hi = int(bounds[t]), min(int(bounds[t + 1]), int(first_bad[t]))
            if prefix_cut[t] and hi - lo <= cap:  # too few settled tokens in this prefix to tell: a longer one
                retry.append(i)
                continue
            n = hi - lo
            k = min(n, cap)
            base = int(starts[t])
            out[i] = TextIds(
                tok_ids[lo : lo + k], n, n > cap,
                (tok_s[lo : lo + k] - base) if offsets else None, (tok_e[lo : lo + k] - base) if offsets else None,
            )
        return retry

    def _astral_info(self, cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(classes, single ids)`` of characters outside the BMP (probed on first sight, then remembered)."""
        known = self._astral
        for cp in set(cps.tolist()) - known.keys():
            cls = probe_class(self._tok, cp)
            ids = self._tok.encode(chr(cp), add_special_tokens=False).ids if cls == SINGLE else []
            known[cp] = (cls, -1) if cls != SINGLE else (cls, ids[0]) if len(ids) == 1 else (OTHER, -1)
        info = [known[c] for c in cps.tolist()]
        return (np.fromiter((c for c, _ in info), dtype=np.uint8, count=len(info)),
                np.fromiter((i for _, i in info), dtype=np.int64, count=len(info)))

    def _lookup(self, words: list[str]) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """Each word's ``(ids, starts, ends)`` (spans relative to the word), the missing ones tokenized in one call."""
        cache = self._words
        found = [cache.get(w) for w in words]
        missing = list(dict.fromkeys(w for w, f in zip(words, found, strict=True) if f is None))
        if missing:
            if len(cache) + len(missing) > WORD_CACHE_SIZE:
                cache.clear()  # atomic under the GIL; a word another thread misses now is tokenized again
            for w, enc in zip(missing, self._tok.encode_batch(missing, add_special_tokens=False), strict=True):
                spans = enc.offsets
                cache[w] = (tuple(enc.ids), tuple(s for s, _ in spans), tuple(e for _, e in spans))
            found = [f if f is not None else cache[w] for w, f in zip(words, found, strict=True)]
        return found  # type: ignore[return-value]


def _scatter(single_vals: np.ndarray, run_vals: np.ndarray, run_counts: np.ndarray, order: np.ndarray, is_run: np.ndarray,
             counts: np.ndarray) -> np.ndarray:
    """Per-token values in text order from the single characters' values and the word runs' flattened values."""
    out = np.empty(int(counts.sum()), dtype=np.int64)
    seg_first = np.cumsum(counts) - counts  # each segment's first token
    out[seg_first[~is_run]] = single_vals[order[~is_run]]
    if len(run_vals):
        runs_in_order = order[is_run] - len(single_vals)  # run index of each run segment, in text order
        # the run values are flattened in run order (run_start order == text order), so runs_in_order is 0..R-1
        first = np.repeat(seg_first[is_run], run_counts[runs_in_order])
        within = np.arange(len(run_vals)) - np.repeat(np.cumsum(run_counts) - run_counts, run_counts)
        out[first + within] = run_vals
    return out


__all__ = ["OTHER", "SINGLE", "SPACE", "WORD", "WordPieceIds", "char_classes", "probe_class"]
