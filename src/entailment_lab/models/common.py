"""Building blocks shared by the model files: config checks, masked reductions, packing and
scattering of the real positions, a faster CPU dropout, tanh and GRU training pass, parameter
counts and the pair-feature classifier.

Conventions used by every model in this package (the contract: ``models/base.py``):
masks are ``torch.bool`` with ``True`` on real tokens, padding id is 0, and every sentence in a
batch has at least one real token (the DataModule guarantees it).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, NoReturn

import torch
from torch import nn

from entailment_lab.errors import ConfigError
from entailment_lab.models import gru_steps

# --- Config checks for ``validate_config`` -------------------------------------------------------
# Each raises ``ConfigError("model.net.KNOB must be ..., got VALUE[; HINT]")``. ``knob`` is the
# name under ``model.net`` and may carry a gloss, e.g. ``"hidden_size (dim, the LSTM size)"``;
# ``hint`` is a fix to suggest, e.g. ``"e.g. dim=300"``.


def _reject(knob: str, requirement: str, value: object, hint: str = "") -> NoReturn:
    raise ConfigError(f"model.net.{knob} must be {requirement}, got {value!r}"
                      + (f"; {hint}" if hint else ""))


def check_positive_int(knob: str, value: object, hint: str = "") -> None:
    """``value`` is an ``int`` >= 1 (a size, a count of layers); ``True`` is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _reject(knob, "a positive integer", value, hint)


