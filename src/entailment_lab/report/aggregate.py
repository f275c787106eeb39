"""Seed statistics per report row, and the rows whose jobs differ in more than the seed.

Mean, sample standard deviation and count of each accuracy come from one pandas
``groupby().agg`` over the completed jobs; rows that average jobs run with different settings
or code (commits) are still averaged, but named in a note so the mix is never hidden.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from entailment_lab.report.job import Job

if TYPE_CHECKING:
    from entailment_lab.report.tables import Table

METRICS = ("train", "train_eval", "val", "test")


@dataclass(frozen=True)
class Stat:
    """Mean, sample standard deviation and count of one accuracy (%) over seeds."""

    mean: float | None = None
    std: float | None = None  # None for fewer than two values
    n: int = 0

    def __str__(self) -> str:
        if not self.n:
            return "–"
        if self.std is None:
            return f"{self.mean:.2f} (1)"
        return f"{self.mean:.2f} ± {self.std:.2f} ({self.n})"


def seed_stats(groups: Sequence[Sequence[Job]]) -> list[dict[str, Stat]]:
    """For each group of jobs, a ``Stat`` per metric in ``METRICS`` (missing values skipped)."""
    frame = pd.DataFrame([[i, *(getattr(job, m) for m in METRICS)]
                          for i, jobs in enumerate(groups) for job in jobs],
                         columns=["group", *METRICS])
    table = frame.astype(float).groupby("group")[list(METRICS)].agg(["mean", "std", "count"])

    def stat(i: int, metric: str) -> Stat:
        if i not in table.index or not table.at[i, (metric, "count")]:
            return Stat()
        mean, std, n = (table.at[i, (metric, k)] for k in ("mean", "std", "count"))
        return Stat(float(mean), None if math.isnan(std) else float(std), int(n))

    return [{m: stat(i, m) for m in METRICS} for i in range(len(groups))]


def seed_other(values: Sequence[float | None]) -> Stat:
    """A ``Stat`` of one metric's values over seeds (``None``: the job did not record it)."""
    series = pd.Series([v for v in values if v is not None], dtype=float)
    if series.empty:
        return Stat()
    std = float(series.std()) if len(series) > 1 else None
    return Stat(float(series.mean()), std, len(series))


# What is not a setting when comparing jobs of one row: the row itself (model, dim, data), the
# seed, and knobs that do not change what a run measures (logging, paths, devices, threads,
# denormals, resuming; `data_root` is where a protocol's files lie, `../shared/data` or the
# same folder spelt absolutely: the data set itself is the row's `data`).
_ROW_KEYS = frozenset({"seed", "experiment", "tags", "dim", "model", "data"})
_NEUTRAL = ("logger", "paths", "hydra", "ckpt_path", "data_root", "threads", "flush_denormal",
            "callbacks.rich_progress_bar",
            "callbacks.lr_monitor", "trainer.accelerator", "trainer.devices",
            "trainer.enable_progress_bar", "trainer.enable_model_summary", "data.num_workers",
            "data.num_proc", "data.cache_dir")


def _neutral(key: str) -> bool:
    return key in _ROW_KEYS or any(key == n or key.startswith(f"{n}.") for n in _NEUTRAL)


def settings_of(job: Job) -> frozenset[str]:
    """The settings a job ran with beyond its row and seed (Hydra choices and overrides)."""
    items = {f"{k}={v}" for k, v in job.choices.items()
             if not _neutral(k) and "/" not in k and v is not None}
    if job.choices.get("experiment"):
        items.add(f"experiment={job.choices['experiment']}")
    for override in job.overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key not in job.choices and not _neutral(key):  # group choices are counted above
            items.add(override.lstrip("+"))
    return frozenset(items)


def mixed_settings_notes(tables: Sequence[Table]) -> list[str]:
    """Rows whose jobs differ in more than the seed: aggregated anyway, but said so."""
    notes = []
    for table in tables:
        for rr in table.rows:
            groups: dict[frozenset[str], int] = {}
            for job in rr.completed:  # only what is averaged
                key = settings_of(job)
                groups[key] = groups.get(key, 0) + 1
            if len(groups) < 2:
                continue
            common = frozenset.intersection(*groups)
            parts = [f"{', '.join(f'`{s}`' for s in sorted(k - common)) or 'the defaults'} "
                     f"({n} job{'s' * (n > 1)})" for k, n in groups.items()]
            notes.append(f"{table.data} row {rr.label} ({rr.config}) mixes settings, averaged "
                         f"together: {'; '.join(parts)}")
    return notes


def code_notes(tables: Sequence[Table]) -> list[str]:
    """Which code the averaged jobs ran (results.json ``code``): one line for the report, and
    one for each row that averages jobs of different commits."""
    jobs = [job for table in tables for rr in table.rows for job in rr.completed]
    if not jobs:
        return []
    commits: dict[str, int] = {}
    for job in jobs:
        if job.commit:
            commits[job.commit[:7]] = commits.get(job.commit[:7], 0) + 1
    parts = [f"`{c}` ({n} job{'s' * (n > 1)})" for c, n in commits.items()]
    unknown = sum(not job.commit for job in jobs)
    if unknown:
        parts.append(f"no recorded commit ({unknown} job{'s' * (unknown > 1)})")
    dirty = sum(bool(job.dirty) for job in jobs)
    line = f"code of the completed jobs: {'; '.join(parts)}"
    if dirty:
        line += f"; {dirty} of them ran code that differed from its commit"
    notes = [line]
    for table in tables:
        for rr in table.rows:
            row_commits = sorted({job.commit[:7] for job in rr.completed if job.commit})
            if len(row_commits) > 1:
                notes.append(f"{table.data} row {rr.label} ({rr.config}) averages jobs of "
                             f"{len(row_commits)} commits: {', '.join(row_commits)}")
    return notes
