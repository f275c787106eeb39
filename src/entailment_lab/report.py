"""The results report: finished jobs next to the published numbers (``src/report.py``).

Reads every job's ``results.json`` under the given folders (sweeps, single runs, or parents of
them; optionally W&B runs), matches each job to the paper row it reproduces, averages over seeds
and writes ``report.md`` / ``report.csv`` / ``report.png``. Nothing is dropped silently: rows
that were not run, jobs still running, crashed or failed are all shown, so a partial sweep
reads as partial.
"""

from __future__ import annotations

import csv
import inspect
import io
import os
import re
import socket
import statistics
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from entailment_lab.errors import UserError
from entailment_lab.paper_tables import (
    ALL_ROWS,
    PAIR_ROWS,
    SENTENCE_DATA,
    SENTENCE_MODELS,
    SENTENCE_ROWS,
    PaperRow,
)
from entailment_lab.results import RESULTS_FILE, read_results, write_text_atomic

COMPLETED, RUNNING, STALE, FAILED, MISSING = (
    "completed", "running", "stale (process gone)", "failed", "no results.json")
_SKIP_DIRS = {"checkpoints", "wandb", "__pycache__", "node_modules", "csv", "tensorboard"}
_TABLE_IDS = sorted({r.table for r in ALL_ROWS})


# --- jobs ------------------------------------------------------------------------------------
@dataclass
class Job:
    """One training job as the report sees it (from ``results.json``, ``.hydra/`` or W&B)."""

    folder: str
    status: str
    task: str | None = "train"
    model: str | None = None
    dim: int | None = None
    seed: int | None = None
    data: str | None = None
    tags: list[str] = field(default_factory=list)
    choices: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    params: int | None = None  # trainable, without word embeddings
    params_paper: int | None = None  # the paper's counting convention, where defined
    train: float | None = None  # % train accuracy in the best-validation epoch (dropout on)
    train_eval: float | None = None  # % train accuracy of the best checkpoint, eval mode
    val: float | None = None  # % best validation accuracy
    test: float | None = None  # % test accuracy of the best-validation checkpoint
    error: str | None = None
    wandb_id: str | None = None  # the W&B run, so a run read twice (folder + API) counts once
    row: PaperRow | None = None
    note: str | None = None  # why the job landed in a row other than the one it declares


def collect_jobs(paths: Iterable[str | os.PathLike]) -> list[Job]:
    """Every job under ``paths``, each folder once, in path order."""
    seen: dict[Path, None] = {}
    for path in paths:
        folders = find_job_folders(path)
        if not folders:
            raise UserError(f"{path}: no job folders under it (folders with {RESULTS_FILE}, "
                            f".hydra/ or train.log)")
        seen.update(dict.fromkeys(folders))
    jobs = [load_job(folder) for folder in seen]
    for job in jobs:
        job.row, job.note = match_row(job)
    return jobs


def _is_job_folder(path: Path) -> bool:
    return ((path / RESULTS_FILE).is_file() or (path / ".hydra").is_dir()
            or (path / "train.log").is_file())


def find_job_folders(path: str | os.PathLike) -> list[Path]:
    """Job folders at or below ``path``, including empty ``N/`` folders of a Hydra sweep.

    A sweep job that died before writing anything leaves an empty numbered folder; it is a job
    (shown as "no results.json") when it sits beside ``multirun.yaml`` or other job folders.
    """
    root = Path(path)
    if root.is_file() and root.name == RESULTS_FILE:
        return [root.parent.resolve()]
    if root.is_file():
        raise UserError(f"{path}: a file; give a job folder, a sweep folder or a {RESULTS_FILE}")
    if not root.is_dir():
        raise UserError(f"{path}: no such folder (give a multirun/... or outputs/... folder)")
    found: list[Path] = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if _is_job_folder(here):
            found.append(here.resolve())
            dirnames[:] = []
            continue
        numbered = [d for d in dirnames if d.isdigit()]
        is_sweep = (here / "multirun.yaml").is_file() or any(
            _is_job_folder(here / d) for d in numbered)
        if is_sweep:  # empty job folders would otherwise be invisible
            found += [(here / d).resolve() for d in numbered
                      if not any((here / d).rglob(RESULTS_FILE))
                      and not _is_job_folder(here / d)]
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS]
    return sorted(found, key=_natural)


