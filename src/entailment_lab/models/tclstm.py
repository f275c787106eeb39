"""Tightly coupled LSTMs (Liu, Qiu & Huang, EMNLP 2016, arXiv 1605.05573): Table 2 row 4.

A TC-LSTM fills an n × m grid over the sentence pair (premise position i, hypothesis position j):
the state (h_{i,j}, c_{i,j}) models the interaction of the prefixes x_{1:i} and y_{1:j}; it reads
the words x_i and y_j and the states of its two neighbours (i, j−1) and (i−1, j), with one forget
gate per neighbour (the TC-LSTM unit of §3.2). A block runs four such grids, one per direction
(from each corner of the grid), and sums them (aggregation layer); blocks are stacked, each
reading the aggregated grid below; dynamic pooling cuts the top grid into p × q regions and keeps
each region's maximum per unit; a fully connected layer and a softmax output classify the pair
(§4). All cells of one anti-diagonal (i + j = t) are independent, so the grid is filled diagonal
by diagonal, each diagonal vectorised over its cells, the batch and the four directions. Sizes,
choices (and what we could not check in the paper), recipe, parameter counts:
``docs/models/tclstm.md``.
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
    check_flags,
    check_nonnegative_int,
    check_num_classes,
    check_positive_int,
    check_probability,
    masked_fill_value,
)

#: The four directions of a block (§4, "four directional coupled-LSTMs"): which sentence is read
#: backwards. Direction 1 starts at (1, 1) and reads (i−1, j), (i, j−1); direction 2 reads
#: (i−1, j), (i, j+1); direction 3 (i+1, j), (i, j+1); direction 4 (i+1, j), (i, j−1).
#: A direction that reads a sentence backwards runs the forward recurrence on that sentence
#: reversed within its true length, so it starts at the sentence's last real word.
DIRECTIONS: tuple[tuple[bool, bool], ...] = ((False, False), (False, True), (True, True),
                                             (True, False))


def reversal_index(mask: torch.Tensor) -> torch.Tensor:
    """(B, len) index that reverses each row's real positions and keeps padding in place."""
    positions = torch.arange(mask.size(1), device=mask.device).expand_as(mask)
    lengths = mask.long().sum(1, keepdim=True)
    return torch.where(positions < lengths, lengths - 1 - positions, positions)


def wavefront_order(n: int, m: int, device: torch.device) -> tuple[torch.Tensor, list[int]]:
    """The cells of an n × m grid in the order the recurrence fills them.

    Returns the flat indices i·m + j sorted by anti-diagonal t = i + j and, within a diagonal,
    by i (n·m,), and the number of cells of each of the n + m − 1 diagonals.
    """
    i = torch.arange(n, device=device)[:, None].expand(n, m)
    j = torch.arange(m, device=device)[None, :].expand(n, m)
    order = torch.argsort(((i + j) * n + i).flatten())
    sizes = [min(n - 1, t) - max(0, t - m + 1) + 1 for t in range(n + m - 1)]
    return order, sizes


