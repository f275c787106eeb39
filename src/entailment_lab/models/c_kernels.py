"""The C kernels of DIN's CPU training pass: built on first use, loaded with ``ctypes``.

Two sources in this package use it: ``small_products.c`` (the interaction layer's m×m
products) and ``gru_steps.c`` (the encoder GRU's elementwise step). Each is compiled on first
use with the system's C compiler (``cc -O3 -march=native``) into a per-machine cache
(``$XDG_CACHE_HOME/entailment_lab`` or ``~/.cache/entailment_lab``, one file per source,
compiler and CPU). Where there is no compiler, the build fails, the CPU has no AVX-512F, or
``ENTAILMENT_LAB_C_KERNELS=0`` is set, ``library()`` returns None and the callers compute with
torch; the reason is logged once per source. The kernels run on one core: callers use them with
one torch thread only (``applies``), and torch spreads its own operations over more.
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

DISABLE_VARIABLE = "ENTAILMENT_LAB_C_KERNELS"
log = logging.getLogger(__name__)
_disabled = [0]  # depth of ``disabled()`` blocks


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Inside this block every kernel is off and torch computes (for FLOP counting with
    torch's dispatch modes, which cannot see the kernels, and for comparisons)."""
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


Signatures = tuple[tuple[str, tuple[type, ...]], ...]  # (function, its argument types), void


@functools.cache
def library(source: str, signatures: Signatures) -> ctypes.CDLL | None:
    """The compiled ``source`` (a ``.c`` file of this package) with its functions' argument
    types set, or None with one log line that says why. The source exports ``int
    available(void)``, 0 when built without AVX-512F."""
    stem = Path(source).stem
    if os.environ.get(DISABLE_VARIABLE, "1") == "0":
        log.info("%s: torch (%s=0)", stem, DISABLE_VARIABLE)
        return None
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or platform.machine() not in ("x86_64", "AMD64"):
        log.info("%s: torch (no C compiler on PATH or not x86-64)", stem)
        return None
    try:
        loaded = _build(Path(__file__).with_name(source), compiler)
    except (OSError, RuntimeError) as err:  # no home or an unwritable cache; a bad library
        log.info("%s: torch (%s)", stem, err)
        return None
    for name, argtypes in signatures if loaded is not None else ():
        getattr(loaded, name).argtypes = list(argtypes)
        getattr(loaded, name).restype = None
    return loaded


def _build(source: Path, compiler: str) -> ctypes.CDLL | None:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([source.read_text(encoding="utf-8"), version,
                                    _cpu_flags()]).encode()).hexdigest()[:16]
    target = _cache_dir() / f"{source.stem}_{key}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            built = Path(tmp) / target.name
            run = subprocess.run([compiler, "-O3", "-march=native", "-shared", "-fPIC", "-o",
                                  str(built), str(source)], capture_output=True, text=True)
            if run.returncode != 0:
                log.info("%s: torch (%s failed: %s)", source.stem, compiler,
                         (run.stderr.strip().splitlines() or ["?"])[-1])
                return None
            os.replace(built, target)  # atomic: concurrent builds leave one whole file
    loaded = ctypes.CDLL(str(target))
    if not loaded.available():
        log.info("%s: torch (this CPU or compiler has no AVX-512F)", source.stem)
        return None
    log.info("%s: C kernel (AVX-512F, %s)", source.stem, target)
    return loaded


def applies(*tensors: torch.Tensor) -> bool:
    """Whether a kernel may compute with these tensors: not ``disabled()``, one torch thread,
    and every tensor contiguous on the CPU, the floating ones in float32."""
    return (not _disabled[0] and torch.get_num_threads() == 1
            and all(t.device.type == "cpu" and t.is_contiguous() for t in tensors)
            and all(t.dtype == torch.float32 for t in tensors if t.is_floating_point()))


def check(name: str, *tensors: torch.Tensor) -> None:
    """A kernel reads raw memory: refuse (``ValueError``) any operand that is not a contiguous
    float32 CPU tensor, naming the function."""
    if not all(t.is_contiguous() and t.device.type == "cpu" and t.dtype == torch.float32
               for t in tensors):
        raise ValueError(f"{name}: every matrix must be a contiguous float32 CPU tensor")


def pointer(t: torch.Tensor | None) -> ctypes.c_void_p | None:
    """The address of ``t``'s first element (None: a NULL pointer)."""
    return None if t is None else ctypes.c_void_p(t.data_ptr())
