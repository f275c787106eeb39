"""Opening a checkpoint without running code: ``torch.load(weights_only=True)``, and one clear
line for a file that is not a plain checkpoint of this project."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from entailment_lab.errors import ConfigError
from entailment_lab.module import CHECKPOINT_KEY


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint's contents, loaded with ``weights_only=True``.

    Only tensors and plain containers are read, so opening a shared file runs no code; a file
    whose pickle names anything else is refused with one line (nothing in it is executed).
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"ckpt_path: no such checkpoint '{file}'")
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, OSError, EOFError, KeyError, ValueError) as err:
        raise ConfigError(f"ckpt_path: '{file}' {_load_failure(err)}") from None
    if not isinstance(checkpoint, dict):
        raise ConfigError(f"ckpt_path: '{file}' holds a {type(checkpoint).__name__}, not a "
                          "Lightning checkpoint")
    return checkpoint


def _load_failure(err: Exception) -> str:
    """Why a weights-only load failed, in a few words (torch's message is long)."""
    message = str(err).strip()
    found = re.search(r"Unsupported global: GLOBAL (\S+)", message)
    if found:
        return (f"refused: its pickle refers to '{found.group(1)}', not a tensor or plain "
                "container, so loading it could run code (this project's checkpoints hold "
                "only tensors and plain containers)")
    detail = message.partition("WeightsUnpickler error:")[2].strip() or message
    detail = f"{type(err).__name__}: {detail.splitlines()[0]}" if detail else type(err).__name__
    return f"is not a readable PyTorch checkpoint ({detail})"


def checkpoint_metadata(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checkpoint (``read_checkpoint``) and this project's entry in it."""
    checkpoint = read_checkpoint(path)
    meta = checkpoint.get(CHECKPOINT_KEY)
    if not isinstance(meta, dict) or "vocab" not in meta:
        raise ConfigError(f"ckpt_path: '{Path(path).expanduser()}' was not written by this "
                          "project's train.py (no vocabulary stored in it)")
    return checkpoint, meta
