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
