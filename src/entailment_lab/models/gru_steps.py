"""The elementwise part of a GRU step on CPU through a C kernel (``gru_steps.c``), for the
encoder's training pass (``common._GRUSequence``).

PyTorch runs a GRU cell's gate arithmetic as about ten elementwise operations a step, forward
and again backward, each a pass over the step's (batch, 3·hidden) gates; the kernel does each
direction in one pass. The matrix products stay in torch. Built on first use (``c_kernels``);
where it cannot be built or run (no compiler, no AVX-512F, ``ENTAILMENT_LAB_C_KERNELS=0``, more
than one torch thread, another dtype or device), ``available()`` is False and
``_GRUSequence`` uses torch's operations. The kernel's exponential is its own (within about
one float32 ulp of torch's), so outputs equal the torch path's to float32 rounding:
``tests/test_c_kernels.py``.
"""

from __future__ import annotations

import ctypes

import torch

from entailment_lab.models import c_kernels
from entailment_lab.models.c_kernels import pointer

SOURCE = "gru_steps.c"
_SIZE, _P = ctypes.c_int64, ctypes.c_void_p
_SIGNATURES = (  # (rows, hidden size, pointers...)
    ("gru_forward_step", (_SIZE, _SIZE, *[_P] * 7)),
    ("gru_backward_step", (_SIZE, _SIZE, *[_P] * 8)),
)


def _library() -> ctypes.CDLL | None:
    return c_kernels.library(SOURCE, _SIGNATURES)


def available(*tensors: torch.Tensor) -> bool:
    """Whether the kernel can compute with these tensors (float32, CPU, contiguous, one torch
    thread) and is built on this machine."""
    return c_kernels.applies(*tensors) and _library() is not None


def _check(name: str, rows: int, hidden: int, shapes: dict[str, tuple[torch.Tensor | None, int]]
           ) -> None:
    """The kernel reads raw memory: each operand a contiguous float32 CPU tensor of ``rows``
    rows and the given width (a ``ValueError`` that names the operand otherwise)."""
    present = [t for t, _ in shapes.values() if t is not None]
    c_kernels.check(name, *present)
    for operand, (t, width) in shapes.items():
        if t is not None and tuple(t.shape) != (rows, width * hidden):
            raise ValueError(f"{name}: {operand} must be ({rows}, {width * hidden}), "
                             f"got {tuple(t.shape)}")


def forward_step_(gh: torch.Tensor, gi: torch.Tensor, h: torch.Tensor | None, rz: torch.Tensor,
                  n: torch.Tensor, gh_n: torch.Tensor, h_next: torch.Tensor) -> torch.Tensor:
    """One forward step of ``nn.GRU``'s cell after its products, written into the outputs.

    gh = W_hh h + b_hh, gi = W_ih x + b_ih (batch, 3d), gates r, z, n; h (batch, d), None for
    h_0 = 0. Writes ``[r | z]`` (batch, 2d), the candidate n and ``gh``'s n part (batch, d),
    and returns ``h_next = (h − n) ⊙ z + n`` (batch, d).
    """
    rows, hidden = h_next.shape
    _check("forward_step_", rows, hidden, {"gh": (gh, 3), "gi": (gi, 3), "h": (h, 1),
                                           "rz": (rz, 2), "n": (n, 1), "gh_n": (gh_n, 1),
                                           "h_next": (h_next, 1)})
    _library().gru_forward_step(rows, hidden, pointer(gh), pointer(gi), pointer(h), pointer(rz),
                                pointer(n), pointer(gh_n), pointer(h_next))
    return h_next


def backward_step_(g: torch.Tensor, rz: torch.Tensor, n: torch.Tensor, gh_n: torch.Tensor,
                   h: torch.Tensor | None, d_gh: torch.Tensor, d_n: torch.Tensor,
                   g_prev: torch.Tensor | None) -> None:
    """One backward step, from g = dL/dh_next (batch, d) and the forward's saved ``[r | z]``,
    n, ``gh_n`` and h (None for h_0 = 0): writes dL/d(W_hh h + b_hh) into ``d_gh`` (batch, 3d)
    and dL/d(W_in x + b_in) into ``d_n`` (batch, d), and adds ``g ⊙ z`` to ``g_prev``
    (dL/dh without the product's part; None at the first step)."""
    rows, hidden = g.shape
    _check("backward_step_", rows, hidden, {"g": (g, 1), "rz": (rz, 2), "n": (n, 1),
                                            "gh_n": (gh_n, 1), "h": (h, 1), "d_gh": (d_gh, 3),
                                            "d_n": (d_n, 1), "g_prev": (g_prev, 1)})
    _library().gru_backward_step(rows, hidden, pointer(g), pointer(rz), pointer(n),
                                 pointer(gh_n), pointer(h), pointer(d_gh), pointer(d_n),
                                 pointer(g_prev))
