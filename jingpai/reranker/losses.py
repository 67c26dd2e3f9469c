"""Ranking losses over the candidates of one query: what a reranker is asked to do at serving time.

A pair loss (binary cross-entropy) asks "is this pair a match?"; a reranker is only ever asked "which of
these 20 lexically close candidates is the match?". :func:`in_window_loss` trains that question: the
pairs of a batch that share a query (the same row of the batch's distinct texts, ``q_index``) form that
query's window, and each window's positives must win a softmax over the window.

>>> import torch
>>> logits = torch.tensor([3.0, 0.0, 0.0, 1.0, 1.0])
>>> target = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])
>>> groups = torch.tensor([0, 0, 0, 1, 1])
>>> round(float(in_window_loss(logits, target, groups)), 4)  # (0.0949 + 0.6931) / 2
0.394

A query whose window holds only positives or only negatives teaches nothing about ranking and is left out:

>>> float(in_window_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]), torch.tensor([0, 1])))
0.0
"""

from __future__ import annotations

import torch

#: stands in for log(0) so an all-masked window gives a finite (and then discarded) value, not NaN gradients
_NEG = -1e4


def _group_logsumexp(values: torch.Tensor, index: torch.Tensor, groups: int) -> torch.Tensor:
    """``logsumexp`` of ``values`` per group (``index`` gives each value's group, ``0..groups-1``)."""
    peak = values.new_full((groups,), _NEG).scatter_reduce(0, index, values, reduce="amax", include_self=True)
    summed = values.new_zeros(groups).scatter_add(0, index, torch.exp(values - peak[index]))
    return torch.log(summed.clamp(min=1e-30)) + peak


def in_window_loss(logits: torch.Tensor, target: torch.Tensor, groups: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """Multi-positive softmax cross-entropy per query window, averaged over the windows that hold both a
    positive (``target >= 0.5``) and a negative.

    For one window with candidates ``i`` and positives ``P``: ``−log(Σ_{i∈P} e^{z_i} / Σ_i e^{z_i})`` with
    ``z = logits / temperature`` — the probability mass the window puts on its paraphrases.

    Args:
        logits: ``[B]`` model logits of the batch's pairs.
        target: ``[B]`` labels in [0, 1] (soft labels count as positive from 0.5).
        groups: ``[B]`` query of each pair (any integer ids; equal ids = one window).
        temperature: softmax temperature.

    Raises:
        ValueError: the shapes differ or ``temperature`` is not positive.
    """
    if not (logits.shape == target.shape == groups.shape) or logits.ndim != 1:
        raise ValueError(f"logits, target and groups must be 1-d of one shape, got {tuple(logits.shape)}, "
                         f"{tuple(target.shape)}, {tuple(groups.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    _, index = torch.unique(groups, return_inverse=True)
    count = int(index.max()) + 1 if index.numel() else 0
    z = logits.float() / temperature
    positive = target >= 0.5
    every = _group_logsumexp(z, index, count)
    wins = _group_logsumexp(z.masked_fill(~positive, _NEG), index, count)
    has_pos = torch.zeros(count, dtype=torch.bool, device=z.device).index_fill(0, index[positive], True)
    has_neg = torch.zeros(count, dtype=torch.bool, device=z.device).index_fill(0, index[~positive], True)
    valid = has_pos & has_neg
    if not bool(valid.any()):
        return z.sum() * 0.0  # keeps the graph (and the gradient's dtype) for an empty window set
    return (every - wins)[valid].mean()


__all__ = ["in_window_loss"]
