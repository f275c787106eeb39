"""DIN's small matrix products on CPU through a C kernel (``small_products.c``), torch elsewhere.

DIN's interaction layer spends most of its time in thousands of independent m×m products (m =
16, 18, 20) whose second factor is gathered per row (each hypothesis word's row reads its
pair's premise matrix). PyTorch's ``bmm`` runs them through MKL's batched product at about 40
GFLOP/s on one core of the AMD EPYC measured here; a register-blocked AVX-512 kernel runs
them about 2× faster (``benchmarks/small_products.py``) and gathers inside its loop, so no
gathered copy is made.

The kernel is compiled on first use with the system's C compiler (``cc -O3 -march=native``)
into a per-machine cache (``$XDG_CACHE_HOME/entailment_lab`` or ``~/.cache/entailment_lab``,
one file per source, compiler and CPU). Where there is no compiler, the build fails, the CPU
has no AVX-512F, or ``ENTAILMENT_LAB_C_KERNELS=0`` is set, ``available()`` is False and the
callers use ``torch.bmm``; the reason is logged once. The products differ from ``bmm``'s by
float32 rounding only (the order of the sums): ``tests/test_small_products.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("small_products.c")
SIZES = (16, 18, 20)  # the m the kernel is specialised for
DISABLE_VARIABLE = "ENTAILMENT_LAB_C_KERNELS"
log = logging.getLogger(__name__)
_disabled = [0]  # depth of ``disabled()`` blocks


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Inside this block ``available()`` is False: torch computes every product (for FLOP
    counting with torch's dispatch modes, which cannot see the kernel, and for comparisons)."""
    _disabled[0] += 1
    try:
        yield
    finally:
        _disabled[0] -= 1


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "entailment_lab"


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return platform.processor()


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The compiled kernel, or None (with one log line saying why)."""
    if os.environ.get(DISABLE_VARIABLE, "1") == "0":
        log.info("small products: torch.bmm (%s=0)", DISABLE_VARIABLE)
        return None
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or platform.machine() not in ("x86_64", "AMD64"):
        log.info("small products: torch.bmm (no C compiler on PATH or not x86-64)")
        return None
    try:
        return _build(compiler)
    except (OSError, RuntimeError) as err:  # no home or an unwritable cache; a bad library
        log.info("small products: torch.bmm (%s)", err)
        return None


def _build(compiler: str) -> ctypes.CDLL | None:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(encoding="utf-8"), version,
                                    _cpu_flags()]).encode()).hexdigest()[:16]
    target = _cache_dir() / f"small_products_{key}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            built = Path(tmp) / target.name
            run = subprocess.run([compiler, "-O3", "-march=native", "-shared", "-fPIC", "-o",
                                  str(built), str(SOURCE)], capture_output=True, text=True)
            if run.returncode != 0:
                log.info("small products: torch.bmm (%s failed: %s)", compiler,
                         (run.stderr.strip().splitlines() or ["?"])[-1])
                return None
            os.replace(built, target)  # atomic: concurrent builds leave one whole file
    library = ctypes.CDLL(str(target))
    if not library.small_products_available():
        log.info("small products: torch.bmm (this CPU or compiler has no AVX-512F)")
        return None
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    for name, pointers in (("gathered_product_t_add", 4),
                           ("scattered_t_product_add", 4), ("fixed_product", 3),
                           ("bias_product_gathered", 7)):
        getattr(library, name).argtypes = [ctypes.c_int, size, *[pointer] * pointers]
        getattr(library, name).restype = None
    log.info("small products: C kernel (AVX-512F, %s)", target)
    return library


def available(*tensors: torch.Tensor) -> bool:
    """Whether the kernel can compute with these tensors: float32 (int64 for indices), CPU,
    contiguous, m in ``SIZES``, one torch thread, and the kernel built on this machine.

    The kernel runs on one core; with more torch threads ``torch.bmm`` spreads the products
    over them instead.
    """
    if _disabled[0] or torch.get_num_threads() != 1:
        return False
    if any(t.device.type != "cpu" or not t.is_contiguous() for t in tensors):
        return False
    matrices = [t for t in tensors if t.is_floating_point()]
    if any(t.dtype != torch.float32 or t.shape[-1] not in SIZES or t.shape[-2] != t.shape[-1]
           for t in matrices):
        return False
    return _library() is not None


def _pointer(t: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


def _check(name: str, *tensors: torch.Tensor, idx: torch.Tensor | None = None,
           rows: int = 0) -> None:
    """The kernel reads raw memory: every operand must be a contiguous float32 CPU tensor, and
    ``idx`` an int64 one with one entry per row (``rows``)."""
    if not all(t.is_contiguous() and t.device.type == "cpu" and t.dtype == torch.float32
               for t in tensors):
        raise ValueError(f"{name}: every matrix must be a contiguous float32 CPU tensor")
    if idx is not None and (idx.dtype != torch.int64 or not idx.is_contiguous()
                            or idx.device.type != "cpu" or len(idx) != rows):
        raise ValueError(f"{name}: idx must be a contiguous int64 CPU tensor with one entry "
                         f"per row ({rows}), got {idx.dtype} of length {len(idx)}")


def _call(name: str, out: torch.Tensor, A: torch.Tensor, B: torch.Tensor, idx: torch.Tensor,
          ) -> torch.Tensor:
    _check(name, out, A, B, idx=idx, rows=len(A))
    getattr(_library(), name)(A.shape[-1], len(A), _pointer(A), _pointer(B), _pointer(idx),
                              _pointer(out))
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
    _library().fixed_product(A.shape[-1], len(A), _pointer(A), _pointer(W), _pointer(C))
    return C


def bias_product_gathered_(C: torch.Tensor, bias: torch.Tensor, S: torch.Tensor, W: torch.Tensor,
                           A: torch.Tensor, B: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``C[r] = bias + S[r] @ W + A[r] @ B[idx[r]]``, written into C: C, S, A (n, m, m), bias
    and W (m, m), B (k, m, m), idx (n,) int64 (DIN's interaction pre-activation, Eq. 8)."""
    _check("bias_product_gathered_", C, bias, S, W, A, B, idx=idx, rows=len(A))
    _library().bias_product_gathered(A.shape[-1], len(A), _pointer(bias), _pointer(S),
                                     _pointer(W), _pointer(A), _pointer(B), _pointer(idx),
                                     _pointer(C))
    return C

