"""Building objects from config: ``hydra.utils.instantiate`` with its errors as one line."""

from __future__ import annotations

from typing import Any

import hydra
from omegaconf import DictConfig

from entailment_lab.errors import ConfigError, UserError


def instantiate(node: DictConfig, what: str, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate`` with errors turned into one-line ``ConfigError``s."""
    try:
        return hydra.utils.instantiate(node, **kwargs)
    except UserError:
        raise
    except hydra.errors.InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        lines = [ln.strip() for ln in str(err).strip().splitlines()
                 if ln.strip() and not ln.strip().startswith("full_key:")]
        raise ConfigError(f"{what}: {' '.join(lines)}") from err


def configured_max_epochs(cfg: DictConfig, overrides: list[str]) -> int | None:
    """The epoch budget the job's config gives without its command-line ``trainer.max_epochs``:
    its recipe's, or its experiment file's where that sets one. Recorded in ``results.json`` at
    run time, so the report judges a run with fewer epochs against the budget of the code and
    configs that ran it, not against today's checkout. ``None`` where it cannot be composed."""
    kept = [o for o in overrides if o.lstrip("+~").partition("=")[0] != "trainer.max_epochs"]
    if len(kept) == len(overrides):
        return cfg.trainer.get("max_epochs")
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from entailment_lab.cli import CONFIG_DIR

    try:
        if GlobalHydra.instance().is_initialized():  # inside @hydra.main: its search path
            return compose(config_name=cfg.task_name, overrides=kept).trainer.get("max_epochs")
        with initialize_config_dir(version_base="1.3", config_dir=CONFIG_DIR):
            return compose(config_name=cfg.task_name, overrides=kept).trainer.get("max_epochs")
    except Exception:  # only costs the report's budget check (it falls back to the recipe file)
        return None
