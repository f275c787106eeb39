"""The run's loggers from config, and W&B's defaults: offline without an API key, one group per
multirun sweep (written into the run's config), one W&B run per job."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, open_dict

from entailment_lab.config import instantiate

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


def name_wandb_run(cfg: DictConfig, name: str) -> None:
    """Name the W&B run ``name``: ``eval.py``'s config has no ``model`` or ``dim`` for
    ``logger/wandb.yaml``'s ``${model.name}-d${dim}-s${seed}``; the checkpoint's run has."""
    for node in _wandb_nodes(cfg):
        with open_dict(node):
            node.name = name


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
    """Close the W&B run so the next job of a multirun starts a new one. A process that never
    imported W&B has no run: W&B is not imported for this (about 0.4 s and 20 MiB)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()