def _natural(path: Path) -> list[Any]:
    """Sort key that puts ``sweep/2`` before ``sweep/10``."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.parts]


def _percent(value: Any) -> float | None:
    return None if value is None else 100.0 * float(value)


def load_job(folder: Path) -> Job:
    """Read one job folder; a job without ``results.json`` is described from ``.hydra/``."""
    data = read_results(folder / RESULTS_FILE)
    status = data.get("status", "unknown")
    if status == "missing":
        job = _job_from_hydra(folder)
        job.error = _last_log_line(folder) or "folder is empty (crashed before writing)"
        return job
    metrics = data.get("metrics") or {}
    params = data.get("params") or {}
    job = Job(
        folder=str(folder), status=status, task=data.get("task"), model=data.get("model"),
        dim=data.get("dim"), seed=data.get("seed"), data=data.get("data"),
        tags=list(data.get("tags") or []), choices=dict(data.get("choices") or {}),
        overrides=list(data.get("overrides") or []), params=params.get("trainable"),
        params_paper=params.get("paper_convention"),
        train=_percent(metrics.get("train/acc_at_best")), val=_percent(metrics.get("val/acc_best")),
        train_eval=_percent(metrics.get("train/acc_eval")),
        test=_percent(metrics.get("test/acc")), error=_first_line(data.get("error")),
        wandb_id=data.get("wandb_run_id"),
    )
    if status == RUNNING and not _process_alive(data.get("pid"), data.get("started")):
        job.status = STALE
    return job


def _job_from_hydra(folder: Path) -> Job:
    """What Hydra saved at job start (``.hydra/``): enough to place a crashed job in its row."""
    job = Job(folder=str(folder), status=MISSING)
    hydra_dir = folder / ".hydra"
    if not hydra_dir.is_dir():
        return job
    from omegaconf import OmegaConf

    try:
        cfg = OmegaConf.load(hydra_dir / "config.yaml")
        job.task = OmegaConf.select(cfg, "task_name", default="train")
        job.model = OmegaConf.select(cfg, "model.name", default=None)
        job.data = OmegaConf.select(cfg, "data.name", default=None)
        job.seed = OmegaConf.select(cfg, "seed", default=None)
        job.tags = list(OmegaConf.select(cfg, "tags", default=None) or [])
        job.dim = OmegaConf.select(cfg, "dim", default=None)  # resolves ${model.default_dim}
        hydra_cfg = OmegaConf.load(hydra_dir / "hydra.yaml")
        choices = OmegaConf.select(hydra_cfg, "hydra.runtime.choices", default=None) or {}
        job.choices = {k: v for k, v in OmegaConf.to_container(choices).items()
                       if not k.startswith("hydra")}
        job.overrides = list(OmegaConf.select(hydra_cfg, "hydra.overrides.task", default=None)
                             or [])
    except Exception:  # a damaged .hydra/ only costs the row assignment
        pass
    return job


def _last_log_line(folder: Path) -> str | None:
    log = folder / "train.log"
    if not log.is_file():
        return None
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return f"train.log ends: {lines[-1][:160]}" if lines else "train.log is empty"


def _first_line(text: str | None) -> str | None:
    return text.strip().splitlines()[0][:200] if text and text.strip() else None


def _process_alive(pid: Any, started: str | None) -> bool:
    """Whether ``pid`` still runs the job: alive, and (on Linux) not a newer process reusing it."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:  # a process started after the job wrote its file is a reused pid
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines()
                    if ln.startswith("btime"))
        proc_start = boot + ticks / os.sysconf("SC_CLK_TCK")
        job_start = time.mktime(time.strptime(started or "", "%Y-%m-%dT%H:%M:%S"))
        return proc_start <= job_start + 2
    except (OSError, ValueError, IndexError, StopIteration):
        return True


# --- matching jobs to paper rows -------------------------------------------------------------
_EXPERIMENT_ROW = re.compile(r"(?:^|/)(?P<table>\w+)/row(?P<row>\d+)$")
_TAG_ROW = re.compile(r"^row(\d+)$")


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
    """The row our (model, dim) implements, preferring the row on the job's data set."""
    candidates = [r for r in ALL_ROWS
                  if r.model is not None and r.model == job.model and r.dim in (None, job.dim)]
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


