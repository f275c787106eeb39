"""DIN's small matrix products on CPU through a C kernel (``small_products.c``), torch elsewhere.

DIN's interaction layer spends most of its time in thousands of independent m×m products (m =
16, 18, 20) whose second factor is gathered per row (each hypothesis word's row reads its
pair's premise matrix). PyTorch's ``bmm`` runs them through MKL's batched product at about 40
GFLOP/s on one core of the AMD EPYC measured here; a register-blocked AVX-512 kernel runs
them about 2× faster (``benchmarks/small_products.py``) and gathers inside its loop, so no
gathered copy is made.

The kernel is compiled on first use (``c_kernels``: the system's ``cc -O3 -march=native``,
a per-machine cache). Where it cannot be built or run (no compiler, no AVX-512F,
``ENTAILMENT_LAB_C_KERNELS=0``, more than one torch thread, another dtype or device),
``available()`` is False and the callers use ``torch.bmm``. The products differ from
``bmm``'s by float32 rounding only (the order of the sums): ``tests/test_c_kernels.py``.
"""

from __future__ import annotations

import ctypes

import torch

from entailment_lab.models import c_kernels
from entailment_lab.models.c_kernels import pointer

SOURCE = "small_products.c"
SIZES = (16, 18, 20)  # the m the kernel is specialised for
_SIZE, _P = ctypes.c_int64, ctypes.c_void_p
_SIGNATURES = (  # (m, n, pointers...)
    ("gathered_product_t_add", (ctypes.c_int, _SIZE, *[_P] * 4)),
    ("scattered_t_product_add", (ctypes.c_int, _SIZE, *[_P] * 4)),
    ("fixed_product", (ctypes.c_int, _SIZE, *[_P] * 3)),
    ("bias_product_gathered", (ctypes.c_int, _SIZE, *[_P] * 7)),
)


def _library() -> ctypes.CDLL | None:
    return c_kernels.library(SOURCE, _SIGNATURES)


def available(*tensors: torch.Tensor) -> bool:
    """Whether the kernel can compute with these tensors: float32 (int64 for indices), CPU,
    contiguous, m in ``SIZES``, one torch thread, and the kernel built on this machine.

    The kernel runs on one core; with more torch threads ``torch.bmm`` spreads the products
    over them instead.
    """
    if not c_kernels.applies(*tensors):
        return False
    if any(t.shape[-1] not in SIZES or t.shape[-2] != t.shape[-1]
           for t in tensors if t.is_floating_point()):
        return False
    return _library() is not None


def _check(name: str, *tensors: torch.Tensor, idx: torch.Tensor | None = None,
           rows: int = 0) -> None:
    """Every operand a contiguous float32 CPU tensor (``c_kernels.check``), and ``idx`` an
    int64 one with one entry per row (``rows``)."""
    c_kernels.check(name, *tensors)
    if idx is not None and (idx.dtype != torch.int64 or not idx.is_contiguous()
                            or idx.device.type != "cpu" or len(idx) != rows):
        raise ValueError(f"{name}: idx must be a contiguous int64 CPU tensor with one entry "
                         f"per row ({rows}), got {idx.dtype} of length {len(idx)}")


def _call(name: str, out: torch.Tensor, A: torch.Tensor, B: torch.Tensor, idx: torch.Tensor,
          ) -> torch.Tensor:
    _check(name, out, A, B, idx=idx, rows=len(A))
    getattr(_library(), name)(A.shape[-1], len(A), pointer(A), pointer(B), pointer(idx),
                              pointer(out))
    return out


def gathered_product_t_add_(C: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                            idx: torch.Tensor) -> torch.Tensor:
    """``C[r] += A[r] @ B[idx[r]]^T`` in place: C, A (n, m, m), B (k, m, m), idx (n,)."""
    return _call("gathered_product_t_add", C, A, B, idx)


def scattered_t_product_add_(G: torch.Tensor, A: torch.Tensor, D: torch.Tensor,
                             idx: torch.Tensor) -> torch.Tensor:
    """``G[idx[r]] += A[r]^T @ D[r]`` in place, rows with the same idx summed: G (k, m, m),
    A, D (n, m, m), idx (n,) (the gradient of a gathered product's second factor)."""
    return _call("scattered_t_product_add", G, A, D, idx)


def fixed_product_(C: torch.Tensor, A: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``C[r] = A[r] @ W``, written into C: C, A (n, m, m), W (m, m)."""
    _check("fixed_product_", C, A, W)
    _library().fixed_product(A.shape[-1], len(A), pointer(A), pointer(W), pointer(C))
    return C


def bias_product_gathered_(C: torch.Tensor, bias: torch.Tensor, S: torch.Tensor, W: torch.Tensor,
                           A: torch.Tensor, B: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``C[r] = bias + S[r] @ W + A[r] @ B[idx[r]]``, written into C: C, S, A (n, m, m), bias
    and W (m, m), B (k, m, m), idx (n,) int64 (DIN's interaction pre-activation, Eq. 8)."""
    _check("bias_product_gathered_", C, bias, S, W, A, B, idx=idx, rows=len(A))
    _library().bias_product_gathered(A.shape[-1], len(A), pointer(bias), pointer(S),
                                     pointer(W), pointer(A), pointer(B), pointer(idx),
                                     pointer(C))
    return C

