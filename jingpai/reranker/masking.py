"""Padding-aware tensor helpers shared by the attention models (TITA, HCAN, IASM).

Every softmax, mean and max over a padded axis goes through these, so padded positions never receive
attention weight nor leak into pooled vectors; a row whose positions are *all* padding yields zeros
instead of NaN.
"""

from __future__ import annotations

import torch


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax over ``dim`` where ``mask`` is ``True``; masked entries get 0, all-masked slices give 0.

    Args:
        logits: scores.
        mask: bool tensor broadcastable to ``logits``.
        dim: axis to normalise.
    """
    mask = mask.expand_as(logits)
    filled = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    probs = torch.softmax(filled, dim=dim) * mask
    # an all-masked slice softmaxes to uniform; the multiply above zeroes it, renormalise the rest
    total = probs.sum(dim=dim, keepdim=True)
    return probs / total.clamp_min(torch.finfo(probs.dtype).tiny)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Mean of ``values`` over ``dim`` counting only positions where ``mask`` (shape ``values.shape[:dim+1]``) is True."""
    m = mask.to(values.dtype)
    while m.dim() < values.dim():
        m = m.unsqueeze(-1)
    return (values * m).sum(dim) / m.sum(dim).clamp_min(1.0)


def masked_max(values: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Max of ``values`` over ``dim`` ignoring masked positions (0 where everything is masked)."""
    m = mask
    while m.dim() < values.dim():
        m = m.unsqueeze(-1)
    m = m.expand_as(values)
    out = values.masked_fill(~m, torch.finfo(values.dtype).min).amax(dim)
    return torch.where(m.any(dim), out, torch.zeros_like(out))


__all__ = ["masked_max", "masked_mean", "masked_softmax"]
