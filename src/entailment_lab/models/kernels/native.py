"""The loader of this package's C sources: built on first use for an explicit ISA, loaded with
``ctypes``.

One source uses it today, ``small_products.c`` (the interaction layer's m×m products). It is
compiled on first use with the system's C compiler for the instruction set it is written in,
named explicitly (``ISA_FLAGS``: AVX-512F and VL with FMA, never ``-march=native``, so the
library computes the same on every CPU that runs it), and only where ``/proc/cpuinfo`` lists
those extensions. The result goes to a per-user cache (``$XDG_CACHE_HOME/entailment_lab`` or
``~/.cache/entailment_lab``, one file per source, compiler and flags). Where there is no
compiler, the build fails, the CPU lacks an extension, or ``ENTAILMENT_LAB_C_KERNELS=0`` is
set, ``library()`` returns None and the callers compute with torch; the reason is logged once
and recorded (``status()``, written into every ``results.json`` as the numeric path). The
kernels run on one core: callers use them with one torch thread only (``applies``).

Why at first use and not at install time: an editable install (``make install``) builds no
extension, and a wheel built on one machine would carry one machine's ISA; the explicit flags
keep the build reproducible, the cache keeps it once per machine.
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
ISA = ("avx512f", "avx512vl", "fma")  # what the sources' intrinsics need (/proc/cpuinfo names)
ISA_FLAGS = ("-O3", "-mavx512f", "-mavx512vl", "-mfma")  # the same, for the compiler
log = logging.getLogger(__name__)
_disabled = [0]  # depth of ``disabled()`` blocks
_status: dict[str, str] = {}  # source stem -> how it was built, or why it was not


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Inside this block every native kernel is off and torch computes (for comparisons, and
    to time or profile the torch path)."""
    _disabled[0] += 1
    try:
        yield
    finally:
        _disabled[0] -= 1


def status() -> dict[str, str]:
    """Each source looked up in this process: the build that runs (compiler and flags), or
    ``torch: <why not>``."""
    return dict(_status)


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            line = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return set()
    return set(line.partition(":")[2].split())


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "entailment_lab"


Signatures = tuple[tuple[str, tuple[type, ...]], ...]  # (function, its argument types)


def _refuse(stem: str, reason: str) -> None:
    _status[stem] = f"torch: {reason}"
    log.info("%s: torch (%s)", stem, reason)


@functools.cache
def library(source: str, signatures: Signatures) -> ctypes.CDLL | None:
    """The compiled ``source`` (a ``.c`` file of this package) with its functions' argument
    types set (each returns an ``int64``), or None with one log line that says why."""
    stem = Path(source).stem
    if os.environ.get(DISABLE_VARIABLE, "1") == "0":
        return _refuse(stem, f"{DISABLE_VARIABLE}=0")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or platform.machine() not in ("x86_64", "AMD64"):
        return _refuse(stem, "no C compiler on PATH or not x86-64")
    if missing := [flag for flag in ISA if flag not in cpu_flags()]:
        return _refuse(stem, f"this CPU has no {', '.join(missing)}")
    try:
        loaded, build = _build(Path(__file__).with_name(source), compiler)
    except (OSError, RuntimeError) as err:  # no home or an unwritable cache; a bad library
        return _refuse(stem, str(err))
    for name, argtypes in signatures:
        getattr(loaded, name).argtypes = list(argtypes)
        getattr(loaded, name).restype = ctypes.c_int64
    _status[stem] = build
    log.info("%s: C kernel (%s)", stem, build)
    return loaded


def _build(source: Path, compiler: str) -> tuple[ctypes.CDLL, str]:
    """The library of ``source``, compiled into the cache unless it is there already, and a
    line naming the build."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    build = f"{Path(compiler).name} {' '.join(ISA_FLAGS)} ({version.partition(chr(10))[0]})"
    key = hashlib.sha256("\0".join([source.read_text(encoding="utf-8"), version,
                                    *ISA_FLAGS]).encode()).hexdigest()[:16]
    target = _cache_dir() / f"{source.stem}_{key}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            built = Path(tmp) / target.name
            run = subprocess.run([compiler, *ISA_FLAGS, "-shared", "-fPIC", "-o", str(built),
                                  str(source)], capture_output=True, text=True)
            if run.returncode != 0:
                raise RuntimeError(f"{Path(compiler).name} failed: "
                                   f"{(run.stderr.strip().splitlines() or ['?'])[-1]}")
            os.replace(built, target)  # atomic: concurrent builds leave one whole file
    return ctypes.CDLL(str(target)), build


def applies(*tensors: torch.Tensor) -> bool:
    """Whether a kernel may compute with these tensors: not ``disabled()``, one torch thread,
    and every tensor contiguous on the CPU, the floating ones in float32."""
    return (not _disabled[0] and torch.get_num_threads() == 1
            and all(t.device.type == "cpu" and t.is_contiguous() for t in tensors)
            and all(t.dtype == torch.float32 for t in tensors if t.is_floating_point()))


def pointer(t: torch.Tensor | None) -> ctypes.c_void_p | None:
    """The address of ``t``'s first element (None: a NULL pointer)."""
    return None if t is None else ctypes.c_void_p(t.data_ptr())
