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
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from jingpai.reranker.featurize import TextIds, rust_ids

logger = logging.getLogger(__name__)

#: character classes (:func:`char_classes`)
SPACE, SINGLE, WORD, OTHER = 0, 1, 2, 3
#: characters read of a long text at first, per token wanted: of an ASCII text, and of any other (CJK: about
#: one a token); grown 4x for the texts it is too short for
PREFIX_CHARS_PER_TOKEN = {"ascii": 6.0, "other": 1.25}
#: characters read past that (for the word cut at the prefix's end, and short texts)
PREFIX_EXTRA_CHARS = 32
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
        #: how far past a prefix an added token starting inside it can reach
        self._added_reach = max((len(a) for a in self._added), default=1) - 1
        #: finds an added token's text in ``text[start:end]`` (one call: 7x cheaper than a test per token)
        self._added_search = re.compile("|".join(map(re.escape, self._added))).search if self._added else None
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

    def encode(self, texts: Sequence[str], *, cap: int | Sequence[int], offsets: bool = False, end: bool = False,
               ) -> list[TextIds | None]:
        """Per text: its first ``cap`` token ids (no special tokens), its token count (exact up to
        ``cap + 1``), whether it has more than ``cap``, with ``offsets`` each kept token's span and with ``end``
        only where the kept tokens end (:attr:`TextIds.end`, without every token's span); ``None`` for a text
        the tokenizer refuses (a lone surrogate). ``cap``: one for every text, or one per text (a request's
        query whole and its documents cut, in one pass)."""
        out: list[TextIds | None] = [None] * len(texts)
        caps = np.full(len(texts), cap, dtype=np.int64) if isinstance(cap, int) else np.asarray(cap, dtype=np.int64).reshape(-1)
        if len(caps) != len(texts):
            raise ValueError(f"cap holds {len(caps)} values for {len(texts)} texts")
        todo = list(range(len(texts)))
        chars = {}
        for i in todo:
            want = min(int(caps[i]), 1 << 24)
            text = texts[i]
            # (a short slice first: most texts that are not ASCII show it in their first characters)
            kind = "ascii" if text[:64].isascii() and text[: 6 * want + 64].isascii() else "other"
            chars[i] = int(PREFIX_CHARS_PER_TOKEN[kind] * want) + PREFIX_EXTRA_CHARS
        rust: list[int] = []
        while todo:
            todo = self._encode_prefixes(texts, todo, chars, caps, offsets, end, out, rust)
            for i in todo:
                chars[i] *= 4
        for i in rust:
            read = rust_ids(self._tok, [texts[i]], cap=int(caps[i]), offsets=offsets or end)[0]
            if read is not None and end and not offsets:
                read = TextIds(read.ids, read.tokens, read.more, stop=read.end)
            out[i] = read
        return out

    # long: the one vectorised pass over a request's prefixes; its steps share the arrays they build
    def _encode_prefixes(self, texts: Sequence[str], todo: list[int], chars: dict[int, int], caps: np.ndarray, offsets: bool,
                         end: bool, out: list[TextIds | None], rust: list[int]) -> list[int]:
        """Encode ``texts[todo]`` from their first ``chars[i]`` characters; returns those whose prefix held too
        few settled tokens (to retry longer); appends those the tables cannot read to ``rust``.

        Every character gets its token count (1 for a one-token word, the word's count at a longer word's first
        character, 0 elsewhere); their running sum places every token, and each prefix's tokens are the range
        between its first and last character's sums."""
        pieces: list[str] = []
        kept: list[int] = []
        added, reach = self._added_search, self._added_reach
        for i in todo:
            text = texts[i]
            # an added token's text (typed "[SEP]") is one token the tables do not know: the Rust tokenizer reads
            # that text; one cut by the prefix's end would change the tokens before it, so look a little past it
            if added is not None and added(text, 0, chars[i] + reach) is not None:
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
                retry += self._encode_prefixes(texts, [i], chars, caps, offsets, end, out, rust)
            return retry
        n_texts = len(kept)
        lens = np.fromiter(map(len, pieces), dtype=np.int64, count=n_texts)
        stops = np.cumsum(lens + 1) - 1  # each prefix's end (its separator) in ``joined``
        starts = stops - lens
        wide = bool(len(cp)) and int(cp.max()) >= 0x10000
        if wide:
            far = cp >= 0x10000
            cls = self._classes[np.where(far, 0, cp)]
            cls[far] = self._astral_info(cp[far])[0]
        else:
            cls = self._classes[cp]
        other = np.flatnonzero(cls == OTHER)
        bad_text = np.zeros(n_texts, dtype=bool)
        if len(other):
            bad_text[np.searchsorted(starts, other, side="right") - 1] = True
        word = (cls == WORD).view(np.int8)
        edge = np.diff(word, prepend=np.int8(0), append=np.int8(0))
        run_start = np.flatnonzero(edge == 1)
        run_end = np.flatnonzero(edge == -1)
        single = np.flatnonzero(cls == SINGLE)
        words = [joined[s:e] for s, e in zip(run_start.tolist(), run_end.tolist(), strict=True)]
        entries = self._lookup(words)
        run_counts = np.fromiter((len(e[0]) for e in entries), dtype=np.int64, count=len(entries))
        # before[c]: tokens before character c (one slot more: ``before[len(cp)]`` is the total)
        tcount = np.zeros(len(cp) + 1, dtype=np.int64)
        tcount[single + 1] = 1
        tcount[run_start + 1] = run_counts
        before = np.cumsum(tcount)
        total = int(before[-1])
        single_at = before[single]
        run_at = before[run_start]
        run_ids = np.fromiter(itertools.chain.from_iterable(e[0] for e in entries), dtype=np.int64, count=int(run_counts.sum()))
        run_pos = (np.repeat(run_at - (np.cumsum(run_counts) - run_counts), run_counts) + np.arange(len(run_ids))) if len(run_ids) else run_at[:0]
        single_cp = cp[single]
        if wide:
            far = single_cp >= 0x10000
            single_ids = self._single_id[np.where(far, 0, single_cp)]
            single_ids[far] = self._astral_info(single_cp[far])[1]
        else:
            single_ids = self._single_id[single_cp]
        tok_ids = np.empty(total, dtype=np.int64)
        tok_ids[single_at] = single_ids
        tok_ids[run_pos] = run_ids
        if offsets:
            run_base = np.repeat(run_start, run_counts)
            tok_s = np.empty(total, dtype=np.int64)
            tok_e = np.empty(total, dtype=np.int64)
            tok_s[single_at], tok_e[single_at] = single, single + 1
            if len(run_ids):
                tok_s[run_pos] = run_base + np.fromiter(itertools.chain.from_iterable(e[1] for e in entries), dtype=np.int64, count=len(run_ids))
                tok_e[run_pos] = run_base + np.fromiter(itertools.chain.from_iterable(e[2] for e in entries), dtype=np.int64, count=len(run_ids))
        lo_all, hi_all = before[starts], before[stops]
        # a word touching the end of a cut prefix may go on past it: its tokens and what follows are not settled
        prefix_cut = np.fromiter((len(texts[i]) > chars[i] for i in kept), dtype=bool, count=n_texts)
        open_end = prefix_cut & (lens > 0)
        if open_end.any():
            last = stops[open_end] - 1
            open_end[open_end] = word[last] == 1
        if open_end.any():
            run_of = np.searchsorted(run_start, stops[open_end] - 1, side="right") - 1
            hi_all[open_end] = np.minimum(hi_all[open_end], run_at[run_of])
        retry: list[int] = []
        lo_list, hi_list, base_list, cap_list = lo_all.tolist(), hi_all.tolist(), starts.tolist(), caps[kept].tolist()
        for t, i in enumerate(kept):
            if bad_text[t]:
                rust.append(i)
                continue
            lo, hi, cap = lo_list[t], hi_list[t], cap_list[t]
            if prefix_cut[t] and hi - lo <= cap:  # too few settled tokens in this prefix to tell: a longer one
                retry.append(i)
                continue
            n = hi - lo
            k = min(n, cap)
            base = base_list[t]
            if offsets:
                out[i] = TextIds(tok_ids[lo : lo + k], n, n > cap, tok_s[lo : lo + k] - base, tok_e[lo : lo + k] - base)
            elif end:
                out[i] = TextIds(tok_ids[lo : lo + k], n, n > cap, stop=self._token_end(lo + k - 1, before, cls, run_start, entries) - base if k else 0)
            else:
                out[i] = TextIds(tok_ids[lo : lo + k], n, n > cap)
        return retry

    @staticmethod
    def _token_end(g: int, before: np.ndarray, cls: np.ndarray, run_start: np.ndarray, entries: list[Any]) -> int:
        """Where token ``g`` of a pass ends (a character offset in its joined text)."""
        c = int(np.searchsorted(before, g, side="right")) - 1  # the character whose tokens hold token g
        if cls[c] == SINGLE:
            return c + 1
        j = int(np.searchsorted(run_start, c))  # c starts a word run
        return c + entries[j][2][g - int(before[c])]

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


__all__ = ["OTHER", "SINGLE", "SPACE", "WORD", "WordPieceIds", "char_classes", "probe_class"]