# --- tables ----------------------------------------------------------------------------------
@dataclass
class Stat:
    """Mean, sample standard deviation and count of a list of percentages."""

    values: list[float]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if self.n > 1 else None

    def __str__(self) -> str:
        if not self.values:
            return "–"
        if self.std is None:
            return f"{self.mean:.2f} (1)"
        return f"{self.mean:.2f} ± {self.std:.2f} ({self.n})"


@dataclass
class RowResult:
    """One line of a report table: a paper row (or an unmatched config) and its jobs."""

    data: str
    paper: PaperRow | None
    model: str | None
    dim: int | None
    jobs: list[Job] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        """Whether the paper's accuracy is for this data set (a SICK run is not SNLI's)."""
        return self.paper is not None and self.paper.data == self.data

    def _count(self, *statuses: str) -> int:
        return sum(j.status in statuses for j in self.jobs)

    @property
    def completed(self) -> list[Job]:
        return [j for j in self.jobs if j.status == COMPLETED]

    @property
    def train(self) -> Stat:
        return Stat([j.train for j in self.completed if j.train is not None])

    @property
    def train_eval(self) -> Stat:
        return Stat([j.train_eval for j in self.completed if j.train_eval is not None])

    @property
    def val(self) -> Stat:
        return Stat([j.val for j in self.completed if j.val is not None])

    @property
    def test(self) -> Stat:
        return Stat([j.test for j in self.completed if j.test is not None])

    @property
    def delta(self) -> float | None:
        if not self.comparable or self.test.mean is None:
            return None
        return self.test.mean - self.paper.test

    def params(self, key: str = "params", sep: str = ",") -> str:
        """Our parameter count (``1,289,203``); a range if the jobs disagree (other settings)."""
        counts = sorted({getattr(j, key) for j in self.jobs if getattr(j, key) is not None})
        text = [f"{c:,}".replace(",", sep) for c in counts]
        return "–" if not counts else text[0] if len(counts) == 1 else f"{text[0]}–{text[-1]}"

    def counts(self) -> dict[str, int]:
        return {"completed": self._count(COMPLETED), "running": self._count(RUNNING),
                "stale": self._count(STALE), "failed": len(self.jobs) - self._count(
                    COMPLETED, RUNNING, STALE, MISSING), "no_results": self._count(MISSING)}

    @property
    def status(self) -> str:
        """'3 done, 1 running', 'failed (2)', 'not run', 'not implemented'."""
        if not self.jobs:
            implemented = self.paper is None or self.paper.implemented
            return "not run" if implemented else "not implemented"
        counts = self.counts()
        if counts["failed"] == len(self.jobs):
            return f"failed ({counts['failed']})"
        words = {"completed": "done", "running": "running", "stale": "stale (process gone)",
                 "failed": "failed", "no_results": "no results.json"}
        return ", ".join(f"{n} {words[k]}" for k, n in counts.items() if n)

    @property
    def label(self) -> str:
        return self.paper.label if self.paper else "–"

    @property
    def config(self) -> str:
        """Our config that ran (or would run) this row: ``din1 d=400``."""
        model = self.model or (self.paper.model if self.paper else None)
        dim = self.dim if self.paper is None else self.paper.dim
        if model is None:
            return ""
        return f"{model} d={dim}" if dim is not None else model

    @property
    def description(self) -> str:
        if self.paper is None:
            return f"{self.config} (no paper row)"
        return f"{self.paper.description} ({self.config})" if self.config else \
            self.paper.description

    @property
    def seeds(self) -> list[Any]:
        return sorted({j.seed for j in self.completed if j.seed is not None}, key=str)


@dataclass
class Table:
    """All rows for one data set, in the paper's order, unmatched configs last."""

    data: str
    layout: str  # "pair" (Table 2) or "sentence" (DCNN)
    rows: list[RowResult]


def layout_of(data: str, jobs: Sequence[Job]) -> str:
    """Sentence data (SST, TREC) get the DCNN layout, sentence pairs Table 2's."""
    if data in SENTENCE_DATA or (jobs and all(j.model in SENTENCE_MODELS for j in jobs)):
        return "sentence"
    return "pair"


