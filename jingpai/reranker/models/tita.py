"""TITA — two-stage interaction + topic-aware matching (Sun et al., NAACL 2021; papers/tita-topic-aware-matching.txt).

Three relevance levels: 2 topic-aware relevant, 1 partially relevant, 0 irrelevant.

* **Stage 1** (eq. 1): BERT over ``[CLS] Q [SEP] D [SEP]``; ``e_D`` = last hidden states at the document's
  token positions.
* **Stage 2** (eqs. 5-11): ``e_Q`` = BERT(Q) alone (same weights); ``S_mn = (e_Q_m ⊙ v) · e_D_n``;
  ``u_Q = softmax_n(S) e_D + e_Q``; symmetrically ``u_D = softmax_m(Sᵀ) e_Q + e_D``. Every softmax and mean
  skips padding and the special tokens.
* **GSM neural topic model** (eqs. 12-21) on the document's bag of rjieba words (topic vocabulary = the
  most frequent words of the training documents minus stop words): encoder MLP → μ, log σ →
  reparameterised ``z`` → ``θ = softmax(W z)``; ``β = softmax(t ṽᵀ)`` (K topics × |V| words) from topic
  and word vectors; loss = −log(θ·β) reconstruction + KL to N(0, I).
* **Memory layer** (eqs. 22-24), ``memory_hops`` hops (2 in the paper): ``p = softmax_k(β_k V u)``,
  ``o = Σ p_k c_k``, ``u ← W_o(o + u)`` starting from ``u = mean(u_D)``; the final ``u`` is ``o_D``.
* **Output** (eqs. 25-27): ``r1 = W[mean(u_D); mean(u_Q)]``, ``r2 = W[o_D; mean(u_Q)]``,
  ``softmax(W[r1; r2])`` over the 3 levels.

Training: :meth:`TitaReranker.pretrain_topics` fits the GSM alone first (paper: 50 epochs); then
:meth:`TitaReranker.loss` = cross entropy + ``topic_loss_weight`` × GSM loss of the batch's documents.
The matcher sees ``β`` detached, so the two objectives update disjoint parameters — the paper's
alternation of the two trainings, done within one step.

Score (for ``predict``/``rank``): the expected relevance level divided by 2, i.e.
``P(level 2) + 0.5·P(level 1)`` ∈ [0, 1]; it orders topic-aware documents above partial ones above
irrelevant ones and uses all three probabilities. :meth:`TitaReranker.probabilities` gives the
three class probabilities themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from jingpai.errors import UserError
from jingpai.reranker.base import Pair, Reranker, RerankerConfig
from jingpai.reranker.masking import masked_mean, masked_softmax
from jingpai.reranker.wordvocab import SPECIALS, VocabError, WordTokenizer, WordVocab

logger = logging.getLogger(__name__)

NUM_LEVELS = 3
ENCODER_DIR = "encoder"
TOPIC_VOCAB_DIR = "topic_vocab"

#: function words left out of the topic vocabulary (the paper drops stop words; no list is given)
STOPWORDS: frozenset[str] = frozenset(
    "的 了 是 在 和 有 我 你 他 她 它 们 也 就 都 而 及 与 着 或 一个 没有 这 那 这个 那个 之 其 于 把 被 让 给 "
    "吗 呢 吧 啊 呀 么 什么 怎么 如何 为什么 哪 哪些 可以 不 很 还 会 要 能 对 从 到 向 上 下 中 个 "
    "the a an of to in on at for and or is are was were be been it this that with as by from what how why".split()
)


class TitaError(UserError, ValueError):
    """Bad TITA configuration or input (missing checkpoint, labels outside 0/1/2)."""


@dataclass(frozen=True)
class TitaConfig(RerankerConfig):
    """TITA options (paper: query ≤16 chars, doc ≤512, K=50 topics, |V|=5,000, d=384, Adam 5e-5, batch 32).

    Attributes:
        base: local path of the HF BERT checkpoint (required; nothing is downloaded).
        max_length: pair input length in BERT tokens.
        max_query_length: query tokens kept for the query-alone pass.
        num_topics: K.
        topic_vocab_size: |V| of the bag of words.
        topic_dim: size of the GSM topic and word vectors.
        topic_hidden: hidden units of the GSM encoder.
        memory_hops: memory-network hops.
        relevance_dim: size of r1 and r2.
        dropout: dropout on the pooled representations.
        topic_loss_weight: weight of the GSM loss (per word) added in :meth:`TitaReranker.loss`.
        seed: seed of the randomly initialised layers.
    """

    base: str = ""
    max_length: int = 256
    max_query_length: int = 16
    num_topics: int = 50
    topic_vocab_size: int = 5000
    topic_dim: int = 384
    topic_hidden: int = 256
    memory_hops: int = 2
    relevance_dim: int = 256
    dropout: float = 0.1
    topic_loss_weight: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.memory_hops < 1 or self.num_topics < 1:
            raise TitaError(f"TitaConfig needs memory_hops >= 1 and num_topics >= 1, got {self.memory_hops}, {self.num_topics}")


class GSM(nn.Module):
    """Gaussian Softmax topic model (Miao et al. 2017) on a bag of words ``x [B, |V|]``."""

    def __init__(self, vocab_size: int, num_topics: int, topic_dim: int, hidden: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(vocab_size, hidden), nn.Softplus())
        self.mu = nn.Linear(hidden, num_topics)
        self.log_sigma = nn.Linear(hidden, num_topics)
        self.theta = nn.Linear(num_topics, num_topics)
        self.topic_vectors = nn.Parameter(torch.randn(num_topics, topic_dim) * 0.1)
        self.word_vectors = nn.Parameter(torch.randn(vocab_size, topic_dim) * 0.1)

    def beta(self) -> torch.Tensor:
        """Topic-word distributions ``[K, |V|]`` (each row sums to 1)."""
        return torch.softmax(self.topic_vectors @ self.word_vectors.T, dim=-1)

    def forward(self, bow: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(θ [B, K], negative ELBO per document [B])``; ``z = μ`` outside training."""
        h = self.encoder(bow)
        mu, log_sigma = self.mu(h), self.log_sigma(h).clamp(-10, 10)
        z = mu + torch.randn_like(mu) * log_sigma.exp() if self.training else mu
        theta = torch.softmax(self.theta(z), dim=-1)
        recon = -(bow * torch.log(theta @ self.beta() + 1e-10)).sum(-1)
        kl = -0.5 * (1 + 2 * log_sigma - mu.pow(2) - (2 * log_sigma).exp()).sum(-1)
        return theta, recon + kl


