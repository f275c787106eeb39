"""What a row of every results table is, and the one aggregation of its runs.

A row is the completed training runs of one setting on one data set. What splits rows
(``RowKey``): the data set, the model and its size (``dim``), the training-set size
(``data.train_size``: a point of a learning curve), whether the premise was hidden
(``data.hypothesis_only``), the early-stopping patience the runs trained under, and every other
setting on their command line. What does not: the seed (what a row averages over) and the knobs
that do not change what a run trains (``NOT_SETTINGS``: where it was written or logged, how
progress is shown, threads and devices, where the data files lie). Runs of one row that ran
different commits, a modified checkout or different numeric paths stay in the row, flagged
(``flags``).

Every report is a view over these rows: the published tables (``leaderboard``), the sweep
report (``tables``: a paper row's line gathers the rows matched to it), the W&B dashboard
(grouped by ``ROW_CONFIG_KEYS``) and the curves (``curves.py``: a panel a row). One aggregation
serves them all: ``stat`` (mean, sample standard deviation, count).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from entailment_lab.report.job import COMPLETED, Job
from entailment_lab.report.match import reduced_budget

# Overrides that do not change what a run trains (a key, or the group below it): the seed,
# tags, where the run was written, logged or resumed from, how progress is shown, threads,
# denormals, devices and data loading workers, and where the data files lie (``data_root``:
# ``../shared/data`` and the same folder spelt absolutely are one protocol; the data set itself
# is the row's ``data``). ``trainer.devices`` and ``trainer.accelerator`` are the machine's: a
# run on another device is the same setting, and the ``numeric paths`` flag says where runs of
# a row computed differently.
NOT_SETTINGS = ("seed", "tags", "hydra", "logger", "paths", "ckpt_path", "data_root", "threads",
                "flush_denormal", "callbacks.rich_progress_bar", "callbacks.lr_monitor",
                "trainer.accelerator", "trainer.devices", "trainer.enable_progress_bar",
                "trainer.enable_model_summary", "data.num_workers", "data.num_proc",
                "data.cache_dir")
# Overrides that a row carries as fields of its own (``RowKey``): on its command line, not
# among its settings. ``data_root`` is not a setting, but a protocol's command needs it.
_FIELDS = frozenset({"data", "data.name", "model", "dim", "data.train_size",
                     "data.hypothesis_only"})
_IN_COMMAND = frozenset({"data_root"})
TRAIN_SIZE, HYPOTHESIS_ONLY = "data.train_size", "data.hypothesis_only"
# The row's fields as keys of the run's resolved config (what W&B stores): the dashboard
# groups its runs by them. The patience and the other settings are left to the runs table.
ROW_CONFIG_KEYS = ("data.name", "model.name", "dim", TRAIN_SIZE, HYPOTHESIS_ONLY)
# Keys of results.json's ``numeric_path`` (``numeric_path.py``; dotted: ``threads.detail``) that
# say how a value was chosen, not which arithmetic ran: runs that differ only there took one
# path. ``threads.detail`` is the load seen at start, different between identical runs.
_NOT_THE_PATH = frozenset({"threads.chosen_by", "threads.detail"})
METRICS = ("train", "train_eval", "val", "test")  # the accuracies a ``Job`` holds, in %


@dataclass(frozen=True)
class Stat:
    """Mean, sample standard deviation and count of one accuracy (%) over a row's runs."""

    mean: float | None = None
    std: float | None = None  # None for fewer than two values
    n: int = 0

    def cell(self, spec: str = ".2f") -> str:
        """``mean ± std (n)``; one run: ``value (1)``; none: ``–``."""
        if not self.n:
            return "–"
        if self.std is None:
            return f"{self.mean:{spec}} (1)"
        return f"{self.mean:{spec}} ± {self.std:{spec}} ({self.n})"

    def __str__(self) -> str:
        return self.cell()


def stat(values: Iterable[float | None]) -> Stat:
    """The one aggregation: mean and sample standard deviation of the values given (``None``:
    a run that did not record it, skipped). ``statistics`` rather than pandas: a handful of
    values a row, and exact sums, so a figure never moves in its last printed digit with the
    order its runs were read in."""
    found = [v for v in values if v is not None]
    if not found:
        return Stat()
    std = statistics.stdev(found) if len(found) > 1 else None
    return Stat(statistics.mean(found), std, len(found))


def stats(jobs: Sequence[Job]) -> dict[str, Stat]:
    """A ``Stat`` of each accuracy in ``METRICS`` over ``jobs``."""
    return {m: stat(getattr(j, m) for j in jobs) for m in METRICS}


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _within(key: str, names: Iterable[str]) -> bool:
    return any(key == n or key.startswith(f"{n}.") for n in names)


