"""match-LSTM (Wang & Jiang, NAACL 2016, "Learning Natural Language Inference with LSTM"): row 5.

An LSTM reads the premise (states h^s_j) and the hypothesis (states h^t_k) separately (Eq. 1).
Then a second LSTM, the match-LSTM, walks along the hypothesis: at word k it attends over the
premise states with a score that also sees its own previous state h^m_{k-1} (Eq. 6), takes the
weighted premise a_k (Eq. 2-3), and reads m_k = [a_k; h^t_k] (Eq. 7-8). Its state at the
hypothesis's last word, h^m_N, is classified by a softmax layer. A NULL premise position with
the fixed state h^s_0 = 0 lets a hypothesis word align with nothing (§2.4). Equation numbers
are the paper's. Choices, the recipe and the parameter count (2,076,003 with 300-d inputs,
against the printed 1.9M): ``docs/models/mlstm.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from entailment_lab.models.base import HeatMap, Network
from entailment_lab.models.common import (
    check_flags,
    check_num_classes,
    check_positive_int,
    check_probability,
    longest_first,
    masked_softmax,
    run_packed,
)


class MatchLSTMLayer(nn.Module):
    """Word-by-word attention (Eq. 2, 3, 6) feeding the match-LSTM (Eq. 7-8).

    ``e_kj = w^e · tanh(W^s h^s_j + W^t h^t_k + W^m h^m_{k-1})`` (Eq. 6),
    ``α_kj = softmax_j(e_kj)`` over the real premise positions (Eq. 3),
    ``a_k = Σ_j α_kj h^s_j`` (Eq. 2), ``h^m_k = LSTM([a_k; h^t_k], h^m_{k-1})`` (Eq. 7-8).
    """

    def __init__(self, hidden_size: int, attention_bias: bool) -> None:
        super().__init__()
        d = hidden_size
        self.W_s = nn.Linear(d, d, bias=False)  # premise states
        self.W_t = nn.Linear(d, d, bias=attention_bias)  # hypothesis state (+ b^e if enabled)
        self.W_m = nn.Linear(d, d, bias=False)  # previous match-LSTM state
        self.w_e = nn.Linear(d, 1, bias=False)  # scoring vector w^e
        self.cell = nn.LSTMCell(2 * d, d)  # Eq. 8: input m_k = [a_k; h^t_k]

    def forward(
        self,
        h_s: torch.Tensor,
        premise_mask: torch.Tensor,
        h_t: torch.Tensor,
        hypothesis_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """h_s (B, len_s, d), h_t (B, len_h, d) -> h^m_N (B, d), α (B, len_h, len_s).

        Each row runs exactly its own hypothesis length N (rows sorted longest first, the
        running prefix updated, as a packed sequence), so h^m_N does not depend on padding.
        α is 0 at padded hypothesis rows and padded premise columns.
        """
        batch, len_h, d = h_t.shape
        order, running = longest_first(hypothesis_mask.sum(dim=1), len_h)
        h_s, premise_mask, h_t = h_s[order], premise_mask[order], h_t[order]

        keys = self.W_s(h_s)  # W^s h^s_j for every j, once: (B, len_s, d)
        queries = self.W_t(h_t)  # W^t h^t_k (+ b^e) for every k: (B, len_h, d)
        h = c = h_t.new_zeros(batch, d)  # h^m_0 = c^m_0 = 0
        finished, alphas = [], []  # final states of rows whose hypothesis has ended; α_k
        # unbind, not x[:, k]: indexing in a loop costs a full-size zero tensor per step in the
        # backward pass.
        for q_k, h_t_k, n in zip(queries.unbind(1), h_t.unbind(1), running, strict=True):
            if n < len(h):  # rows n.. have passed their last word: their state is h^m_N
                finished.append(h[n:])
                h, c = h[:n], c[:n]
            # Eq. 6: (n, len_s)
            e = self.w_e(torch.tanh(keys[:n] + (q_k[:n] + self.W_m(h)).unsqueeze(1))).squeeze(-1)
            alpha = masked_softmax(e, premise_mask[:n])  # Eq. 3: (n, len_s), 0 at padding
            a = (alpha.unsqueeze(1) @ h_s[:n]).squeeze(1)  # Eq. 2: (n, d)
            m = torch.cat([a, h_t_k[:n]], dim=-1)  # Eq. 7: m_k = [a_k; h^t_k], (n, 2d)
            h, c = self.cell(m, (h, c))  # Eq. 8: h^m_k, c^m_k (n, d)
            alphas.append(F.pad(alpha, (0, 0, 0, batch - n)))  # (B, len_s), 0 for ended rows

        final = torch.cat([h, *reversed(finished)])  # h^m_N of every row, sorted order: (B, d)
        inverse = torch.argsort(order)
        return final[inverse], torch.stack(alphas, dim=1)[inverse]  # (B, d), (B, len_h, len_s)


class MatchLSTM(Network):
    """Table 2 row 5: 300D mLSTM (word-by-word attention + match-LSTM) for sentence pairs."""

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        hidden_size: int = 300,
        dropout: float = 0.3,
        share_encoder: bool = True,
        null_premise: bool = True,
        attention_bias: bool = False,
    ) -> None:
        super().__init__()
        self.validate_config(hidden_size=hidden_size, dropout=dropout,
                             share_encoder=share_encoder, null_premise=null_premise,
                             attention_bias=attention_bias)
        check_num_classes(num_classes)
        self.embedding = embedding
        self.null_premise = null_premise
        d = hidden_size
        self.dropout = nn.Dropout(dropout)  # on the word vectors of both sentences
        self.premise_lstm = nn.LSTM(embedding.embedding_dim, d, batch_first=True)  # Eq. 1
        self.hypothesis_lstm = (self.premise_lstm if share_encoder  # the official code's
                                else nn.LSTM(embedding.embedding_dim, d, batch_first=True))
        self.match = MatchLSTMLayer(d, attention_bias)
        self.classifier = nn.Linear(d, num_classes)  # softmax layer on h^m_N (in the loss)

    @classmethod
    def validate_config(cls, *, hidden_size: int, dropout: float, share_encoder: bool,
                        null_premise: bool, attention_bias: bool, **_: Any) -> None:
        check_positive_int("hidden_size (dim, the size d of every LSTM state)", hidden_size,
                           "e.g. dim=300")
        check_probability("dropout", dropout)
        check_flags(share_encoder=share_encoder, null_premise=null_premise,
                    attention_bias=attention_bias)

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Logits ``(B, num_classes)``; with details the attention α (B, len_h, [1 +] len_p)."""
        x_s = self.dropout(self.embedding(premise))  # (B, len_p, d_emb)
        x_t = self.dropout(self.embedding(hypothesis))  # (B, len_h, d_emb)
        # Eq. 1, packed: each sentence's states stop at its last word, 0 at padding.
        h_s = run_packed(self.premise_lstm, x_s, premise_mask)  # h^s_j: (B, len_p, d)
        h_t = run_packed(self.hypothesis_lstm, x_t, hypothesis_mask)  # h^t_k: (B, len_h, d)
        mask_s = premise_mask.bool()
        if self.null_premise:  # §2.4: NULL, a fixed h^s_0 = 0, first among the premise states
            h_s = torch.cat([h_s.new_zeros(h_s.shape[0], 1, h_s.shape[2]), h_s], dim=1)
            mask_s = torch.cat([mask_s.new_ones(mask_s.shape[0], 1), mask_s], dim=1)
        h_m, alpha = self.match(h_s, mask_s, h_t, hypothesis_mask.bool())  # (B, d)
        out = {"logits": self.classifier(h_m)}  # (B, num_classes)
        if return_details:
            out["attention"] = alpha  # α_kj: (B, len_h, len_s), rows sum to 1 on real words
            out["premise_mask"] = mask_s  # (B, len_s), NULL first when null_premise
            out["hypothesis_mask"] = hypothesis_mask.bool()  # (B, len_h)
            out["match_state"] = h_m  # h^m_N: (B, d)
        return out

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """The word-by-word attention α_kj (Eq. 3): hypothesis words × premise words."""
        cols = ["NULL", *premise] if self.null_premise else list(premise)
        alpha = details["attention"][index, : len(hypothesis), : len(cols)]
        return {"attention": HeatMap(
            alpha.detach().float().cpu(), list(hypothesis), cols,
            "Word-by-word attention α_kj (softmax over the premise)", "premise word j",
            "hypothesis word k", "attention weight")}