def pick(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``out[k, b, p] = table[k or 0, b, index[k, b, p]]``: (D, B, S, f), (K, B, P) -> (K, B, P, f).

    D is 1 (one table for every direction) or K. One ``index_select`` on the flattened table:
    its backward is one ``index_add`` (per-diagonal slicing would zero-fill a full-size gradient
    for every diagonal).
    """
    D, B, S, f = table.shape
    K, _, P = index.shape
    unit = torch.arange(K, device=index.device) if D > 1 else index.new_zeros(K)
    base = (unit[:, None] * B + torch.arange(B, device=index.device)[None, :]) * S  # (K, B)
    flat = (index + base[..., None]).flatten()
    return table.reshape(D * B * S, f).index_select(0, flat).view(K, B, P, f)


def chunk_membership(lengths: torch.Tensor, chunks: int, size: int) -> torch.Tensor:
    """(B, chunks, size) bool: position belongs to region k of the dynamic pooling.

    Region k of a sentence of length ℓ spans [⌊kℓ/p⌋, ⌊(k+1)ℓ/p⌋): p roughly equal,
    non-overlapping regions covering the real positions only; when ℓ < p a region would be empty
    and takes the one position it starts at instead (positions are repeated, as Socher et al.
    2011 do for short sentences).
    """
    k = torch.arange(chunks, device=lengths.device)[None, :]  # (1, p)
    start = k * lengths[:, None] // chunks  # (B, p)
    end = torch.maximum((k + 1) * lengths[:, None] // chunks, start + 1)
    positions = torch.arange(size, device=lengths.device)[None, None, :]
    return (positions >= start[..., None]) & (positions < end[..., None])


class TCLSTMBlock(nn.Module):
    """One block: the TC-LSTM unit run in four directions (§4), summed (aggregation layer).

    The unit (§3.2): ``[c̃; o; i; f¹; f²] = [tanh; σ; σ; σ; σ](T_{A,b}[x_i; y_j; h_{i,j−1};
    h_{i−1,j}])``, ``c_{i,j} = c̃ ⊙ i + c_{i,j−1} ⊙ f¹ + c_{i−1,j} ⊙ f²``, ``h_{i,j} = o ⊙
    tanh(c_{i,j})``. T_{A,b} is one affine map; ``weight`` holds it as (D, in + 2d, 5d) with D = 1
    (one unit for the four directions) or one per direction. In a stacked block the input
    [x_i; y_j] is the aggregated state ĥ_{i,j} of the block below.
    """

    def __init__(self, input_size: int, hidden_size: int, num_weights: int) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.weight = nn.Parameter(torch.empty(num_weights, input_size + 2 * hidden_size,
                                               5 * hidden_size))
        self.bias = nn.Parameter(torch.empty(num_weights, 1, 5 * hidden_size))

    def sweep(self, inputs: torch.Tensor, n: int, m: int, sizes: Sequence[int]) -> torch.Tensor:
        """Fill the grid of every direction from its (1, 1) corner, anti-diagonal by diagonal.

        ``inputs`` is the input part T_A[x_i; y_j] + b of every cell, (K, B, n·m, 5d), in each
        direction's own (reversed) coordinates and in ``wavefront_order`` (diagonal t = i + j
        after diagonal, ``sizes[t]`` cells each, i ascending). Returns h in the same layout,
        (K, B, n·m, d). Cell (i, j) reads only cells (i−1, j) and (i, j−1) or the zero border
        (i = 0 or j = 0), so a real cell never reads a padded one: padded cells come after the
        real ones in both coordinates.
        """
        K, B = inputs.shape[:2]
        d = self.hidden_size
        recurrent = self.weight[:, self.input_size:]  # (D, 2d, 5d), acts on [h_{i,j−1}; h_{i−1,j}]
        # Diagonal t (cells (i, t − i), i = lo..hi) is stored in "row space": (K, B, n + 1, d),
        # row i + 1 holds cell i, row 0 is the border i = −1; rows off the diagonal are zero.
        h_prev = inputs.new_zeros(K, B, n + 1, d)
        c_prev = inputs.new_zeros(K, B, n + 1, d)
        outputs: list[torch.Tensor] = []
        # split's backward is one cat: no zero-filled full-size gradient per diagonal.
        for t, cell_inputs in enumerate(inputs.split(list(sizes), dim=2)):  # (K, B, L, 5d)
            lo, hi = max(0, t - m + 1), min(n - 1, t)
            L = hi - lo + 1
            up = slice(lo, hi + 1)  # (i − 1, j) is row i of the previous diagonal's storage
            left = slice(lo + 1, hi + 2)  # (i, j − 1) is row i + 1 (zero when j = 0)
            h_both = torch.cat([h_prev[:, :, left], h_prev[:, :, up]], dim=-1)  # (K, B, L, 2d)
            gates = cell_inputs + torch.matmul(
                h_both.reshape(K, B * L, 2 * d), recurrent).view(K, B, L, 5 * d)
            c_tilde, o, i, f_left, f_up = gates.chunk(5, dim=-1)
            c = (torch.tanh(c_tilde) * torch.sigmoid(i)  # c_{i,j}: (K, B, L, d)
                 + c_prev[:, :, left] * torch.sigmoid(f_left)
                 + c_prev[:, :, up] * torch.sigmoid(f_up))
            h = torch.sigmoid(o) * torch.tanh(c)  # h_{i,j}
            pad = (0, 0, lo + 1, n - hi - 1)  # back to row space
            h_prev, c_prev = F.pad(h, pad), F.pad(c, pad)
            outputs.append(h)
        return torch.cat(outputs, dim=2)  # (K, B, n·m, d), diagonal after diagonal


class TightlyCoupledLSTM(Network):
    """Stacked TC-LSTMs with dynamic pooling for sentence pairs (premise = X, hypothesis = Y).

    ``dim`` is d, the size of every grid state h_{i,j} (Table 2's "50D"). With the defaults
    (4 blocks, one unit shared by the four directions, pooling 2 × 1, a 50-unit fully connected
    layer) and the 100-d word vectors of row 4's experiment the model has 193,703 trainable
    parameters, 293,703 with 300-d vectors (docs/models/tclstm.md: the row's 190k is not
    reproduced exactly). ``tests/models/tclstm/test_reference.py`` checks it against an independent
    cell-by-cell reference of the equations.
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        dim: int = 50,
        num_layers: int = 4,
        directions: int = 4,
        share_directions: bool = True,
        pool_rows: int = 2,
        pool_cols: int = 1,
        mlp_size: int = 50,
        dropout: float = 0.0,
        init_range: float = 0.1,
    ) -> None:
        super().__init__()
        self.validate_config(dim=dim, num_layers=num_layers, directions=directions,
                             share_directions=share_directions, pool_rows=pool_rows,
                             pool_cols=pool_cols, mlp_size=mlp_size, dropout=dropout,
                             init_range=init_range)
        check_num_classes(num_classes)
        self.embedding = embedding
        self.hidden_size = dim
        self.directions = DIRECTIONS[:directions]
        self.pool = (pool_rows, pool_cols)
        self.dropout = nn.Dropout(dropout)
        num_weights = 1 if share_directions else directions
        e = embedding.embedding_dim
        # Block 1 reads [x_i; y_j] (2e); a stacked block reads ĥ_{i,j} of the block below (d).
        self.blocks = nn.ModuleList(
            TCLSTMBlock(2 * e if layer == 0 else dim, dim, num_weights)
            for layer in range(num_layers))
        pooled = pool_rows * pool_cols * dim
        head: list[nn.Module] = []
        if mlp_size:  # fully connected layer (§4), then the output layer
            head += [nn.Linear(pooled, mlp_size), nn.Tanh(), nn.Dropout(dropout)]
        head.append(nn.Linear(mlp_size or pooled, num_classes))  # softmax is in the loss
        self.classifier = nn.Sequential(*head)
        self._initialise(init_range)

    @classmethod
    def validate_config(cls, *, dim: int, num_layers: int, directions: int,
                        share_directions: bool, pool_rows: int, pool_cols: int, mlp_size: int,
                        dropout: float, init_range: float, **_: Any) -> None:
        for knob, value in (("dim", dim), ("num_layers", num_layers), ("pool_rows", pool_rows),
                            ("pool_cols", pool_cols)):
            check_positive_int(knob, value)
        check_nonnegative_int("mlp_size", mlp_size)
        if isinstance(directions, bool) or directions not in (1, 4):
            raise ConfigError(f"model.net.directions must be 4 (the paper's four directional "
                              f"C-LSTMs) or 1 (single direction), got {directions!r}")
        check_flags(share_directions=share_directions)
        check_probability("dropout", dropout)
        if init_range <= 0.0:
            raise ConfigError(f"model.net.init_range must be > 0, got {init_range}")

    def _initialise(self, init_range: float) -> None:
        """Every parameter but the word vectors U[−r, r] (the paper's "other parameters")."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if not name.startswith("embedding."):
                    p.uniform_(-init_range, init_range)

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Logits ``(B, C)``; with details, the top block's grid ĥ and the pooled regions."""
        x = self.dropout(self.embedding(premise))  # (B, n, e)
        y = self.dropout(self.embedding(hypothesis))  # (B, m, e)
        B, n, m, e = x.size(0), x.size(1), y.size(1), x.size(2)
        d = self.hidden_size
        order, sizes = wavefront_order(n, m, x.device)  # (n·m,) cells i·m + j, diagonal order
        rows, cols = order // m, order % m
        # Direction k reads a sentence backwards by running on it reversed within its true
        # length: its cell (i', j') is the grid's cell (read_p[k, i'], read_h[k, j']).
        forward_p = torch.arange(n, device=x.device).expand(B, n)
        forward_h = torch.arange(m, device=x.device).expand(B, m)
        read_p = torch.stack([reversal_index(premise_mask) if flip else forward_p
                              for flip, _ in self.directions])  # (K, B, n)
        read_h = torch.stack([reversal_index(hypothesis_mask) if flip else forward_h
                              for _, flip in self.directions])  # (K, B, m)
        read_p, read_h = read_p[:, :, rows], read_h[:, :, cols]  # (K, B, n·m) per position
        source = read_p * m + read_h  # the grid cell that position p of direction k computes
        # ... and back: the position of every grid cell in each direction (a permutation).
        target = torch.empty_like(source).scatter_(
            2, source, torch.arange(n * m, device=x.device).expand_as(source))
        grid_mask = premise_mask[:, :, None] & hypothesis_mask[:, None, :]  # (B, n, m)

        grid = x.new_zeros(B, n, m, d)  # ĥ of the block below, set by each block
        for layer, block in enumerate(self.blocks):
            W, b = block.weight[:, None], block.bias[:, None]  # (D, 1, in + 2d, 5d), (D, 1, 1, 5d)
            if layer == 0:
                # T_A[x_i; y_j] + b = (A_x x_i + b) + A_y y_j: each word projected once.
                px = torch.matmul(x, W[..., :e, :]) + b  # (D, B, n, 5d)
                py = torch.matmul(y, W[..., e:2 * e, :])  # (D, B, m, 5d)
                inputs = pick(px, read_p) + pick(py, read_h)  # (K, B, n·m, 5d)
            else:
                below = self.dropout(grid).view(B, n * m, d)  # ĥ_{i,j} of the block below
                inputs = pick(torch.matmul(below, W[..., :d, :]) + b, source)  # T_A ĥ + b
            h = block.sweep(inputs, n, m, sizes)  # (K, B, n·m, d), wavefront order
            h = pick(h, target).view(-1, B, n, m, d)  # in the grid's own coordinates
            # Aggregation layer: ĥ_{i,j} = Σ_directions h_{i,j}; zero on padded cells.
            grid = h.sum(0) * grid_mask[..., None].to(h.dtype)  # (B, n, m, d)

        pooled = self._dynamic_pool(grid, premise_mask, hypothesis_mask)  # (B, p, q, d)
        logits = self.classifier(self.dropout(pooled.flatten(1)))  # (B, C)
        out = {"logits": logits}
        if return_details:
            out.update(interaction_grid=grid, grid_mask=grid_mask, pooled=pooled)
        return out

    def _dynamic_pool(self, grid: torch.Tensor, premise_mask: torch.Tensor,
                      hypothesis_mask: torch.Tensor) -> torch.Tensor:
        """Pooling layer (§4): per unit, the maximum of each of p × q regions of the real grid.

        grid (B, n, m, d) -> (B, p, q, d); regions cover real cells only (``chunk_membership``).
        """
        p, q = self.pool
        n, m = grid.size(1), grid.size(2)
        low = masked_fill_value(grid.dtype)
        rows = chunk_membership(premise_mask.long().sum(1), p, n)  # (B, p, n)
        cols = chunk_membership(hypothesis_mask.long().sum(1), q, m)  # (B, q, m)
        by_col = grid[:, :, None].masked_fill(~cols[:, None, :, :, None], low)  # (B, n, q, m, d)
        by_col = by_col.max(dim=3).values  # (B, n, q, d)
        by_row = by_col[:, None].masked_fill(~rows[:, :, :, None, None], low)  # (B, p, n, q, d)
        return by_row.max(dim=2).values  # (B, p, q, d)

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """‖ĥ_{i,j}‖ of the top block over the grid (cf. the paper's neuron maps, §6)."""
        lp, lh = len(premise), len(hypothesis)
        norms = details["interaction_grid"][index, :lp, :lh].detach().float().norm(dim=-1).cpu()
        span = (norms.max() - norms.min()).clamp_min(1e-12)
        return {"interaction": HeatMap(((norms - norms.min()) / span).T, list(hypothesis),
                                       list(premise), "Interaction grid ‖ĥ_ij‖ (top block)",
                                       "premise word i", "hypothesis word j", "min-max norm")}