def command_overrides(job: Job) -> tuple[str, ...]:
    """The overrides of ``job``'s command line that reproduce what it trained, but the seed: its
    settings with the row's own fields and ``data_root``, the experiment first, then by name
    (so the same command typed in another order is the same row)."""
    kept = {o.lstrip("+") for o in job.overrides
            if not _within(_key(o), set(NOT_SETTINGS) - _IN_COMMAND)
            and o.lstrip("+").lower() != f"{HYPOTHESIS_ONLY}=false"}  # the default
    return tuple(sorted(kept, key=lambda o: (not o.startswith("experiment="), o)))


def settings(job: Job) -> tuple[str, ...]:
    """The overrides that split ``job``'s row from others beyond its ``RowKey`` fields."""
    return tuple(o for o in command_overrides(job) if _key(o) not in _FIELDS | _IN_COMMAND)


def train_size(job: Job) -> int | None:
    """The training pairs a run asked for (``data.train_size=N``); None: the whole split."""
    for override in job.overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key == TRAIN_SIZE and value.isdigit():
            return int(value)
    return None


def numeric_path(job: Job) -> str | None:
    """``job``'s numeric path as one comparable string; None for a record without one."""
    path = job.numeric_path
    if not isinstance(path, Mapping):
        return None
    return json.dumps(_without(path, _NOT_THE_PATH), sort_keys=True, default=str)


def _without(values: Mapping[str, Any], dropped: frozenset[str], prefix: str = "") -> dict:
    """``values`` less the (dotted) keys in ``dropped``, at every depth."""
    return {k: _without(v, dropped, f"{prefix}{k}.") if isinstance(v, Mapping) else v
            for k, v in values.items() if f"{prefix}{k}" not in dropped}


@dataclass(frozen=True)
class RowKey:
    """What splits rows; two runs with equal keys are seeds of one row."""

    data: str | None
    model: str | None
    dim: int | None
    train_size: int | None  # data.train_size (a learning curve's point); None: whole split
    hypothesis_only: bool  # the premise replaced by a constant: a diagnostic baseline
    early_stopping: str  # the patience the runs trained under ("None": the whole budget)
    settings: tuple[str, ...]  # the other settings of the command line (``settings``)

    def items(self) -> list[str]:
        """The key as ``name=value`` words, for saying how two rows differ."""
        return [f"data={self.data}", f"model={self.model}", f"dim={self.dim}",
                f"{TRAIN_SIZE}={self.train_size}", f"{HYPOTHESIS_ONLY}={self.hypothesis_only}",
                f"early stopping patience {self.early_stopping}", *self.settings]


def row_key(job: Job) -> RowKey:
    """The row ``job`` belongs to."""
    return RowKey(job.data, job.model, job.dim, train_size(job),
                  job.diagnostics.hypothesis_only, str(job.early_stopping), settings(job))


@dataclass
class Row:
    """The runs of one setting on one data set."""

    key: RowKey
    jobs: list[Job] = field(default_factory=list)
    # Completed records of a seed that a later completed run of the same seed replaced (a
    # re-run: ``newest_per_seed``); not in ``jobs``, counted in the flags.
    replaced: list[Job] = field(default_factory=list)

    @property
    def data(self) -> str | None:
        return self.key.data

    @property
    def model(self) -> str | None:
        return self.key.model

    @property
    def dim(self) -> int | None:
        return self.key.dim

    @property
    def train_size(self) -> int | None:
        return self.key.train_size

    @property
    def hypothesis_only(self) -> bool:
        return self.key.hypothesis_only

    @property
    def tests(self) -> list[float]:
        """The test accuracies (%) of the runs that recorded one."""
        return [j.test for j in self.jobs if j.test is not None]

    def stat(self, metric: str = "test") -> Stat:
        """Mean ± std of one accuracy of ``METRICS`` over the row's runs."""
        return stat(getattr(j, metric) for j in self.jobs)

    @property
    def flags(self) -> list[str]:
        out = flags(self.jobs)
        if self.replaced:
            n = len(self.replaced)
            out.append(f"{n} earlier record{'s' if n != 1 else ''} of a re-run seed left out")
        return out

    @property
    def label(self) -> str:
        """``din1 d=400``, with the training pairs, ``hypothesis only`` and any other setting
        (the experiment, which names the table, left out)."""
        key = self.key
        size = f", {key.train_size:,} pairs" if key.train_size else ""
        only = ", hypothesis only" if key.hypothesis_only else ""
        extra = "".join(f", `{s}`" for s in key.settings if not s.startswith("experiment="))
        return f"{key.model}" + (f" d={key.dim}" if key.dim else "") + size + only + extra

    @property
    def command_overrides(self) -> tuple[str, ...]:
        """The runs' command line but the seed (the most common one, should they be spelt
        differently: ``data_root`` relative in one and absolute in another)."""
        counts = Counter(command_overrides(j) for j in self.jobs)
        return max(counts, key=counts.get) if counts else ()

    @property
    def seeds(self) -> list[Any]:
        return sorted({j.seed for j in self.jobs if j.seed is not None}, key=str)