class TitaNet(nn.Module):
    """BERT two-stage interaction + GSM + topic memory; returns 3-level logits."""

    def __init__(self, config: TitaConfig, bert: nn.Module, topic_vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.bert = bert
        self.build_matching(config, bert.config.hidden_size, topic_vocab_size)

    def build_matching(self, config: TitaConfig, d: int, topic_vocab_size: int, *, extra: int = 0) -> None:
        """The layers after the encoder (stage 2, GSM, memory, output) for token states of width ``d``;
        ``extra``: width of features the encoder adds to r1's input (0 for BERT)."""
        self.v = nn.Parameter(torch.full((d,), d**-0.5))
        self.gsm = GSM(topic_vocab_size, config.num_topics, config.topic_dim, config.topic_hidden)
        # β_k V averages rows of V over a topic's words, which shrinks them; unit-variance rows keep
        # the memory keys β_k V from collapsing to ~0 (a uniform, uninformative p) at the start
        self.memory_in = nn.Parameter(torch.randn(topic_vocab_size, d))  # V in eq. 22
        self.memory_out = nn.Parameter(torch.randn(config.num_topics, d) * d**-0.5)  # c in eq. 23
        self.hop_out = nn.ModuleList(nn.Linear(d, d) for _ in range(config.memory_hops))  # W_o per hop
        self.dropout = nn.Dropout(config.dropout)
        self.r1 = nn.Linear(2 * d + extra, config.relevance_dim)
        self.r2 = nn.Linear(2 * d, config.relevance_dim)
        self.out = nn.Linear(2 * config.relevance_dim, NUM_LEVELS)

    def encode(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Stage 1: ``(e_pair [B, N, d], e_Q [B, M, d], extra r1 features or None)``."""
        e_pair = self.bert(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
        ).last_hidden_state
        e_q = self.bert(
            input_ids=batch["q_input_ids"], attention_mask=batch["q_attention_mask"], token_type_ids=batch["q_token_type_ids"]
        ).last_hidden_state
        return e_pair, e_q, None

    def interaction(self, batch: dict[str, torch.Tensor], e_pair: torch.Tensor, e_q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stage 2, pooled: ``(mean u_Q, mean u_D)``, each ``[B, d]``."""
        d_mask, q_mask = batch["d_mask"], batch["q_mask"]
        sim = (e_q * self.v) @ e_pair.transpose(1, 2)  # [B, M, N]; pair positions outside D are masked below
        u_q = masked_softmax(sim, d_mask[:, None, :], dim=-1) @ e_pair + e_q
        u_d = masked_softmax(sim.transpose(1, 2), q_mask[:, None, :], dim=-1) @ e_q + e_pair
        return masked_mean(u_q, q_mask, dim=1), masked_mean(u_d, d_mask, dim=1)

    def memory(self, u: torch.Tensor) -> torch.Tensor:
        """``o_D`` after the memory hops over the (detached) topic memory β."""
        keys = self.gsm.beta().detach().to(u.dtype) @ self.memory_in  # [K, d]: β_k V
        for w_o in self.hop_out:
            p = torch.softmax(u @ keys.T, dim=-1)
            u = w_o(p @ self.memory_out + u)
        return u

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        e_pair, e_q, extra = self.encode(batch)
        uq, ud = self.interaction(batch, e_pair, e_q)
        uq, ud = self.dropout(uq), self.dropout(ud)
        od = self.dropout(self.memory(ud))
        r1 = self.r1(torch.cat([ud, uq] if extra is None else [ud, uq, self.dropout(extra)], dim=-1))
        r2 = self.r2(torch.cat([od, uq], dim=-1))
        return self.out(torch.cat([r1, r2], dim=-1))


class TitaReranker(Reranker):
    """TITA over a local BERT checkpoint; create with :meth:`build` (topic vocabulary from documents).

    Args:
        config: model config; ``config.base`` is the local checkpoint path.
        topic_vocab: bag-of-words vocabulary of the topic model (required).
        encoder_dir: rebuild BERT from the config saved here (random weights, to be overwritten by
            ``load``) instead of loading ``config.base``.
        device: torch device name.

    Raises:
        TitaError: no topic vocabulary, or ``config.base`` is empty / not a directory.

    Example:
        >>> model = TitaReranker.build(documents, TitaConfig(base="models/bert-zh"))  # doctest: +SKIP
        >>> model.pretrain_topics(documents, epochs=50)                               # doctest: +SKIP
        >>> model.probabilities([("樱花", "玉渊潭公园是赏樱花的最佳去处")])                 # doctest: +SKIP
    """

    name = "tita"
    config_class = TitaConfig
    num_labels = NUM_LEVELS
    config: TitaConfig
    net: TitaNet

    def __init__(
        self,
        config: TitaConfig,
        *,
        topic_vocab: WordVocab | None = None,
        encoder_dir: str | Path | None = None,
        device: str | None = None,
    ) -> None:
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        if topic_vocab is None:
            raise TitaError("TitaReranker needs a topic vocabulary: create it with TitaReranker.build(documents, config) or load a saved model")
        super().__init__(config, device=device)
        if encoder_dir is None:
            if not config.base or not Path(config.base).is_dir():
                raise TitaError(f"TitaConfig.base={config.base!r} must be a local HF checkpoint directory")
            source = Path(config.base)
            bert = AutoModel.from_pretrained(source, local_files_only=True)
        else:
            source = Path(encoder_dir)
            bert = AutoModel.from_config(AutoConfig.from_pretrained(source, local_files_only=True))
        self.tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        self.topic_vocab = topic_vocab
        self.words = WordTokenizer()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.net = TitaNet(config, bert, len(topic_vocab))
        self.net.to(self.device)

    @classmethod
    def build(cls, documents: Iterable[str], config: TitaConfig, *, device: str | None = None) -> TitaReranker:
        """A new model whose topic vocabulary is the ``topic_vocab_size`` most frequent words of ``documents``.

        Raises:
            TitaError: ``documents`` hold no word outside the stop list.
        """
        try:
            vocab = WordVocab.build(documents, max_size=config.topic_vocab_size, stopwords=STOPWORDS, max_bigrams=0)
        except VocabError as exc:
            raise TitaError(f"cannot build TITA's topic vocabulary: {exc}") from exc
        return cls(config, topic_vocab=vocab, device=device)

    # ------------------------------------------------------------------ assets

    def save_assets(self, directory: Path) -> None:
        enc = directory / ENCODER_DIR
        self.tokenizer.save_pretrained(enc)
        self.net.bert.config.save_pretrained(enc)
        self.topic_vocab.save(directory / TOPIC_VOCAB_DIR)

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> TitaReranker:
        vocab = WordVocab.load(directory / TOPIC_VOCAB_DIR)
        return cls(config, topic_vocab=vocab, encoder_dir=directory / ENCODER_DIR, device=device)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ inputs

    def bag_of_words(self, documents: Sequence[str]) -> torch.Tensor:
        """Word counts ``[B, |V|]`` over the topic vocabulary (unknown and stop words ignored)."""
        bow = np.zeros((len(documents), len(self.topic_vocab)), dtype=np.float32)
        for i, doc in enumerate(documents):
            for idx in self.topic_vocab.encode(self.words.cut(doc)):
                if idx >= len(SPECIALS):
                    bow[i, idx] += 1.0
        return torch.from_numpy(bow)

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        for i, pair in enumerate(pairs):
            if len(pair) != 2 or not all(isinstance(t, str) for t in pair):
                raise TypeError(f"pair {i} must be (query: str, document: str), got {pair!r}")
        queries = [q for q, _ in pairs]
        docs = [d for _, d in pairs]
        enc = self.tokenizer(
            queries, docs, truncation=True, max_length=self.config.max_length, padding=True,
            return_tensors="pt", return_token_type_ids=True, return_special_tokens_mask=True,
        )  # fmt: skip
        q_enc = self.tokenizer(
            queries, truncation=True, max_length=self.config.max_query_length + 2, padding=True,
            return_tensors="pt", return_token_type_ids=True, return_special_tokens_mask=True,
        )  # fmt: skip
        # document positions by sequence id (works for tokenizers without token types too)
        d_mask = torch.tensor(
            [[sid == 1 for sid in enc.sequence_ids(i)] for i in range(len(pairs))], dtype=torch.bool
        ).reshape(enc["input_ids"].shape)
        d_mask &= enc["attention_mask"].bool() & ~enc["special_tokens_mask"].bool()
        return {
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "token_type_ids": enc["token_type_ids"],
            "d_mask": d_mask,
            "q_input_ids": q_enc["input_ids"],
            "q_attention_mask": q_enc["attention_mask"],
            "q_token_type_ids": q_enc["token_type_ids"],
            "q_mask": q_enc["attention_mask"].bool() & ~q_enc["special_tokens_mask"].bool(),
            "bow": self.bag_of_words(docs),
        }

    # ------------------------------------------------------------------ outputs

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """3-level logits ``[B, 3]`` (0 irrelevant, 1 partial, 2 topic-aware relevant)."""
        return self.net(batch)

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        probs = torch.softmax(self.logits(batch).float(), dim=-1)
        return probs[:, 2] + 0.5 * probs[:, 1]

    @torch.inference_mode()
    def probabilities(self, pairs: Sequence[Pair], *, batch_size: int = 32) -> np.ndarray:
        """Class probabilities ``[len(pairs), 3]`` for levels 0, 1, 2."""
        self.net.eval()
        out = [
            torch.softmax(self.logits(self.to_device(self.featurize(pairs[i : i + batch_size]))).float(), dim=-1).cpu().numpy()
            for i in range(0, len(pairs), batch_size)
        ]
        return np.concatenate(out) if out else np.zeros((0, NUM_LEVELS), dtype=np.float32)

    def topic_loss(self, bow: torch.Tensor) -> torch.Tensor:
        """Mean GSM loss per word over the documents with at least one topic-vocabulary word."""
        bow = bow.to(self.device)
        words = bow.sum(-1)
        keep = words > 0
        if not keep.any():
            return bow.sum() * 0.0
        _, nelbo = self.net.gsm(bow[keep])
        return (nelbo / words[keep]).mean()

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        """Cross entropy over the 3 levels + ``topic_loss_weight`` × GSM loss.

        Raises:
            TitaError: a label is not 0, 1 or 2.
        """
        labels = labels.to(self.device).long()
        bad = labels[(labels < 0) | (labels >= NUM_LEVELS)]
        if bad.numel():
            raise TitaError(f"TITA labels must be relevance levels 0, 1 or 2, got {sorted(set(bad.tolist()))}")
        ce = nn.functional.cross_entropy(self.logits(batch).float(), labels)
        if self.config.topic_loss_weight:
            ce = ce + self.config.topic_loss_weight * self.topic_loss(batch["bow"])
        return ce

    def pretrain_topics(
        self,
        documents: Sequence[str],
        *,
        epochs: int,
        batch_size: int = 64,
        lr: float = 2e-3,
        seed: int = 0,
    ) -> list[float]:
        """Fit the GSM topic model alone on ``documents`` (the paper's λ epochs before joint training).

        Args:
            documents: training documents.
            epochs: passes over ``documents``.
            batch_size: documents per step.
            lr: Adam learning rate.
            seed: shuffling / sampling seed.

        Returns:
            Mean loss per word of each epoch.
        """
        bow = self.bag_of_words(documents)
        bow = bow[bow.sum(-1) > 0]
        if not len(bow):
            raise TitaError(f"none of the {len(documents)} documents has a word of the topic vocabulary")
        gsm = self.net.gsm
        opt = torch.optim.Adam(gsm.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed)
        gsm.train()
        history = []
        for epoch in range(epochs):
            order = torch.randperm(len(bow), generator=gen)
            total, steps = 0.0, 0
            for start in range(0, len(bow), batch_size):
                loss = self.topic_loss(bow[order[start : start + batch_size]])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total, steps = total + loss.item(), steps + 1
            history.append(total / steps)
            logger.info("GSM pretraining epoch %d/%d: loss/word %.4f", epoch + 1, epochs, history[-1])
        return history


__all__ = ["STOPWORDS", "TitaConfig", "TitaError", "TitaNet", "TitaReranker"]
