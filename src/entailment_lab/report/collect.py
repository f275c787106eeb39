"""Find job folders and read each one into a ``Job``.

A job folder holds ``results.json`` (written by ``pipeline.train``), or at least Hydra's
``.hydra/`` or a ``train.log``; an empty numbered folder of a sweep is a job that crashed before
writing anything. Nothing is skipped silently: every folder becomes a job with a status.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from entailment_lab.errors import UserError
from entailment_lab.report.breakdowns import from_record
from entailment_lab.report.job import (
    INTERRUPTED,
    MISSING,
    RUNNING,
    STALE,
    Job,
    first_line,
    percent,
)
from entailment_lab.report.match import match_row
from entailment_lab.results import RESULTS_FILE, read_results

_SKIP_DIRS = {"checkpoints", "wandb", "__pycache__", "node_modules", "csv", "tensorboard"}


# Models that read ``dim`` only from a later commit on (69e5660): their records from before say
# ``dim: null`` and ran at the one width the model had then, given here, so that old and new
# records of one setting make one row.
SIZE_BEFORE_DIM = {"decatt": 200, "decatt_intra": 200}


def recorded_dim(record: dict[str, Any]) -> int | None:
    """A record's ``dim``; for a record made before its model read ``dim``, that model's width
    then (``SIZE_BEFORE_DIM``)."""
    dim = record.get("dim")
    return SIZE_BEFORE_DIM.get(record.get("model")) if dim is None else dim


def collect_jobs(paths: Iterable[str | os.PathLike]) -> list[Job]:
    """Every job under ``paths``, each folder once, in path order, matched to its paper row."""
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


def load_job(folder: Path) -> Job:
    """Read one job folder; a job without ``results.json`` is described from ``.hydra/``."""
    data = read_results(folder / RESULTS_FILE)
    status = data.get("status", "unknown")
    if status == "missing":
        job = _job_from_hydra(folder)
        job.error = _last_log_line(folder) or "folder is empty (crashed before writing)"
        job.diagnostics = from_record({"overrides": job.overrides})
        return job
    metrics = data.get("metrics") or {}
    params = data.get("params") or {}
    budget = data.get("budget") or {}
    code = data.get("code") or {}
    job = Job(
        folder=str(folder), status=status, task=data.get("task"), model=data.get("model"),
        inputs=data.get("inputs"), dim=recorded_dim(data), seed=data.get("seed"),
        data=data.get("data"), started=data.get("started"),
        tags=list(data.get("tags") or []), choices=dict(data.get("choices") or {}),
        overrides=list(data.get("overrides") or []), params=params.get("trainable"),
        max_epochs=budget.get("max_epochs"),
        configured_max_epochs=budget.get("configured_max_epochs"),
        early_stopping=data.get("early_stopping", "not recorded"),
        epochs=metrics.get("epochs"), stopped_by=metrics.get("stopped_by"),
        params_paper=params.get("paper_convention"),
        train=percent(metrics.get("train/acc_at_best")), val=percent(metrics.get("val/acc_best")),
        train_eval=percent(metrics.get("train/acc_eval")),
        test=percent(metrics.get("test/acc")), error=first_line(data.get("error")),
        other_test={k.removeprefix("test/"): percent(v) for k, v in metrics.items()
                    if k.startswith("test/") and k not in ("test/acc", "test/loss")
                    and isinstance(v, int | float)},
        wandb_id=data.get("wandb_run_id"), commit=code.get("commit"), dirty=code.get("dirty"),
        numeric_path=data.get("numeric_path"),
        train_pairs=(data.get("data_stats") or {}).get("train/size"),
        history=list(data.get("history") or []),
    )
    # A record without its schema (unreadable): only what its overrides say.
    job.diagnostics = from_record(data if "schema" in data else {"overrides": job.overrides})
    if status == RUNNING and not process_alive(data.get("pid"), data.get("started")):
        job.status = STALE
    if status == INTERRUPTED and data.get("resumed_by"):
        job.error = f"{job.error or INTERRUPTED}; resumed in {data['resumed_by'][-1]}"
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


def process_alive(pid: Any, started: str | None) -> bool:
    """Whether ``pid`` still runs the job: alive, and not a newer process reusing the pid."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        proc_start = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # exists, but its start time cannot be read
        return True
    try:  # a process started after the job wrote its file is a reused pid
        job_start = time.mktime(time.strptime(started or "", "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return True
    return proc_start <= job_start + 2