def group_rows(jobs: Iterable[Job]) -> list[Row]:
    """``jobs`` grouped into rows, in the order each row's first job comes."""
    rows: dict[RowKey, Row] = {}
    for job in jobs:
        key = row_key(job)
        rows.setdefault(key, Row(key)).jobs.append(job)
    for row in rows.values():
        row.jobs, row.replaced = newest_per_seed(row.jobs)
    return list(rows.values())


def newest_per_seed(jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """``jobs`` with one completed record per seed, and the records left out. A row averages
    over seeds, so a seed run again (a re-run that stores what the first did not, such as its
    test predictions) counts once: its newest completed record (by start time) stays, in the
    place of the first. Jobs not completed, or without a seed, all stay."""
    def seeded(job: Job) -> bool:
        return job.status == COMPLETED and job.seed is not None

    newest: dict[Any, Job] = {}
    for job in filter(seeded, jobs):
        if job.seed not in newest or (job.started or "") > (newest[job.seed].started or ""):
            newest[job.seed] = job
    kept, placed = [], set()
    for job in jobs:  # in the place of the seed's first record
        if not seeded(job):
            kept.append(job)
        elif job.seed not in placed:
            placed.add(job.seed)
            kept.append(newest[job.seed])
    ids = {id(j) for j in kept}
    return kept, [j for j in jobs if id(j) not in ids]


def across(jobs: Sequence[Job]) -> list[str]:
    """The flags that count what differs between runs: several commits, several numeric paths
    (runs without a recorded path are left out: older records)."""
    out = []
    commits = {j.commit for j in jobs}
    if len(commits) > 1:
        out.append(f"{len(commits)} commits")
    paths = {p for j in jobs if (p := numeric_path(j)) is not None}
    if len(paths) > 1:
        out.append(f"{len(paths)} numeric paths")
    return out


ACROSS = ("commits", "numeric paths")  # the endings of ``across``'s flags


def flags(jobs: Sequence[Job]) -> list[str]:
    """What a reader must know about these runs, said by the generator, not by prose: a
    reduced budget, several commits or numeric paths, runs ended by early stopping, runs from a
    modified checkout, fewer than three runs."""
    out = []
    reduced = sorted({r for j in jobs if (r := reduced_budget(j))})
    if reduced:
        out.append(f"reduced ({', '.join(reduced)})")
    out += across(jobs)
    stopped = sum(j.stopped_by == "early_stopping" for j in jobs)
    if stopped:
        out.append(f"{stopped} ended by early stopping (an earlier protocol)")
    dirty = sum(bool(j.dirty) for j in jobs)
    if dirty:
        out.append(f"{dirty} from a modified checkout")
    tests = sum(j.test is not None for j in jobs)
    if tests < 3:
        out.append(f"{tests} run{'s' if tests != 1 else ''}")
    return out


def learning_curves(rows: Iterable[Row]) -> dict[RowKey, dict[int | None, Row]]:
    """The rows that differ only in their training-set size: for each setting run on smaller
    training sets, its rows by size, with its whole-set row (same settings, same stopping
    rule) under ``None`` where there is one."""
    rows = list(rows)
    curves: dict[RowKey, dict[int | None, Row]] = {}
    for row in rows:
        if row.train_size is not None:
            curves.setdefault(replace(row.key, train_size=None), {})[row.train_size] = row
    for row in rows:
        if row.train_size is None and row.key in curves:
            curves[row.key][None] = row
    return curves


def count_range(values: Iterable[int | None], sep: str = ",") -> str:
    """``1,289,203``, or ``620,547–889,203`` where runs disagree, ``–`` for none; ``sep`` the
    thousands separator."""
    found = sorted({v for v in values if v is not None})
    text = [f"{c:,}".replace(",", sep) for c in found]
    return "–" if not found else text[0] if len(found) == 1 else f"{text[0]}–{text[-1]}"
