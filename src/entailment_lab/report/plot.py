"""The report's figure (``report.png``): test accuracy against parameters, one panel a table.

Our mean ± std over seeds and the paper's point for each row, a dotted line between the two;
each point is labelled with its row beside the marker (ours to the right, the paper's to the
left; labels that would overlap, e.g. rows 18 and 19 at 1.9M, are spread apart vertically once
the layout is final), and the legend sits below the axes so it never hides a point. Rows of
reduced-budget runs are grey, not joined to the paper's point.
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
    import matplotlib.pyplot as plt

    fig = plot_figure(tables)
    try:
        return figure_bytes(fig, "png", dpi)
    finally:
        plt.close(fig)


def plot_figure(tables: Sequence[Table]) -> Any:
    """The Matplotlib figure of ``tables``, labels placed (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(tables), 1, figsize=(9, 5.4 * len(tables)), squeeze=False,
                             layout="constrained")
    labels = [_plot_table(ax, table) for ax, table in zip(axes[:, 0], tables, strict=True)]
    fig.draw_without_rendering()  # the final layout, so label distances are the drawn ones
    for ax, table_labels in zip(axes[:, 0], labels, strict=True):
        _place_labels(ax, table_labels)
    return fig


def _count_label(value: float, _pos: Any = None) -> str:
    """Tick labels 200k, 1M, 1.5M instead of 2 × 10^5."""
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value / 1e3:g}k" if value >= 1e3 else f"{value:g}"


_LABEL_PT = 8  # label font size (points)
_GAP = 1.3 * _LABEL_PT  # vertical distance between the centres of two labels side by side


def _spread(ys: list[float]) -> list[float]:
    """Label centres (sorted ``ys``, points) moved apart by at least ``_GAP``: overlapping
    labels form a cluster centred on their own mean, merged with the next until none overlap."""
    clusters = [[y] for y in ys]  # each: the original ys of its labels

    def start(c: list[float]) -> float:
        return sum(c) / len(c) - _GAP * (len(c) - 1) / 2

    merged = True
    while merged:
        merged = False
        for i in range(len(clusters) - 1):
            first, second = clusters[i], clusters[i + 1]
            if start(first) + _GAP * len(first) > start(second):
                clusters[i:i + 2] = [first + second]
                merged = True
                break
    return [start(c) + _GAP * k for c in clusters for k in range(len(c))]


def _place_labels(ax: Any, labels: list[tuple[float, float, str, str, bool]]) -> None:
    """Row labels beside their markers (ours to the right, the paper's to the left). Labels
    whose horizontal extents overlap are spread vertically around their points (rows 18 and 19
    share 1.9M), with a thin line to the marker when moved."""
    to_points = 72.0 / ax.figure.dpi
    items = []
    for x, y, text, color, right in labels:
        px, py = (v * to_points for v in ax.transData.transform((x, y)))
        width = 0.62 * _LABEL_PT * len(text)
        left = px + 7 if right else px - 7 - width
        items.append({"xy": (x, y), "py": py, "span": (left, left + width), "text": text,
                      "color": color, "right": right})
    groups: list[list[dict[str, Any]]] = []  # connected by overlapping horizontal extents
    for item in sorted(items, key=lambda it: it["span"][0]):
        touching = [g for g in groups if any(it["span"][1] > item["span"][0] and
                                             item["span"][1] > it["span"][0] for it in g)]
        for g in touching:
            groups.remove(g)
        groups.append([item, *(it for g in touching for it in g)])
    for group in groups:
        group.sort(key=lambda it: it["py"])
        for item, ty in zip(group, _spread([it["py"] for it in group]), strict=True):
            moved = abs(ty - item["py"]) > 0.5 * _LABEL_PT
            ax.annotate(item["text"], item["xy"], xytext=(7 if item["right"] else -7,
                                                          ty - item["py"]),
                        textcoords="offset points", fontsize=_LABEL_PT, color=item["color"],
                        ha="left" if item["right"] else "right", va="center",
                        arrowprops={"arrowstyle": "-", "lw": 0.4, "color": item["color"],
                                    "shrinkA": 1, "shrinkB": 3} if moved else None)


def _plot_table(ax: Any, table: Table) -> list[tuple[float, float, str, str, bool]]:
    """Draw one table's points, axes and legend; return its labels (x, y, text, colour, right)
    for ``_place_labels``."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    xs: list[float] = []
    ys: list[float] = []  # everything that must be visible, error bars included
    legend = {}
    labels: list[tuple[float, float, str, str, bool]] = []
    counts = {rr.test.n for rr in table.rows if rr.test.n and not rr.reduced}
    ours_name = ("ours (one run per row)" if counts == {1} else
                 "ours (mean ± std over seeds; n = 1: no bar)" if 1 in counts else
                 "ours (mean ± std over seeds)")
    for rr in table.rows:
        p = rr.paper if rr.comparable else None
        ours_x = [j.params for j in rr.completed if j.params and j.test is not None]
        has_ours = bool(ours_x) and rr.test.n > 0
        if p is not None and p.para_count:
            color = _PAPER if p.implemented else _OTHER
            ax.scatter(p.para_count, p.test, marker="o", s=36, zorder=3, color=color,
                       facecolors=color if p.implemented else "none")
            labels.append((p.para_count, p.test, p.label, color, False))
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
        color = _OTHER if rr.reduced else _OURS
        ax.errorbar(x, mean, yerr=std, fmt="s", ms=6, capsize=3, color=color, zorder=4,
                    markerfacecolor="none" if rr.reduced else color)
        labels.append((x, mean, rr.paper.label if rr.paper else rr.config, color, True))
        xs.append(x)
        ys += [mean - std, mean + std]
        if rr.reduced:
            legend["ours, debug / truncated budget (not compared)"] = Line2D(
                [], [], ls="", marker="s", color=_OTHER, markerfacecolor="none")
        else:
            legend[ours_name] = Line2D([], [], ls="", marker="s", color=_OURS)
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
        return labels
    ax.set_xlim(min(xs) / 1.8, max(xs) * 1.8)
    pad = max(2.0, 0.08 * (max(ys) - min(ys)))
    ax.set_ylim(max(0.0, min(ys) - pad), min(100.0, max(ys) + pad))
    ax.legend(legend.values(), legend.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.13),
              ncol=len(legend), fontsize=8, frameon=False)  # outside: never hides a point
    return labels