def build_tables(jobs: Sequence[Job]) -> list[Table]:
    """One table per data set among the training jobs; each paper row once, in order."""
    by_data: dict[str, list[Job]] = {}
    for job in jobs:
        if job.task in (None, "train") and (job.data or job.model):
            by_data.setdefault(job.data or "unknown", []).append(job)
    tables = []
    for data, data_jobs in by_data.items():
        layout = layout_of(data, data_jobs)
        if layout == "sentence":
            base = [r for r in SENTENCE_ROWS if r.data == data]
        else:  # the paper's own data set shows every row; others only what we can run
            base = [r for r in PAIR_ROWS if data == "snli" or r.implemented]
        rows = {r: RowResult(data, r, r.model, r.dim) for r in base}
        extra: dict[tuple[Any, ...], RowResult] = {}
        for job in data_jobs:
            if job.row is not None:
                rows.setdefault(job.row, RowResult(data, job.row, job.row.model, job.row.dim))
                rows[job.row].jobs.append(job)
            else:
                key = (str(job.model), str(job.dim))
                extra.setdefault(key, RowResult(data, None, job.model, job.dim)).jobs.append(job)
        order = {r: i for i, r in enumerate(ALL_ROWS)}
        ordered = sorted(rows.values(), key=lambda rr: order[rr.paper])
        ordered += [extra[k] for k in sorted(extra)]
        tables.append(Table(data, layout, ordered))
    rank = {"snli": 0}
    tables.sort(key=lambda t: (t.layout == "sentence", rank.get(t.data, 1), t.data))
    return tables


# What is not a setting when comparing jobs of one row: the row itself (model, dim, data), the
# seed, and knobs that do not change what a run measures (logging, paths, devices, resuming).
_ROW_KEYS = frozenset({"seed", "experiment", "tags", "dim", "model", "data"})
_NEUTRAL = ("logger", "paths", "hydra", "ckpt_path", "callbacks.rich_progress_bar",
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


# --- output ----------------------------------------------------------------------------------
def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "–" if value is None else format(value, spec)


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _table_markdown(table: Table) -> str:
    cells = []
    for rr in table.rows:
        paper = rr.paper if rr.comparable else None
        ours = ([str(rr.train), str(rr.train_eval), str(rr.test)] if rr.completed
                else ["", "", ""])
        delta = "" if not rr.completed else "–" if rr.delta is None else f"{rr.delta:+.2f}"
        if table.layout == "pair":
            cells.append([rr.label, rr.description, (rr.paper.para if rr.paper else None) or "–",
                          rr.params(), rr.params("params_paper"),
                          _fmt(paper.train if paper else None), _fmt(paper.test if paper else None),
                          *ours, delta, rr.status])
        else:
            cells.append([rr.label, rr.description, rr.params(),
                          _fmt(paper.test if paper else None), *ours, delta, rr.status])
    if table.layout == "pair":
        header = ["#", "model", "Para (paper)", "params (ours)", "params (paper conv.)",
                  "train % (paper)", "test % (paper)", "train % (ours)", "train % eval (ours)",
                  "test % (ours)", "Δ test", "runs"]
    else:
        header = ["#", "model", "params (ours)", "test % (paper)", "train % (ours)",
                  "train % eval (ours)", "test % (ours)", "Δ test", "runs"]
    return _md_table(header, cells)


def _title(table: Table) -> str:
    if table.layout == "sentence":
        source = "DCNN (Kalchbrenner et al. 2014)"
    else:
        source = "Table 2 of Huo & Liu (DIN) + DIIN"
    if not any(rr.comparable for rr in table.rows):
        source += f"; the paper's accuracies are not for {table.data}, so none are shown"
    return f"## {table.data.upper()} — {source}"


def _display(folder: str) -> str:
    """A folder relative to the cwd when it is below it, else as given (W&B URLs too)."""
    path = Path(folder)
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else folder


def _job_config(job: Job) -> str:
    parts = [job.model, job.dim is not None and f"d={job.dim}",
             job.seed is not None and f"seed={job.seed}", job.data]
    return " ".join(str(p) for p in parts if p) or "?"


def render_markdown(tables: Sequence[Table], jobs: Sequence[Job], sources: Sequence[str]) -> str:
    """The whole report as Markdown: one table per data set, then the jobs that did not finish."""
    statuses: dict[str, int] = {}
    for job in jobs:
        statuses[job.status] = statuses.get(job.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items(), key=lambda kv: -kv[1]))
    out = ["# Results report", "",
           f"{len(jobs)} jobs from {', '.join(f'`{s}`' for s in sources)}: {summary}.", "",
           "Ours: accuracy of the checkpoint with the best validation accuracy (train = running "
           "training accuracy of that epoch, dropout on; train eval = that checkpoint on the "
           "training split in eval mode, what the model fits), mean ± sample std (n = "
           "completed runs); Δ test = ours − "
           "paper, in points. Params: trainable, without word embeddings; *paper conv.*: the "
           "same count under the convention that reproduces the paper's Para (DIN: GRUs counted "
           "with two weight blocks). Running jobs are counted in *runs*, not in the means.", ""]
    for table in tables:
        out += [_title(table), "", _table_markdown(table), ""]
    notes = [f"`{_display(j.folder)}`: {j.note}" for j in jobs if j.note]
    notes += mixed_settings_notes(tables)
    other = [j for j in jobs if j.task not in (None, "train")]
    if other:
        tasks = ", ".join(sorted({str(j.task) for j in other}))
        notes.append(f"{len(other)} job(s) of other tasks ({tasks}) are not in the tables")
    unplaced = [j for j in jobs if j.task in (None, "train") and not (j.data or j.model)]
    if unplaced:
        notes.append(f"{len(unplaced)} job(s) could not be placed in a table (no results.json "
                     "and no .hydra/ config); listed below")
    if notes:
        out += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    unfinished = [j for j in jobs if j.status != COMPLETED]
    out += ["## Jobs that did not complete", ""]
    if unfinished:
        out.append(_md_table(
            ["folder", "status", "config", "row", "error"],
            [[f"`{_display(j.folder)}`", j.status,
              _job_config(j),
              j.row.label if j.row else "–", j.error or ""] for j in unfinished]))
    else:
        out.append("None: every job completed.")
    return "\n".join(out) + "\n"


