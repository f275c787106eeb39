"""The results report: finished jobs next to the published numbers (``src/report.py``).

Reads every job under the given folders (sweeps, single runs, or parents of them; optionally
W&B runs), matches each job to the paper row it reproduces, averages over seeds and writes
``report.md`` / ``report.csv`` / ``report.png``. Nothing is dropped silently: rows that were not
run, jobs still running, crashed or failed are all shown, so a partial sweep reads as partial.

One module a job: ``job`` (the record types), ``collect`` (job folders), ``wandb_runs`` (W&B),
``match`` (paper rows), ``rows`` (what a row is: the settings that split rows, the one seed
aggregation, the flags), ``breakdowns`` (per-class / overlap / genre accuracies), ``tables``
(a paper row's line), ``render`` (Markdown, CSV), ``plot`` (PNG), ``make`` (the whole report,
and the per-run records beside it); views over the rows elsewhere: ``leaderboard`` (the
published tables), ``dashboard`` (W&B), ``entailment_lab.curves``.
"""

from entailment_lab.report.collect import collect_jobs, find_job_folders, load_job
from entailment_lab.report.job import COMPLETED, FAILED, MISSING, RUNNING, STALE, Job
from entailment_lab.report.make import RUNS_DIR, Report, make_report, replace_tree, results_copies
from entailment_lab.report.match import declared_row, match_row, reduced_budget, row_by_config
from entailment_lab.report.render import CSV_COLUMNS, csv_rows, render_csv, render_markdown
from entailment_lab.report.rows import Row, RowKey, Stat, group_rows, row_key, stat
from entailment_lab.report.tables import RowResult, Table, build_tables, layout_of
from entailment_lab.report.wandb_runs import (
    check_wandb_reachable,
    jobs_from_wandb_runs,
    load_wandb_jobs,
)

__all__ = [
    "COMPLETED", "CSV_COLUMNS", "FAILED", "MISSING", "RUNNING", "STALE", "Job", "RUNS_DIR",
    "Report",
    "Row", "RowKey", "RowResult", "Stat", "Table", "build_tables", "check_wandb_reachable",
    "collect_jobs", "csv_rows", "declared_row", "find_job_folders", "group_rows",
    "jobs_from_wandb_runs", "layout_of", "load_job", "load_wandb_jobs", "make_report",
    "match_row", "reduced_budget", "replace_tree", "results_copies", "render_csv",
    "render_markdown", "row_by_config", "row_key", "stat",
]
