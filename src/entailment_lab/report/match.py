"""Match a job to the paper row it reproduces.

A job declares its row (``experiment=table2/row17``, or tags ``table2``, ``row17``); a job that
declares none counts under the row its (model, dim) implements. When the declaration and the
config that ran disagree, what ran wins and the job carries a note saying so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from entailment_lab.paper_tables import ALL_ROWS, PaperRow
from entailment_lab.report.job import COMPLETED, Job

_EXPERIMENT_ROW = re.compile(r"(?:^|/)(?P<table>\w+)/row(?P<row>\d+)$")
_TAG_ROW = re.compile(r"^row(\d+)$")
_TABLE_IDS = sorted({r.table for r in ALL_ROWS})


def _lookup(table: str, row: int) -> PaperRow | None:
    return next((r for r in ALL_ROWS if r.table == table and r.row == row), None)


def declared_row(job: Job) -> PaperRow | None:
    """The row a job says it reproduces: ``experiment=table2/row17``, else tags ``row17``."""
    experiment = job.choices.get("experiment")
    match = _EXPERIMENT_ROW.search(experiment) if isinstance(experiment, str) else None
    if match:
        return _lookup(match["table"], int(match["row"]))
    rows = [int(m[1]) for t in job.tags if (m := _TAG_ROW.match(str(t)))]
    if rows:
        table = next((t for t in job.tags if t in _TABLE_IDS), "table2")
        return _lookup(table, rows[0])
    return None


def row_by_config(job: Job) -> PaperRow | None:
    """The row our (model, dim) implements, preferring the row on the job's data set and a
    re-implementation's row over the authors' own figure (rLSTM: row 12 over row 10)."""
    candidates = sorted((r for r in ALL_ROWS if r.model is not None and r.model == job.model
                         and r.dim in (None, job.dim)), key=lambda r: r.authors_figure)
    same_data = [r for r in candidates if r.data == job.data]
    return (same_data or candidates or [None])[0]


def match_row(job: Job) -> tuple[PaperRow | None, str | None]:
    """The row a job counts under, and a note when its declaration and its config disagree.

    A declared row wins when it is consistent with what ran; ``experiment=table2/row17
    model=din2`` ran DIN-2, so it counts under DIN-2's row, with a note.
    """
    declared, configured = declared_row(job), row_by_config(job)
    if declared is None:
        return configured, None
    if job.model is None or (declared.model == job.model and declared.dim in (None, job.dim)):
        return declared, None
    where = f"row {configured.label}" if configured else "no paper row"
    return configured, (f"declares row {declared.label} ({declared.model} d={declared.dim}) but "
                        f"ran {job.model} d={job.dim}; counted under {where}")


# Trainer knobs that cut a run short: a job overriding them ran less than its recipe's budget.
_LIMITS = ("trainer.limit_train_batches", "trainer.limit_val_batches",
           "trainer.limit_test_batches", "trainer.fast_dev_run", "trainer.overfit_batches",
           "trainer.max_steps", "trainer.max_time")
_NO_LIMIT = ("", "null", "none", "false", "-1", "1.0", "0", "0.0")  # the knobs' "no limit"
# Caps that only cut a run where they bind: a job that still trained all its epochs is whole.
_CAPS = ("trainer.max_steps", "trainer.max_time")
def limit_overrides(lookup: Callable[[str], Any]) -> list[str]:
    """``key=value`` for each budget knob that ``lookup`` (a resolved config) sets to a limit:
    what a run read back from W&B (no Hydra overrides) ran with."""
    values = {key: lookup(key) for key in _LIMITS}
    return [f"{key}={value}" for key, value in values.items()
            if value is not None and str(value).lower() not in _NO_LIMIT]


def _cap_did_not_bind(job: Job) -> bool:
    """A time or step cap did not end the job: it completed, and trained all the epochs it was
    given or was ended by its early stopping (results.json metrics "stopped_by"; runs recorded
    before that field existed are judged by their epoch count alone)."""
    if job.status != COMPLETED:
        return False
    if job.stopped_by is not None:
        return job.stopped_by in ("max_epochs", "early_stopping")
    return job.epochs is not None and job.max_epochs is not None and job.epochs >= job.max_epochs


def reduced_budget(job: Job) -> str | None:
    """Why a job is not a full run of its row (``debug=tiny``, ``trainer.max_epochs=2``), or
    ``None``. Such jobs stay in the report, marked, but out of the comparison with the paper.
    A ``trainer.max_time`` or ``max_steps`` cap that did not bind (the job completed every
    epoch of its budget, or its early stopping ended it first) does not reduce it."""
    debug = job.choices.get("debug")
    if debug:
        return f"debug={debug}"
    for override in job.overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key in _CAPS and _cap_did_not_bind(job):
            continue
        if key in _LIMITS and value.lower() not in _NO_LIMIT:
            return override.lstrip("+~")
        if key == "trainer.max_epochs" and value.isdigit() and \
                int(value) < (job.configured_max_epochs or 0):
            # the budget its config gave, as results.json recorded it (config.budget_record)
            return override.lstrip("+~")
    return None
