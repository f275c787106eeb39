"""DIN's interaction loop (Eq. 8) as a registered PyTorch operator with a hand-written
backward: ``torch.ops.entailment_lab.interaction`` and ``interaction_backward``.

The reference is ``din._interaction_loop`` (autograd over torch operations), which the model
runs under mixed precision and for its analysis maps. This operator computes the same loop on
transposed matrices, ``S_τ = tanh(S_{τ-1} W_inter^T + b_inter^T + X W̃'_τ^T)`` for the rows
still inside their premise, with the products in the C kernel (``small_products``) where it
applies (CPU, float32, one torch thread, m in 16/18/20) and in torch otherwise. Registered
through ``torch.library`` (as a ``TORCH_LIBRARY`` op would be), it is one visible operator to
the profiler (``entailment_lab::interaction``), to FLOP counting (``register_flop_formula``:
two m×m products a row and step forward, four backward) and to ``torch.compile`` (a fake
implementation gives the output shapes), and its operands are checked before any kernel reads
them (the kernel checks every index against the matrices it reads or writes).

The forward keeps, for the backward, the rows sorted by premise length and every state S_0 ..
S_L (its outputs after the first); the backward updates one gradient buffer in place step by step
and accumulates the weights' gradients in place, instead of autograd's new tensor and
accumulation per operation and step. ``tests/models/din/test_model.py`` gradchecks it and
``tests/models/din/test_kernels.py`` checks the registrations (``torch.library.opcheck``) and
compares the kernel with the torch products.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import register_flop_formula

from entailment_lab.models.kernels import small_products
from entailment_lab.models.kernels.elementwise import tanh_
from entailment_lab.models.kernels.record import note

Shape = tuple[int, ...]


def _check(name: str, X: torch.Tensor, W_p: torch.Tensor, pair: torch.Tensor,
           order: torch.Tensor, running: list[int]) -> None:
    """The operator's operands, checked before any kernel reads them (``ValueError``)."""
    N, m = len(X), X.shape[-1]
    problems = [
        (X.dim() == 3 and X.shape[1] == m, f"X must be (N, m, m), got {tuple(X.shape)}"),
        (W_p.dim() == 4 and W_p.shape[2:] == (m, m) and W_p.shape[0] == len(running),
         f"W_p must be (len(running)={len(running)}, batch, {m}, {m}), got {tuple(W_p.shape)}"),
        (pair.shape == (N,) and order.shape == (N,) and pair.dtype == order.dtype == torch.int64,
         f"pair and order must be int64 of shape ({N},), got {tuple(pair.shape)} "
         f"{pair.dtype} and {tuple(order.shape)} {order.dtype}"),
        (all(0 <= n <= N for n in running) and running == sorted(running, reverse=True),
         f"running must be non-increasing counts of at most {N} rows, got {running}"),
    ]
    for fine, message in problems:
        if not fine:
            raise ValueError(f"entailment_lab::{name}: {message}")