CSV_COLUMNS = (
    "data", "layout", "row", "paper_table", "paper_row", "description", "model", "dim",
    "paper_para", "paper_para_count", "params_trainable", "params_paper_convention",
    "paper_train", "paper_test", "train_mean", "train_std", "train_n", "train_eval_mean",
    "train_eval_std", "val_mean", "test_mean",
    "test_std", "test_n", "delta_test", "status", "completed", "running", "stale", "failed",
    "no_results", "seeds", "folders",
)


def csv_rows(tables: Sequence[Table]) -> list[dict[str, Any]]:
    """One dict per table row (incl. "not run" rows); accuracies in %, blanks as ''."""
    out = []
    for table in tables:
        for rr in table.rows:
            p = rr.paper
            out.append({
                "data": table.data, "layout": table.layout, "row": rr.label,
                "paper_table": p.table if p else "", "paper_row": p.row if p else "",
                "description": p.description if p else "", "model": rr.config.split(" ")[0],
                "dim": (p.dim if p else rr.dim) or "", "paper_para": (p.para if p else "") or "",
                "paper_para_count": (p.para_count if p else "") or "",
                "params_trainable": rr.params(sep="").replace("–", "-").strip("-"),
                "params_paper_convention":
                    rr.params("params_paper", sep="").replace("–", "-").strip("-"),
                "paper_train": (p.train if rr.comparable else "") or "",
                "paper_test": p.test if rr.comparable else "",
                "train_mean": _num(rr.train.mean), "train_std": _num(rr.train.std),
                "train_n": rr.train.n, "train_eval_mean": _num(rr.train_eval.mean),
                "train_eval_std": _num(rr.train_eval.std), "val_mean": _num(rr.val.mean),
                "test_mean": _num(rr.test.mean), "test_std": _num(rr.test.std),
                "test_n": rr.test.n, "delta_test": _num(rr.delta), "status": rr.status,
                **rr.counts(), "seeds": " ".join(map(str, rr.seeds)),
                "folders": " ".join(_display(j.folder) for j in rr.jobs),
            })
    return out


def _num(value: float | None) -> str | float:
    return "" if value is None else round(value, 4)


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())


