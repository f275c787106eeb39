"""Word-by-word attention (Rocktäschel, Grefenstette, Hermann, Kočiský & Blunsom, ICLR 2016,
"Reasoning about Entailment with Neural Attention", arXiv 1509.06664): Table 2 row 2.

Conditional encoding (§2.2): an LSTM reads the premise; a second LSTM with its own weights reads
a delimiter and the hypothesis, its memory cell starting from the premise LSTM's last cell state.
Word-by-word attention (§2.4, Eq. 11-13): at every hypothesis word t the model attends over the
premise outputs Y, with a recurrent attention representation r_t; the pair is
``h* = tanh(W^p r_N + W^x h_N)`` (Eq. 14), classified by a softmax layer. Equation numbers are
the paper's; k is the hidden size. Choices, recipe and the parameter count (252,103 for the
paper's 252k; DIN's Table 2 prints 250k): ``docs/models/wbw_attention.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from entailment_lab.models.base import HeatMap, Network
from entailment_lab.models.common import (
    check_choice,
    check_flags,
    check_num_classes,
    check_positive_int,
    check_probability,
    count_trainable_parameters,
    last_true_index,
    masked_softmax,
    pack,
    run_rnn,
)

CONDITIONS = ("cell", "state")


class WordByWordAttention(Network):
    """Conditional encoding with word-by-word attention over the premise (Table 2 row 2)."""

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        hidden_size: int = 100,
        dropout: float = 0.1,
        delimiter: bool = True,
        condition_on: str = "cell",
        single_lstm_bias: bool = False,
    ) -> None:
        super().__init__()
        self.validate_config(hidden_size=hidden_size, dropout=dropout, delimiter=delimiter,
                             condition_on=condition_on, single_lstm_bias=single_lstm_bias)
        check_num_classes(num_classes)
        self.embedding = embedding
        self.condition_on = condition_on
        d_emb, k = embedding.embedding_dim, hidden_size

        # The delimiter read before the hypothesis (§2.2, Fig. 1): a word vector of its own,
        # trained like the paper's out-of-vocabulary words (U[-0.05, 0.05]).
        self.delimiter = (nn.Parameter(torch.empty(d_emb).uniform_(-0.05, 0.05))
                          if delimiter else None)
        # "a linear layer to project word vectors to the dimensionality of the hidden size"
        # (§2.2), shared by both sentences: x_i = W^in v_i + b^in.
        self.projection = nn.Linear(d_emb, k)
        self.dropout = nn.Dropout(dropout)
        # Eq. 1-6, two LSTMs "with different parameters" (§2.2).
        self.premise_lstm = nn.LSTM(k, k, batch_first=True)
        self.hypothesis_lstm = nn.LSTM(k, k, batch_first=True)
        if single_lstm_bias:  # Eq. 1-6 literally: one bias per gate (b_hh fixed at zero)
            for lstm in (self.premise_lstm, self.hypothesis_lstm):
                nn.init.zeros_(lstm.bias_hh_l0)
                lstm.bias_hh_l0.requires_grad_(False)
        # Eq. 11-13: M_t = tanh(W^y Y + (W^h h_t + W^r r_{t-1}) ⊗ e_L),
        # α_t = softmax(wᵀ M_t), r_t = Y α_tᵀ + tanh(W^t r_{t-1}); no biases in the paper.
        self.W_y = nn.Linear(k, k, bias=False)
        self.W_h = nn.Linear(k, k, bias=False)
        self.W_r = nn.Linear(k, k, bias=False)
        self.W_t = nn.Linear(k, k, bias=False)
        self.w = nn.Linear(k, 1, bias=False)
        # Eq. 14: h* = tanh(W^p r_N + W^x h_N), then a softmax layer (softmax in the loss).
        self.W_p = nn.Linear(k, k, bias=False)
        self.W_x = nn.Linear(k, k, bias=False)
        self.classifier = nn.Linear(k, num_classes)

    @classmethod
    def validate_config(cls, *, hidden_size: int, dropout: float, delimiter: bool,
                        condition_on: str, single_lstm_bias: bool, **_: Any) -> None:
        check_positive_int("hidden_size (k, set by dim=)", hidden_size,
                           "the paper's k is 100 (dim=100)")
        check_probability("dropout", dropout)
        check_choice("condition_on", condition_on, CONDITIONS)
        check_flags(delimiter=delimiter, single_lstm_bias=single_lstm_bias)

    def paper_parameter_count(self) -> int | None:
        """Trainable parameters except word vectors, the delimiter being one (the paper's |θ|_M
        leaves out word embeddings); None without a delimiter (the true count then)."""
        if self.delimiter is None:
            return None
        return count_trainable_parameters(self, exclude=self.embedding) - self.delimiter.numel()

    def _inputs(self, ids: torch.Tensor) -> torch.Tensor:
        """x_i = dropout(W^in v_i + b^in): (batch, len) -> (batch, len, k)."""
        return self.dropout(self.projection(self.embedding(ids)))

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Logits ``(batch, num_classes)``; with details the attention α (batch, len_h, len_p)."""
        batch, len_h = hypothesis.shape
        # --- Conditional encoding (§2.2). Packed sequences: padding is never read. -----------
        x_p = self._inputs(premise)  # (B, len_p, k)
        Y, (h_L, c_L) = run_rnn(self.premise_lstm, pack(x_p, premise_mask))  # h_L, c_L: (1, B, k)
        Y, _ = nn.utils.rnn.pad_packed_sequence(Y, batch_first=True,
                                                total_length=premise.shape[1])  # (B, len_p, k)
        # The hypothesis LSTM starts from the premise's last cell state c_L ("its memory state
        # is initialized with the last cell state of the previous LSTM"); h_0 = 0, or the
        # premise's h_L too with condition_on="state". Packed: each premise's own last word.
        h_0 = h_L if self.condition_on == "state" else torch.zeros_like(h_L)  # (1, B, k)

        vectors = self.embedding(hypothesis)  # (B, len_h, d_emb)
        mask_h = hypothesis_mask
        if self.delimiter is not None:  # [delimiter; hypothesis]: (B, 1 + len_h, d_emb)
            delim = self.delimiter.to(vectors.dtype).expand(batch, 1, -1)
            vectors = torch.cat([delim, vectors], dim=1)
            mask_h = torch.cat([mask_h.new_ones(batch, 1), mask_h], dim=1)
        x_h = self.dropout(self.projection(vectors))  # (B, [1 +] len_h, k)
        H, _ = run_rnn(self.hypothesis_lstm, pack(x_h, mask_h), (h_0, c_L))
        H, _ = nn.utils.rnn.pad_packed_sequence(H, batch_first=True, total_length=x_h.shape[1])
        H = H[:, -len_h:]  # (B, len_h, k): the hypothesis words' outputs (no delimiter step)

        # --- Word-by-word attention (§2.4, Eq. 11-13), one step per hypothesis word. --------
        WyY = self.W_y(Y)  # W^y Y, computed once: (B, len_p, k)
        Wh_H = self.W_h(H)  # W^h h_t for every t: (B, len_h, k)
        r = H.new_zeros(batch, H.shape[-1])  # r_0 = 0: (B, k)
        rs, alphas = [], []
        # Rows whose hypothesis has ended keep stepping on zero outputs; their r after the end is
        # never read (r_N is taken at each row's own last word below).
        for Wh_h_t in Wh_H.unbind(1):  # (B, k) each
            M_t = torch.tanh(WyY + (Wh_h_t + self.W_r(r))[:, None, :])  # Eq. 11: (B, len_p, k)
            alpha_t = masked_softmax(self.w(M_t).squeeze(-1), premise_mask, dim=1)  # Eq. 12
            r = (alpha_t[:, None, :] @ Y).squeeze(1) + torch.tanh(self.W_t(r))  # Eq. 13: (B, k)
            rs.append(r)
            alphas.append(alpha_t)

        # --- Eq. 14 at each row's last hypothesis word N, then the softmax layer. -----------
        last = last_true_index(hypothesis_mask)  # (B,)
        rows = torch.arange(batch, device=H.device)
        r_N = torch.stack(rs, dim=1)[rows, last]  # (B, k)
        h_N = H[rows, last]  # (B, k)
        h_star = torch.tanh(self.W_p(r_N) + self.W_x(h_N))  # (B, k)
        out = {"logits": self.classifier(self.dropout(h_star))}  # (B, num_classes)
        if return_details:
            # α_t over the premise for every hypothesis word; padded words' rows are zero.
            attention = torch.stack(alphas, dim=1) * hypothesis_mask[:, :, None]  # (B, lh, lp)
            out.update(attention=attention, premise_mask=premise_mask,
                       hypothesis_mask=hypothesis_mask, pair_representation=h_star)
        return out

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """α_t of Eq. 12: one row per hypothesis word, over the premise words."""
        lp, lh = len(premise), len(hypothesis)
        attention = details["attention"][index, :lh, :lp].detach().float().cpu()
        return {"attention": HeatMap(
            attention, list(hypothesis), list(premise), "Word-by-word attention (Eq. 12)",
            "premise word", "hypothesis word", "attention weight")}
