"""The encoder GRU's CPU training pass with a hand-written backward (``gru_outputs``); the
reference is ``nn.GRU`` itself, which every other case runs."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from entailment_lab.models.kernels.elementwise import sigmoid_tanh_applies, tanh_
from entailment_lab.models.kernels.record import note


def autocast_enabled() -> bool:
    """Whether mixed precision (``torch.autocast``) is on for CPU or CUDA."""
    return any(torch.is_autocast_enabled(device) for device in ("cpu", "cuda"))


class _GRUSequence(torch.autograd.Function):
    """A one-layer, batch-first ``nn.GRU`` over a whole batch (h_0 = 0), with a hand-written
    backward: the same equations and operation order as PyTorch's CPU cell,
    ``r, z = σ(W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z})``, ``n = tanh(W_in x + b_in + r ⊙
    (W_hn h + b_hn))``, ``h' = (h − n) ⊙ z + n``, and ``tanh`` through the sigmoid.

    Autograd's backward of ``nn.GRU`` on CPU runs about fifteen operations a step, concatenates
    the three gates' gradients and accumulates each weight's gradient step by step. Here the
    gates' gradients are written into one buffer per product and the weights' gradients are
    one matrix product over all steps after the loop. The first step's gates are ``b_hh``
    (``W_hh h_0 = 0`` is not computed). Outputs equal ``nn.GRU``'s to float rounding:
    ``tests/models/din/test_model.py`` compares them (float64 and float32) and gradchecks the
    backward.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, W_ih: torch.Tensor, W_hh: torch.Tensor,
                b_ih: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
        batch, steps, _ = x.shape
        d = W_hh.shape[1]
        x_steps = x.transpose(0, 1).contiguous()  # time-major: (len, batch, in)
        # W_ih x + b_ih for every step at once: (len, batch, 3d), gates in PyTorch's order r, z, n
        gi = torch.addmm(b_ih, x_steps.view(steps * batch, -1), W_ih.T).view(steps, batch, 3 * d)
        out = x.new_empty(steps, batch, d)  # h_t
        rz = x.new_empty(steps, batch, 2 * d)  # [r | z]
        n = x.new_empty(steps, batch, d)
        gh_n = x.new_empty(steps, batch, d)  # W_hn h + b_hn
        for t in range(steps):
            h = out[t - 1] if t else None  # h_{t-1}; h_0 = 0
            # W_hh h + b_hh: (batch, 3d); b_hh alone at the first step
            gh = torch.addmm(b_hh, h, W_hh.T) if t else b_hh.expand(batch, 3 * d)
            r_z = torch.add(gh[:, : 2 * d], gi[t, :, : 2 * d], out=rz[t]).sigmoid_()
            gh_n[t] = gh[:, 2 * d:]
            n_t = tanh_(torch.addcmul(gi[t, :, 2 * d:], gh_n[t], r_z[:, :d], out=n[t]))
            h_minus_n = torch.sub(h, n_t, out=out[t]) if t else torch.neg(n_t, out=out[t])
            h_minus_n.mul_(r_z[:, d:]).add_(n_t)
        ctx.save_for_backward(x_steps, W_ih, W_hh, out, rz, n, gh_n)
        return out.transpose(0, 1)  # (batch, len, d)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x_steps, W_ih, W_hh, out, rz, n, gh_n = ctx.saved_tensors
        steps, batch, d = out.shape
        G = grad_out.transpose(0, 1).contiguous()  # dL/dh_t; step t adds its part to step t−1's
        d_gh = out.new_empty(steps, batch, 3 * d)  # dL/d(W_hh h + b_hh): [r | z | n's, ⊙ r]
        d_n = out.new_empty(steps, batch, d)  # dL/d(n's pre-activation) = dL/d(W_in x + b_in)
        for t in reversed(range(steps)):
            g, r, z = G[t], rz[t, :, :d], rz[t, :, d:]
            h = out[t - 1] if t else out.new_zeros(batch, d)  # h_{t-1}
            # h_t = (h − n) ⊙ z + n: dL/dn = g ⊙ (1 − z), dL/dz = g ⊙ (h − n), dL/dh = g ⊙ z
            torch.ops.aten.tanh_backward.grad_input(g - g * z, n[t], grad_input=d_n[t])
            torch.mul(d_n[t], r, out=d_gh[t, :, 2 * d:])
            torch.ops.aten.sigmoid_backward.grad_input(d_n[t] * gh_n[t], r,
                                                       grad_input=d_gh[t, :, :d])
            torch.ops.aten.sigmoid_backward.grad_input(g * (h - n[t]), z,
                                                       grad_input=d_gh[t, :, d: 2 * d])
            if t:
                G[t - 1].addcmul_(g, z).addmm_(d_gh[t], W_hh)
        # The weights' gradients: one product over all steps (h_0 = 0 adds nothing)
        flat_gh, flat_n = d_gh.view(-1, 3 * d), d_n.view(-1, d)
        x_flat = x_steps.view(steps * batch, -1)
        grad_W_hh = flat_gh[batch:].T @ out[:-1].reshape(-1, d)
        grad_b_hh = flat_gh.sum(0)
        grad_W_ih = torch.cat([flat_gh[:, : 2 * d].T @ x_flat, flat_n.T @ x_flat])
        grad_b_ih = torch.cat([grad_b_hh[: 2 * d], flat_n.sum(0)])
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.addmm(flat_n @ W_ih[2 * d:], flat_gh[:, : 2 * d], W_ih[: 2 * d])
            grad_x = grad_x.view(steps, batch, -1).transpose(0, 1)
        return grad_x, grad_W_ih, grad_W_hh, grad_b_ih, grad_b_hh


def gru_outputs(gru: nn.GRU, x: torch.Tensor) -> torch.Tensor:
    """``gru(x)[0]`` with h_0 = 0: every step's output (batch, len, hidden) of batch-first x.

    Training on CPU in float32/64 without autocast, a one-layer, one-direction ``gru`` runs
    ``_GRUSequence`` (its own backward; outputs equal to float rounding); otherwise ``gru``
    itself.
    """
    fast = (
        torch.is_grad_enabled() and not autocast_enabled() and sigmoid_tanh_applies(x)
        and gru.num_layers == 1 and not gru.bidirectional and gru.batch_first and gru.bias
    )
    if not fast:
        return gru(x)[0]
    note("encoder_gru", "hand-written backward")
    return _GRUSequence.apply(x, gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0,
                              gru.bias_hh_l0)
