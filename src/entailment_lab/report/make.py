"""Make the results report: collect jobs, build the tables, write report.md / .csv / .png,
and (``copy_results``) the per-run records beside them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entailment_lab.errors import UserError
from entailment_lab.files import write_bytes_atomic, write_text_atomic
from entailment_lab.report.collect import collect_jobs, find_job_folders
from entailment_lab.report.job import Job
from entailment_lab.report.render import csv_rows, render_csv, render_markdown
from entailment_lab.report.tables import Table, build_tables
from entailment_lab.report.wandb_runs import (
    load_wandb_jobs,
)
from entailment_lab.results import RESULTS_FILE, read_results, results_json

RUNS_DIR = "runs"  # make_report(copy_results=True) copies each job's results.json below it


def results_copies(paths: Sequence[str | os.PathLike], runs_dir: Path) -> dict[Path, bytes]:
    """``{path below runs_dir: bytes}`` of every job's ``results.json`` under ``paths``.

    A job folder J found under PATH goes to ``PATH's name / J relative to PATH`` (a PATH that
    is itself a job folder: ``its name``), with its paths made relative (``_portable``).
    Refused, before anything is written: a ``runs_dir`` inside a PATH (the copies would be
    read as more jobs next time) and two jobs that would land on the same copy.
    """
    copies: dict[Path, bytes] = {}
    for path in paths:
        root = Path(path).resolve()
        if root.is_file():  # a results.json given directly
            root = root.parent
        if runs_dir.resolve().is_relative_to(root):
            raise UserError(f"--copy-results: the copies would go to {runs_dir}, inside the run "
                            f"folder {path}, and be read as more runs; give --out outside it")
        for folder in find_job_folders(path):
            source = folder / RESULTS_FILE
            if not source.is_file():
                continue  # a job that wrote nothing (the report shows it) has nothing to copy
            target = Path(root.name) / folder.relative_to(root) / RESULTS_FILE
            if target in copies:
                raise UserError(f"--copy-results: two jobs would be copied to "
                                f"{runs_dir / target}; give run folders with different names")
            copies[target] = _portable(source)
    return copies


def checkout_of(folder: Path) -> Path | None:
    """The git checkout (a folder holding ``.git``, a worktree's file included) that holds
    ``folder``: the repository root its run was started from; ``None`` outside any."""
    for parent in [folder.resolve(), *folder.resolve().parents]:
        if (parent / ".git").exists():
            return parent
    return None


def _portable(results: Path) -> bytes:
    """A results file as it may leave this machine: every path below the checkout the run
    was started from (``best_checkpoint``, a ``resume`` command), or below the working
    directory, made relative to it, so no copy names this machine's folders (a run published
    from another checkout, e.g. a clean worktree, too)."""
    data = read_results(results)
    if "schema" not in data:  # unreadable: copied as it is, the report says so
        return results.read_bytes()
    roots = {Path.cwd().resolve(), checkout_of(results.parent)} - {None}
    # the longest first: a checkout inside the working directory keeps its own prefix
    prefixes = sorted((f"{root}{os.sep}" for root in roots), key=len, reverse=True)

    def relative(value: Any) -> Any:
        if isinstance(value, str):
            for prefix in prefixes:
                value = value.replace(prefix, "")
            return value
        if isinstance(value, list):
            return [relative(v) for v in value]
        if isinstance(value, dict):
            return {k: relative(v) for k, v in value.items()}
        return value

    return results_json(relative(data)).encode("utf-8")


def replace_tree(folder: Path, files: dict[Path, bytes]) -> None:
    """Make ``folder`` hold exactly ``files`` (relative path -> bytes), swapped in whole.

    The new tree is written beside it and renamed into place, so a reader sees the old copies
    or the new ones, never a mix, and copies of runs no longer reported do not linger.
    """
    staging = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    retired = folder.with_name(f".{folder.name}.{os.getpid()}.old")
    try:
        for relative, data in files.items():
            write_bytes_atomic(staging / relative, data)
        staging.mkdir(parents=True, exist_ok=True)
        if folder.exists():
            folder.rename(retired)
        try:
            staging.rename(folder)
        except BaseException:
            if retired.exists():  # put the old copies back
                retired.rename(folder)
            raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
        if retired.exists() and folder.exists():  # never the only copy left
            shutil.rmtree(retired)


@dataclass
class Report:
    """What ``make_report`` produced: the Markdown text and the files written."""

    markdown: str
    files: list[Path]
    tables: list[Table]
    jobs: list[Job]


def make_report(paths: Sequence[str | os.PathLike], out: str | os.PathLike | None = None,
                wandb_project: str | None = None, wandb_group: str | None = None,
                plot: bool = True, compare_reduced: bool = False,
                copy_results: bool = False) -> Report:
    """Collect jobs, build the tables, write ``report.md/.csv/.png`` into ``out``.

    ``out`` defaults to the first path (its folder, if it is a ``results.json``), else the cwd.
    Everything is rendered before the first file is written. Jobs with a debug preset or a
    truncated budget are marked and kept out of the paper comparison unless ``compare_reduced``.
    With ``copy_results`` every job's ``results.json`` is also copied to
    ``out/runs/<PATH's name>/<job folder below PATH>/`` (``results_copies``), so that
    ``make_report([out/runs])`` and ``src/curves.py`` rebuild the same tables and curves from
    ``out`` alone, after the run folders are gone.
    """
    if not paths and not wandb_project:
        raise UserError("give at least one folder of runs (e.g. multirun/DATE/TIME-ID) or --wandb")
    if wandb_group and not wandb_project:
        raise UserError("--group needs --wandb ENTITY/PROJECT")
    jobs = collect_jobs(paths) if paths else []
    if wandb_project:
        local = {j.wandb_id for j in jobs if j.wandb_id}
        jobs += [j for j in load_wandb_jobs(wandb_project, wandb_group) if j.wandb_id not in local]
    tables = build_tables(jobs, compare_reduced=compare_reduced)
    sources = [str(p) for p in paths]
    if wandb_project:
        sources.append(f"wandb:{wandb_project}" + (f" group {wandb_group}" if wandb_group else ""))
    outputs: dict[str, str | bytes] = {"report.md": render_markdown(tables, jobs, sources),
                                       "report.csv": render_csv(csv_rows(tables))}
    if plot and tables:
        from entailment_lab.report.plot import plot_png  # Matplotlib only when drawing

        outputs["report.png"] = plot_png(tables)

    if out is None:
        first = Path(paths[0]) if paths else Path.cwd()
        out = first if first.is_dir() else first.parent
    out_dir = Path(out)
    files = [out_dir / name for name in outputs]
    if copy_results:  # read and checked before anything is written
        copies = results_copies(paths, out_dir / RUNS_DIR)
        replace_tree(out_dir / RUNS_DIR, copies)
        files.append(out_dir / RUNS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, content in outputs.items():
        if isinstance(content, str):
            write_text_atomic(out_dir / name, content)
        else:
            write_bytes_atomic(out_dir / name, content)
    return Report(str(outputs["report.md"]), files, tables, jobs)
