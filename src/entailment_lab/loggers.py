"""The run's loggers from config, and W&B's defaults: offline without an API key, one group per
multirun sweep (written into the run's config), one W&B run per job."""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger, Logger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from omegaconf import DictConfig, open_dict

from entailment_lab.config import instantiate
from entailment_lab.files import write_text_atomic

log = logging.getLogger(__name__)


def _wandb_defaults() -> None:
    """Without an API key or WANDB_MODE, go offline instead of failing after 8 seconds."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return
    netrc = Path.home() / ".netrc"
    if netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore"):
        return
    log.warning("W&B: no API key and no WANDB_MODE; logging offline (upload later with "
                "`wandb sync <job folder>/wandb/offline-run-*`)")
    os.environ["WANDB_MODE"] = "offline"


def _sweep_group() -> str | None:
    """The W&B group of a multirun job: its sweep folder, e.g. ``2026-11-21_10-00-00-ab12cd``."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    sweep = Path(hc.sweep.dir)
    return f"{sweep.parent.name}_{sweep.name}"


def _wandb_nodes(cfg: DictConfig) -> list[DictConfig]:
    return [node for node in (cfg.get("logger") or {}).values()
            if node is not None and "Wandb" in node.get("_target_", "")]


def resolve_wandb_group(cfg: DictConfig, group: str | None = None) -> None:
    """Write the W&B group into ``cfg`` where it is null: ``group``, else (a multirun job) the
    sweep folder's name, so the run's config, its settings and its checkpoints all name the
    group the run is filed under."""
    for node in _wandb_nodes(cfg):
        if node.get("group") is None:
            with open_dict(node):
                node.group = group or _sweep_group()


def wandb_group(config: Mapping[str, Any]) -> str | None:
    """The W&B group recorded in a run's resolved config (a checkpoint's), if any."""
    loggers = config.get("logger") or {}
    return next((node.get("group") for node in loggers.values()
                 if isinstance(node, Mapping) and "Wandb" in str(node.get("_target_"))
                 and node.get("group")), None)


class _KeepingWriter(ExperimentWriter):
    """Lightning's CSV writer, except that the rows already in ``metrics.csv`` are kept.

    Lightning deletes the file of a folder it logs into again, so a run resumed in its own
    folder would keep only the epochs after the checkpoint. This writer leaves the file in place
    (a resumed run killed before its first flush, up to ``flush_logs_every_n_steps`` steps in,
    loses nothing) and at its first save rewrites it, atomically, with the earlier rows logged
    before the first step it logs itself (so the rows of an epoch interrupted after its
    checkpoint, which the resumed run replays, are not doubled) followed by its own.
    """

    def __init__(self, log_dir: str) -> None:
        path = Path(log_dir) / self.NAME_METRICS_FILE
        self._earlier: list[dict[str, str]] | None = None  # None: no file to keep
        if path.is_file():
            with path.open(newline="", encoding="utf-8") as file:
                self._earlier = list(csv.DictReader(file))
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:
        """Lightning's check deletes ``metrics.csv``; here it stays until the first save."""

    def save(self) -> None:
        if self._earlier is None or not self.metrics:
            super().save()
            return
        first = min(int(row["step"]) for row in self.metrics)
        kept = [{k: v for k, v in row.items() if v != ""} for row in self._earlier
                if row.get("step", "").isdigit() and int(row["step"]) < first]
        rows = [*kept, *self.metrics]
        self.metrics_keys = sorted(set().union(*rows))
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.metrics_keys)
        writer.writeheader()
        writer.writerows(rows)
        write_text_atomic(self.metrics_file_path, text.getvalue())
        self._earlier, self.metrics = None, []


class ResumableCSVLogger(CSVLogger):
    """Lightning's ``CSVLogger``; given ``resumed_from`` (the checkpoint a run resumes from,
    ``ckpt_path`` in conf/logger/csv.yaml) the rows already in the folder's ``metrics.csv`` are
    kept (``_KeepingWriter``), where Lightning's would delete them. Without it, or in a new
    folder, it is Lightning's logger."""

    def __init__(self, *args: Any, resumed_from: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._resuming = bool(resumed_from)

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            writer = _KeepingWriter if self._resuming else ExperimentWriter
            self._experiment = writer(log_dir=self.log_dir)
        return self._experiment


def build_loggers(cfg: DictConfig, resume_id: str | None = None) -> list[Logger]:
    """The loggers of ``cfg.logger``; W&B with its group in the run's settings and, given
    ``resume_id``, continuing that run."""
    resolve_wandb_group(cfg)
    loggers = []
    for name, node in (cfg.get("logger") or {}).items():
        if node is None or "_target_" not in node:
            continue
        kwargs: dict[str, Any] = {}
        if "Wandb" in node._target_:
            import wandb

            _wandb_defaults()
            kwargs["settings"] = wandb.Settings(run_group=node.get("group"))
            if resume_id:
                kwargs.update(id=resume_id, resume="allow")
        loggers.append(instantiate(node, f"logger.{name}", **kwargs))
    return loggers


def finish_wandb() -> None:
    """Close the W&B run so the next job of a multirun starts a new one."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is not None:
        wandb.finish()
