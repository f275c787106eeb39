"""Entry-point support: config resolvers and turning user errors into one-line messages."""

from __future__ import annotations

import math
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from entailment_lab.errors import UserError
from entailment_lab.results import RunInterruptedError

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


def run_task(task: Callable[[DictConfig], dict[str, Any]], cfg: DictConfig) -> float | None:
    """Run ``task``; print user errors in one line (no traceback) and exit with status 1; a run
    stopped by a signal (already logged, with how to resume) exits with the shell's status for
    it (143 for SIGTERM, 130 for Ctrl+C).

    Returns ``cfg.optimized_metric`` for Hydra sweepers; if the run produced none, or NaN (a
    diverged run), ``cfg.objective_on_nan`` instead, so that an Optuna study records a bad
    trial and goes on (Optuna refuses NaN and would stop the whole sweep).
    """
    try:
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
