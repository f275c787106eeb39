"""DIN: Dynamic Interactive Network over matrix space (Huo & Liu, 2018): DIN-1, DIN-2, ablation.

A GRU encodes the premise; every word of both sentences becomes an m×m matrix (m = √d, Eq. 7);
for each hypothesis word a matrix RNN reads the premise (interaction, Eq. 8), and its output
generates the weights of a GRU over the hypothesis (control: DIN-1 Eq. 9-16, DIN-2 Eq. 17-19;
Table 2 row 18 feeds it to an ordinary GRU instead); mean pooling, FC and softmax follow
(Eq. 20-22). Equation numbers are the paper's. The encoder (and row 18's GRU) is PyTorch's
``nn.GRU`` by default, whose candidate departs from Eq. 5; ``encoder_gru="paper"`` selects Eq. 3-6
as printed (``PaperGRU``). The paper's ambiguities and the knob that selects
each reading (the defaults reproduce Table 2's parameter counts), the analysis maps of Fig. 2
and 3, and the speed measurements: ``docs/models/din.md``. The fast paths of CPU training (the
interaction's and control's hand-written backwards, a C kernel for the interaction's products,
tanh through the sigmoid) live in ``models/kernels/``; this file holds the equations, and its
loops are their reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from entailment_lab.errors import ConfigError
from entailment_lab.models import kernels
from entailment_lab.models.base import HeatMap, Network
from entailment_lab.models.common import (
    Dropout,
    check_choice,
    count_trainable_parameters,
    longest_first,
    run_packed,
    scatter_rows,
)
from entailment_lab.models.kernels import tanh, tanh_

# The public API: the network, its layers (each callable alone, as benchmarks/bench_din.py
# times them) and ``Words``, the rows the layers pass between them
__all__ = ["DIN", "Interaction", "MatrixControlGRU", "PaperGRU", "StaticControlGRU",
           "Transformation", "VectorControlGRU", "Words", "make_gru", "minmax_normalise",
           "time_major_rows"]
GATES = ("z (update)", "r (reset)", "h (candidate)")  # rows of the gate-change map (Fig. 3)
VARIANTS = ("din1", "din2", "static")
CHOICES = {  # the reading knobs and their allowed values (docs/models/din.md), default first
    "variant": VARIANTS,
    "din1_weights": ("shared", "split"),
    "din2_weights": ("diagonal", "row_scale"),
    "din2_input": ("hypothesis_matrix", "word"),
    "static_input": ("word", "hypothesis_matrix"),
    "interaction_init": ("zeros", "hypothesis"),
    "fc_activation": ("tanh", "relu", "none"),
    "encoder_gru": ("torch", "paper"),
}


def _uniform_(tensor: torch.Tensor, fan_in: int) -> None:
    """PyTorch's default layer initialisation: uniform(±1/√fan_in)."""
    bound = 1.0 / math.sqrt(fan_in)
    nn.init.uniform_(tensor, -bound, bound)


def minmax_normalise(
    values: torch.Tensor, mask: torch.Tensor, dims: tuple[int, ...]
) -> torch.Tensor:
    """Min-max normalise ``values`` to [0, 1] over ``dims``, using only positions where ``mask``.

    Masked-out positions become 0; a group whose real values are all equal becomes 0.
    ``mask`` must broadcast to ``values``.
    """
    mask = mask.expand_as(values)
    big = torch.finfo(values.dtype).max
    lo = values.masked_fill(~mask, big).amin(dim=dims, keepdim=True)
    hi = values.masked_fill(~mask, -big).amax(dim=dims, keepdim=True)
    span = hi - lo
    scaled = (values - lo) / torch.where(span > 0, span, torch.ones_like(span))
    return torch.where(mask & (span > 0), scaled, torch.zeros_like(values))


class Transformation(nn.Module):
    """Eq. 7: ``W̃ = tanh(W_trans · c + b_trans)``, a vector of size d_c -> an m×m matrix."""

    def __init__(self, in_features: int, m: int) -> None:
        super().__init__()
        self.m = m
        self.W_trans = nn.Parameter(torch.empty(m, m, in_features))  # R^{m×m×d_c}
        self.b_trans = nn.Parameter(torch.empty(m, m))  # R^{m×m}
        _uniform_(self.W_trans, in_features)
        _uniform_(self.b_trans, in_features)

    def forward(self, c: torch.Tensor, transposed: bool = False) -> torch.Tensor:
        """c (..., d_c) -> W̃ (..., m, m), or W̃^T with ``transposed`` (the layout the
        interaction and control layers compute in: their products need no transposed copy)."""
        m = self.m
        W, b = self.W_trans, self.b_trans
        if transposed:  # output (j, i) is W̃'s (i, j): W_trans and b_trans with i and j swapped
            W, b = W.transpose(0, 1), b.T
        out = F.linear(c, W.reshape(m * m, -1), b.reshape(m * m))
        return tanh(out).unflatten(-1, (m, m))


