"""Re-read LSTM (Sha, Chang, Sui & Li, COLING 2016): Table 2 rows 10 and 12.

A BiLSTM encodes the premise into P; a re-read LSTM unit (rLSTM) then reads the hypothesis and,
before each word, re-reads the premise: it attends over P from its own memory ``m_{t-1}`` and
cell state ``c_{t-1}`` (R2-R3), and the premise summary ``m_t`` (R4) enters the gates (R5) and
the output (R7). The hypothesis states are averaged (R8) and classified by a tanh layer and a
softmax (R9). The paper's own text could not be read here: R1-R9 are our reconstruction from
the DIN paper's description of rLSTM, a public re-implementation and the word-by-word attention
(Rocktäschel et al. 2016) that rLSTM modifies. Sources, every choice with its knob, and the
parameter count (1,985,103 with 300-d word vectors, the paper's 2.0M): ``docs/models/rlstm.md``.
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
    check_nonnegative_int,
    check_num_classes,
    check_positive_int,
    check_probability,
    last_true_index,
    masked_mean,
    masked_softmax,
    run_packed,
)


class ReReadCell(nn.Module):
    """The rLSTM unit over a whole hypothesis: attention over P at every step, fed into the gates.

    State per example: ``h`` (hidden), ``c`` (cell), ``m`` (the re-read premise summary), all
    (B, k), zero at t = 0. Steps past a hypothesis' end keep its state unchanged, so the result
    for a sentence does not depend on the padding that follows it.
    """

    def __init__(self, input_size: int, hidden_size: int, memory_in_gates: bool,
                 memory_in_output: bool) -> None:
        super().__init__()
        k = hidden_size
        self.memory_in_gates, self.memory_in_output = memory_in_gates, memory_in_output
        # R5: the four blocks (i, f, g, o) of W x_t + U h_{t-1} + V m_t + b; one bias.
        self.W = nn.Linear(input_size, 4 * k)
        self.U = nn.Linear(k, 4 * k, bias=False)
        self.V = nn.Linear(k, 4 * k, bias=False) if memory_in_gates else None
        # R2: M_t = tanh(W^p P + (W^m m_{t-1} + W^c c_{t-1}) ⊗ e); R3: α_t = softmax(wᵀ M_t).
        self.W_p = nn.Linear(k, k, bias=False)
        self.W_m = nn.Linear(k, k, bias=False)
        self.W_c = nn.Linear(k, k, bias=False)
        self.w = nn.Linear(k, 1, bias=False)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, P: torch.Tensor,
                p_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # x: (B, Lh, d) hypothesis words; P: (B, Lp, k) premise encoding, masks (B, L) bool.
        B, Lh, _ = x.shape
        k = P.size(-1)
        Wx = self.W(x)        # (B, Lh, 4k): the input part of R5 for every step at once
        WpP = self.W_p(P)     # (B, Lp, k): the premise part of R2, the same at every step
        h = c = m = x.new_zeros(B, k)
        outputs, attentions = [], []
        for t in range(Lh):
            # R2-R3: re-read the premise from what has been read so far (m_{t-1}, c_{t-1}).
            query = self.W_m(m) + self.W_c(c)                          # (B, k)
            scores = self.w(torch.tanh(WpP + query[:, None, :])).squeeze(-1)  # (B, Lp)
            alpha = masked_softmax(scores, p_mask)                     # (B, Lp), 0 on padding
            m_t = (alpha[:, :, None] * P).sum(dim=1)                   # R4: (B, k)
            # R5-R6: an LSTM step on x_t with the premise summary m_t in every gate.
            gates = Wx[:, t] + self.U(h)                               # (B, 4k)
            if self.V is not None:
                gates = gates + self.V(m_t)
            i, f, g, o = gates.chunk(4, dim=-1)                        # (B, k) each
            i, f, o, g = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), torch.tanh(g)
            c_t = f * c + i * g                                        # R6
            h_t = o * torch.tanh(c_t)                                  # R7
            if self.memory_in_output:
                h_t = h_t + o * torch.tanh(m_t)
            # Padded steps (past this hypothesis' end) leave the state as it was.
            real = x_mask[:, t, None]                                  # (B, 1)
            h, c, m = (torch.where(real, h_t, h), torch.where(real, c_t, c),
                       torch.where(real, m_t, m))
            outputs.append(h_t * real)
            attentions.append(alpha * real)
        # (B, Lh, k) states h_t and (B, Lh, Lp) attention α_t, zero at padded steps
        return torch.stack(outputs, dim=1), torch.stack(attentions, dim=1)


class ReReadLSTM(Network):
    """Premise BiLSTM + rLSTM over the hypothesis + mean pooling + tanh layer + softmax.

    With ``hidden_size=300`` ("300D"), 300-d word vectors and 3 classes: 1,985,103 trainable
    parameters (Table 2 rows 10 / 12: 2.0M); the arithmetic is in docs/models/rlstm.md.
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        hidden_size: int = 300,
        premise_bidirectional: bool = True,
        memory_in_gates: bool = True,
        memory_in_output: bool = True,
        pooling: str = "mean",
        mlp_layers: int = 1,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.validate_config(hidden_size=hidden_size, premise_bidirectional=premise_bidirectional,
                             memory_in_gates=memory_in_gates, memory_in_output=memory_in_output,
                             pooling=pooling, mlp_layers=mlp_layers, dropout=dropout)
        check_num_classes(num_classes)
        k, d = hidden_size, embedding.embedding_dim
        self.embedding, self.pooling = embedding, pooling
        self.dropout = nn.Dropout(dropout)
        # R1: P = [→h; ←h], k/2 per direction (or one direction of size k), so P is (B, Lp, k).
        self.premise_lstm = nn.LSTM(d, k // 2 if premise_bidirectional else k, batch_first=True,
                                    bidirectional=premise_bidirectional)
        self.rlstm = ReReadCell(d, k, memory_in_gates, memory_in_output)
        # R9: mlp_layers tanh layers of width k (dropout before each), then the softmax layer.
        layers: list[nn.Module] = []
        for _ in range(mlp_layers):
            layers += [nn.Linear(k, k), nn.Tanh(), nn.Dropout(dropout)]
        self.classifier = nn.Sequential(*layers, nn.Linear(k, num_classes))

    @classmethod
    def validate_config(cls, *, hidden_size: int, premise_bidirectional: bool,
                        memory_in_gates: bool, memory_in_output: bool, pooling: str,
                        mlp_layers: int, dropout: float, **_: Any) -> None:
        check_positive_int("hidden_size (dim, the rLSTM size k)", hidden_size, "e.g. dim=300")
        if premise_bidirectional and hidden_size % 2:
            raise ConfigError(f"model.net.hidden_size (dim) must be even with "
                              f"model.net.premise_bidirectional=true (k/2 per direction), got "
                              f"{hidden_size}")
        if not (memory_in_gates or memory_in_output):
            raise ConfigError("model.net.memory_in_gates and model.net.memory_in_output are both "
                              "false: the premise would never reach the classifier")
        check_choice("pooling", pooling, ("mean", "last"))
        check_nonnegative_int("mlp_layers", mlp_layers)
        check_probability("dropout", dropout)

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Logits ``(B, num_classes)``; with details, the re-read attention ``(B, Lh, Lp)``."""
        # R1: premise words (B, Lp, d) -> BiLSTM over the real words (packed) -> P (B, Lp, k).
        p_words = self.dropout(self.embedding(premise))
        P = self.dropout(run_packed(self.premise_lstm, p_words, premise_mask))
        # R2-R7: the rLSTM reads the hypothesis (B, Lh, d), re-reading P before every word.
        h_words = self.dropout(self.embedding(hypothesis))
        states, attention = self.rlstm(h_words, hypothesis_mask, P, premise_mask)
        # R8: mean of h_t over the real hypothesis words (or the state at the last one).
        if self.pooling == "mean":
            pooled = masked_mean(states, hypothesis_mask)                          # (B, k)
        else:
            rows = torch.arange(states.size(0), device=states.device)
            pooled = states[rows, last_true_index(hypothesis_mask)]
        logits = self.classifier(self.dropout(pooled))                            # R9: (B, C)
        out = {"logits": logits}
        if return_details:
            out["attention"] = attention  # (B, Lh, Lp): α_t over the premise, rows of padding 0
            out["hypothesis_states"] = states  # (B, Lh, k), 0 on padding
            out["premise_encoding"] = P  # (B, Lp, k), 0 on padding
        return out

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """The premise attention α_t of each hypothesis step (rows sum to 1 over the premise)."""
        attention = details["attention"][index, : len(hypothesis), : len(premise)]
        return {"attention": HeatMap(
            attention.detach().float().cpu(), list(hypothesis), list(premise),
            "Re-read attention over the premise at each hypothesis word", "premise word",
            "hypothesis word", "attention weight")}