# --- plot ------------------------------------------------------------------------------------
def plot_tables(tables: Sequence[Table], path: Path) -> None:
    """Test accuracy against parameters (log x): our means ± std and the paper's points.

    A dotted line joins a paper point to ours for the same row, so the parameter gap (true vs
    printed counts) and the accuracy gap read at a glance.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from entailment_lab.explain import save_figures

    fig, axes = plt.subplots(len(tables), 1, figsize=(9, 5.4 * len(tables)), squeeze=False,
                             layout="constrained")
    labels = [(ax, _plot_table(ax, table)) for ax, table in zip(axes[:, 0], tables, strict=True)]
    fig.canvas.draw()  # labels are placed once the layout is final
    fig.set_layout_engine("none")  # keep the axes where the labels were fitted
    for ax, points in labels:
        _place_labels(ax, points)
    save_figures({path.stem: fig}, path.parent, dpi=130)


_OURS, _PAPER, _OTHER = "#1f77b4", "#d62728", "#8c8c8c"
_Label = tuple[float, float, str, str, float]  # x, y, text, colour, error bar half-height


def _count_label(value: float, _pos: Any = None) -> str:
    """Tick labels 200k, 1M, 1.5M instead of 2 × 10^5."""
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value / 1e3:g}k" if value >= 1e3 else f"{value:g}"


def _plot_table(ax: Any, table: Table) -> list[_Label]:
    """Draw one table's points; return the labels (x, y, text, colour) to place later."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    labels: list[_Label] = []
    ys: list[float] = []  # everything that must be visible, error bars included
    legend = {}
    for rr in table.rows:
        p = rr.paper if rr.comparable else None
        ours_x = [j.params for j in rr.completed if j.params and j.test is not None]
        has_ours = bool(ours_x) and rr.test.n > 0
        if p is not None and p.para_count:
            color = _PAPER if p.implemented else _OTHER
            ax.scatter(p.para_count, p.test, marker="o", s=36, zorder=3, color=color,
                       facecolors=color if p.implemented else "none")
            labels.append((p.para_count, p.test, p.label, color, 0.0))
            ys.append(p.test)
            legend["paper, implemented here" if p.implemented else "paper, other systems"] = (
                Line2D([], [], ls="", marker="o", color=color,
                       markerfacecolor=color if p.implemented else "none"))
        elif p is not None and has_ours:  # the paper gives no parameter count (DCNN)
            ax.axhline(p.test, color=_PAPER, ls="--", lw=1)
            ax.annotate(f"paper ({p.label}): {p.test:.1f}", (0.01, p.test), color=_PAPER,
                        xycoords=("axes fraction", "data"), va="bottom", fontsize=8)
            ys.append(p.test)
            legend["paper (no parameter count)"] = Line2D([], [], ls="--", color=_PAPER)
        if not has_ours:
            continue
        x, mean, std = statistics.median(ours_x), rr.test.mean, rr.test.std or 0.0
        ax.errorbar(x, mean, yerr=std, fmt="s", ms=6, capsize=3, color=_OURS, zorder=4)
        labels.append((x, mean, rr.label if rr.paper else rr.config, _OURS, std))
        ys += [mean - std, mean + std]
        legend["ours (mean ± std over seeds)"] = Line2D([], [], ls="", marker="s", color=_OURS)
        if p is not None and p.para_count:
            ax.plot([p.para_count, x], [p.test, mean], ls=":", lw=1, color="#555555", zorder=2)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(_count_label))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("parameters without word embeddings (log scale)")
    ax.set_ylabel(f"{table.data.upper()} test accuracy (%)")
    ax.set_title(_title(table).removeprefix("## "), fontsize=10, wrap=True)
    ax.grid(True, which="major", alpha=0.3)
    if not labels:
        ax.text(0.5, 0.5, "no completed runs with a test accuracy yet", ha="center",
                transform=ax.transAxes, color=_OTHER)
        return labels
    xs = [pt[0] for pt in labels]
    ax.set_xlim(min(xs) / 1.8, max(xs) * 1.8)
    pad = max(2.0, 0.08 * (max(ys) - min(ys)))
    ax.set_ylim(max(0.0, min(ys) - pad), min(100.0, max(ys) + pad))
    ax.legend(legend.values(), legend.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.13),
              ncol=len(legend), fontsize=8, frameon=False)  # outside: never hides a point
    return labels


