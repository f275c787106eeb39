"""Entry-point support: the command line checked before Hydra runs it, user errors as
one-line messages, the run folder said at start and end, and a quiet console.

Nothing here imports torch or Lightning at module level: an entry point answers a mistake on
its command line (or ``--help``) in about a second (``precheck.py``).
"""

from __future__ import annotations

import logging
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from entailment_lab.errors import UserError

log = logging.getLogger(__name__)


def checked_main(hydra_main: Callable[[], Any], config_name: str, script: str) -> None:
    """Check the command line (``precheck.checked_command``), then run ``hydra_main`` (the
    entry point's ``@hydra.main`` function) on it. A mistake ends in one line on stderr
    (``error: ...``), exit status 1, before Hydra makes a run folder and before any data is
    read. ``script``: the entry point's file (``conf/`` is beside its folder, as its
    ``config_path="../conf"`` says)."""
    import os

    from entailment_lab.precheck import checked_command

    if os.environ.get("LOCAL_RANK", "0") != "0":  # a DDP rank Lightning started: rank 0 checked
        hydra_main()
        return
    conf = Path(script).resolve().parent.parent / "conf"
    try:
        sys.argv[1:] = checked_command(config_name, sys.argv[1:], conf)
    except (UserError, OmegaConfBaseException) as err:
        sys.exit(f"error: {one_line(err)}")
    hydra_main()


def one_line(err: BaseException) -> str:
    """An error's message as one line (its first)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def run_task(task: Callable[[DictConfig], dict[str, Any]], cfg: DictConfig) -> float | None:
    """Run ``task``; print user errors in one line (no traceback) and exit with status 1; a run
    stopped by a signal (already logged, with how to resume) exits with the shell's status for
    it (143 for SIGTERM, 130 for Ctrl+C). The job's folder is logged at start and at end.

    Returns ``cfg.optimized_metric`` for Hydra sweepers; if the run produced none, or NaN (a
    diverged run), ``cfg.objective_on_nan`` instead, so that an Optuna study records a bad
    trial and goes on (Optuna refuses NaN and would stop the whole sweep).
    """
    from entailment_lab.signals import RunInterruptedError
    from entailment_lab.threads import (
        keep_freed_memory,
        processes_per_run,
        set_flush_denormal,
        set_threads,
    )

    folder = _folder(cfg)
    if folder:
        log.info("run folder: %s", folder)
    try:
        log.info(set_threads(cfg.get("threads", "auto"), processes_per_run(cfg)))
        log.info(set_flush_denormal(cfg.get("flush_denormal", False)))
        log.info(keep_freed_memory())
        metrics = task(cfg)
    except RunInterruptedError as err:
        _said_folder(folder, "stopped")
        sys.exit(err.exit_code)
    except (UserError, MissingMandatoryValue) as err:
        message = str(err).strip().splitlines()[0]
        if isinstance(err, MissingMandatoryValue):
            key = getattr(err, "full_key", "") or ""
            message = f"config value '{key}' is required (???); set it on the command line, " \
                      f"e.g. {key}=..."
        _said_folder(folder, "failed")
        sys.exit(f"error: {message}")
    except OmegaConfBaseException as err:
        message = str(err).strip().splitlines()[0]
        _said_folder(folder, "failed")
        sys.exit(f"error: config: {message}")
    _said_folder(folder, "done")
    name = cfg.get("optimized_metric")
    if not name:
        return None
    value = metrics.get(name)
    if value is None or math.isnan(value):
        return cfg.get("objective_on_nan", float("nan"))
    return float(value)


def _folder(cfg: DictConfig) -> str | None:
    try:
        return str((cfg.get("paths") or {}).get("output_dir") or "") or None
    except OmegaConfBaseException:  # no Hydra run (a test calling run_task)
        return None


def _said_folder(folder: str | None, how: str) -> None:
    if folder:
        log.info("run folder (%s): %s", how, folder)


# Console noise: lines a researcher has no use for, dropped through the public switches of
# Python's warnings and logging modules. Lightning's advertising "Tip" lines and the deprecation
# warning its own ``_pytree`` module triggers in torch. (W&B's warning about the ``anonymous``
# argument that Lightning passes has no public switch: it stays.)
_NOISE_MESSAGES = (r".*isinstance\(treespec, LeafSpec\)",)
_RANK_ZERO_LOGGERS = tuple(f"{pkg}.utilities.rank_zero"
                           for pkg in ("lightning.pytorch", "lightning.fabric", "lightning_fabric"))


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


quiet_console()
