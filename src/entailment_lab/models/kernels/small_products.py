"""DIN's small matrix products on CPU through a C kernel (``small_products.c``).

DIN's interaction layer spends most of its time in thousands of independent m×m products (m =
16, 18, 20) whose second factor is gathered per row (each hypothesis word's row reads its
pair's premise matrix). PyTorch's ``bmm`` runs them through MKL's batched product; a
register-blocked AVX-512 kernel runs them 1.6-2× faster (``benchmarks/small_products.py``) and
gathers inside its loop, so no gathered copy is made.

The kernel is compiled on first use (``native``: explicit AVX-512F/VL + FMA flags, a per-user
cache). Where it cannot be built or run (no compiler, a CPU without those extensions,
``ENTAILMENT_LAB_C_KERNELS=0``, more than one torch thread, another dtype or device),
``available()`` is False and the caller (``interaction.py``) computes with torch. Every call
checks its operands first, as ``TORCH_CHECK`` would: dtype, layout and shapes here, each index
against the matrices it reads or writes in the kernel itself (an ``IndexError`` naming the row).
The products differ from ``bmm``'s by float32 rounding only (the order of the sums):
``tests/models/din/test_kernels.py``.
"""

from __future__ import annotations

import ctypes

import torch

from entailment_lab.models.kernels import native
from entailment_lab.models.kernels.native import pointer

SOURCE = "small_products.c"
SIZES = (16, 18, 20)  # the m the kernel is specialised for
_SIZE, _P = ctypes.c_int64, ctypes.c_void_p
_SIGNATURES = (  # (m, n, pointers, with k, the number of indexed matrices, before idx)
    ("gathered_product_t_add", (ctypes.c_int, _SIZE, _P, _P, _SIZE, _P, _P)),
    ("scattered_t_product_add", (ctypes.c_int, _SIZE, _P, _P, _SIZE, _P, _P)),
    ("fixed_product", (ctypes.c_int, _SIZE, _P, _P, _P)),
    ("bias_product_gathered", (ctypes.c_int, _SIZE, *[_P] * 5, _SIZE, _P, _P)),
)


def _library() -> ctypes.CDLL | None:
    return native.library(SOURCE, _SIGNATURES)


def available(*tensors: torch.Tensor) -> bool:
    """Whether the kernel can compute with these tensors: float32 (int64 for indices), CPU,
    contiguous, m in ``SIZES``, one torch thread, and the kernel built on this machine.

    The kernel runs on one core; with more torch threads ``torch.bmm`` spreads the products
    over them instead.
    """
    if not native.applies(*tensors):
        return False
    if any(t.shape[-1] not in SIZES or t.shape[-2] != t.shape[-1]
           for t in tensors if t.is_floating_point()):
        return False
    return _library() is not None


def _check(name: str, rows: int, m: int, idx: torch.Tensor | None = None,
           **operands: tuple[torch.Tensor, int | None]) -> None:
    """Refuse (``ValueError``, naming the function and operand) m outside ``SIZES``, any
    operand that is not a contiguous float32 CPU tensor of (count, m, m) (count None: any; 0:
    one (m, m) matrix), and an ``idx`` that is not a contiguous int64 CPU vector of ``rows``."""
    if m not in SIZES:
        raise ValueError(f"{name}: m must be one of {SIZES}, got {m}")
    for operand, (t, count) in operands.items():
        if not (t.is_contiguous() and t.device.type == "cpu" and t.dtype == torch.float32):
            raise ValueError(f"{name}: {operand} must be a contiguous float32 CPU tensor, got "
                             f"{t.dtype} on {t.device}{'' if t.is_contiguous() else ', strided'}")
        if count == 0:
            fits, wanted = tuple(t.shape) == (m, m), f"({m}, {m})"
        else:
            fits = t.dim() == 3 and t.shape[1:] == (m, m) and count in (None, len(t))
            wanted = f"({'k' if count is None else count}, {m}, {m})"
        if not fits:
            raise ValueError(f"{name}: {operand} must be {wanted}, got {tuple(t.shape)}")
    if idx is not None and (idx.dtype != torch.int64 or not idx.is_contiguous()
                            or idx.device.type != "cpu" or idx.shape != (rows,)):
        raise ValueError(f"{name}: idx must be a contiguous int64 CPU tensor with one entry "
                         f"per row ({rows}), got {idx.dtype} of shape {tuple(idx.shape)}")


def _raise_if_outside(name: str, bad: int, idx: torch.Tensor, k: int) -> None:
    """The kernel's bounds check: ``bad`` is 0, or 1 + the first row whose index is outside
    [0, k) (nothing was read or written)."""
    if bad:
        raise IndexError(f"{name}: idx[{bad - 1}] = {int(idx[bad - 1])} is outside the {k} "
                         f"matrices it indexes")


def _indexed(name: str, out: torch.Tensor, A: torch.Tensor, B: torch.Tensor, idx: torch.Tensor,
             indexed: torch.Tensor) -> torch.Tensor:
    """Check the operands and call the kernel ``name`` (without its trailing ``_``), whose
    ``idx`` indexes ``indexed`` (``out`` or ``B``): (m, n, A, B, k, idx, out)."""
    n, m = len(A), A.shape[-1]
    _check(name, n, m, idx, out=(out, None if out is indexed else n), A=(A, n),
           B=(B, None if B is indexed else n))
    bad = getattr(_library(), name.rstrip("_"))(m, n, pointer(A), pointer(B), len(indexed),
                                                pointer(idx), pointer(out))
    _raise_if_outside(name, bad, idx, len(indexed))
    return out


def gathered_product_t_add_(C: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                            idx: torch.Tensor) -> torch.Tensor:
    """``C[r] += A[r] @ B[idx[r]]^T`` in place: C, A (n, m, m), B (k, m, m), idx (n,)."""
    return _indexed("gathered_product_t_add_", C, A, B, idx, indexed=B)


def scattered_t_product_add_(G: torch.Tensor, A: torch.Tensor, D: torch.Tensor,
                             idx: torch.Tensor) -> torch.Tensor:
    """``G[idx[r]] += A[r]^T @ D[r]`` in place, rows with the same idx summed: G (k, m, m),
    A, D (n, m, m), idx (n,) (the gradient of a gathered product's second factor)."""
    return _indexed("scattered_t_product_add_", G, A, D, idx, indexed=G)


def fixed_product_(C: torch.Tensor, A: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``C[r] = A[r] @ W``, written into C: C, A (n, m, m), W (m, m)."""
    n, m = len(A), A.shape[-1]
    _check("fixed_product_", n, m, out=(C, n), A=(A, n), W=(W, 0))
    _library().fixed_product(m, n, pointer(A), pointer(W), pointer(C))
    return C


def bias_product_gathered_(C: torch.Tensor, bias: torch.Tensor, S: torch.Tensor, W: torch.Tensor,
                           A: torch.Tensor, B: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``C[r] = bias + S[r] @ W + A[r] @ B[idx[r]]``, written into C: C, S, A (n, m, m), bias
    and W (m, m), B (k, m, m), idx (n,) int64 (DIN's interaction pre-activation, Eq. 8)."""
    n, m = len(A), A.shape[-1]
    _check("bias_product_gathered_", n, m, idx, out=(C, n), bias=(bias, 0), S=(S, n),
           W=(W, 0), A=(A, n), B=(B, None))
    bad = _library().bias_product_gathered(m, n, pointer(bias), pointer(S), pointer(W),
                                           pointer(A), pointer(B), len(B), pointer(idx),
                                           pointer(C))
    _raise_if_outside("bias_product_gathered_", bad, idx, len(B))
    return C
