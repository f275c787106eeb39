"""Building blocks shared by the model files: masked reductions and the pair-feature classifier.

Conventions used by every model in this package (see ``models/__init__.py``):
masks are ``torch.bool`` with ``True`` on real tokens, padding id is 0, and every sentence in a
batch has at least one real token (the DataModule guarantees it).
"""

from __future__ import annotations

import torch
from torch import nn


def masked_fill_value(dtype: torch.dtype) -> float:
    """The most negative finite value of ``dtype`` (safer than -inf: no NaN on all-masked rows)."""
    return torch.finfo(dtype).min


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` that gives exactly zero weight where ``mask`` is False.

    ``mask`` must broadcast to ``scores``.
    """
    scores = scores.masked_fill(~mask, masked_fill_value(scores.dtype))
    return torch.softmax(scores, dim=dim) * mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` (batch, length, features) over real positions of ``mask`` (batch, length)."""
    weights = mask.unsqueeze(-1).to(x.dtype)  # (batch, length, 1)
    return (x * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max of ``x`` (batch, length, features) over real positions only."""
    return x.masked_fill(~mask.unsqueeze(-1), masked_fill_value(x.dtype)).max(dim=1).values


def last_true_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last real position: (batch,) for a (batch, length) mask."""
    return mask.long().sum(dim=1).clamp_min(1) - 1


def count_trainable_parameters(module: nn.Module, exclude: nn.Module | None = None) -> int:
    """Trainable parameters of ``module`` except those of ``exclude`` (the word embeddings).

    This is the "Para" column of the papers' tables: word vectors are never counted, whether
    frozen or fine-tuned.
    """
    skip = {id(p) for p in exclude.parameters()} if exclude is not None else set()
    return sum(p.numel() for p in module.parameters() if p.requires_grad and id(p) not in skip)


class PairFeatureClassifier(nn.Module):
    """Classify a pair from two sentence vectors with ``[u; v; |u - v|; u * v]`` and an MLP.

    The matching heuristic of Mou et al. (2016) / Conneau et al. (2017), used by the sentence-
    encoder baselines (LSTM, DCNN on pairs).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_classes: int,
        num_layers: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = 4 * input_size
        for _ in range(num_layers):
            layers += [nn.Dropout(dropout), nn.Linear(size, hidden_size), nn.Tanh()]
            size = hidden_size
        layers += [nn.Dropout(dropout), nn.Linear(size, num_classes)]
        self.mlp = nn.Sequential(*layers)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # u, v: (batch, input_size) -> logits (batch, num_classes)
        return self.mlp(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))
