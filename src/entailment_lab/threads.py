"""The CPU policy of every entry point: how many torch threads a job takes, denormals, and
whether the C library keeps freed memory.

Set once, at start (``threads`` and ``flush_denormal`` in the configs); docs/usage.md, "CPU
threads" and "CPU memory", says why ``auto`` does not simply take every core and why freed
memory is kept.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from omegaconf import DictConfig

from entailment_lab.errors import ConfigError

THREADS_HELP = "threads=auto, a positive integer, or null (torch's default)"


class ThreadChoice(str):
    """The line ``set_threads`` logs, carrying what it says as fields: ``count`` (torch's
    threads), ``chosen_by`` (``OMP_NUM_THREADS``, ``torch's default``, ``auto`` or
    ``threads=N``) and ``detail`` (for ``auto``, the load it saw: it differs between runs of
    one command)."""

    count: int
    chosen_by: str
    detail: str

    def __new__(cls, count: int, chosen_by: str, detail: str = "") -> ThreadChoice:
        hint = "; threads=N or OMP_NUM_THREADS=N to choose" if chosen_by not in (
            "OMP_NUM_THREADS", "torch's default") else ""
        line = super().__new__(cls, f"torch threads: {count} ({detail or chosen_by}{hint})")
        line.count, line.chosen_by, line.detail = count, chosen_by, detail
        return line


_choice: list[ThreadChoice] = []  # the last choice of this process (numeric_path reads it)
_flush: list[bool] = []  # the last set_flush_denormal setting


def set_threads(threads: object, processes: int = 1) -> ThreadChoice:
    """The CPU thread policy of every entry point; returns a line saying what was chosen (a
    ``ThreadChoice``, whose fields ``results.json`` records as the numeric path).

    ``OMP_NUM_THREADS``, when set, wins (torch reads it itself). Otherwise ``threads``: a
    positive int; null for torch's own default (one thread per physical core); or ``auto``
    (the configs' default), ``auto_threads()``: the cores this process may use that are not
    busy now, shared among the jobs a parallel sweep runs at once and the ``processes`` each
    job starts (DDP ranks). Why (README, "Threads"): on
    a 2-core machine DIN-1 20×20 trains 1.6× faster with 2 threads than with 1 when the machine
    is idle, and 47× slower when another job keeps the second core busy.
    """
    import torch

    if os.environ.get("OMP_NUM_THREADS"):
        choice = ThreadChoice(torch.get_num_threads(), "OMP_NUM_THREADS")
    elif threads is None:
        choice = ThreadChoice(torch.get_num_threads(), "torch's default")
    elif threads == "auto":
        count, reason = auto_threads(parallel_jobs() * processes)
        choice = ThreadChoice(count, "auto", reason)
    elif isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be {THREADS_HELP}, got {threads!r}; e.g. threads=2")
    else:
        choice = ThreadChoice(threads, f"threads={threads}")
    torch.set_num_threads(choice.count)
    _choice[:] = [choice]
    return choice


def cpu_policy() -> dict[str, Any]:
    """What this process's CPU policy is now, for the record: torch's thread count, how the
    entry point chose it (``set_threads``; "not set" outside the entry points, e.g. in a test
    or a notebook), and whether denormal floats are flushed (None: never set)."""
    import torch

    count = torch.get_num_threads()
    choice = _choice[0] if _choice else None
    if choice is None:
        chosen_by, detail = "not set (torch's default or the caller's)", ""
    elif choice.count != count:
        chosen_by, detail = "changed after start", f"{choice.chosen_by} chose {choice.count}"
    else:
        chosen_by, detail = choice.chosen_by, choice.detail
    return {"threads": {"count": count, "chosen_by": chosen_by, "detail": detail},
            "flush_denormal": _flush[0] if _flush else None}


def auto_threads(jobs: int = 1, sample_s: float = 0.2) -> tuple[int, str]:
    """Threads for one of ``jobs`` processes started together: free cores // jobs, at least 1.

    Free cores: the physical cores this process may run on (its CPU affinity: a SLURM or
    container allotment) less the cores' worth of work the machine runs now (CPU use summed
    over those cores during ``sample_s`` seconds, rounded).
    """
    import psutil

    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    usage = psutil.cpu_percent(interval=sample_s, percpu=True)
    allowed = allowed or list(range(len(usage)))
    # Cores' worth of work running now (a busy thread may move between cores).
    busy = round(sum(usage[i] for i in allowed if i < len(usage)) / 100)
    logical = len(allowed)
    physical = psutil.cpu_count(logical=False) or logical
    cores = min(logical, physical)  # hyper-threads add little to matrix products
    free = max(1, cores - busy)
    threads = max(1, free // max(1, jobs))
    jobs_note = f", shared by {jobs} processes" if jobs > 1 else ""
    return threads, f"auto: {cores} core(s), {busy} busy{jobs_note}"


def processes_per_run(cfg: DictConfig) -> int:
    """Training processes one run starts on this machine: ``trainer.devices`` under a DDP
    strategy (each rank is a process), else 1."""
    trainer = cfg.get("trainer") or {}
    devices = trainer.get("devices")
    if "ddp" in str(trainer.get("strategy", "")) and isinstance(devices, int) and devices > 1:
        return devices
    return 1


def parallel_jobs() -> int:
    """How many jobs of this sweep run at once on this machine (Hydra's joblib launcher)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return 1
    hydra_cfg = HydraConfig.get()
    launcher = hydra_cfg.get("launcher") or {}
    if hydra_cfg.mode != RunMode.MULTIRUN or "joblib" not in str(launcher.get("_target_", "")):
        return 1
    n_jobs = int(launcher.get("n_jobs") or 1)
    return n_jobs if n_jobs > 0 else os.cpu_count() or 1  # joblib: -1 = one job per core


def set_flush_denormal(flush: bool) -> str:
    """Compute CPU floats below 1.2e-38 (denormals) as 0 when ``flush``; returns a log line.

    Denormal arithmetic is 10-100x slower on x86 CPUs. Adagrad from a zero accumulator with an
    L2 gradient (DCNN's recipe) drives the unused word vectors into that range, and a DCNN
    step then spent 7 of its 19 ms in the optimiser (``benchmarks/bench_dcnn.py``: 0.7 ms
    flushed). Flushing changes results in their last digits, and a training run, being
    chaotic, then follows another trajectory: the default is off (``conf/train.yaml``, so
    runs made before the switch reproduce exactly) and DCNN's recipe turns it on.
    """
    import torch

    if not flush:
        torch.set_flush_denormal(False)
        _flush[:] = [False]
        return "denormal floats: kept"
    flushed = torch.set_flush_denormal(True)
    _flush[:] = [flushed]
    return "denormal floats: flushed to zero" if flushed else \
        "denormal floats: kept (this CPU cannot flush them)"


# glibc's mallopt parameters (malloc.h) and the environment variables that set them
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MALLOC_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
               "GLIBC_TUNABLES", "LD_PRELOAD")
_MMAP_THRESHOLD = 32 * 2**20  # glibc's largest: blocks up to 32 MiB come from the reused heap
_TRIM_THRESHOLD = 2**31 - 1  # never hand the heap's free top back to the system


def keep_freed_memory() -> str:
    """Let glibc's malloc keep freed memory for reuse; returns a log line.

    By default glibc serves blocks above a threshold (128 kB, raised as they are freed, up to
    32 MiB) from fresh pages and hands a free heap top of more than twice that back to the
    system; a training step that allocates and frees tens of MB of activations and gradients
    then takes page faults on fresh memory every step. For DIN-1 20×20 on one thread that was
    about 2,000 faults and 7 ms of a 200 ms step. After this call the process's resident memory
    stays at its peak instead. ``MALLOC_*``, ``GLIBC_TUNABLES`` or ``LD_PRELOAD`` (another
    allocator) in the environment win; other C libraries are left as they are.
    """
    if any(name in os.environ for name in _MALLOC_ENV):
        return "malloc: as the environment sets it"
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return "malloc: the C library's own policy (not glibc)"
    if mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD):
        return "malloc: freed memory kept for reuse (MALLOC_TRIM_THRESHOLD_=N to change)"
    return "malloc: glibc's default (mallopt refused)"