@torch.library.custom_op("entailment_lab::interaction", mutates_args=())
def interaction(X: torch.Tensor, W_p: torch.Tensor, W_inter: torch.Tensor,
                b_inter: torch.Tensor, pair: torch.Tensor, order: torch.Tensor,
                running: list[int], hypothesis_init: bool, keep: bool) -> list[torch.Tensor]:
    """Eq. 8, transposed: ``X`` = W̃_t^T of N rows (N, m, m), ``W_p`` = W̃'_τ^T time-major
    (len_p, batch, m, m), each row's ``pair`` (N,), ``order`` (N,) the rows by premise length,
    longest first, and ``running[τ]`` the rows inside their premise at step τ -> ``[(W^t_{ℓ_P})^T
    of every row (N, m, m), in X's order]``, followed (``keep``) by what the backward reads:
    the sorted rows, S_0 and the state after each step τ (``running[τ]`` rows), each its own
    tensor (one buffer for all would be large enough for the C library to map fresh pages for
    it every step). ``hypothesis_init``: S_0 = X, else 0."""
    _check("interaction", X, W_p, pair, order, running)
    X, b_idx = X.index_select(0, order), pair.index_select(0, order)  # longest premise first
    S = X.clone() if hypothesis_init else torch.zeros_like(X)  # (W^t_0)^T
    saved = [X, S] if keep else []
    # b_inter^T contiguous: a transposed (m, m) bias broadcast over (n, m, m) takes PyTorch's
    # strided path, about 3× slower than the contiguous add
    W_inter_T, b_inter_T = W_inter.T.contiguous(), b_inter.T.contiguous()
    kernel = small_products.available(X, W_p, b_inter_T)
    note("interaction", "C small_products" if kernel else "torch")
    finished = []  # final states of rows whose premise has ended
    for tau, n in enumerate(running):
        if n < len(S):  # rows n.. have passed their premise's end: S is (W^t_{ℓ_P})^T
            finished.append(S[n:])
            S = S[:n]
        if kernel:  # the whole pre-activation in one pass, each row's W̃'_τ^T read in place
            pre = small_products.bias_product_gathered_(torch.empty_like(S), b_inter_T, S,
                                                        W_inter_T, X[:n], W_p[tau], b_idx[:n])
        else:
            pre = torch.matmul(S, W_inter_T).add_(b_inter_T)
            pre.baddbmm_(X[:n], W_p[tau].index_select(0, b_idx[:n]))
        S = tanh_(pre)
        if keep:
            saved.append(S)
    S = torch.cat([S, *reversed(finished)])  # all N rows, sorted
    return [torch.empty_like(S).index_copy_(0, order, S), *saved]  # X's order


@interaction.register_fake
def _(X: torch.Tensor, W_p: torch.Tensor, W_inter: torch.Tensor, b_inter: torch.Tensor,
      pair: torch.Tensor, order: torch.Tensor, running: list[int], hypothesis_init: bool,
      keep: bool) -> list[torch.Tensor]:
    _check("interaction", X, W_p, pair, order, running)
    rows = [len(X), len(X), len(X), *running] if keep else [len(X)]
    return [X.new_empty(n, *X.shape[1:]) for n in rows]


