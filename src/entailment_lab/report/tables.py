"""The report's tables: one per data set, each paper row once, in the paper's order.

A ``RowResult`` is one line of a table: a paper row (or a config with no paper row) with the
jobs that count under it, their seed statistics (``rows.stat``) and the words that describe it.
It is a view over ``rows``: its completed jobs are one or more rows of settings, gathered under
the paper row they reproduce. Rows that were not run stay in the table, so a partial sweep
reads as partial.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from entailment_lab.paper_tables import (
    ALL_ROWS,
    PAIR_ROWS,
    SENTENCE_DATA,
    SENTENCE_ROWS,
    PaperRow,
)
from entailment_lab.report.job import COMPLETED, MISSING, RUNNING, STALE, Job
from entailment_lab.report.match import reduced_budget
from entailment_lab.report.rows import Row, Stat, count_range, group_rows, stat


def _stat(metric: str) -> property:
    """A line's ``Stat`` of one accuracy over its completed jobs (``rows.stat``)."""
    return property(lambda line: stat(getattr(j, metric) for j in line.completed))


@dataclass
class RowResult:
    """One line of a report table: a paper row (or an unmatched config) and its jobs, of
    every status. Its completed jobs form one or more rows (``rows.Row``: settings beyond
    the seed); a line that gathers several says so in the report's notes."""

    data: str
    paper: PaperRow | None
    model: str | None
    dim: int | None
    jobs: list[Job] = field(default_factory=list)
    reduced: str | None = None  # debug preset / truncated budget of its jobs: not compared
    hypothesis_only: bool = False  # its jobs read the hypothesis alone: not compared

    @property
    def comparable(self) -> bool:
        """Whether the paper's accuracy is for this data set (a SICK run is not SNLI's), is this
        model's (row 3's printed figure is another model's: ``PaperRow.not_comparable``), and
        our jobs ran the full budget (a ``debug=tiny`` run is no reproduction) on whole pairs
        (a hypothesis-only baseline is a diagnostic, not the paper's model)."""
        return (self.paper is not None and self.paper.data == self.data and not self.reduced
                and not self.hypothesis_only and self.paper.not_comparable is None)

    def _count(self, *statuses: str) -> int:
        return sum(j.status in statuses for j in self.jobs)

    @property
    def completed(self) -> list[Job]:
        return [j for j in self.jobs if j.status == COMPLETED]

    @property
    def rows(self) -> list[Row]:
        """The rows (settings) its completed jobs form: one, unless settings were mixed."""
        return group_rows(self.completed)

    train = _stat("train")
    train_eval = _stat("train_eval")
    val = _stat("val")
    test = _stat("test")

    @property
    def other_test(self) -> dict[str, Stat]:
        """Mean ± std over the completed jobs of every other test metric they recorded."""
        names = sorted({n for j in self.completed for n in j.other_test})
        return {n: other for n in names
                if (other := stat(j.other_test.get(n) for j in self.completed)).n}

    @property
    def delta(self) -> float | None:
        if not self.comparable or self.test.mean is None:
            return None
        return self.test.mean - self.paper.test

    def params(self, key: str = "params", sep: str = ",") -> str:
        """Our parameter count (``1,289,203``); a range if the jobs disagree (other settings)."""
        return count_range((getattr(j, key) for j in self.jobs), sep)

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
        label = self.paper.label if self.paper else "–"
        label += " (hypothesis only)" if self.hypothesis_only else ""
        return f"{label} (reduced)" if self.reduced else label

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
            text = f"{self.config} (no paper row)"
        else:
            text = f"{self.paper.description} ({self.config})" if self.config else \
                self.paper.description
        marks = ["hypothesis only (premise replaced by a constant)"] if self.hypothesis_only \
            else []
        marks += [f"reduced budget ({self.reduced})"] if self.reduced else []
        if marks:
            text += f" — {'; '.join(marks)}: not compared with the paper"
        return text

    @property
    def seeds(self) -> list[Any]:
        return sorted({j.seed for j in self.completed if j.seed is not None}, key=str)


@dataclass
class Table:
    """All rows for one data set, in the paper's order, unmatched configs last."""

    data: str
    layout: str  # "pair" (Table 2) or "sentence" (DCNN)
    rows: list[RowResult]


def _with_marked_rows(data: str, ordered: list[RowResult], marked: dict[Any, list[Job]]
                      ) -> list[RowResult]:
    """``ordered`` with a marked row (reduced budget, hypothesis only) of jobs after the row
    each belongs to; ``marked`` keys are ``(row key, reduced, hypothesis only)``."""
    out = []
    for rr in ordered:
        out.append(rr)
        base = rr.paper or (str(rr.model), str(rr.dim))
        for key in sorted((k for k in marked if k[0] == base), key=lambda k: (k[2], k[1])):
            out.append(_marked_row(data, rr.paper, key, marked.pop(key)))
    for key, jobs in marked.items():  # rows that exist only as marked runs
        out.append(_marked_row(data, jobs[0].row, key, jobs))
    return out


def _marked_row(data: str, paper: PaperRow | None, key: tuple[Any, bool, bool],
                jobs: list[Job]) -> RowResult:
    reasons = sorted({str(reduced_budget(j)) for j in jobs}) if key[1] else []
    model, dim = (paper.model, paper.dim) if paper else (jobs[0].model, jobs[0].dim)
    return RowResult(data, paper, model, dim, jobs=jobs, reduced=", ".join(reasons) or None,
                     hypothesis_only=key[2])


def layout_of(data: str, jobs: Sequence[Job]) -> str:
    """Sentence data (SST, TREC), or jobs whose models all read single sentences, get the DCNN
    layout; sentence pairs Table 2's."""
    if data in SENTENCE_DATA or (jobs and all(j.inputs == "sentence" for j in jobs)):
        return "sentence"
    return "pair"


def build_tables(jobs: Sequence[Job], compare_reduced: bool = False) -> list[Table]:
    """One table per data set among the training jobs; each paper row once, in order.

    Jobs with a debug preset or a truncated budget (``match.reduced_budget``) get rows of their
    own, marked and kept out of the comparison with the paper, unless ``compare_reduced``; so do
    hypothesis-only jobs (``Diagnostics.hypothesis_only``), always.
    """
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
        marked: dict[Any, list[Job]] = {}
        for job in data_jobs:
            is_reduced = not compare_reduced and bool(reduced_budget(job))
            only = job.diagnostics.hypothesis_only
            if is_reduced or only:
                key = (job.row or (str(job.model), str(job.dim)), is_reduced, only)
                marked.setdefault(key, []).append(job)
            elif job.row is not None:
                rows.setdefault(job.row, RowResult(data, job.row, job.row.model, job.row.dim))
                rows[job.row].jobs.append(job)
            else:
                key = (str(job.model), str(job.dim))
                extra.setdefault(key, RowResult(data, None, job.model, job.dim)).jobs.append(job)
        order = {r: i for i, r in enumerate(ALL_ROWS)}
        ordered = sorted(rows.values(), key=lambda rr: order[rr.paper])
        ordered += [extra[k] for k in sorted(extra)]
        ordered = _with_marked_rows(data, ordered, marked)
        tables.append(Table(data, layout, ordered))
    rank = {"snli": 0}
    tables.sort(key=lambda t: (t.layout == "sentence", rank.get(t.data, 1), t.data))
    return tables
