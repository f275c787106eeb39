"""The report's figure (``report.png``): test accuracy against parameters, one panel a table.

Our mean ± std over seeds and the paper's point for each row, a dotted line between the two;
each point is labelled with its row beside the marker (ours to the right, the paper's to the
left), and the legend sits below the axes so it never hides a point.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from entailment_lab.files import figure_bytes
from entailment_lab.report.render import title
from entailment_lab.report.tables import Table

_OURS, _PAPER, _OTHER = "#1f77b4", "#d62728", "#8c8c8c"


def plot_png(tables: Sequence[Table], dpi: float = 130) -> bytes:
    """The figure of ``tables`` rendered as PNG bytes (the caller writes them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(tables), 1, figsize=(9, 5.4 * len(tables)), squeeze=False,
                             layout="constrained")
    try:
        for ax, table in zip(axes[:, 0], tables, strict=True):
            _plot_table(ax, table)
        return figure_bytes(fig, "png", dpi)
    finally:
        plt.close(fig)


def _count_label(value: float, _pos: Any = None) -> str:
    """Tick labels 200k, 1M, 1.5M instead of 2 × 10^5."""
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value / 1e3:g}k" if value >= 1e3 else f"{value:g}"


def _label(ax: Any, x: float, y: float, text: str, color: str, right: bool) -> None:
    """A row label beside its marker: ours to the right, the paper's to the left."""
    ax.annotate(text, (x, y), xytext=(7 if right else -7, 0), textcoords="offset points",
                fontsize=8, color=color, ha="left" if right else "right", va="center")


def _plot_table(ax: Any, table: Table) -> None:
    """Draw one table's points, labels, axes and legend."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    xs: list[float] = []
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
            _label(ax, p.para_count, p.test, p.label, color, right=False)
            xs.append(p.para_count)
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
        _label(ax, x, mean, rr.label if rr.paper else rr.config, _OURS, right=True)
        xs.append(x)
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
    ax.set_title(title(table).removeprefix("## "), fontsize=10, wrap=True)
    ax.grid(True, which="major", alpha=0.3)
    if not xs:
        ax.text(0.5, 0.5, "no completed runs with a test accuracy yet", ha="center",
                transform=ax.transAxes, color=_OTHER)
        return
    ax.set_xlim(min(xs) / 1.8, max(xs) * 1.8)
    pad = max(2.0, 0.08 * (max(ys) - min(ys)))
    ax.set_ylim(max(0.0, min(ys) - pad), min(100.0, max(ys) + pad))
    ax.legend(legend.values(), legend.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.13),
              ncol=len(legend), fontsize=8, frameon=False)  # outside: never hides a point