def check_nonnegative_int(knob: str, value: object, hint: str = "") -> None:
    """``value`` is an ``int`` >= 0 (a count that may be zero); ``False`` is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _reject(knob, "an integer >= 0", value, hint)


def check_probability(knob: str, value: object) -> None:
    """``value`` is a number in [0, 1): a dropout rate."""
    if not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        _reject(knob, "in [0, 1)", value)


def check_flags(**knobs: object) -> None:
    """Every value is a ``bool`` (a YAML true / false), checked in the order given."""
    for knob, value in knobs.items():
        if not isinstance(value, bool):
            _reject(knob, "true or false", value)


def check_choice(knob: str, value: object, choices: Collection[object]) -> None:
    """``value`` is one of ``choices``."""
    if value not in choices:
        _reject(knob, f"one of {tuple(choices)}", value)


def check_num_classes(num_classes: int) -> None:
    """A classifier needs two classes at least (``num_classes`` comes from the data)."""
    if num_classes < 2:
        raise ConfigError(f"num_classes must be >= 2, got {num_classes}.")


def masked_fill_value(dtype: torch.dtype) -> float:
    """The most negative finite value of ``dtype`` (safer than -inf: no NaN on all-masked rows)."""
    return torch.finfo(dtype).min


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 if it is float16 or bfloat16 (autocast's matmul outputs); float32 and
    float64 tensors are returned as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` that gives exactly zero weight where ``mask`` is False.

    ``mask`` must broadcast to ``scores``. Computed in float32 at least: under mixed precision
    the scores come from matmuls in bfloat16 / float16, too coarse for exponentials and their
    sum. The weights stay float32, as CUDA autocast's own softmax returns them.
    """
    scores = _at_least_float32(scores)
    scores = scores.masked_fill(~mask, masked_fill_value(scores.dtype))
    return torch.softmax(scores, dim=dim) * mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` (batch, length, features) over real positions of ``mask`` (batch, length).

    Summed in float32 at least (a float32 result for bfloat16 / float16 ``x``), as CUDA
    autocast runs every ``sum``: a half-precision total over a long sentence loses digits.
    """
    x = _at_least_float32(x)
    weights = mask.unsqueeze(-1).to(x.dtype)  # (batch, length, 1)
    return (x * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)


def last_true_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last real position: (batch,) for a (batch, length) mask."""
    return mask.long().sum(dim=1).clamp_min(1) - 1


def scatter_rows(
    rows: torch.Tensor, mask: torch.Tensor, index: tuple[torch.Tensor, ...] | None = None
) -> torch.Tensor:
    """The inverse of ``x[mask]``: rows (N, ...) -> (*mask.shape, ...), zeros where mask is False.

    Position-wise layers run on the N real positions only (``x[mask]``) and scatter back, so
    padding costs no compute. ``index`` (e.g. ``mask.nonzero(as_tuple=True)``, reordered) gives
    the rows' positions when they are not in the order of ``x[mask]``.
    """
    return rows.new_zeros(*mask.shape, *rows.shape[1:]).index_put(index or (mask,), rows)


def longest_first(lengths: torch.Tensor, steps: int) -> tuple[torch.Tensor, list[int]]:
    """Order of rows by ``lengths``, longest first, and how many rows still run at each step.

    With the rows in this order, those still inside their sequence at step s are the first
    ``running[s]`` (the idea of ``pack_padded_sequence``): a recurrence updates only that
    prefix, so padding is never computed.
    """
    order = torch.argsort(lengths, descending=True, stable=True)
    steps_range = torch.arange(steps, device=lengths.device)
    running = (lengths[None, :] > steps_range[:, None]).sum(dim=1)  # (steps,), non-increasing
    return order, running.tolist()


def pack(x: torch.Tensor, mask: torch.Tensor) -> nn.utils.rnn.PackedSequence:
    """Right-padded ``x`` (batch, len, features) as a packed sequence of its real positions."""
    return nn.utils.rnn.pack_padded_sequence(
        x, mask.sum(dim=1).cpu(), batch_first=True, enforce_sorted=False
    )


def run_rnn(
    rnn: nn.RNNBase,
    packed: nn.utils.rnn.PackedSequence,
    hx: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
) -> tuple[nn.utils.rnn.PackedSequence, torch.Tensor | tuple[torch.Tensor, ...]]:
    """``rnn(packed, hx)``, in float32 when CPU autocast is on (``trainer.precision=bf16-mixed``).

    CPU autocast casts ``nn.LSTM``'s inputs to bfloat16 and, when every row of a batch has the
    same length (the packed batch is then a plain one), hands them to oneDNN, whose bfloat16 LSTM
    needs a CPU with AVX512-BF16: on others (AVX2-only machines) torch 2.13 raises "could not
    create a primitive descriptor for the LSTM forward propagation primitive". Running the CPU
    recurrence in float32 works on every CPU and gives the same numbers on all of them; on a GPU,
    autocast keeps cuDNN's half-precision recurrences.
    """
    if packed.data.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return rnn(packed, hx)
    packed = packed._replace(data=_at_least_float32(packed.data))  # PackedSequence: a namedtuple
    if isinstance(hx, tuple):
        hx = tuple(_at_least_float32(h) for h in hx)
    elif hx is not None:
        hx = _at_least_float32(hx)
    with torch.autocast("cpu", enabled=False):
        return rnn(packed, hx)


def run_packed(rnn: nn.RNNBase, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Run a batch-first ``rnn`` over right-padded ``x`` (batch, len, in) as a packed sequence.

    Padded steps are skipped (outputs 0 there); real steps are as in the unpacked run.
    """
    out, _ = nn.utils.rnn.pad_packed_sequence(
        run_rnn(rnn, pack(x, mask))[0], batch_first=True, total_length=x.shape[1]
    )
    return out


class Dropout(nn.Dropout):
    """``nn.Dropout`` with a faster CPU path: the same distribution, another random stream.

    On CPU, PyTorch draws dropout's mask with ``bernoulli_``, about 3× slower than drawing
    uniforms (measured: 16 ms vs 5 ms for 1.2M elements, one thread; DIN drops three such
    tensors a step). Here the kept entries are those whose uniform draw is >= p, scaled by
    1/(1 - p), as ``nn.Dropout``. Other devices use ``nn.Dropout`` itself.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu":
            return super().forward(x)
        keep = (torch.empty_like(x).uniform_() >= self.p).to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x * keep


# tanh on CPU: PyTorch's float kernel costs about 3 ns an element on one thread of the AMD EPYC
# we measure on (1.1-1.5 ms for the (960, 20, 20) interaction state), its sigmoid about 0.4 ns.
# ``tanh(x) = 2·σ(2x) − 1`` in three in-place passes takes about 0.20 ms for the same tensor. Its
# absolute error is at most about one float32 ulp of 1 (1.8e-7 vs float64 tanh, against 3e-8
# for torch.tanh), the size of the rounding of any sum of such values; relative accuracy is
# lost only where |tanh(x)| is itself below that. Other devices and dtypes use torch.tanh.
_SIGMOID_TANH_DTYPES = (torch.float32, torch.float64)


def _sigmoid_tanh_applies(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype in _SIGMOID_TANH_DTYPES


_MINUS_ONE = torch.tensor(-1.0)  # a 0-dim tensor: it takes the other operand's dtype


def _sigmoid_tanh_of_double(y: torch.Tensor) -> torch.Tensor:
    """``tanh(x)`` in place from ``y = 2x``: ``2·σ(y) − 1``, the last two operations in one pass
    (``−1 + 2·s`` rounds as ``2·s − 1``: the doubling is exact)."""
    return torch.add(_MINUS_ONE, y.sigmoid_(), alpha=2.0, out=y)


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """``x.tanh_()``, faster on CPU (``2·σ(2x) − 1``); for tensors outside autograd."""
    if not _sigmoid_tanh_applies(x):
        return x.tanh_()
    return _sigmoid_tanh_of_double(x.mul_(2.0))


class _SigmoidTanh(torch.autograd.Function):
    """tanh through the sigmoid, forward and backward (``1 − tanh²``, from the saved output)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        y = _sigmoid_tanh_of_double(torch.mul(x, 2.0))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """``torch.tanh(x)``, faster on CPU in float32 and float64 (``2·σ(2x) − 1``; see above)."""
    if not _sigmoid_tanh_applies(x):
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _SigmoidTanh.apply(x)
    return _sigmoid_tanh_of_double(torch.mul(x, 2.0))


def autocast_enabled() -> bool:
    """Whether mixed precision (``torch.autocast``) is on for CPU or CUDA."""
    return any(torch.is_autocast_enabled(device) for device in ("cpu", "cuda"))


class _GRUSequence(torch.autograd.Function):
    """A one-layer, batch-first ``nn.GRU`` over a whole batch (h_0 = 0), with a hand-written
    backward: the same equations and operation order as PyTorch's CPU cell,
    ``r, z = σ(W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z})``, ``n = tanh(W_in x + b_in + r ⊙
    (W_hn h + b_hn))``, ``h' = (h − n) ⊙ z + n``, and ``tanh`` through the sigmoid (above).

    Autograd's backward of ``nn.GRU`` on CPU runs about fifteen operations a step, concatenates
    the three gates' gradients and accumulates each weight's gradient step by step. Here the
    gates' gradients are written into one buffer per product and the weights' gradients are
    one matrix product over all steps after the loop. In float32 with one thread each step's
    gate arithmetic is one C pass (``gru_steps.py``), forward and backward. Outputs equal
    ``nn.GRU``'s to float rounding: ``tests/test_din_model.py`` compares them (float64 and
    float32) and gradchecks the backward, ``tests/test_c_kernels.py`` compares the kernel's.
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
        kernel = gru_steps.available(x_steps, W_hh)  # the gate arithmetic in C (gru_steps.py)
        for t in range(steps):
            h = out[t - 1] if t else None  # h_{t-1}; h_0 = 0
            # W_hh h + b_hh: (batch, 3d); b_hh alone at the first step
            gh = torch.addmm(b_hh, h, W_hh.T) if t else b_hh.expand(batch, 3 * d).contiguous()
            if kernel:
                gru_steps.forward_step_(gh, gi[t], h, rz[t], n[t], gh_n[t], out[t])
                continue
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
        kernel = gru_steps.available(G, W_hh)
        for t in reversed(range(steps)):
            if kernel:  # the elementwise lines below in one pass (gru_steps.py)
                gru_steps.backward_step_(G[t], rz[t], n[t], gh_n[t], out[t - 1] if t else None,
                                         d_gh[t], d_n[t], G[t - 1] if t else None)
                if t:
                    G[t - 1].addmm_(d_gh[t], W_hh)
                continue
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
        torch.is_grad_enabled() and not autocast_enabled() and _sigmoid_tanh_applies(x)
        and gru.num_layers == 1 and not gru.bidirectional and gru.batch_first and gru.bias
    )
    if not fast:
        return gru(x)[0]
    return _GRUSequence.apply(x, gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0,
                              gru.bias_hh_l0)


def count_trainable_parameters(module: nn.Module, exclude: nn.Module | None = None) -> int:
    """Trainable parameters of ``module`` except those of ``exclude`` (the word embeddings).

    This is the "Para" column of the papers' tables: word vectors are never counted, whether
    frozen or fine-tuned.
    """
    skip = {id(p) for p in exclude.parameters()} if exclude is not None else set()
    return sum(p.numel() for p in module.parameters() if p.requires_grad and id(p) not in skip)


class PairFeatureClassifier(nn.Module):
    """Classify a pair from two sentence vectors with ``[u; v; |u - v|; u * v]`` and an MLP.

    The matching heuristic of Mou et al. (2016) / Conneau et al. (2017), used by the sentence-
    encoder baselines (LSTM, DCNN on pairs).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_classes: int,
        num_layers: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = 4 * input_size
        for _ in range(num_layers):
            layers += [nn.Dropout(dropout), nn.Linear(size, hidden_size), nn.Tanh()]
            size = hidden_size
        layers += [nn.Dropout(dropout), nn.Linear(size, num_classes)]
        self.mlp = nn.Sequential(*layers)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # u, v: (batch, input_size) -> logits (batch, num_classes)
        return self.mlp(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))
