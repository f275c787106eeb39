"""Validation curves and learning curves of finished runs: views over the report's rows.

The runs are read as the report reads them (``report.collect``) and grouped into the report's
rows (``report.rows``: data set, model, size, training pairs, hypothesis-only, settings), so a
panel or a line here is a row of the results tables.

* Validation curves: validation accuracy per epoch of every run (``history`` in
  ``results.json``), one panel a row, each run labelled by its seed, epochs counted as the
  records count them (from 0), the epoch of the best checkpoint marked. They are the evidence
  for an epoch budget: a curve still rising when the budget ends says the budget is too short.
* Learning curve: test accuracy against the number of training pairs, mean ± std over seeds
  (``rows.stat``), one line per setting run on smaller training sets (``data.train_size``;
  ``rows.learning_curves``), its whole-set row at the pairs that row's runs recorded.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from entailment_lab.errors import UserError
from entailment_lab.files import save_figures
from entailment_lab.report.collect import find_job_folders, load_job
from entailment_lab.report.job import COMPLETED, Job
from entailment_lab.report.rows import Row, group_rows, learning_curves
from entailment_lab.results import write_text_atomic

CELL = "test % (mean ± std, n)"  # the learning-curve table's cell: ``Stat.cell``


def load_rows(paths: Iterable[str | Path]) -> list[Row]:
    """The completed training runs below ``paths``, grouped into the report's rows.

    Job folders are found as the report finds them (``find_job_folders``: a missing path is a
    ``UserError``; checkpoint and logger folders are not searched); a folder found twice counts
    once.
    """
    folders = dict.fromkeys(f for path in paths for f in find_job_folders(path))
    jobs = (load_job(folder) for folder in folders)
    return group_rows(j for j in jobs if j.status == COMPLETED and j.task == "train")


def _order(row: Row) -> tuple[Any, ...]:
    """Panels by data set, model and size; a model's smaller training sets before its whole
    set."""
    key = row.key
    return (str(key.data), str(key.model), key.dim or 0, key.hypothesis_only,
            key.train_size is None, key.train_size or 0, key.settings, key.early_stopping)


def run_labels(jobs: Sequence[Job]) -> list[str]:
    """A legend entry per run: ``seed N``; where runs of one row share a seed (the same
    command run twice), the run's folder too."""
    seeds = Counter(j.seed for j in jobs)
    return [f"seed {j.seed}" + (f" ({'/'.join(Path(j.folder).parts[-2:])})"
                                if seeds[j.seed] > 1 else "") for j in jobs]


def plot_validation_curves(rows: Sequence[Row], out: Path) -> Path:
    """One panel per row: val/acc per epoch (from 0, as ``history`` records it) for each run,
    labelled by its seed, its best epoch marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = sorted((r for r in rows if any(h.get("val/acc") is not None
                                            for j in r.jobs for h in j.history)), key=_order)
    if not panels:
        raise UserError("no run has a per-epoch history (results.json 'history')")
    cols = min(4, len(panels))
    n_rows = -(-len(panels) // cols)
    # At least 7 in wide: the suptitle below is wider than one or two 4-inch panels.
    fig, axes = plt.subplots(n_rows, cols, figsize=(max(4 * cols, 7), 3 * n_rows),
                             squeeze=False, layout="constrained")  # the suptitle's own room
    for ax, row in zip(axes.flat, panels, strict=False):
        last = 1  # the panel's last epoch: a one-epoch model still gets an axis of epochs
        for job, label in zip(row.jobs, run_labels(row.jobs), strict=True):
            points = [(h["epoch"], 100 * h["val/acc"]) for h in job.history
                      if h.get("epoch") is not None and h.get("val/acc") is not None]
            if not points:
                continue
            epochs, accs = zip(*points, strict=True)
            last = max(last, *epochs)
            line, = ax.plot(epochs, accs, marker=".", lw=1, label=label)
            best = max(points, key=lambda p: p[1])
            ax.plot(*best, "o", color=line.get_color(), mfc="none", ms=9)
        ax.set_title(f"{row.label} — {row.data}", fontsize=9)
        ax.set_xlim(-0.5, last + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch (from 0)")
        ax.set_ylabel("val acc %")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    fig.suptitle("Validation accuracy per epoch (circle: the checkpoint that is tested)")
    return save_figures({"validation_curves": fig}, out, dpi=110)[0]


def _pairs(row: Row) -> int | None:
    """The training pairs a row stands at: the size its runs asked for, else (the whole
    set) the size most of them recorded."""
    if row.train_size is not None:
        return row.train_size
    recorded = Counter(j.train_pairs for j in row.jobs if j.train_pairs is not None)
    return max(recorded, key=recorded.get) if recorded else None


def learning_curve_table(rows: Sequence[Row]) -> pd.DataFrame:
    """Test accuracy (%) mean, std and n per (data, model, train_size): a line per setting
    that ran on smaller training sets, its whole-set row included."""
    points = []
    for curve in learning_curves(rows).values():
        for size, row in curve.items():
            pairs, test = _pairs(row), row.stat("test")
            if pairs is not None and test.n:
                label = row.label if size is None else row.label.replace(f", {size:,} pairs", "")
                points.append({"data": row.data, "model": label, "train_size": pairs,
                               "mean": test.mean, "std": math.nan if test.std is None
                               else test.std, "count": test.n, CELL: test.cell(".2f")})
    columns = ["data", "model", "train_size", "mean", "std", "count", CELL]
    return pd.DataFrame(points, columns=columns).sort_values(["data", "model", "train_size"],
                                                             ignore_index=True)


def plot_learning_curve(rows: Sequence[Row], out: Path) -> Path:
    """Test accuracy against training pairs, one line per setting, ± std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = learning_curve_table(rows)
    if table.empty:
        raise UserError("no setting has completed runs on smaller training sets "
                        "(data.train_size=N)")
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for (data, model), line in table.groupby(["data", "model"]):
        ax.errorbar(line["train_size"], line["mean"], yerr=line["std"].fillna(0), marker="o",
                    capsize=3, label=f"{model} ({data})")
    ax.set_xscale("log")
    ax.minorticks_off()  # only the measured sizes are labelled
    sizes = sorted(table["train_size"].unique())
    ax.set_xticks(sizes, [f"{int(s):,}" for s in sizes])
    ax.set_xlabel("training pairs")
    ax.set_ylabel("test accuracy % (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figures({"learning_curve": fig}, out, dpi=110)[0]


def write_learning_curve_markdown(rows: Sequence[Row], out: Path) -> Path:
    """``learning_curve.md``: a line per setting, a column per training size."""
    wide = learning_curve_table(rows).pivot(index=["data", "model"], columns="train_size",
                                            values=CELL).fillna("not run")
    wide.columns = [f"{int(c):,} pairs" for c in wide.columns]
    path = out / "learning_curve.md"
    write_text_atomic(path, wide.reset_index().to_markdown(index=False) + "\n")
    return path
