"""The results report: finished jobs next to the published numbers (``src/report.py``).

Reads every job under the given folders (sweeps, single runs, or parents of them; optionally
W&B runs), matches each job to the paper row it reproduces, averages over seeds and writes
``report.md`` / ``report.csv`` / ``report.png``. Nothing is dropped silently: rows that were not
run, jobs still running, crashed or failed are all shown, so a partial sweep reads as partial.

One module a job: ``collect`` (job folders), ``wandb_runs`` (W&B), ``match`` (paper rows),
``tables`` and ``aggregate`` (rows, seed statistics), ``render`` (Markdown, CSV), ``plot`` (PNG).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from entailment_lab.errors import UserError
from entailment_lab.files import write_bytes_atomic, write_text_atomic
from entailment_lab.report.aggregate import Stat, mixed_settings_notes, settings_of
from entailment_lab.report.collect import collect_jobs, find_job_folders, load_job
from entailment_lab.report.job import COMPLETED, FAILED, MISSING, RUNNING, STALE, Job
from entailment_lab.report.match import declared_row, match_row, reduced_budget, row_by_config
from entailment_lab.report.render import CSV_COLUMNS, csv_rows, render_csv, render_markdown
from entailment_lab.report.tables import RowResult, Table, build_tables, layout_of
from entailment_lab.report.wandb_runs import (
    check_wandb_reachable,
    jobs_from_wandb_runs,
    load_wandb_jobs,
)

__all__ = [
    "COMPLETED", "CSV_COLUMNS", "FAILED", "MISSING", "RUNNING", "STALE", "Job", "Report",
    "RowResult", "Stat", "Table", "build_tables", "check_wandb_reachable", "collect_jobs",
    "csv_rows", "declared_row", "find_job_folders", "jobs_from_wandb_runs", "layout_of",
    "load_job", "load_wandb_jobs", "make_report", "match_row", "mixed_settings_notes",
    "reduced_budget",
    "render_csv", "render_markdown", "row_by_config", "settings_of",
]


@dataclass
class Report:
    """What ``make_report`` produced: the Markdown text and the files written."""

    markdown: str
    files: list[Path]
    tables: list[Table]
    jobs: list[Job]


def make_report(paths: Sequence[str | os.PathLike], out: str | os.PathLike | None = None,
                wandb_project: str | None = None, wandb_group: str | None = None,
                plot: bool = True, compare_reduced: bool = False) -> Report:
    """Collect jobs, build the tables, write ``report.md/.csv/.png`` into ``out``.

    ``out`` defaults to the first path (its folder, if it is a ``results.json``), else the cwd.
    Everything is rendered before the first file is written. Jobs with a debug preset or a
    truncated budget are marked and kept out of the paper comparison unless ``compare_reduced``.
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
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, content in outputs.items():
        if isinstance(content, str):
            write_text_atomic(out_dir / name, content)
        else:
            write_bytes_atomic(out_dir / name, content)
    return Report(str(outputs["report.md"]), [out_dir / name for name in outputs], tables, jobs)
