"""The layers of ``bertca`` (:mod:`jingpai.reranker.models.bertca`): masked co-attention between entity and
document states, a packed BiLSTM and the Deep-Fusion LSTMs decoder (Liu et al. 2016). Its inputs (and the split of
a jointly encoded pair into its two sides) are built in :mod:`jingpai.reranker.models.bertca_inputs`.

Padding never leaks into real positions: masked keys get exactly zero attention weight, packed LSTMs
skip padding, and a DF-LSTM cell depends only on cells with smaller indices.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` where ``mask`` is False gets exactly 0 weight (all-masked rows give 0)."""
    logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    return logits.softmax(dim=dim) * mask


def co_attention(
    h: torch.Tensor, h_mask: torch.Tensor, hd: torch.Tensor, hd_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Co-attention of entity states ``h`` [B,N,l] and document states ``hd`` [B,M,l].

    Returns:
        ``(G [B,N,2l], G' [B,M,2l])``; padded positions are zero and padded keys get no weight.
    """
    affinity = hd @ h.transpose(1, 2)  # L: [B, M, N]
    pair = hd_mask.unsqueeze(2) & h_mask.unsqueeze(1)  # [B, M, N]
    attn_doc = masked_softmax(affinity, pair, dim=2)  # A'ᵀ: each doc position over entity positions
    attn_ent = masked_softmax(affinity.transpose(1, 2), pair.transpose(1, 2), dim=2)  # Aᵀ: entity over doc
    f = attn_doc @ h  # [B, M, l]
    g = attn_ent @ torch.cat([hd, f], dim=-1)  # [B, N, 2l]
    f_prime = attn_ent @ hd  # [B, N, l]
    g_prime = attn_doc @ torch.cat([h, f_prime], dim=-1)  # [B, M, 2l]
    return g * h_mask.unsqueeze(-1), g_prime * hd_mask.unsqueeze(-1)


class PooledNorm(nn.BatchNorm1d):
    """BatchNorm over the K-max pooled features; a training batch of one pair (a run's last batch can be)
    has no spread to normalise by, so it uses the running statistics, as evaluation does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] == 1:
            return nn.functional.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        return super().forward(x)


class BiLSTM(nn.Module):
    """A packed BiLSTM: outputs at real positions never depend on padding; padded outputs are 0."""

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x.float(), lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out * mask.unsqueeze(-1)


class DeepFusionLSTM(nn.Module):
    """DF-LSTMs (Liu et al. 2016): two LSTMs coupled over the grid of prefixes g_{1:i}, g'_{1:j}.

    ``h^g_{i,j}, c^g_{i,j} = LSTM([g_i ; H_{i,j}], c^g_{i-1,j})`` and
    ``h^{g'}_{i,j}, c^{g'}_{i,j} = LSTM([g'_j ; H_{i,j}], c^{g'}_{i,j-1})`` where ``H_{i,j}`` holds the
    fused states ``h = h^g ⊕ h^{g'}`` of cells (i-1,j), (i,j-1), (i-1,j-1). Cells on one anti-diagonal
    are independent, so the grid is swept diagonal by diagonal. Cell (i,j) depends only on cells with
    smaller indices, hence real cells never see padding.

    Returns per-position vectors: ``u_i = h^g_{i,M}`` (entity position i after the whole document) and
    ``v_j = h^{g'}_{N,j}`` (document position j after the whole entity), N and M the real lengths.
    """

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.cell_g = nn.Linear(input_size + 6 * hidden, 4 * hidden)
        self.cell_d = nn.Linear(input_size + 6 * hidden, 4 * hidden)

    @staticmethod
    def _step(linear: nn.Linear, x: torch.Tensor, c_prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i, f, g, o = linear(x).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def forward(
        self, g: torch.Tensor, g_mask: torch.Tensor, gd: torch.Tensor, gd_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, _ = g.shape
        m = gd.shape[1]
        d = self.hidden
        g, gd = g.float(), gd.float()
        rows = torch.arange(n + 1, device=g.device)  # i = 0..N on every diagonal (i = 0 is the border)
        zeros = g.new_zeros(b, n + 1, d)
        # per diagonal k (cells (i, k-i)): h^g, c^g, h^g', c^g' as [B, N+1, d]
        prev2 = (zeros, zeros, zeros, zeros)
        prev1 = (zeros, zeros, zeros, zeros)
        out_g, out_d = [zeros, zeros], [zeros, zeros]  # diagonals 0 and 1 are all border
        g_pad = torch.cat([g.new_zeros(b, 1, g.shape[2]), g], dim=1)  # g_pad[:, i] = g_i (1-based)
        gd_pad = torch.cat([gd.new_zeros(b, 1, gd.shape[2]), gd], dim=1)
        for k in range(2, n + m + 1):
            j = k - rows
            valid = ((rows >= 1) & (j >= 1) & (j <= m)).view(1, n + 1, 1)
            jc = j.clamp(0, m)

            def up(t: torch.Tensor) -> torch.Tensor:  # value at row i-1 on a diagonal (row 0 → border)
                return torch.cat([t.new_zeros(b, 1, d), t[:, :-1]], dim=1)

            hg1, cg1, hd1, cd1 = prev1
            hg2, _, hd2, _ = prev2
            # (i-1, j) and (i, j-1) lie on diagonal k-1 at rows i-1 and i; (i-1, j-1) on k-2 at row i-1
            fused = torch.cat([up(hg1), up(hd1), hg1, hd1, up(hg2), up(hd2)], dim=-1)
            h_g, c_g = self._step(self.cell_g, torch.cat([g_pad[:, rows], fused], dim=-1), up(cg1))
            h_d, c_d = self._step(self.cell_d, torch.cat([gd_pad[:, jc], fused], dim=-1), cd1)
            cur = tuple(torch.where(valid, t, 0.0) for t in (h_g, c_g, h_d, c_d))
            out_g.append(cur[0])
            out_d.append(cur[2])
            prev2, prev1 = prev1, cur
        diag_g = torch.stack(out_g, dim=1)  # [B, N+M+1, N+1, d]; cell (i, j) at [:, i+j, i]
        diag_d = torch.stack(out_d, dim=1)
        n_real = g_mask.sum(1)  # [B]
        m_real = gd_mask.sum(1)
        batch = torch.arange(b, device=g.device).unsqueeze(1)
        i_idx = torch.arange(1, n + 1, device=g.device).unsqueeze(0)  # [1, N]
        j_idx = torch.arange(1, m + 1, device=g.device).unsqueeze(0)  # [1, M]
        u = diag_g[batch, (i_idx + m_real.unsqueeze(1)).clamp(max=n + m), i_idx]  # h^g_{i, M_b}
        v = diag_d[batch, (n_real.unsqueeze(1) + j_idx).clamp(max=n + m), n_real.unsqueeze(1).expand(-1, m)]
        return u * g_mask.unsqueeze(-1), v * gd_mask.unsqueeze(-1)


__all__ = ["BiLSTM", "DeepFusionLSTM", "PooledNorm", "co_attention", "masked_softmax"]
