"""Validation curves and learning curves from the ``results.json`` files of finished runs.

* Validation curves: validation accuracy per epoch of every run (``history`` in
  ``results.json``), one panel per data set and model, the epoch of the best checkpoint marked.
  They are the evidence for an epoch budget and an early-stopping patience: a curve still
  rising when the budget ends says the budget is too short.
* Learning curve: test accuracy against the number of training pairs (``data.train_size``),
  mean ± std over seeds, one line per model.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from entailment_lab.files import save_figures
from entailment_lab.report import find_job_folders
from entailment_lab.results import RESULTS_FILE, read_results, write_text_atomic


def _label(run: dict[str, Any]) -> str:
    dim = run.get("dim")
    return f"{run.get('model')}" + (f" d={dim}" if dim is not None else "")


def load_runs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per completed training run below ``paths`` (its results.json, flattened).

    Job folders are found as the report finds them (``find_job_folders``: a missing path is a
    ``UserError``; checkpoint and logger folders are not searched).
    """
    rows = []
    for path in paths:
        for folder in find_job_folders(path):
            run = read_results(folder / RESULTS_FILE)
            if run.get("status") != "completed" or run.get("task") != "train":
                continue
            rows.append({
                "folder": str(folder), "data": run.get("data"), "model": _label(run),
                "seed": run.get("seed"),
                "train_size": (run.get("data_stats") or {}).get("train/size"),
                "test_acc": (run.get("metrics") or {}).get("test/acc"),
                "history": run.get("history") or [],
            })
    return pd.DataFrame(rows)


def history_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Per-epoch rows (data, model, train_size, seed, epoch, val/acc, train/acc) of every run."""
    rows = [{"data": r.data, "model": r.model, "train_size": r.train_size, "seed": r.seed,
             "folder": r.folder, **h}
            for r in runs.itertuples() for h in r.history]
    return pd.DataFrame(rows)


def _panel_title(data: str, model: str, train_size: float, sizes: int) -> str:
    """``model — data``, with the training pairs (-1: unknown) when the model ran on several
    sizes."""
    pairs = f", {int(train_size):,} pairs" if sizes > 1 and train_size >= 0 else ""
    return f"{model} — {data}{pairs}"


def plot_validation_curves(runs: pd.DataFrame, out: Path) -> Path:
    """One panel per (data, model) and, for a learning curve, per training size: val/acc per
    epoch for each run, its best epoch marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = history_frame(runs)
    if history.empty or "val/acc" not in history:
        raise ValueError("no run has a per-epoch history (results.json 'history')")
    history["train_size"] = history["train_size"].fillna(-1)  # unknown size: one panel
    panels = sorted(history.groupby(["data", "model", "train_size"]).groups)
    sizes = history.groupby(["data", "model"])["train_size"].nunique()
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    # At least 7 in wide: the suptitle below is wider than one or two 4-inch panels.
    fig, axes = plt.subplots(rows, cols, figsize=(max(4 * cols, 7), 3 * rows), squeeze=False,
                             layout="constrained")  # leaves the suptitle its own room
    for ax, (data, model, size) in zip(axes.flat, panels, strict=False):
        panel = history[(history["data"] == data) & (history["model"] == model)
                        & (history["train_size"] == size)]
        for (seed, _folder), run in panel.groupby(["seed", "folder"]):
            run = run.dropna(subset=["val/acc"])
            line, = ax.plot(run["epoch"] + 1, 100 * run["val/acc"], marker=".", lw=1,
                            label=f"seed {seed}")
            best = run.loc[run["val/acc"].idxmax()]
            ax.plot(best["epoch"] + 1, 100 * best["val/acc"], "o", color=line.get_color(),
                    mfc="none", ms=9)
        ax.set_title(_panel_title(data, model, size, sizes[(data, model)]), fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylabel("val acc %")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    fig.suptitle("Validation accuracy per epoch (circle: the checkpoint that is tested)")
    return save_figures({"validation_curves": fig}, out, dpi=110)[0]


def learning_curve_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Test accuracy (%) mean, std and n per (data, model, train_size)."""
    runs = runs.dropna(subset=["train_size", "test_acc"])
    grouped = runs.assign(test=100 * runs["test_acc"]).groupby(["data", "model", "train_size"])
    return grouped["test"].agg(["mean", "std", "count"]).reset_index()


def plot_learning_curve(runs: pd.DataFrame, out: Path) -> Path:
    """Test accuracy against training pairs, one line per (data, model), ± std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = learning_curve_table(runs)
    if table.empty:
        raise ValueError("no completed run with a test accuracy")
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


def write_learning_curve_markdown(runs: pd.DataFrame, out: Path) -> Path:
    table = learning_curve_table(runs)
    table["test % (mean ± std, n)"] = [
        f"{m:.2f} ± {s:.2f} ({n})" if n > 1 else f"{m:.2f} (1)"
        for m, s, n in zip(table["mean"], table["std"], table["count"], strict=True)]
    wide = table.pivot(index=["data", "model"], columns="train_size",
                       values="test % (mean ± std, n)").fillna("not run")
    wide.columns = [f"{int(c):,} pairs" for c in wide.columns]
    path = out / "learning_curve.md"
    write_text_atomic(path, wide.reset_index().to_markdown(index=False) + "\n")
    return path
