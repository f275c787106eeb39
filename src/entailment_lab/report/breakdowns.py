"""The diagnostics of a run beyond its test accuracy, as the report tables show them.

A run's ``results.json`` may hold ``breakdowns``: for each evaluated set (``test``, and e.g.
``test_mismatched`` or an extra test set), the accuracy per gold class (``per_class``), per
word-overlap bucket of the pair (``overlap``) and per genre (``genre``, MultiNLI). Older records
have only ``test_confusion_matrix`` (rows = gold, columns = predicted) and ``labels``: their
per-class accuracy (the recall of each gold class) is read from the matrix, so every record has
per-class figures. Further evaluated sets also leave ``metrics["<set>/acc"]``. A run that read
the hypothesis alone (``data.hypothesis_only=true``) says so by ``"hypothesis_only": true``.

``from_record`` reads them when a job is read (``collect``, ``wandb_runs``); ``breakdown_stats``
gives a table's columns (mean ± std over each row's runs, ``rows.stat``), shared by the
per-sweep report and the published results tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from entailment_lab.report.job import Diagnostics, Job, percent
from entailment_lab.report.rows import HYPOTHESIS_ONLY, Stat, stat

MAIN_SET = "test"
# Metric prefixes that are not further evaluated sets (``train/acc``, ``val/acc``, ``test/acc``).
_SPLITS = frozenset({"train", "val", "validation", MAIN_SET})


def per_class_from_confusion(confusion: Sequence[Sequence[float]], labels: Sequence[str]
                             ) -> dict[str, float | None]:
    """Recall of each gold class (%) from a confusion matrix whose rows are the gold labels."""
    if len(confusion) != len(labels) or any(len(row) != len(labels) for row in confusion):
        return {}
    return {label: 100.0 * row[i] / sum(row) if sum(row) else None
            for i, (label, row) in enumerate(zip(labels, confusion, strict=True))}


def further_sets(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``{set: accuracy %}`` of every ``<set>/acc`` metric but the train, val and test splits."""
    out = {}
    for key, value in metrics.items():
        name, slash, metric = key.rpartition("/")
        if slash and metric == "acc" and name not in _SPLITS and isinstance(value, int | float):
            out[name] = percent(value)
    return out


def from_record(record: Mapping[str, Any]) -> Diagnostics:
    """The diagnostics of one ``results.json`` (as a dict)."""
    sets: dict[str, dict[str, dict[str, float | None]]] = {}
    for name, found in (record.get("breakdowns") or {}).items():
        if not isinstance(found, Mapping):
            continue
        sets[name] = {kind: {group: percent(v.get("acc")) for group, v in groups.items()
                             if isinstance(v, Mapping)}
                      for kind, groups in found.items() if isinstance(groups, Mapping)}
    confusion, labels = record.get("test_confusion_matrix"), record.get("labels")
    if not sets.get(MAIN_SET, {}).get("per_class") and confusion and labels:
        per_class = per_class_from_confusion(confusion, labels)
        if per_class:
            sets.setdefault(MAIN_SET, {})["per_class"] = per_class
    overrides = record.get("overrides") or []
    hypothesis_only = bool(record.get("hypothesis_only")) or \
        f"{HYPOTHESIS_ONLY}=true" in [o.lstrip("+").lower() for o in overrides]
    return Diagnostics(hypothesis_only, {k: v for k, v in sets.items() if any(v.values())},
                       further_sets(record.get("metrics") or {}))


def evaluated_sets(groups: Sequence[Sequence[Job]]) -> list[str]:
    """Every set evaluated beyond ``test`` by a job of ``groups``, in the order first seen."""
    names: dict[str, None] = {}
    for jobs in groups:
        for job in jobs:
            diagnostics = job.diagnostics
            names.update(dict.fromkeys(n for n in diagnostics.sets if n != MAIN_SET))
            names.update(dict.fromkeys(diagnostics.further))
    return list(names)


def breakdown_stats(groups: Sequence[Sequence[Job]], split: str = MAIN_SET,
                    further: bool = True) -> dict[str, list[Stat]]:
    """Column title -> one ``Stat`` per group (mean ± std of its jobs' accuracies, %).

    Columns: the accuracy of each gold class (titled by its label), then of each group of
    every other breakdown of ``split`` (``overlap 0-25%``, ``genre fiction``), then (with
    ``further``) the accuracy of each further evaluated set (``test_mismatched acc``). A
    column appears when some job of some group recorded it; a group that did not gets an
    empty ``Stat`` (``–``)."""
    columns: dict[tuple[str, str], None] = {}
    for jobs in groups:
        for job in jobs:
            for kind, values in job.diagnostics.sets.get(split, {}).items():
                columns.update(dict.fromkeys((kind, group) for group in values))
    order = sorted(columns, key=lambda c: c[0] != "per_class")  # stable: classes first
    out = {(group if kind == "per_class" else f"{kind} {group}"):
           [stat(j.diagnostics.sets.get(split, {}).get(kind, {}).get(group) for j in jobs)
            for jobs in groups]
           for kind, group in order}
    if further:
        for name in evaluated_sets(groups):
            values = [[j.diagnostics.further.get(name) for j in jobs] for jobs in groups]
            if any(v is not None for vs in values for v in vs):
                out[f"{name} acc"] = [stat(vs) for vs in values]
    return out


def spread(found: Stat, runs: int, spec: str = ".1f") -> str:
    """A compact cell: ``mean ± std``, ``value`` for one run, ``(n)`` appended where fewer
    runs than the row's ``runs`` recorded it, ``–`` where none did."""
    if not found.n:
        return "–"
    text = format(found.mean, spec)
    if found.std is not None:
        text += f" ± {format(found.std, spec)}"
    return text + (f" ({found.n})" if found.n != runs else "")
