"""Decomposable Attention (Parikh, Täckström, Das & Uszkoreit, EMNLP 2016): Table 2 rows 8 and 9.

Attend, compare, aggregate. Each word of one sentence is softly aligned with the other sentence
(attend, Eq. 1-2), each word is compared with what it is aligned to (compare, Eq. 3), and the
comparisons are summed and classified (aggregate, Eq. 4-5). No recurrence, no word order
(except for the optional intra-sentence attention's distance biases, Eq. 7-8). Equation numbers
are the paper's. The NULL token, weight sharing, initialisation, distance buckets, masks and the
parameter counts (381,803 / 582,214 for the paper's 382k / 582k): ``docs/models/decatt.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from entailment_lab.errors import ConfigError
from entailment_lab.models.base import HeatMap, Network
from entailment_lab.models.common import (
    check_choice,
    check_num_classes,
    check_positive_int,
    check_probability,
    count_trainable_parameters,
    masked_softmax,
)


class FeedForward(nn.Module):
    """Two ReLU layers with dropout before each linear map: F, G, F_intra and the body of H."""

    def __init__(self, input_size: int, hidden_size: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Dropout(dropout),
            nn.Linear(input_size, hidden_size),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (..., input_size) -> (..., hidden_size)
        return self.net(x)


class IntraSentenceAttention(nn.Module):
    """Self-alignment within one sentence with a learned bias per (clipped) word distance.

    ``f_ij = F_intra(a_i)^T F_intra(a_j)`` (Eq. 7);
    ``a'_i = sum_j softmax_j(f_ij + d_{i-j}) a_j`` (Eq. 8), ``d`` indexed by
    ``min(|i - j|, max_distance)``.
    """

    def __init__(self, hidden_size: int, dropout: float, max_distance: int) -> None:
        super().__init__()
        self.max_distance = max_distance
        self.F_intra = FeedForward(hidden_size, hidden_size, dropout)
        self.distance_bias = nn.Parameter(torch.zeros(max_distance + 1))  # d_0 .. d_max

    def forward(self, a: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # a: (batch, len, h); mask: (batch, len) bool
        length = a.size(1)
        projected = self.F_intra(a)  # (batch, len, h)
        f = projected @ projected.transpose(1, 2)  # Eq. 7: (batch, len, len)
        position = torch.arange(length, device=a.device)
        distance = (position[:, None] - position[None, :]).abs().clamp_max(self.max_distance)
        scores = f + self.distance_bias[distance]  # (batch, len, len) + (len, len)
        weights = masked_softmax(scores, mask[:, None, :], dim=2)  # over j: (batch, len, len)
        a_prime = weights @ a  # Eq. 8: (batch, len, h)
        return a_prime, weights


class DecomposableAttention(Network):
    """Decomposable Attention for sentence pairs (premise a, hypothesis b).

    ``intra_attention=False`` is Table 2 row 8 (381,803 parameters with 300-d word vectors and
    3 classes), ``intra_attention=True`` row 9 (582,214); the arithmetic is in
    docs/models/decatt.md.
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        hidden_size: int = 200,
        dropout: float = 0.2,
        intra_attention: bool = False,
        max_distance: int = 10,
        init_std: float = 0.01,
        null_trainable: bool = False,
        null_init: str = "unit",
    ) -> None:
        super().__init__()
        self.validate_config(hidden_size=hidden_size, dropout=dropout, max_distance=max_distance,
                             init_std=init_std, null_init=null_init)
        check_num_classes(num_classes)

        self.embedding = embedding
        self.intra_attention = intra_attention
        input_size = embedding.embedding_dim
        h = hidden_size

        # NULL word vector, prefixed to every sentence (docs/models/decatt.md): a random direction
        # of unit length like harvardnlp's normalised <s> vector, or N(0, init_std²) per entry.
        null = torch.randn(input_size)
        null = null / null.norm() if null_init == "unit" else null * init_std
        if null_trainable:
            self.null_vector = nn.Parameter(null)
        else:
            self.register_buffer("null_vector", null, persistent=True)

        self.projection = nn.Linear(input_size, h, bias=False)  # word vectors -> h
        self.intra = IntraSentenceAttention(h, dropout, max_distance) if intra_attention else None
        word_size = 2 * h if intra_attention else h  # size of a-bar: [a; a'] or a
        self.F = FeedForward(word_size, h, dropout)  # attend
        self.G = FeedForward(2 * word_size, h, dropout)  # compare [a-bar_i; beta_i]
        self.H = nn.Sequential(FeedForward(2 * h, h, dropout), nn.Linear(h, num_classes))

        # Gaussian init of every trainable parameter of this model (not the word vectors).
        skip = {id(p) for p in self.embedding.parameters()} | {id(self.null_vector)}
        with torch.no_grad():
            for p in self.parameters():
                if id(p) not in skip:
                    p.normal_(0.0, init_std)

    @classmethod
    def validate_config(cls, *, hidden_size: int, dropout: float, max_distance: int,
                        init_std: float, null_init: str, **_: Any) -> None:
        check_positive_int("hidden_size", hidden_size)
        check_probability("dropout", dropout)
        if max_distance < 0:
            raise ConfigError(f"model.net.max_distance must be >= 0, got {max_distance}.")
        if init_std <= 0.0:
            raise ConfigError(f"model.net.init_std must be > 0, got {init_std}.")
        check_choice("null_init", null_init, ("unit", "normal"))

    def paper_parameter_count(self) -> int:
        """Trainable parameters except word vectors, counting a trainable NULL as a word vector."""
        count = count_trainable_parameters(self, exclude=self.embedding)
        if isinstance(self.null_vector, nn.Parameter):
            count -= self.null_vector.numel()
        return count

    def _words(
        self, tokens: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """NULL-prefixed, projected (and optionally self-attended) word representations a-bar."""
        vectors = self.embedding(tokens)  # (batch, len, d_emb)
        null = self.null_vector.to(vectors.dtype).expand(vectors.size(0), 1, -1)
        vectors = torch.cat([null, vectors], dim=1)  # (batch, 1 + len, d_emb)
        mask = torch.cat([mask.new_ones(mask.size(0), 1), mask.bool()], dim=1)  # (batch, 1 + len)
        a = self.projection(vectors)  # (batch, 1 + len, h)
        if self.intra is None:
            return a, mask, None
        a_prime, intra_weights = self.intra(a, mask)  # (batch, 1 + len, h), (.., 1 + len, 1 + len)
        return torch.cat([a, a_prime], dim=-1), mask, intra_weights  # a-bar = [a; a']

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Logits ``(batch, num_classes)``; with details, the attention maps (NULL at index 0)."""
        # premise: (batch, len_p), hypothesis: (batch, len_h); below la = len_p + 1, lb = len_h + 1
        a_bar, mask_a, intra_a = self._words(premise, premise_mask)  # (batch, la, word_size)
        b_bar, mask_b, intra_b = self._words(hypothesis, hypothesis_mask)  # (batch, lb, word_size)

        # Attend. Eq. 1: e_ij = F(a-bar_i)^T F(b-bar_j).
        e = self.F(a_bar) @ self.F(b_bar).transpose(1, 2)  # (batch, la, lb)
        # Eq. 2: beta_i = sum_j softmax_j(e_ij) b-bar_j; alpha_j = sum_i softmax_i(e_ij) a-bar_i.
        # The pair mask also zeroes the rows (columns) of padded words, which are never used.
        pair_mask = mask_a[:, :, None] & mask_b[:, None, :]  # (batch, la, lb)
        attn_over_b = masked_softmax(e, pair_mask, dim=2)  # real rows sum to 1: (batch, la, lb)
        attn_over_a = masked_softmax(e, pair_mask, dim=1)  # real cols sum to 1: (batch, la, lb)
        beta = attn_over_b @ b_bar  # (batch, la, word_size)
        alpha = attn_over_a.transpose(1, 2) @ a_bar  # (batch, lb, word_size)

        # Compare. Eq. 3: v1_i = G([a-bar_i; beta_i]), v2_j = G([b-bar_j; alpha_j]).
        v1_i = self.G(torch.cat([a_bar, beta], dim=-1))  # (batch, la, h)
        v2_j = self.G(torch.cat([b_bar, alpha], dim=-1))  # (batch, lb, h)

        # Aggregate. Eq. 4: sums over real positions only; Eq. 5: y-hat = H([v1; v2]).
        v1 = (v1_i * mask_a.unsqueeze(-1).to(v1_i.dtype)).sum(dim=1)  # (batch, h)
        v2 = (v2_j * mask_b.unsqueeze(-1).to(v2_j.dtype)).sum(dim=1)  # (batch, h)
        logits = self.H(torch.cat([v1, v2], dim=-1))  # (batch, num_classes)

        out = {"logits": logits}
        if return_details:
            out["attention_scores"] = e  # (batch, la, lb), unnormalised e_ij
            out["attention_premise_to_hypothesis"] = attn_over_b  # softmax over j (hypothesis)
            out["attention_hypothesis_to_premise"] = attn_over_a  # softmax over i (premise)
            out["premise_mask"] = mask_a  # (batch, la), NULL first
            out["hypothesis_mask"] = mask_b  # (batch, lb)
            if intra_a is not None and intra_b is not None:
                out["intra_attention_premise"] = intra_a  # (batch, la, la)
                out["intra_attention_hypothesis"] = intra_b  # (batch, lb, lb)
        return out

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """The soft alignment of Eq. 2 (softmax over the hypothesis), NULL first."""
        lp, lh = len(premise), len(hypothesis)
        attention = details["attention_premise_to_hypothesis"][index, : lp + 1, : lh + 1]
        return {"attention": HeatMap(
            attention.detach().float().cpu().T, ["NULL", *hypothesis], ["NULL", *premise],
            "Soft alignment (softmax over hypothesis)", "premise word", "hypothesis word",
            "attention weight")}
