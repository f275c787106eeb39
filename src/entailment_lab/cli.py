"""Entry-point support: config resolvers, user errors as one-line messages, a quiet console."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from entailment_lab.errors import ConfigError, UserError
from entailment_lab.results import RunInterruptedError

if TYPE_CHECKING:
    from lightning.pytorch.callbacks import Callback

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "conf")
_RUN_ID = secrets.token_hex(3)  # fixed for this process: all jobs of one sweep agree on it


def project_root() -> str:
    """The checkout this package lives in (``src/entailment_lab`` -> repo root), else the cwd."""
    root = Path(__file__).resolve().parents[2]
    return str(root if (root / "conf").is_dir() else Path.cwd())


def register_resolvers() -> None:
    """``${project_root:}`` and ``${run_id:}`` for the configs (idempotent)."""
    OmegaConf.register_new_resolver("project_root", project_root, replace=True)
    OmegaConf.register_new_resolver("run_id", lambda: _RUN_ID, replace=True)


THREADS_HELP = "threads=auto, a positive integer, or null (torch's default)"


def set_threads(threads: object, processes: int = 1) -> str:
    """The CPU thread policy of every entry point; returns a line saying what was chosen.

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
        return f"torch threads: {torch.get_num_threads()} (OMP_NUM_THREADS)"
    if threads is None:
        return f"torch threads: {torch.get_num_threads()} (torch's default)"
    if threads == "auto":
        threads, reason = auto_threads(parallel_jobs() * processes)
    elif isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be {THREADS_HELP}, got {threads!r}; e.g. threads=2")
    else:
        reason = f"threads={threads}"
    torch.set_num_threads(threads)
    return f"torch threads: {threads} ({reason}; threads=N or OMP_NUM_THREADS=N to choose)"


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
        return "denormal floats: kept"
    if torch.set_flush_denormal(True):
        return "denormal floats: flushed to zero"
    return "denormal floats: kept (this CPU cannot flush them)"


def run_task(task: Callable[[DictConfig], dict[str, Any]], cfg: DictConfig) -> float | None:
    """Run ``task``; print user errors in one line (no traceback) and exit with status 1; a run
    stopped by a signal (already logged, with how to resume) exits with the shell's status for
    it (143 for SIGTERM, 130 for Ctrl+C).

    Returns ``cfg.optimized_metric`` for Hydra sweepers; if the run produced none, or NaN (a
    diverged run), ``cfg.objective_on_nan`` instead, so that an Optuna study records a bad
    trial and goes on (Optuna refuses NaN and would stop the whole sweep).
    """
    try:
        logging.getLogger(__name__).info(set_threads(cfg.get("threads", "auto"),
                                                     processes_per_run(cfg)))
        logging.getLogger(__name__).info(set_flush_denormal(cfg.get("flush_denormal", False)))
        metrics = task(cfg)
    except RunInterruptedError as err:
        sys.exit(err.exit_code)
    except (UserError, MissingMandatoryValue) as err:
        message = str(err).strip().splitlines()[0]
        if isinstance(err, MissingMandatoryValue):
            key = getattr(err, "full_key", "") or ""
            message = f"config value '{key}' is required (???); set it on the command line, " \
                      f"e.g. {key}=..."
        sys.exit(f"error: {message}")
    except OmegaConfBaseException as err:
        message = str(err).strip().splitlines()[0]
        sys.exit(f"error: config: {message}")
    name = cfg.get("optimized_metric")
    if not name:
        return None
    value = metrics.get(name)
    if value is None or math.isnan(value):
        return cfg.get("objective_on_nan", float("nan"))
    return float(value)


# Console noise: lines a researcher has no use for, dropped at the source (each run printed
# them). Lightning's advertising "Tip" lines, the deprecation warning its own ``_pytree`` module
# triggers in torch, and W&B's warning about the ``anonymous`` argument Lightning always passes.
_NOISE_MESSAGES = (r".*isinstance\(treespec, LeafSpec\)",)
_RANK_ZERO_LOGGERS = tuple(f"{pkg}.utilities.rank_zero"
                           for pkg in ("lightning.pytorch", "lightning.fabric", "lightning_fabric"))
_WANDB_NOISE = ("The anonymous setting has no effect and will be removed in a future version.",)


class _DropTips(logging.Filter):
    """Drop Lightning's "💡 Tip: ..." advertisements."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).lstrip().startswith("💡 Tip")


def quiet_console() -> None:
    """Silence the known noise of every run (idempotent)."""
    for message in _NOISE_MESSAGES:
        warnings.filterwarnings("ignore", message=message)
    for name in _RANK_ZERO_LOGGERS:  # whichever of them rank_zero_info logs through
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropTips) for f in logger.filters):
            logger.addFilter(_DropTips())
    # The two below reach into Lightning's and W&B's internals (no public switch exists): if a
    # new version moves them, the noise comes back and nothing else changes.
    with contextlib.suppress(ImportError, AttributeError):
        _plain_lightning_console()
    with contextlib.suppress(ImportError, AttributeError):
        # wandb.termwarn(..., repeat=False) prints a message once: mark ours as printed
        from wandb.errors import term

        for message in _WANDB_NOISE:
            term._printed_messages.add(f"{term.WARN_STRING} {message}")


def _plain_lightning_console() -> None:
    """Outside a terminal, Lightning's own default bar and model summary are the plain ones
    (its rich bar wraps its metrics one value per line in a log file); and the model summary
    leaves out its FLOPs column when nothing was counted (no ``example_input_array``: all 0)."""
    from lightning.pytorch.callbacks import ModelSummary, RichModelSummary
    from lightning.pytorch.trainer.connectors import callback_connector

    if not sys.stdout.isatty():  # the defaults used when callbacks.rich_progress_bar=null
        callback_connector._RICH_AVAILABLE = False
    for cls in (ModelSummary, RichModelSummary):
        if not getattr(cls.summarize, "_without_zero_flops", False):
            cls.summarize = staticmethod(_without_zero_flops(cls.summarize))


def _without_zero_flops(summarize: Callable[..., None]) -> Callable[..., None]:
    """``ModelSummary.summarize`` that drops an all-zero FLOPs column (plain text then)."""
    def wrapped(summary_data: list[tuple[str, list[str]]], total_parameters: int,
                trainable_parameters: int, model_size: float,
                total_training_modes: dict[str, int], total_flops: int, **kwargs: Any) -> None:
        if total_flops:
            summarize(summary_data, total_parameters, trainable_parameters, model_size,
                      total_training_modes, total_flops, **kwargs)
            return
        from lightning.pytorch.utilities.model_summary.model_summary import (
            _format_summary_table,
        )

        columns = [column for column in summary_data if column[0] != "FLOPs"]
        table = _format_summary_table(total_parameters, trainable_parameters, model_size,
                                      total_training_modes, total_flops, *columns)
        table = "\n".join(line for line in table.splitlines() if "Total Flops" not in line)
        logging.getLogger("lightning.pytorch.callbacks.model_summary").info("\n%s", table)

    wrapped._without_zero_flops = True  # type: ignore[attr-defined]
    return wrapped


def progress_bar(**kwargs: Any) -> Callback:
    """Lightning's rich progress bar in a terminal; outside one (a log file, a pipe, CI) the
    plain tqdm bar, which stays on one line per update instead of wrapping its metrics."""
    from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

    if sys.stdout.isatty():
        return RichProgressBar(**kwargs)
    return TQDMProgressBar(refresh_rate=kwargs.get("refresh_rate", 20))


quiet_console()
