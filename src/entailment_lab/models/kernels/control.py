"""DIN-1's control recurrence (Eq. 10-13) with a hand-written backward, for training without
mixed precision; the reference is ``din._control_loop`` (autograd), which every other case runs.
"""

from __future__ import annotations

from typing import Any

import torch

from entailment_lab.models.kernels.elementwise import tanh_
from entailment_lab.models.kernels.record import note


def control_loop(W_zr: torch.Tensor, W_n: torch.Tensor, pre_zr: torch.Tensor,
                 pre_n: torch.Tensor, running: list[int]) -> torch.Tensor:
    """``din._control_loop(W_zr, W_n, pre_zr, pre_n, running)``: every step's state ``H_t^T``
    (N, m, m), with the hand-written backward of ``_ControlLoop``."""
    note("control", "hand-written backward")
    return _ControlLoop.apply(W_zr, W_n, pre_zr, pre_n, running)


class _ControlLoop(torch.autograd.Function):
    """Eq. 10-13 over the hypothesis, transposed, for the rows of ``din.time_major_rows``, with a
    hand-written backward.

    The forward is the reference's arithmetic (``din._control_loop``, outside autograd), and
    keeps each step's gates ``[Z^T | R^T]``, ``(R ⊙ H_{t-1})^T`` and ``H̃_t^T``. Autograd's
    backward of the loop runs a dozen operations a step, slices and concatenates every step's
    gradients and fills zeros for the rows that drop out. Here each step's gradients are
    written straight into their rows of one buffer per input, and the state's gradient is
    carried back in place. ``tests/models/din/test_model.py`` gradchecks it and compares the model's
    gradients with the padded implementation's (float64).
    """

    @staticmethod
    def forward(ctx: Any, W_zr: torch.Tensor, W_n: torch.Tensor, pre_zr: torch.Tensor,
                pre_n: torch.Tensor, running: list[int]) -> torch.Tensor:
        m = W_n.shape[-1]
        H = pre_n.new_zeros(running[0], m, m)  # H_0^T = 0
        outputs, saved = [], []
        for W_zr_t, W_n_t, pre_zr_t, pre_n_t in zip(
            W_zr.split(running), W_n.split(running), pre_zr.split(running), pre_n.split(running),
            strict=True,
        ):  # each step's rows, (n, m, ·)
            H = H[: len(W_zr_t)]  # rows past their hypothesis's end drop out
            gates = torch.baddbmm(pre_zr_t, H, W_zr_t).sigmoid_()  # Eq. 10-11: [Z^T | R^T]
            Z, R = gates.chunk(2, dim=-1)
            RH = R * H
            H_tilde = tanh_(torch.baddbmm(pre_n_t, RH, W_n_t))  # Eq. 12
            H = torch.lerp(H, H_tilde, Z)  # Eq. 13: (1 - Z) ⊙ H + Z ⊙ H̃
            outputs.append(H)
            saved += (gates, RH, H_tilde)
        H_all = torch.cat(outputs)
        ctx.save_for_backward(W_zr, W_n, H_all, *saved)
        ctx.running = running
        return H_all

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_H: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        W_zr, W_n, H_all, *saved = ctx.saved_tensors
        running, m = ctx.running, W_n.shape[-1]
        starts = [0]
        for n in running[:-1]:
            starts.append(starts[-1] + n)
        G_all = grad_H.contiguous().clone()  # dL/dH_t^T; step t+1 adds its part to step t's rows
        grad_W_zr, grad_W_n = torch.empty_like(W_zr), torch.empty_like(W_n)
        grad_pre_zr, grad_pre_n = torch.empty_like(W_zr), torch.empty_like(W_n)
        d_gates = W_zr.new_empty(running[0], m, 2 * m)  # dL/d[Z^T | R^T], reused every step
        for step in reversed(range(len(running))):
            n, rows = running[step], slice(starts[step], starts[step] + running[step])
            gates, RH, H_tilde = saved[3 * step: 3 * step + 3]
            Z, R = gates.chunk(2, dim=-1)
            H = H_all[starts[step - 1]:][:n] if step else H_all.new_zeros(n, m, m)  # H_{t-1}^T
            G = G_all[rows]
            # Eq. 13, H_t = H + Z ⊙ (H̃ − H): dL/dH̃ = G ⊙ Z, dL/dZ = G ⊙ (H̃ − H), dL/dH = G − G ⊙ Z
            d_tilde = G * Z
            d_Z, d_R = d_gates[:n].chunk(2, dim=-1)
            torch.mul(G, H_tilde - H, out=d_Z)
            d_H = G - d_tilde
            # Eq. 12, H̃ = tanh(pre_n + (R ⊙ H) W_n): the pre-activation's, then the product's
            d_pre_n = torch.ops.aten.tanh_backward.grad_input(d_tilde, H_tilde,
                                                             grad_input=grad_pre_n[rows])
            d_RH = torch.bmm(d_pre_n, W_n[rows].transpose(-1, -2))
            torch.bmm(RH.transpose(-1, -2), d_pre_n, out=grad_W_n[rows])
            torch.mul(d_RH, H, out=d_R)
            d_H.addcmul_(d_RH, R)
            # Eq. 10-11, [Z | R] = σ(pre_zr + H [W_z | W_r])
            d_pre_zr = torch.ops.aten.sigmoid_backward.grad_input(d_gates[:n], gates,
                                                                 grad_input=grad_pre_zr[rows])
            d_H.baddbmm_(d_pre_zr, W_zr[rows].transpose(-1, -2))
            torch.bmm(H.transpose(-1, -2), d_pre_zr, out=grad_W_zr[rows])
            if step:
                G_all[starts[step - 1]:][:n] += d_H  # rows [:n] of step t−1 are step t's rows
        return grad_W_zr, grad_W_n, grad_pre_zr, grad_pre_n, None