def _place_labels(ax: Any, points: Sequence[_Label]) -> None:
    """Put each label at the nearest spot around its point that hides no other label or marker.

    Candidates go outwards in rings; far ones get a leader line. In a crowd the spot with the
    least overlap wins, so a label is never dropped.
    """
    from matplotlib.text import Text

    renderer = ax.figure.canvas.get_renderer()
    taken: list[tuple[float, float, float, float]] = []
    for x, y, _, _, err in points:  # markers and error bars are obstacles too
        cx, cy = ax.transData.transform((x, y))
        taken.append((cx - 6, cy - 6, cx + 6, cy + 6))
        if err:
            (_, low), (_, high) = ax.transData.transform([(x, y - err), (x, y + err)])
            taken.append((cx - 4, low, cx + 4, high))
    frame = ax.get_window_extent(renderer)
    directions = [(1, 0.2), (-1, 0.2), (1, -1), (-1, -1), (0, 1.2), (0, -1.4), (1, 1), (-1, 1)]
    for x, y, text, color, _ in sorted(points, key=lambda p: (p[0], p[1])):
        best: tuple[float, tuple[float, float], str] | None = None
        for radius in (6, 14, 22, 32):
            for dx, dy in directions:
                offset = (dx * radius, dy * radius)
                ha = "left" if dx > 0 else "right" if dx < 0 else "center"
                probe = ax.annotate(text, (x, y), xytext=offset, textcoords="offset points",
                                    fontsize=8, ha=ha, va="center")
                probe.update_positions(renderer)
                box = Text.get_window_extent(probe, renderer)  # the text only, no leader
                probe.remove()
                rect = (box.x0 - 1, box.y0 - 1, box.x1 + 1, box.y1 + 1)
                outside = (box.x0 < frame.x0 or box.x1 > frame.x1 or box.y0 < frame.y0
                           or box.y1 > frame.y1)
                cost = 1e9 * outside + sum(_overlap(rect, t) for t in taken) + radius / 100
                if best is None or cost < best[0]:
                    best = (cost, offset, ha)
            if best is not None and best[0] < 1:
                break
        assert best is not None
        _, offset, ha = best
        far = abs(offset[0]) > 6 or abs(offset[1]) > 8
        ann = ax.annotate(text, (x, y), xytext=offset, textcoords="offset points", fontsize=8,
                          color=color, ha=ha, va="center",
                          arrowprops={"arrowstyle": "-", "color": color, "lw": 0.7,
                                      "shrinkA": 0, "shrinkB": 3} if far else None)
        ann.update_positions(renderer)
        box = Text.get_window_extent(ann, renderer)
        taken.append((box.x0 - 1, box.y0 - 1, box.x1 + 1, box.y1 + 1))


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Overlapping area of two (x0, y0, x1, y1) rectangles."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


# --- Weights & Biases ------------------------------------------------------------------------
def check_wandb_reachable(timeout: float = 3.0) -> None:
    """Fail in seconds, with one line, when the W&B API cannot be reached (never hang)."""
    mode = os.environ.get("WANDB_MODE", "")
    if mode in ("offline", "disabled", "dryrun"):
        raise UserError(f"--wandb needs the W&B API but WANDB_MODE={mode}; unset WANDB_MODE, or "
                        "report from the local job folders (python src/report.py multirun/...)")
    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    host = url.hostname or "api.wandb.ai"
    port = url.port or (80 if url.scheme == "http" else 443)
    outcome: list[BaseException | None] = []

    def connect() -> None:  # in a thread: name resolution ignores socket timeouts
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as err:
            outcome.append(err)

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    if not outcome or outcome[0] is not None:
        reason = f": {outcome[0]}" if outcome else ""
        raise UserError(f"cannot reach the W&B API at {host}:{port} within {timeout:g} s"
                        f"{reason}; check the network, or report from the local job folders")


def _lookup_config(config: dict[str, Any], key: str) -> Any:
    """A config value whether W&B stored it nested (``model: {name}``), flat (``model.name``)
    or in the raw API form (``{"value": ..., "desc": ...}``)."""
    def unwrap(value: Any) -> Any:
        raw = isinstance(value, dict) and "value" in value and set(value) <= {"value", "desc"}
        return value["value"] if raw else value

    node: Any = config
    for part in key.split("."):
        node = unwrap(node)
        if not isinstance(node, dict) or part not in node:
            node = config.get(key, config.get(key.replace(".", "/")))
            break
        node = node[part]
    return unwrap(node)


_WANDB_STATES = {"finished": COMPLETED, "running": RUNNING, "pending": RUNNING,
                 "crashed": FAILED, "failed": FAILED, "killed": FAILED, "preempted": FAILED}


