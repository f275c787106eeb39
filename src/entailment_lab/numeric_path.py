"""Which floating-point path a run took, for ``results.json`` (``numeric_path``).

Two runs of one command and seed can compute differently: ``threads=auto`` picks the thread
count from the machine's load at start, DIN's C kernel runs only at one thread on CPUs with
AVX-512, torch dispatches its own CPU kernels by the CPU's vector extensions, and GPUs add
their determinism and TF32 switches. The record names each, so the report can flag rows whose
runs took different paths (every key but ``threads.detail``, the free-text load seen at
start, is meant for comparison).
"""

from __future__ import annotations

import platform
from collections import Counter
from typing import Any

import torch

from entailment_lab.models import kernels
from entailment_lab.threads import cpu_policy

# The x86 and Arm vector extensions worth naming (the rest of /proc/cpuinfo's flags say
# nothing about a floating-point path): prefixes of the flags' names
_VECTOR_FLAGS = ("sse", "ssse", "avx", "fma", "f16c", "amx", "asimd", "sve", "neon")


def cpu() -> dict[str, Any]:
    """The CPU's model name, its vector extensions, and the kernel family torch dispatches its
    own CPU operations to (``torch.backends.cpu.get_cpu_capability``)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "torch_capability": torch.backends.cpu.get_cpu_capability(),
            "vector_extensions": sorted(f for f in flags if f.startswith(_VECTOR_FLAGS))}


def determinism() -> dict[str, Any]:
    """torch's switches that change results between runs or devices."""
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_enabled": torch.backends.cudnn.enabled,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
    }


def kernels_ran(since: Counter[tuple[str, str]] | None = None) -> dict[str, list[str]]:
    """Each fast path of ``models.kernels`` that ran since the counts ``since`` (all, if None)
    and the implementations that computed it (e.g. ``{"interaction": ["C small_products"]}``);
    a path not named ran as its model's torch reference, or not at all."""
    ran: dict[str, set[str]] = {}
    for (path, implementation), n in (kernels.calls() - (since or Counter())).items():
        if n > 0:
            ran.setdefault(path, set()).add(implementation)
    return {path: sorted(implementations) for path, implementations in sorted(ran.items())}


def numeric_path(device: torch.device | str, since: Counter[tuple[str, str]] | None = None
                 ) -> dict[str, Any]:
    """The record: torch's version, the device, the CPU, the thread count and how it was chosen,
    denormal flushing, the fast paths that ran (since ``since``, ``kernels.calls()`` at the
    run's start) and how their native kernels were built, and the determinism switches."""
    device = torch.device(device)
    name = str(device)
    if device.type == "cuda" and torch.cuda.is_available():
        name += f": {torch.cuda.get_device_name(device)}"
    ran = kernels_ran(since)
    native = kernels.native_status() if ran else {}  # how it is built here, or why not
    return {"torch": torch.__version__, "device": name, "cpu": cpu(), **cpu_policy(),
            "kernels": ran, "native_kernels": dict(sorted(native.items())),
            "determinism": determinism()}
