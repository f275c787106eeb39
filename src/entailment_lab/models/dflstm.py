"""Deep Fusion LSTMs (Liu, Qiu, Chen & Huang, ACL 2016): Table 2 row 3.

Two interdependent LSTMs fill a grid over the sentence pair. Cell (i, j) holds h^(x)_{i,j}, the
encoding of the premise prefix x_{1:i} under the influence of the hypothesis prefix y_{1:j}, and
h^(y)_{i,j}, that of y_{1:j} under x_{1:i} (Eq. 6-8). An LSTM's recurrent input is not its own
previous state but H_{i,j} = r^(x)_{i,j} ⊕ r^(y)_{i,j} (Eq. 17): what attention reads from two
external memories, the K previous states of the x-LSTM along the premise and of the y-LSTM along
the hypothesis (Eq. 10-16). The pair's matching vector is h_{n,m} = h^(x) ⊕ h^(y) at the cell of
both true last words, classified by a softmax layer (§5.1). Cells on one anti-diagonal
(i + j = const) do not depend on each other, so the grid is filled diagonal by diagonal, each
diagonal vectorised over its cells and the batch. Equation numbers are the paper's; sizes,
choices, recipe and parameter counts: ``docs/models/dflstm.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from entailment_lab.errors import ConfigError
from entailment_lab.models.base import HeatMap, Network
from entailment_lab.models.common import (
    check_num_classes,
    check_positive_int,
    check_probability,
    masked_softmax,
)


class FusionLSTMCell(nn.Module):
    """One conditional LSTM step (Eq. 2-4 with Eq. 7/8's arguments): ``LSTM(H, c_prev, z)``.

    ``[c̃; o; i; f] = [tanh; σ; σ; σ](T_{A,b}[z; H])``, ``c = c̃ ⊙ i + c_prev ⊙ f``,
    ``h = o ⊙ tanh(c)``: one affine map with one bias (Jozefowicz et al. 2015, no peepholes).
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.affine = nn.Linear(input_size + 2 * hidden_size, 4 * hidden_size)  # T_{A,b}

    def forward(self, z: torch.Tensor, history: torch.Tensor, c_prev: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        # z: (B, L, d_in) input at the L cells; history H: (B, L, 2d); c_prev: (B, L, d)
        c_tilde, o, i, f = self.affine(torch.cat([z, history], dim=-1)).chunk(4, dim=-1)
        c = torch.tanh(c_tilde) * torch.sigmoid(i) + c_prev * torch.sigmoid(f)  # Eq. 3
        h = torch.sigmoid(o) * torch.tanh(c)  # Eq. 4
        return h, c


class MemoryAttention(nn.Module):
    """The align function ``g(M_k, r, z) = vᵀ tanh(W_a [M_k; r; z])`` (Eq. 16) and the read.

    ``W_a`` is kept as its three column blocks (memory, previous read, input), so that the
    memory block is applied once per stored state (``keys``) instead of once per read.
    """

    def __init__(self, hidden_size: int, input_size: int) -> None:
        super().__init__()
        self.W_memory = nn.Linear(hidden_size, hidden_size, bias=False)
        self.W_read = nn.Linear(hidden_size, hidden_size, bias=False)
        self.W_input = nn.Linear(input_size, hidden_size, bias=False)
        self.v = nn.Linear(hidden_size, 1, bias=False)

    def keys(self, h: torch.Tensor) -> torch.Tensor:
        """``W_a``'s memory block applied to states about to be stored: (..., d) -> (..., d)."""
        return self.W_memory(h)

    def forward(self, memory: torch.Tensor, keys: torch.Tensor, slot_mask: torch.Tensor,
                previous_read: torch.Tensor, z: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        # memory, keys: (B, L, K, d); slot_mask: (L, K), False where the slot lies before the
        # sentence start; previous_read r_{prev}: (B, L, d); z: (B, L, d_in)
        query = self.W_read(previous_read) + self.W_input(z)  # (B, L, d)
        scores = self.v(torch.tanh(keys + query.unsqueeze(2))).squeeze(-1)  # Eq. 16: (B, L, K)
        weights = masked_softmax(scores, slot_mask, dim=-1)  # Eq. 14/15; all-zero if no slot
        read = (weights.unsqueeze(-1) * memory).sum(dim=2)  # Eq. 12/13: r = a M, (B, L, d)
        return read, weights


class DeepFusionLayer(nn.Module):
    """One DF-LSTM grid layer: the x-LSTM, the y-LSTM and their memory attention."""

    def __init__(self, input_size: int, hidden_size: int, separate_attention: bool) -> None:
        super().__init__()
        self.lstm_x = FusionLSTMCell(input_size, hidden_size)  # reads the premise (Eq. 7)
        self.lstm_y = FusionLSTMCell(input_size, hidden_size)  # reads the hypothesis (Eq. 8)
        # Eq. 16 defines one g for both memories (Eq. 14 and 15); separate_attention: one each.
        count = 2 if separate_attention else 1
        self.attention = nn.ModuleList(
            MemoryAttention(hidden_size, input_size) for _ in range(count))

    @property
    def attention_x(self) -> MemoryAttention:
        return self.attention[0]

    @property
    def attention_y(self) -> MemoryAttention:
        return self.attention[-1]


class DeepFusionLSTM(Network):
    """DF-LSTMs for sentence pairs (premise = X, hypothesis = Y).

    ``dim`` is the size of the matching vector h_{i,j} = h^(x)_{i,j} ⊕ h^(y)_{i,j} (Eq. 6), so
    each LSTM has ``dim / 2`` units: Table 2's "600D" is 300 + 300. With 300-d word vectors and
    3 classes that is 2,434,503 parameters (docs/models/dflstm.md: the row's 2.8M is not this
    model's count). ``tests/models/dflstm/test_reference.py`` checks it against an independent
    cell-by-cell reference of Eq. 2-17.
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        dim: int = 600,
        memory_size: int = 9,
        num_layers: int = 1,
        separate_attention: bool = False,
        dropout: float = 0.0,
        init_range: float = 0.1,
    ) -> None:
        super().__init__()
        self.validate_config(dim=dim, memory_size=memory_size, num_layers=num_layers,
                             dropout=dropout, init_range=init_range)
        check_num_classes(num_classes)
        self.embedding = embedding
        self.hidden_size = dim // 2  # d, units per LSTM
        self.memory_size = memory_size  # K (Eq. 9-11)
        self.dropout = nn.Dropout(dropout)
        d = self.hidden_size
        # Layer 1 reads word vectors; a stacked layer reads its own stream's state below it.
        self.layers = nn.ModuleList(
            DeepFusionLayer(embedding.embedding_dim if layer == 0 else d, d, separate_attention)
            for layer in range(num_layers))
        self.classifier = nn.Linear(2 * d, num_classes)  # softmax on h_{n,m} (§5.1)
        self._initialise(init_range)

    @classmethod
    def validate_config(cls, *, dim: int, memory_size: int, num_layers: int, dropout: float,
                        init_range: float, **_: Any) -> None:
        if not isinstance(dim, int) or dim < 2 or dim % 2:
            raise ConfigError(
                f"model.net.dim / dim={dim!r} must be an even integer >= 2: the matching vector "
                "h^(x) ⊕ h^(y) (Eq. 6) is split between the two LSTMs (e.g. dim=600 = 300 + 300)")
        check_positive_int("memory_size (K, Eq. 9)", memory_size)
        check_positive_int("num_layers", num_layers)
        check_probability("dropout", dropout)
        if init_range <= 0.0:
            raise ConfigError(f"model.net.init_range must be > 0, got {init_range}")

    def _initialise(self, init_range: float) -> None:
        """§5.4: LSTM weights orthogonal (each gate's block), everything else U[-r, r]."""
        d = self.hidden_size
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.startswith("embedding."):
                    continue  # the word vectors are the backbone's
                if name.endswith("affine.weight"):  # T_{A,b}: (4d, d_in + 2d)
                    for block in p.split(d, dim=0):
                        nn.init.orthogonal_(block)
                else:
                    p.uniform_(-init_range, init_range)

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Logits ``(B, C)``; with details, the grid of matching vectors and memory attention."""
        x = self.dropout(self.embedding(premise))  # (B, n, d_emb)
        y = self.dropout(self.embedding(hypothesis))  # (B, m, d_emb)
        batch, n, m = x.size(0), x.size(1), y.size(1)
        d, K = self.hidden_size, self.memory_size
        len_x = premise_mask.long().sum(1)  # (B,) true lengths
        len_y = hypothesis_mask.long().sum(1)
        last_diagonal = len_x + len_y - 2  # diagonal of each pair's cell (n_b, m_b), 0-based

        # State of diagonal t (cells (i, t - i), i = lo..hi) is stored in "row space":
        # (B, K + n, d) with row K + i holding cell i and K leading zero rows, so that reading
        # the cell k rows up (i - k) before the premise start gives zeros (masked below).
        def to_rows(values: torch.Tensor, lo: int) -> torch.Tensor:
            # (B, L, d) -> (B, K + n, d), zeros outside the diagonal's rows
            return F.pad(values, (0, 0, K + lo, n - lo - values.size(1)))

        zeros = x.new_zeros(batch, K + n, d)
        empty = dict.fromkeys(("h_x", "c_x", "r_x", "k_x", "h_y", "c_y", "r_y", "k_y"), zeros)
        # history[layer][t] = that layer's stored diagonal t; t < 0 is the empty grid border.
        history: list[list[dict[str, torch.Tensor]]] = [[] for _ in self.layers]
        match = x.new_zeros(batch, 2 * d)  # h_{n,m} per pair, filled when its diagonal is done
        slots = torch.arange(1, K + 1, device=x.device)  # k = 1..K: the cell k steps back
        cells: list[tuple[torch.Tensor, torch.Tensor]] = []  # (rows, cols) per diagonal
        details: dict[str, list[torch.Tensor]] = {"grid": [], "ax": [], "ay": []}

        for t in range(n + m - 1):
            lo, hi = max(0, t - m + 1), min(n - 1, t)
            rows = torch.arange(lo, hi + 1, device=x.device)  # i of the L cells
            cols = t - rows  # j of the same cells
            # Slot k of the x-memory of (i, j) is (i - k, j), of the y-memory (i, j - k) (Eq.
            # 10/11); a slot before the sentence start is no memory.
            mask_x = (rows[:, None] - slots[None, :]) >= 0  # (L, K)
            mask_y = (cols[:, None] - slots[None, :]) >= 0  # (L, K)
            z_x, z_y = x[:, lo:hi + 1], y[:, cols]  # words x_i, y_j: (B, L, d_emb)
            for layer, fusion in enumerate(self.layers):
                past = history[layer]
                # back[k] = diagonal t - k (k = 1..K; back[0] unused), the border when t - k < 0
                back = [empty] + [past[t - k] if t - k >= 0 else empty for k in range(1, K + 1)]
                # x-side reads diagonal t - k at rows i - k (same j); y-side at rows i (same i).
                up = [slice(K + lo - k, K + hi + 1 - k) for k in range(K + 1)]
                same = slice(K + lo, K + hi + 1)
                M_x = torch.stack([back[k]["h_x"][:, up[k]] for k in range(1, K + 1)], 2)
                keys_x = torch.stack([back[k]["k_x"][:, up[k]] for k in range(1, K + 1)], 2)
                M_y = torch.stack([back[k]["h_y"][:, same] for k in range(1, K + 1)], 2)
                keys_y = torch.stack([back[k]["k_y"][:, same] for k in range(1, K + 1)], 2)
                # M_*, keys_*: (B, L, K, d)
                r_x, a_x = fusion.attention_x(M_x, keys_x, mask_x, back[1]["r_x"][:, up[1]], z_x)
                r_y, a_y = fusion.attention_y(M_y, keys_y, mask_y, back[1]["r_y"][:, same], z_y)
                H = torch.cat([r_x, r_y], dim=-1)  # Eq. 17: (B, L, 2d)
                h_x, c_x = fusion.lstm_x(z_x, H, back[1]["c_x"][:, up[1]])  # Eq. 7
                h_y, c_y = fusion.lstm_y(z_y, H, back[1]["c_y"][:, same])  # Eq. 8
                past.append({
                    "h_x": to_rows(h_x, lo), "c_x": to_rows(c_x, lo), "r_x": to_rows(r_x, lo),
                    "k_x": to_rows(fusion.attention_x.keys(h_x), lo),
                    "h_y": to_rows(h_y, lo), "c_y": to_rows(c_y, lo), "r_y": to_rows(r_y, lo),
                    "k_y": to_rows(fusion.attention_y.keys(h_y), lo),
                })
                z_x, z_y = h_x, h_y  # the next layer's inputs at these cells
            top = torch.cat([h_x, h_y], dim=-1)  # h_{i,j} of the top layer, Eq. 6: (B, L, 2d)
            # pairs whose cell (n_b, m_b) is on this diagonal take it; no `if done.any()`: on a
            # GPU that test would make the host wait at every diagonal
            done = last_diagonal == t
            at = (len_x - 1 - lo).clamp(0, hi - lo)  # that cell's index on the diagonal
            final = top[torch.arange(batch, device=x.device), at]  # (B, 2d)
            match = torch.where(done[:, None], final, match)
            if return_details:
                cells.append((rows, cols))
                details["grid"].append(top)
                details["ax"].append(a_x)
                details["ay"].append(a_y)

        logits = self.classifier(self.dropout(match))  # (B, C); softmax is in the loss
        out = {"logits": logits}
        if return_details:
            out.update(self._grids(cells, details, premise_mask, hypothesis_mask))
            out["matching_vector"] = match
        return out

    @staticmethod
    def _grids(cells: list[tuple[torch.Tensor, torch.Tensor]],
               details: Mapping[str, list[torch.Tensor]], premise_mask: torch.Tensor,
               hypothesis_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """The per-diagonal top-layer tensors laid out on the (n, m) grid, zero on padding."""
        rows = torch.cat([r for r, _ in cells])
        cols = torch.cat([c for _, c in cells])
        grid_mask = premise_mask[:, :, None] & hypothesis_mask[:, None, :]  # (B, n, m)
        out: dict[str, torch.Tensor] = {"grid_mask": grid_mask}
        for key, name in (("grid", "matching_grid"), ("ax", "memory_attention_premise"),
                          ("ay", "memory_attention_hypothesis")):
            values = torch.cat(details[key], dim=1)  # (B, cells, features)
            grid = values.new_zeros(*grid_mask.shape, values.size(-1))
            grid[:, rows, cols] = values
            out[name] = grid * grid_mask.unsqueeze(-1).to(grid.dtype)
        # matching_grid: (B, n, m, 2d) = h_{i,j}; memory_attention_*: (B, n, m, K), slot k - 1
        # holds the weight of position i - k (premise) or j - k (hypothesis) at cell (i, j).
        return out

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """‖h_{i,j}‖ over the grid (cf. Fig. 4) and the memory attention at the last cell (cf.
        Fig. 5: which earlier words each memory reads when the final word pair is encoded)."""
        lp, lh = len(premise), len(hypothesis)
        norms = details["matching_grid"][index, :lp, :lh].detach().float().norm(dim=-1).cpu()
        span = (norms.max() - norms.min()).clamp_min(1e-12)
        maps = {"matching": HeatMap(((norms - norms.min()) / span).T, list(hypothesis),
                                    list(premise), "Matching vector ‖h_ij‖ (cf. Fig. 4)",
                                    "premise word i", "hypothesis word j", "min-max norm")}
        for side, words, length in (("premise", premise, lp), ("hypothesis", hypothesis, lh)):
            weights = details[f"memory_attention_{side}"][index, lp - 1, lh - 1]  # (K,)
            row = torch.zeros(1, length)
            for k, w in enumerate(weights.detach().float().cpu().tolist(), start=1):
                if length - 1 - k >= 0:
                    row[0, length - 1 - k] = w
            maps[f"memory_{side}"] = HeatMap(
                row, ["last cell"], list(words), f"{side.capitalize()} memory read at the last "
                "cell (cf. Fig. 5)", f"{side} word", "", "attention weight")
        return maps
