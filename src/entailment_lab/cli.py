"""Entry-point support: user errors as one-line messages, and a quiet console."""

from __future__ import annotations

import logging
import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from entailment_lab.errors import UserError
from entailment_lab.signals import RunInterruptedError
from entailment_lab.threads import (
    keep_freed_memory,
    processes_per_run,
    set_flush_denormal,
    set_threads,
)


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
        logging.getLogger(__name__).info(keep_freed_memory())
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