def jobs_from_wandb_runs(runs: Iterable[Any], project: str) -> list[Job]:
    """Turn W&B API runs (``config``, ``summary``, ``state``, ``tags``) into report jobs."""
    jobs = []
    for run in runs:
        config = dict(run.config or {})
        summary = dict(getattr(run.summary, "_json_dict", None) or run.summary or {})
        state = str(getattr(run, "state", "unknown"))
        status = _WANDB_STATES.get(state, state)
        job = Job(
            folder=getattr(run, "url", None) or f"wandb:{project}/{run.id}", status=status,
            task=_lookup_config(config, "task_name") or "train",
            model=_lookup_config(config, "model.name"), dim=_lookup_config(config, "dim"),
            seed=_lookup_config(config, "seed"), data=_lookup_config(config, "data.name"),
            tags=list(getattr(run, "tags", None) or _lookup_config(config, "tags") or []),
            params=summary.get("params/trainable") or config.get("params/trainable"),
            params_paper=summary.get("params/paper_convention")
            or config.get("params/paper_convention"),
            train=_percent(summary.get("train/acc_at_best")),
            train_eval=_percent(summary.get("train/acc_eval")),
            val=_percent(summary.get("val/acc_best")), test=_percent(summary.get("test/acc")),
            error=f"W&B state: {state}" if status == FAILED else None, wandb_id=run.id,
        )
        job.row, job.note = match_row(job)
        jobs.append(job)
    return jobs


def load_wandb_jobs(project: str, group: str | None) -> list[Job]:
    """The runs of ``ENTITY/PROJECT`` (one ``group``, e.g. a sweep folder name) as jobs."""
    if project.count("/") != 1:
        raise UserError(f"--wandb wants ENTITY/PROJECT, got {project!r}")
    check_wandb_reachable()
    try:
        import wandb

        api = wandb.Api(timeout=30)
        eager = {"lazy": False} if "lazy" in inspect.signature(api.runs).parameters else {}
        runs = list(api.runs(project, filters={"group": group} if group else {}, **eager))
    except Exception as err:  # auth, unknown project, HTTP errors: all one line
        raise UserError(f"W&B: cannot list the runs of {project}: "
                        f"{_first_line(str(err)) or type(err).__name__}") from err
    if not runs:
        raise UserError(f"W&B: no runs in {project}" + (f" with group {group!r}" if group else ""))
    return jobs_from_wandb_runs(runs, project)


# --- the whole report ------------------------------------------------------------------------
@dataclass
class Report:
    """What ``make_report`` produced: the Markdown text and the files written."""

    markdown: str
    files: list[Path]
    tables: list[Table]
    jobs: list[Job]


def make_report(paths: Sequence[str | os.PathLike], out: str | os.PathLike | None = None,
                wandb_project: str | None = None, wandb_group: str | None = None,
                plot: bool = True) -> Report:
    """Collect jobs, build the tables, write ``report.md/.csv/.png`` into ``out``.

    ``out`` defaults to the first path (its folder, if it is a ``results.json``), else the cwd.
    """
    if not paths and not wandb_project:
        raise UserError("give at least one folder of runs (e.g. multirun/DATE/TIME-ID) or --wandb")
    if wandb_group and not wandb_project:
        raise UserError("--group needs --wandb ENTITY/PROJECT")
    jobs = collect_jobs(paths) if paths else []
    if wandb_project:
        local = {j.wandb_id for j in jobs if j.wandb_id}
        jobs += [j for j in load_wandb_jobs(wandb_project, wandb_group) if j.wandb_id not in local]
    tables = build_tables(jobs)
    sources = [str(p) for p in paths]
    if wandb_project:
        sources.append(f"wandb:{wandb_project}" + (f" group {wandb_group}" if wandb_group else ""))
    markdown = render_markdown(tables, jobs, sources)

    if out is None:
        first = Path(paths[0]) if paths else Path.cwd()
        out = first if first.is_dir() else first.parent
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [out_dir / "report.md", out_dir / "report.csv"]
    write_text_atomic(files[0], markdown)
    write_csv(files[1], csv_rows(tables))
    if plot and tables:
        files.append(out_dir / "report.png")
        plot_tables(tables, files[-1])
    return Report(markdown, files, tables, jobs)