@torch.library.custom_op("entailment_lab::interaction_backward", mutates_args=())
def interaction_backward(grad: torch.Tensor, saved: list[torch.Tensor], W_p: torch.Tensor,
                         W_inter: torch.Tensor, pair: torch.Tensor, order: torch.Tensor,
                         running: list[int], hypothesis_init: bool
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of ``interaction``'s inputs X, W_p, W_inter, b_inter from ``grad``, the
    gradient of its first output, and ``saved``, the rest of its outputs."""
    N, m = len(grad), grad.shape[-1]
    _check("interaction_backward", grad, W_p, pair, order, running)
    if [len(t) for t in saved] != [N, N, *running]:
        raise ValueError(f"entailment_lab::interaction_backward: saved must hold {N}, {N} and "
                         f"then {running} rows, got {[len(t) for t in saved]}")
    X, *states = saved  # states[k]: S_0, then the state after step k - 1
    b_idx = pair.index_select(0, order)
    G = grad.index_select(0, order)  # dL/dS_τ of each (sorted) row at the step being undone
    grad_X, grad_W_p = torch.zeros_like(X), torch.zeros_like(W_p)
    grad_W_inter_T, grad_b_T = W_inter.new_zeros(m, m), W_inter.new_zeros(m, m)
    kernel = small_products.available(X, W_p, W_inter, G)
    note("interaction_backward", "C small_products" if kernel else "torch")
    # the row index of a sum of every row into one matrix (W_inter's gradient), for the kernel
    rows_to_one = torch.zeros(N, dtype=torch.int64, device=X.device) if kernel else None
    for tau in reversed(range(len(running))):
        n = running[tau]
        # Rows [:n] ran step τ; G holds dL/dS_τ (written by step τ+1, or the output's gradient
        # for rows whose premise ended at τ).
        d = torch.ops.aten.tanh_backward(G[:n], states[tau + 1])  # dL/d(pre-activation)
        S_prev, X_n = states[tau][:n], X[:n]
        if kernel:  # the four products of the branch below, gathers and scatters included
            small_products.gathered_product_t_add_(grad_X[:n], d, W_p[tau], b_idx[:n])
            small_products.scattered_t_product_add_(grad_W_p[tau], X_n, d, b_idx[:n])
            small_products.scattered_t_product_add_(grad_W_inter_T[None], S_prev, d,
                                                    rows_to_one[:n])
            small_products.fixed_product_(G[:n], d, W_inter)
        else:
            W_p_rows = W_p[tau].index_select(0, b_idx[:n])
            grad_X[:n].baddbmm_(d, W_p_rows.transpose(-1, -2))  # of X W̃'^T
            grad_W_p[tau].index_add_(0, b_idx[:n], torch.bmm(X_n.transpose(-1, -2), d))
            grad_W_inter_T.addmm_(S_prev.reshape(-1, m).T, d.view(-1, m))  # of S W_inter^T
            torch.mm(d.view(-1, m), W_inter, out=G[:n].view(-1, m))  # dL/dS_{τ-1}
        grad_b_T += d.sum(dim=0)
    if hypothesis_init:
        grad_X += G  # S_0 = X
    grad_X = torch.empty_like(grad_X).index_copy_(0, order, grad_X)  # the caller's order
    return grad_X, grad_W_p, grad_W_inter_T.T.contiguous(), grad_b_T.T.contiguous()


@interaction_backward.register_fake
def _(grad: torch.Tensor, saved: list[torch.Tensor], W_p: torch.Tensor, W_inter: torch.Tensor,
      pair: torch.Tensor, order: torch.Tensor, running: list[int], hypothesis_init: bool
      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.empty_like(grad), torch.empty_like(W_p), torch.empty_like(W_inter),
            torch.empty_like(W_inter))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: list[torch.Tensor]) -> None:
    _, W_p, W_inter, _, pair, order, running, hypothesis_init, keep = inputs
    if not keep:
        raise RuntimeError("entailment_lab::interaction: gradients need keep=True")
    ctx.save_for_backward(W_p, W_inter, pair, order, *output[1:])
    ctx.running, ctx.hypothesis_init = running, hypothesis_init
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)  # no zero-filled gradients for the kept states


def _backward(ctx: Any, grads: list[torch.Tensor | None]) -> tuple[torch.Tensor | None, ...]:
    W_p, W_inter, pair, order, *saved = ctx.saved_tensors
    grad = grads[0].contiguous() if grads[0] is not None else torch.zeros_like(saved[0])
    return (*interaction_backward(grad, saved, W_p, W_inter, pair, order, ctx.running,
                                  ctx.hypothesis_init), None, None, None, None, None)


interaction.register_autograd(_backward, setup_context=_setup_context)


def _flops_per_row_step(m: int) -> int:
    return 2 * 2 * m**3  # two m×m products, a multiply and an add each


@register_flop_formula(torch.ops.entailment_lab.interaction)
def _interaction_flops(X: Shape, W_p: Shape, W_inter: Shape, b_inter: Shape, pair: Shape,
                       order: Shape, running: list[int], *args: Any, **kwargs: Any) -> int:
    return sum(running) * _flops_per_row_step(X[-1])


@register_flop_formula(torch.ops.entailment_lab.interaction_backward)
def _interaction_backward_flops(grad: Shape, saved: list[Shape], W_p: Shape, W_inter: Shape,
                                pair: Shape, order: Shape, running: list[int], *args: Any,
                                **kwargs: Any) -> int:
    return 2 * sum(running) * _flops_per_row_step(grad[-1])


def run(X: torch.Tensor, W_p: torch.Tensor, W_inter: torch.Tensor, b_inter: torch.Tensor,
        pair: torch.Tensor, order: torch.Tensor, running: list[int],
        hypothesis_init: bool) -> torch.Tensor:
    """The operator's final states (N, m, m), keeping what the backward needs only where a
    gradient will be taken."""
    keep = torch.is_grad_enabled() and any(
        t.requires_grad for t in (X, W_p, W_inter, b_inter))
    return interaction(X, W_p, W_inter, b_inter, pair, order, running, hypothesis_init, keep)[0]