class Interaction(nn.Module):
    """Eq. 8: ``W^t_τ = tanh(W̃'_τ W̃_t + W_inter W^t_{τ-1} + b_inter)`` for every (pair, t).

    A Python loop over premise positions τ only, over the N real hypothesis words (rows),
    computed on transposed matrices: ``(W^t_τ)^T = tanh(W̃_t^T W̃'_τ^T + (W^t_{τ-1})^T
    W_inter^T + b_inter^T)``, so the ``W_inter`` term of all rows is one plain matrix product
    (an (n·m, m) by (m, m) product) and the rest is one batched product added in place. The
    rows are sorted by premise length, longest first, so that the rows still inside their
    premise at step τ are a prefix (the idea of ``pack_padded_sequence``): a row leaves the loop
    at its premise's true last position, so its final state is ``W^t_{ℓ_P}`` whatever the
    padding, and padding is never computed.
    """

    def __init__(self, m: int, init: str = "zeros") -> None:
        super().__init__()
        self.init = init
        self.W_inter = nn.Parameter(torch.empty(m, m))  # R^{m×m}
        self.b_inter = nn.Parameter(torch.empty(m, m))  # R^{m×m}
        _uniform_(self.W_inter, m)
        _uniform_(self.b_inter, m)

    def forward(
        self,
        W_p: torch.Tensor,
        premise_mask: torch.Tensor,
        X: torch.Tensor,
        pair: torch.Tensor,
        return_norms: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """W_p: W̃'_τ^T, time-major (len_p, batch, m, m); X: W̃_t^T of N hypothesis words, in any
        order (N, m, m); pair (N,): each word's pair -> (W^t_{ℓ_P})^T of each word (N, m, m),
        in X's order.

        Padded premise positions of W_p are never read. With ``return_norms`` also
        ``‖W^t_τ‖_F`` (N, len_p), 0 past each premise's end.
        """
        # The rows sorted by their premise's length, longest first
        order, running = longest_first(premise_mask.sum(dim=1)[pair], W_p.shape[0])
        hypothesis_init = self.init == "hypothesis"
        if kernels.applies() and not return_norms:  # the registered operator (models/kernels)
            return kernels.interaction(X, W_p, self.W_inter, self.b_inter, pair, order, running,
                                       hypothesis_init), None
        S, norms = _interaction_loop(X[order], W_p, self.W_inter, self.b_inter, pair[order],
                                     running, hypothesis_init, return_norms)
        back = torch.argsort(order)  # sorted rows -> X's order
        return S[back], torch.stack(norms, dim=1)[back] if return_norms else None


def _interaction_loop(
    X: torch.Tensor,
    W_p_steps: torch.Tensor,
    W_inter: torch.Tensor,
    b_inter: torch.Tensor,
    b_idx: torch.Tensor,
    running: list[int],
    hypothesis_init: bool,
    return_norms: bool = False,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Eq. 8 over the premise, transposed: ``S_τ = tanh(S_{τ-1} W_inter^T + b_inter^T + X
    W̃'_τ^T)`` for the rows still inside their premise (the first ``running[τ]``).

    X (N, m, m): ``W̃_t^T`` of each row; W_p_steps (len_p, batch, m, m): ``W̃'_τ^T``; b_idx
    (N,): each row's pair. Returns ``(W^t_{ℓ_P})^T`` of every row (N, m, m) and, with
    ``return_norms``, ``‖W^t_τ‖_F`` per step ((N,) each, 0 once a row has ended). The reference
    of ``kernels.interaction`` (the same loop with a hand-written backward and a C kernel).
    """
    S = X.clone() if hypothesis_init else torch.zeros_like(X)  # (W^t_0)^T
    W_inter_T = W_inter.T
    finished, norms = [], []  # final states of rows whose premise has ended
    for tau, n in enumerate(running):
        if n < len(S):  # rows n.. have passed their premise's end: S is (W^t_{ℓ_P})^T
            finished.append(S[n:])
            S, X = S[:n], X[:n]  # views taken when n changes, not every step
        # (W^t_{τ-1})^T W_inter^T + b_inter^T + W̃_t^T W̃'_τ^T: (n, m, m). matmul folds the first
        # product into one (n·m, m) by (m, m) product and returns a tensor that is no view, so
        # the rest can run in place (no product's backward needs its own output, tanh keeps
        # its result); in place on a view, autograd would copy whole gradients.
        pre = torch.matmul(S, W_inter_T).add_(b_inter.T)
        pre.baddbmm_(X, W_p_steps[tau].index_select(0, b_idx[:n]))
        S = tanh(pre)
        if return_norms:
            norms.append(F.pad(S.flatten(1).norm(dim=1), (0, len(b_idx) - n)))  # (N,)
    return torch.cat([S, *reversed(finished)]), norms  # all N rows, in order


def time_major_rows(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The real positions of a (batch, len) ``mask`` in the order a recurrence visits them.

    Step by step (time-major) and, within a step, the sentences by length, longest first
    (``pack_padded_sequence``'s layout): step t's rows are the ``running[t]`` sentences still
    inside their length, the first rows of the step before. Returns the rows' sentence and
    position indices, (N,) each, and ``running``, so ``x[b_idx, t_idx].split(running)`` gives
    each step's rows without any padding.
    """
    order, running = longest_first(mask.sum(dim=1), mask.shape[1])
    b_idx = torch.cat([order[:n] for n in running])
    t_idx = torch.repeat_interleave(
        torch.arange(len(running), device=mask.device),
        torch.tensor(running, device=mask.device),
        output_size=sum(running),  # known here: no count read back from a GPU
    )
    return b_idx, t_idx, running


class Words(NamedTuple):
    """The hypothesis's real words in the order DIN's control recurrence visits them
    (``time_major_rows``): step by step, longest hypotheses first.

    Between the transformation and the pooling every per-word tensor is (N, ...) in this order,
    so no layer fills, scatters or gathers padded tensors; ``scatter`` pads one for the
    analysis maps and the ablation's ``nn.GRU``.
    """

    pair: torch.Tensor  # (N,) each word's pair in the batch
    position: torch.Tensor  # (N,) its position in the hypothesis
    running: list[int]  # words at each step: step t's are the first running[t] of the last's
    mask: torch.Tensor  # the hypothesis mask (batch, len_h)

    @classmethod
    def of(cls, mask: torch.Tensor) -> Words:
        return cls(*time_major_rows(mask), mask)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, len_h, ...) -> the words' rows (N, ...)."""
        return x[self.pair, self.position]

    def scatter(self, rows: torch.Tensor) -> torch.Tensor:
        """The words' rows (N, ...) -> (batch, len_h, ...), zero at padded positions."""
        return scatter_rows(rows, self.mask, (self.pair, self.position))


class PaperGRU(nn.Module):
    """Eq. 3-6 as printed (the GRU of Cho et al., 2014): the reset gate acts before the product.

    ``z = σ(W_z·[h_{t-1}, x_t] + b_z)``, ``r = σ(W_r·[h_{t-1}, x_t] + b_r)``, ``h̃ = tanh(W_h·[r ⊙
    h_{t-1}, x_t] + b_h)``, ``h_t = (1 − z) ⊙ h_{t-1} + z ⊙ h̃``, one bias per gate (``nn.GRU``
    has two and puts r after ``W_hn h``). Each ``W_g`` is stored as its x columns (``weight_x``)
    and its h columns (``weight_h``), gates stacked in the order (z, r, h). Called like a
    batch-first ``nn.GRU``; with a mask, only the real positions are computed.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        d = self.hidden_size = hidden_size
        self.weight_x = nn.Parameter(torch.empty(3 * d, input_size))  # [W_z; W_r; W_h], x part
        self.weight_h = nn.Parameter(torch.empty(3 * d, d))  # the h part
        self.bias = nn.Parameter(torch.empty(3 * d))  # [b_z; b_r; b_h]
        for p in self.parameters():
            _uniform_(p, d)  # as nn.GRU

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (batch, len, in), bool mask (batch, len) or None (all real) -> h_t (batch, len, d),
        0 at padded positions, and each row's last real h_t (1, batch, d)."""
        if mask is None:
            mask = x.new_ones(x.shape[:2], dtype=torch.bool)
        d = self.hidden_size
        b_idx, t_idx, running = time_major_rows(mask)  # the real steps, longest rows first
        x_rows = x[b_idx, t_idx]  # (N, in)
        # The x_t parts of Eq. 4-6 for every step at once; (z, r) and h as separate products,
        # so each is contiguous: (N, 2d) and (N, d)
        pre_zr = F.linear(x_rows, self.weight_x[: 2 * d], self.bias[: 2 * d])
        pre_h = F.linear(x_rows, self.weight_x[2 * d:], self.bias[2 * d:])
        Wh_zr_T, Wh_h_T = self.weight_h[: 2 * d].T, self.weight_h[2 * d:].T  # (d, 2d), (d, d)
        h = pre_zr.new_zeros(running[0], d)  # h_0 = 0, in the dtype of the gates (autocast)
        outputs = []
        for pre_zr_t, pre_h_t in zip(pre_zr.split(running), pre_h.split(running), strict=True):
            h = h[: len(pre_zr_t)]  # rows past their sequence's end drop out
            z, r = torch.sigmoid(torch.addmm(pre_zr_t, h, Wh_zr_T)).chunk(2, dim=1)  # Eq. 4, 6
            h_tilde = tanh(torch.addmm(pre_h_t, r * h, Wh_h_T))  # Eq. 5: r before W_h
            h = torch.lerp(h, h_tilde, z)  # Eq. 3: (1 - z) ⊙ h + z ⊙ h̃
            outputs.append(h)
        out = scatter_rows(torch.cat(outputs), mask, (b_idx, t_idx))  # (batch, len, d)
        last = out[torch.arange(len(out), device=out.device), mask.sum(dim=1) - 1]
        return out, last[None]

    def gates(self, x: torch.Tensor, h_prev: torch.Tensor) -> torch.Tensor:
        """The activations (z, r, h̃) of Eq. 4-6: x (..., in), h_{t-1} (..., d) -> (..., 3, d)."""
        d = self.hidden_size
        z, r = torch.sigmoid(F.linear(x, self.weight_x[: 2 * d], self.bias[: 2 * d])
                             + F.linear(h_prev, self.weight_h[: 2 * d])).chunk(2, dim=-1)
        h_tilde = tanh(F.linear(x, self.weight_x[2 * d:], self.bias[2 * d:])
                       + F.linear(r * h_prev, self.weight_h[2 * d:]))
        return torch.stack([z, r, h_tilde], dim=-2)


def make_gru(input_size: int, hidden_size: int, form: str) -> nn.GRU | PaperGRU:
    """A GRU with static weights (the encoder, row 18's control): ``form`` "torch" or "paper"."""
    if form == "paper":
        return PaperGRU(input_size, hidden_size)
    return nn.GRU(input_size, hidden_size, batch_first=True)


class MatrixControlGRU(nn.Module):
    """DIN-1 control layer (Eq. 9-16): a GRU with an m×m matrix state and generated weights.

    ``W^t_g = tanh(W^g_con W^t_{ℓ_P} + b^g_con)``, ``b^t_g = tanh(B^g_con W^t_{ℓ_P})`` for
    g ∈ (z, r, h), stacked on dim 0 of ``W_con``/``b_con``/``B_con`` (3, m, m).

    Computed on transposed matrices, ``(A B)^T = B^T A^T``: the generated weights of every real
    word come from one matrix product per gate group, e.g. ``(W^t_{ℓ_P})^T [W^z_con{}^T |
    W^r_con{}^T]`` for z and r together, and a step of the recurrence is two batched products,
    ``H^T [W_z^T | W_r^T]`` (both gates at once) and ``(R ⊙ H)^T W_h^T``. The recurrence
    visits the real words only (``time_major_rows``): padding is never stepped through.
    """

    def __init__(self, m: int, weights: str = "shared") -> None:
        super().__init__()
        self.m = m
        self.W_con = nn.Parameter(torch.empty(3, m, m))
        self.b_con = nn.Parameter(torch.empty(3, m, m))
        self.B_con = nn.Parameter(torch.empty(3, m, m))
        # "split": a second generated matrix per gate for the W̃_t part of [H_{t-1}, W̃_t].
        self.W_con_x = nn.Parameter(torch.empty(3, m, m)) if weights == "split" else None
        self.b_con_x = nn.Parameter(torch.empty(3, m, m)) if weights == "split" else None
        for p in self.parameters():
            _uniform_(p, m)

    @staticmethod
    def _gates_T(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(3, m, m) per-gate matrices -> ``[A_z^T | A_r^T]`` (m, 2m) and ``A_h^T`` (m, m), both
        contiguous (a transposed bias broadcast over every word takes a slower strided path)."""
        return A[:2].permute(2, 0, 1).flatten(1), A[2].T.contiguous()

    def _product_T(self, W_out_T: torch.Tensor, A: torch.Tensor, bias: torch.Tensor | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """``tanh(W^T A_g^T + bias_g^T)`` for the gates (z, r) side by side and for h.

        W_out_T (..., m, m) -> (..., m, 2m) and (..., m, m). Each group is its own matrix
        product over every word at once (matmul folds the leading dims into one), so its
        output is contiguous: slicing one product into groups would cost strided copies in
        the backward pass.
        """
        A_zr, A_h = self._gates_T(A)
        b_zr, b_h = self._gates_T(bias) if bias is not None else (0.0, 0.0)
        return tanh(W_out_T @ A_zr + b_zr), tanh(W_out_T @ A_h + b_h)

    def generate_T(self, W_out_T: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        """Eq. 15-16, transposed: ``(W^t_{ℓ_P})^T`` (..., m, m) -> W_H^T, W_X^T, b^T.

        Each is a pair: the (z, r) gates side by side, ``[W_z^T | W_r^T]`` (..., m, 2m), and
        ``W_h^T`` (..., m, m). W_H multiplies H_{t-1}, W_X multiplies W̃_t (the same tensors
        unless "split").
        """
        W_H = self._product_T(W_out_T, self.W_con, self.b_con)  # Eq. 15
        b = self._product_T(W_out_T, self.B_con, None)  # Eq. 16
        if self.W_con_x is None:
            return W_H, W_H, b
        return W_H, self._product_T(W_out_T, self.W_con_x, self.b_con_x), b

    def forward(
        self,
        W_out: torch.Tensor,
        X: torch.Tensor,
        words: Words,
        return_change: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """W_out = (W^t_{ℓ_P})^T and X = W̃_t^T of each word, in ``words``' order (N, m, m) ->
        h_t = VECTORIZE(H_t) of each word (N, d) [, Δ (batch, 3, len_h)]."""
        m = self.m
        # Eq. 15-16 for the N real words: ((N, m, 2m), (N, m, m)) each
        W_H, W_X, b = self.generate_T(W_out)
        (W_zr, W_n), (X_zr, X_n), (b_zr, b_n) = W_H, W_X, b
        # The W̃_t part of Eq. 10-12 for every step at once: W̃_t^T W_X^T + b^T
        pre_zr, pre_n = torch.baddbmm(b_zr, X, X_zr), torch.baddbmm(b_n, X, X_n)
        if torch.is_grad_enabled() and kernels.applies():  # a hand-written backward
            H_all = kernels.control_loop(W_zr, W_n, pre_zr, pre_n, words.running)
        else:
            H_all = _control_loop(W_zr, W_n, pre_zr, pre_n, words.running)
        h = H_all.transpose(-1, -2).flatten(1)  # Eq. 14, VECTORIZE(H_t): (N, d)
        change = None
        if return_change:
            watched = (W_H,) if self.W_con_x is None else (W_H, W_X)  # Fig. 3's weights
            W = torch.cat([part for group in watched for part in group], dim=-1)
            rest = self.generate_T(W_out.new_zeros(m, m))[: len(watched)]
            W0 = torch.cat([part for group in rest for part in group], dim=-1)
            W = words.scatter(_by_gate(W))  # (batch, len_h, 3, ·)
            change = _step_change(W, _by_gate(W0))
        return h, change


def _control_loop(
    W_zr: torch.Tensor,
    W_n: torch.Tensor,
    pre_zr: torch.Tensor,
    pre_n: torch.Tensor,
    running: list[int],
) -> torch.Tensor:
    """Eq. 10-13 over the hypothesis, transposed, for the rows of ``time_major_rows``.

    W_zr (N, m, 2m), W_n (N, m, m): each real word's generated ``[W_z^T | W_r^T]`` and ``W_h^T``;
    pre_zr, pre_n: the same shapes, its ``W̃_t^T W_X^T + b^T`` terms; ``running``: rows per
    step. Returns every step's state ``H_t^T``, (N, m, m) in the same row order. The reference
    of ``kernels.control_loop`` (the same loop with a hand-written backward).
    """
    m = W_n.shape[-1]
    H = pre_n.new_zeros(running[0], m, m)  # H_0^T = 0, in the dtype of the gates (autocast)
    outputs = []
    for W_zr_t, W_n_t, pre_zr_t, pre_n_t in zip(
        W_zr.split(running), W_n.split(running), pre_zr.split(running), pre_n.split(running),
        strict=True,
    ):  # each step's rows, (n, m, ·)
        H = H[: len(W_zr_t)]  # rows past their hypothesis's end drop out
        # Eq. 10-11: [Z^T | R^T] = σ(H^T [W_z^T | W_r^T] + W̃_t^T [W_z^T | W_r^T] + b^T)
        pre = torch.baddbmm(pre_zr_t, H, W_zr_t)
        gates = torch.sigmoid(pre) if pre.requires_grad else pre.sigmoid_()  # in place if no grad
        Z, R = gates.chunk(2, dim=-1)
        pre = torch.baddbmm(pre_n_t, R * H, W_n_t)
        H_tilde = tanh(pre) if pre.requires_grad else tanh_(pre)  # Eq. 12
        H = torch.lerp(H, H_tilde, Z)  # Eq. 13: (1 - Z) ⊙ H + Z ⊙ H̃
        outputs.append(H)
    return torch.cat(outputs)


class VectorControlGRU(nn.Module):
    """DIN-2 control layer (Eq. 17-19): a GRU with a d-vector state and re-parameterised weights.

    ``V^t = VECTORIZE(W^t_{ℓ_P})``, ``W^t_g = W^g_con V^t + b^g_con`` and ``b^t_g = B^g_con V^t``
    (d-vectors) for g ∈ (z, r, h). ``"diagonal"``: ``W^t_g ⊙ h + W^t_g ⊙ x``; ``"row_scale"``:
    ``W^t_g ⊙ (U_h h + U_x x)`` with static ``U_h`` (3, d, d), ``U_x`` (3, d, d_x). The weights
    of every real word are generated at once; the recurrence visits the real words only
    (``time_major_rows``).
    """

    def __init__(self, d: int, input_size: int, weights: str = "diagonal") -> None:
        super().__init__()
        self.W_con = nn.Parameter(torch.empty(3, d, d))  # W^g_con ∈ R^{d×d}
        self.b_con = nn.Parameter(torch.empty(3, d))  # b^g_con ∈ R^d
        self.B_con = nn.Parameter(torch.empty(3, d, d))  # B^g_con ∈ R^{d×d}
        self.U_h = nn.Parameter(torch.empty(3, d, d)) if weights == "row_scale" else None
        self.U_x = nn.Parameter(torch.empty(3, d, input_size)) if weights == "row_scale" else None
        for p in (self.W_con, self.b_con, self.B_con):
            _uniform_(p, d)
        if self.U_h is not None:
            _uniform_(self.U_h, d + input_size)
            _uniform_(self.U_x, d + input_size)

    def generate(self, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. 18-19: V^t (..., d) -> (W^t_g, b^t_g), each (..., 3, d)."""
        d = V.shape[-1]
        W = (V @ self.W_con.reshape(3 * d, d).T).unflatten(-1, (3, d)) + self.b_con  # Eq. 18
        b = (V @ self.B_con.reshape(3 * d, d).T).unflatten(-1, (3, d))  # Eq. 19
        return W, b

    @staticmethod
    def _static(U: torch.Tensor | None, v: torch.Tensor) -> torch.Tensor:
        """``U_g v`` for the gates stacked in U (k, d, ·): v (..., ·) -> (..., k, d).

        Without U ("diagonal") v itself, broadcast over the gates.
        """
        if U is None:
            return v.unsqueeze(-2)
        return (v @ U.reshape(-1, U.shape[-1]).T).unflatten(-1, U.shape[:2])

    def forward(
        self,
        W_out: torch.Tensor,
        x: torch.Tensor,
        words: Words,
        return_change: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """W_out = (W^t_{ℓ_P})^T (N, m, m) and the input x (N, d_x) of each word, in ``words``'
        order -> h_t of each word (N, d) [, Δ (batch, 3, len_h)]."""
        running = words.running
        V = W_out.transpose(-1, -2).flatten(1)  # Eq. 18, V^t = VECTORIZE(W^t_{ℓ_P}): (N, d)
        d = V.shape[-1]
        W, b = self.generate(V)  # Eq. 18-19: (N, 3, d)
        pre_x = W * self._static(self.U_x, x) + b  # W^t_g ⊙ (U_x) x_t + b^t_g
        U_zr = None if self.U_h is None else self.U_h[:2]
        U_n = None if self.U_h is None else self.U_h[2:]
        h = pre_x.new_zeros(running[0], d)  # h_0 = 0, in the dtype of the gates (autocast)
        outputs = []
        for W_t, pre_t in zip(W.split(running), pre_x.split(running), strict=True):
            h = h[: len(W_t)]  # rows past their hypothesis's end drop out
            w_z, w_r, w_n = W_t.unbind(1)  # W^t_g: (n, d)
            pre_z, pre_r, pre_n = pre_t.unbind(1)
            h_z, h_r = (h, h) if U_zr is None else self._static(U_zr, h).unbind(1)  # (U^g_h)h
            z = torch.sigmoid(w_z * h_z + pre_z)  # Eq. 17: σ(W^t_z·[h_{t-1}, x_t] + b^t_z)
            r = torch.sigmoid(w_r * h_r + pre_r)
            h_tilde = tanh(w_n * self._static(U_n, r * h)[:, 0] + pre_n)
            h = torch.lerp(h, h_tilde, z)  # (1 - z) ⊙ h + z ⊙ h̃
            outputs.append(h)
        change = None
        if return_change:
            change = _step_change(words.scatter(W), self.generate(V.new_zeros(d))[0])
        return torch.cat(outputs), change  # (N, d)


class StaticControlGRU(nn.Module):
    """Table 2 row 18: no generated weights; an ordinary GRU reads ``[input_t; V^t]``.

    ``form``: "torch" (``nn.GRU``) or "paper" (``PaperGRU``, Eq. 3-6 as printed), as the encoder.
    """

    def __init__(self, d: int, input_size: int, form: str = "torch") -> None:
        super().__init__()
        self.gru = make_gru(input_size + d, d, form)

    def forward(
        self,
        W_out: torch.Tensor,
        x: torch.Tensor,
        words: Words,
        return_change: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """W_out = (W^t_{ℓ_P})^T (N, m, m) and the input x (N, d_x) of each word, in ``words``'
        order -> h_t of each word (N, d) [, Δ (batch, 3, len_h)]."""
        # [x_t; V^t], padded for the GRU: (batch, len_h, d_x + d)
        inputs = words.scatter(torch.cat([x, W_out.transpose(-1, -2).flatten(1)], dim=-1))
        # h_0 = 0; packed, unlike the encoder: batches are bucketed by premise length, so
        # hypothesis padding is large (about half the positions) and a packed run skips it
        g = self.gru  # a PaperGRU steps through real positions only, 0 at padding
        h = g(inputs, words.mask)[0] if isinstance(g, PaperGRU) else run_packed(g, inputs,
                                                                               words.mask)
        h_rows = words.gather(h)  # (N, d)
        if not return_change:
            return h_rows, None
        # Recompute the gate activations from the outputs, in the order (z, r, candidate).
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
        if isinstance(g, PaperGRU):
            resting = g.gates(inputs.new_zeros(inputs.shape[-1]), h.new_zeros(h.shape[-1]))
            return h_rows, _step_change(g.gates(inputs, h_prev), resting)  # zero input and state
        gates = self._gates(  # PyTorch's GRU: r, z, n order
            F.linear(inputs, g.weight_ih_l0, g.bias_ih_l0),
            F.linear(h_prev, g.weight_hh_l0, g.bias_hh_l0),
        )
        resting = self._gates(g.bias_ih_l0, g.bias_hh_l0)  # zero input, zero state: (3, d)
        return h_rows, _step_change(gates, resting)

    @staticmethod
    def _gates(gi: torch.Tensor, gh: torch.Tensor) -> torch.Tensor:
        """(..., 3d) input and hidden pre-activations -> (..., 3, d) activations in (z, r, n)."""
        i_r, i_z, i_n = gi.chunk(3, dim=-1)
        h_r, h_z, h_n = gh.chunk(3, dim=-1)
        r = torch.sigmoid(i_r + h_r)
        return torch.stack([torch.sigmoid(i_z + h_z), r, tanh(i_n + r * h_n)], dim=-2)


def _step_change(W: torch.Tensor, W0: torch.Tensor) -> torch.Tensor:
    """Fig. 3's ``‖W^t_g − W^{t-1}_g‖`` (``W^0_g = W0``) over the last dim.

    W (batch, len_h, 3, k), W0 (3, k) -> (batch, 3, len_h).
    """
    prev = torch.cat([W0.expand_as(W[:, :1]), W[:, :-1]], dim=1)
    return (W - prev).norm(dim=-1).transpose(1, 2)


def _by_gate(W_T: torch.Tensor) -> torch.Tensor:
    """Transposed generated weights (..., m, k·3m), gates side by side in each of k parts
    (k = 1, or 2 for "split": W_H then W_X) -> (..., 3, k·m²), each gate's entries together."""
    m = W_T.shape[-2]
    return W_T.unflatten(-1, (-1, 3, m)).movedim(-2, -4).flatten(-3)


class DIN(Network):
    """The Dynamic Interactive Network: ``variant`` "din1", "din2" or "static" (Table 2 row 18).

    See docs/models/din.md for the architecture, every ambiguity of the paper's text and the
    knob that selects each reading.
    """

    @classmethod
    def validate_config(cls, *, dim: int, **knobs: Any) -> None:
        """``dim`` is a perfect square; every reading knob is one of its choices."""
        m = math.isqrt(dim) if isinstance(dim, int) and dim > 0 else 0
        if m * m != dim or m == 0:
            raise ConfigError(
                f"model.dim / dim={dim} must be a perfect square (e.g. 256, 324, 400) because DIN "
                "reshapes each word's d-dim encoding into √d×√d matrices (Eq. 7)"
            )
        for name, value in knobs.items():
            if name in CHOICES:
                check_choice(name, value, CHOICES[name])

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        dim: int,
        variant: str = "din1",
        dropout: float = 0.2,
        din1_weights: str = "shared",
        din2_weights: str = "diagonal",
        din2_input: str = "hypothesis_matrix",
        static_input: str = "word",
        interaction_init: str = "zeros",
        fc_activation: str = "tanh",
        encoder_gru: str = "torch",
    ) -> None:
        super().__init__()
        self.validate_config(
            dim=dim, variant=variant, din1_weights=din1_weights, din2_weights=din2_weights,
            din2_input=din2_input, static_input=static_input,
            interaction_init=interaction_init, fc_activation=fc_activation,
            encoder_gru=encoder_gru,
        )
        m = math.isqrt(dim)
        d_emb = embedding.embedding_dim
        if (
            variant == "din2"
            and din2_input == "word"
            and din2_weights == "diagonal"
            and d_emb != dim
        ):
            raise ConfigError(
                f"model.net.din2_input='word' (size {d_emb}) needs din2_weights='row_scale': a "
                f"diagonal generated weight of size dim={dim} cannot multiply it"
            )
        self.variant, self.dim, self.m = variant, dim, m
        self.din2_input, self.static_input = din2_input, static_input

        self.embedding = embedding  # fixed GloVe; built and frozen by the backbone
        self.dropout = Dropout(dropout)
        # Eq. 3-6: nn.GRU ("torch", the reset gate after W_hn h) or as printed ("paper")
        self.encoder = make_gru(d_emb, dim, encoder_gru)
        self.transform_p = Transformation(dim, m)  # Eq. 7, c = h'_τ
        self.transform_h = Transformation(d_emb, m)  # Eq. 7, c = x_t
        self.interaction = Interaction(m, interaction_init)  # Eq. 8
        self.control: nn.Module
        if variant == "din1":
            self.control = MatrixControlGRU(m, din1_weights)
        elif variant == "din2":
            self.control = VectorControlGRU(
                dim, d_emb if din2_input == "word" else dim, din2_weights
            )
        else:
            self.control = StaticControlGRU(
                dim, d_emb if static_input == "word" else dim, encoder_gru
            )
        self.fc = nn.Linear(dim, dim)  # Eq. 21
        self.fc_activation = {"tanh": nn.Tanh(), "relu": nn.ReLU(), "none": nn.Identity()}[
            fc_activation
        ]
        self.output = nn.Linear(dim, num_classes)  # Eq. 22, W_output ∈ R^{classes×d}

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Token ids and bool masks (batch, len) -> {"logits": (batch, num_classes), ...}."""
        # Dropout (§3.1.3): the encoder's input and output and the control layer's output.
        # Padding is at the end of each sentence, so the recurrences read real positions first
        # and their outputs there do not depend on it.
        x_p = self.dropout(self.embedding(premise))  # x'_τ: (batch, len_p, d_emb)
        x_h = self.embedding(hypothesis)  # x_t: (batch, len_h, d_emb)
        words = Words.of(hypothesis_mask)  # the N real hypothesis words, in the control's order
        h_p = self.encode(x_p, premise_mask)  # Eq. 3-6, h'_τ: (batch, len_p, d)
        W_p, W_h = self.transform(h_p, x_h, words)  # Eq. 7, transposed: premise steps, words
        h, norms, change = self.interact_and_control(
            W_p, premise_mask, W_h, x_h, words, return_details
        )  # Eq. 8-19, h_t of each word: (N, d)
        result = {"logits": self.classify(h, words)}  # Eq. 20-22
        if return_details:
            real = premise_mask[:, None, :] & hypothesis_mask[:, :, None]  # (batch, len_h, len_p)
            # Analysis maps, detached: (batch, len_h, len_p) and (batch, 3, len_h) in [0, 1].
            result["interaction_norms"] = minmax_normalise(norms.detach(), real, dims=(2,))
            result["gate_change"] = minmax_normalise(
                change.detach(), hypothesis_mask[:, None, :], dims=(1, 2)
            )
            result["premise_mask"] = premise_mask
            result["hypothesis_mask"] = hypothesis_mask
        return result

    def encode(self, x_p: torch.Tensor, premise_mask: torch.Tensor) -> torch.Tensor:
        """Eq. 3-6: x'_τ (batch, len_p, d_emb) -> h'_τ (batch, len_p, d); padded positions are
        never read.

        ``nn.GRU`` runs unpacked: it runs forward and padding comes last, so real positions
        equal a packed run's (and the backward skips the packed sequence's zero-filled
        gradients); in CPU training through ``kernels.gru_outputs`` (its equations, a
        hand-written backward). ``PaperGRU`` steps through the real positions only.
        """
        if isinstance(self.encoder, PaperGRU):
            return self.encoder(x_p, premise_mask)[0]
        return kernels.gru_outputs(self.encoder, x_p)

    def transform(self, h_p: torch.Tensor, x_h: torch.Tensor, words: Words
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. 7, transposed: h'_τ (batch, len_p, d), x_t (batch, len_h, d_emb) -> W̃'_τ^T
        time-major (len_p, batch, m, m) and W̃_t^T of each real hypothesis word (N, m, m), in
        ``words``' order; the encoder's output gets dropout (§3.1.3).

        W̃_t is computed for the real words only (about half the hypothesis positions are
        padding: batches are bucketed by premise length first). The encoder's training pass
        returns h'_τ as a batch-major view of time-major memory, so ``h_p.transpose(0, 1)`` is
        contiguous.
        """
        W_p = self.transform_p(self.dropout(h_p.transpose(0, 1)), transposed=True)
        W_h = self.transform_h(words.gather(x_h), transposed=True)
        return W_p, W_h

    def classify(self, h: torch.Tensor, words: Words) -> torch.Tensor:
        """Eq. 20-22: h_t of each real hypothesis word (N, d) -> logits (batch, num_classes),
        softmax in the loss. Dropout (§3.1.3, the control layer's output) is drawn for the
        real words only."""
        lengths = words.mask.sum(dim=1, keepdim=True).to(h.dtype)  # (batch, 1)
        h_sum = h.new_zeros(len(lengths), h.shape[1]).index_add_(0, words.pair, self.dropout(h))
        h_bar = h_sum / lengths  # Eq. 20, the mean over each hypothesis's words
        return self.output(self.fc_activation(self.fc(h_bar)))  # Eq. 21-22

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """The paper's Fig. 2 (‖W^t_τ‖ over the premise) and Fig. 3 (gate-weight changes)."""
        lp, lh = len(premise), len(hypothesis)
        norms = details["interaction_norms"][index, :lh, :lp].detach().float().cpu()
        change = details["gate_change"][index, :, :lh].detach().float().cpu()
        return {
            "interaction": HeatMap(norms, list(hypothesis), list(premise),
                                   "Interaction ‖W^t_τ‖ (Fig. 2)", "premise word τ",
                                   "hypothesis word t", "min-max over premise"),
            "gates": HeatMap(change, list(GATES), list(hypothesis),
                             "Change of generated gate weights (Fig. 3)", "hypothesis word t",
                             "gate", "normalised change"),
        }

    def interact_and_control(
        self,
        W_p: torch.Tensor,
        premise_mask: torch.Tensor,
        W_h: torch.Tensor,
        x_h: torch.Tensor,
        words: Words,
        return_details: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The interaction and control layers (Eq. 8-19), from the transformed matrices.

        W_p: W̃'_τ^T (len_p, batch, m, m); W_h: W̃_t^T of each word in ``words``' order (N, m,
        m); x_h (batch, len_h, d_emb) -> h_t of each word (N, d) and, with ``return_details``,
        the raw ``‖W^t_τ‖`` (batch, len_h, len_p) and gate changes (batch, 3, len_h).
        """
        # Eq. 8, (W^t_{ℓ_P})^T of each word: (N, m, m)
        W_out, norms = self.interaction(W_p, premise_mask, W_h, words.pair, return_details)
        if self.variant == "din1":
            h, change = self.control(W_out, W_h, words, return_details)  # Eq. 9-16
        else:
            uses_word = (self.din2_input if self.variant == "din2" else self.static_input) == "word"
            # x_t, or VECTORIZE(W̃_t): (N, d_emb or d)
            x = words.gather(x_h) if uses_word else W_h.transpose(-1, -2).flatten(1)
            h, change = self.control(W_out, x, words, return_details)  # Eq. 17-19 / 18
        return h, None if norms is None else words.scatter(norms), change

    def paper_parameter_count(self) -> int:
        """Trainable parameters (no embeddings) counted as the paper appears to count them.

        The true count minus one of the three gate blocks of every GRU with static gate weights
        (the encoder, the ablation's control GRU, DIN-2's ``U_h``/``U_x`` under "row_scale"):
        the paper's figures match an ``nn.GRU`` counted as 2 weight blocks + 4d biases
        (docs/models/din.md, "Parameter counts"). A ``PaperGRU`` (one bias per gate) loses a
        third the same way: 2 weight blocks + 2d biases.
        """
        surplus = 0
        for module in self.modules():
            if isinstance(module, nn.GRU | PaperGRU):
                surplus += sum(p.numel() for p in module.parameters() if p.requires_grad) // 3
            elif isinstance(module, VectorControlGRU) and module.U_h is not None:
                surplus += (module.U_h.numel() + module.U_x.numel()) // 3
        return self.parameter_count() - surplus

    def parameter_count(self) -> int:
        """The true number of trainable parameters, word embeddings excluded."""
        return count_trainable_parameters(self, exclude=self.embedding)
