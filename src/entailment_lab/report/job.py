"""A training job as the report sees it, whatever it was read from.

``collect`` fills ``Job`` from a job folder (``results.json``, else ``.hydra/``), ``wandb_runs``
from a W&B run; the statuses below are the words the tables count. The record types live here,
on the ground floor of ``report/``: every other module of the report reads them, none of them
names a type above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from entailment_lab.paper_tables import PaperRow

COMPLETED, RUNNING, STALE, FAILED, MISSING = (
    "completed", "running", "stale (process gone)", "failed", "no results.json")
INTERRUPTED = "interrupted"  # stopped by a signal; results.json says how to resume it


@dataclass(frozen=True)
class Diagnostics:
    """What one run recorded beyond its test accuracy (``breakdowns.from_record``); in %."""

    hypothesis_only: bool = False
    # evaluated set -> breakdown (``per_class``, ``overlap``, ``genre``) -> group -> % (None:
    # an empty group)
    sets: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    further: dict[str, float] = field(default_factory=dict)  # further set -> accuracy %


@dataclass
class Job:
    """One training job as the report sees it (from ``results.json``, ``.hydra/`` or W&B)."""

    folder: str
    status: str
    task: str | None = "train"
    model: str | None = None
    inputs: str | None = None  # what the model reads: "pair" or "sentence" (Network.inputs)
    dim: int | None = None
    seed: int | None = None
    data: str | None = None
    started: str | None = None  # when it started (results.json, ``%Y-%m-%dT%H:%M:%S``)
    tags: list[str] = field(default_factory=list)
    choices: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    max_epochs: int | None = None  # the epochs the run was given (results.json "budget")
    configured_max_epochs: int | None = None  # its config's budget without a command-line one
    early_stopping: int | str | None = "not recorded"  # its patience; None: whole budget
    epochs: int | None = None  # the epochs it trained (results.json metrics "epochs")
    stopped_by: str | None = None  # what ended them (metrics "stopped_by": callbacks.stop_reason)
    params: int | None = None  # trainable, without word embeddings
    params_paper: int | None = None  # the paper's counting convention, where defined
    train: float | None = None  # % train accuracy in the best-validation epoch (dropout on)
    train_eval: float | None = None  # % train accuracy of the best checkpoint, eval mode
    val: float | None = None  # % best validation accuracy
    test: float | None = None  # % test accuracy of the best-validation checkpoint
    # Every other test metric the run computed (its ``metrics`` config: ``test/f1_macro``,
    # ``test/acc_per_class/<label>``, ...), in %, by its name without ``test/``.
    other_test: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    wandb_id: str | None = None  # the W&B run, so a run read twice (folder + API) counts once
    commit: str | None = None  # the git commit of the code it ran (results.json "code")
    dirty: bool | None = None  # whether its code (src, conf) differed from that commit
    # The numeric path the run took (results.json "numeric_path": torch version, threads, the
    # kernels that ran, CPU and its vector extensions, determinism); None: not recorded.
    numeric_path: dict[str, Any] | None = None
    train_pairs: int | None = None  # the pairs it trained on (results.json data_stats)
    history: list[dict[str, Any]] = field(default_factory=list)  # per epoch, from epoch 0
    row: PaperRow | None = None
    note: str | None = None  # why the job landed in a row other than the one it declares
    # Per-class / overlap / genre accuracies, further test sets, hypothesis-only: read with
    # the record (``breakdowns.from_record``).
    diagnostics: Diagnostics = field(default_factory=Diagnostics)


def percent(value: Any) -> float | None:
    """A stored accuracy (0–1) as a percentage; ``None`` stays ``None``."""
    return None if value is None else 100.0 * float(value)


def first_line(text: str | None) -> str | None:
    """The first line of an error (at most 200 characters), ``None`` for no text."""
    return text.strip().splitlines()[0][:200] if text and text.strip() else None
