"""The report as text: Markdown (``report.md``) and CSV (``report.csv``).

Both are rendered in memory by pandas (``to_markdown`` through tabulate, ``to_csv``) and
written by the caller, so a failure leaves no half-written report. The CSV columns are an
interface: docs and CI scripts read them by name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from entailment_lab.report import breakdowns
from entailment_lab.report.job import COMPLETED, Job
from entailment_lab.report.rows import numeric_path
from entailment_lab.report.tables import Table

CSV_COLUMNS = (
    "data", "layout", "row", "paper_table", "paper_row", "description", "model", "dim",
    "paper_para", "paper_para_count", "params_trainable", "params_paper_convention",
    "paper_train", "paper_test", "train_mean", "train_std", "train_n", "train_eval_mean",
    "train_eval_std", "val_mean", "test_mean",
    "test_std", "test_n", "delta_test", "status", "completed", "running", "stale", "failed",
    "no_results", "seeds", "folders", "reduced_budget", "other_test_metrics", "test_breakdowns",
)
_PAIR_HEADER = ["#", "model", "Para (paper)", "params (ours)", "params (paper conv.)",
                "train % (paper)", "test % (paper)", "train % (ours)", "train % eval (ours)",
                "test % (ours)", "Δ test", "runs"]
_SENTENCE_HEADER = ["#", "model", "params (ours)", "test % (paper)", "train % (ours)",
                    "train % eval (ours)", "test % (ours)", "Δ test", "runs"]


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "–" if value is None else format(value, spec)


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table of the cells as given: no number parsing, no padding, ``|`` escaped."""
    cells = [[str(c).replace("|", "\\|") for c in row] for row in rows]
    return pd.DataFrame(cells, columns=list(header)).to_markdown(
        index=False, disable_numparse=True, stralign=None, numalign=None)


def _table_markdown(table: Table) -> str:
    cells = []
    for rr in table.rows:
        paper = rr.paper if rr.comparable else None
        ours = ([str(rr.train), str(rr.train_eval), str(rr.test)] if rr.completed
                else ["", "", ""])
        delta = "" if not rr.completed else "–" if rr.delta is None else f"{rr.delta:+.2f}"
        if table.layout == "pair":
            cells.append([rr.label, rr.description, (rr.paper.para if rr.paper else None) or "–",
                          rr.params(), rr.params("params_paper"),
                          _fmt(paper.train if paper else None), _fmt(paper.test if paper else None),
                          *ours, delta, rr.status])
        else:
            cells.append([rr.label, rr.description, rr.params(),
                          _fmt(paper.test if paper else None), *ours, delta, rr.status])
    return _md_table(_PAIR_HEADER if table.layout == "pair" else _SENTENCE_HEADER, cells)


def _breakdown_markdown(table: Table) -> list[str]:
    """Markdown lines: each row's test accuracy per gold class, per overlap bucket (and genre)
    where recorded, and on further test sets; then a table per further set with breakdowns."""
    rows = [rr for rr in table.rows if rr.completed]
    groups = [rr.completed for rr in rows]
    out: list[str] = []
    sections = [("test", breakdowns.breakdown_stats(groups))]
    sections += [(name, breakdowns.breakdown_stats(groups, split=name, further=False))
                 for name in breakdowns.evaluated_sets(groups)]
    for name, stats in sections:
        cells = [[f"{rr.label} ({rr.config})" if rr.config else rr.label,
                  *(breakdowns.spread(column[i], len(groups[i]), ".2f")
                    for column in stats.values())]
                 for i, rr in enumerate(rows) if any(column[i].n for column in stats.values())]
        if cells:
            further = ("; *SET acc*: accuracy on a further test set"
                       if any(c.endswith(" acc") for c in stats) else "")
            out += [f"Accuracy on `{name}` per gold class (its recall) and, where recorded, "
                    f"per word-overlap bucket or genre{further} (%, mean ± std over the row's "
                    "runs; (n): only n of them recorded it):", "",
                    _md_table(["row", *stats], cells), ""]
    return out


def title(table: Table) -> str:
    """The table's heading: its data set and the paper its rows come from."""
    if table.layout == "sentence":
        source = "DCNN (Kalchbrenner et al. 2014)"
    else:
        source = "Table 2 of Huo & Liu (DIN) + DIIN"
    if not any(rr.comparable for rr in table.rows):
        source += f"; the paper's accuracies are not for {table.data}, so none are shown"
    return f"## {table.data.upper()} — {source}"


def _display(folder: str) -> str:
    """A folder relative to the cwd when it is below it, else as given (W&B URLs too)."""
    path = Path(folder)
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else folder


def _job_config(job: Job) -> str:
    parts = [job.model, job.dim is not None and f"d={job.dim}",
             job.seed is not None and f"seed={job.seed}", job.data]
    return " ".join(str(p) for p in parts if p) or "?"


def _jobs(n: int) -> str:
    return f"{n} job{'s' * (n > 1)}"


def mixed_settings_notes(tables: Sequence[Table]) -> list[str]:
    """Lines whose completed jobs form several rows (settings beyond the seed): averaged
    anyway, but said so, with what each row's jobs ran beyond what they share."""
    notes = []
    for table in tables:
        for rr in table.rows:
            rows = rr.rows
            if len(rows) < 2:
                continue
            items = [set(row.key.items()) for row in rows]
            common = set.intersection(*items)
            parts = [f"{', '.join(f'`{s}`' for s in sorted(own - common)) or 'the defaults'} "
                     f"({_jobs(len(row.jobs))})" for row, own in zip(rows, items, strict=True)]
            notes.append(f"{table.data} row {rr.label} ({rr.config}) mixes settings, averaged "
                         f"together: {'; '.join(parts)}")
    return notes


def code_notes(tables: Sequence[Table]) -> list[str]:
    """Which code the averaged jobs ran (results.json ``code``): one line for the report, and
    one for each line that averages jobs of different commits or numeric paths (results.json
    ``numeric_path``; jobs that did not record one are left out)."""
    jobs = [job for table in tables for rr in table.rows for job in rr.completed]
    if not jobs:
        return []
    commits = Counter(job.commit[:7] for job in jobs if job.commit)
    parts = [f"`{c}` ({_jobs(n)})" for c, n in commits.items()]
    unknown = sum(not job.commit for job in jobs)
    if unknown:
        parts.append(f"no recorded commit ({_jobs(unknown)})")
    dirty = sum(bool(job.dirty) for job in jobs)
    line = f"code of the completed jobs: {'; '.join(parts)}"
    if dirty:
        line += f"; {dirty} of them ran code that differed from its commit"
    notes = [line]
    for table in tables:
        for rr in table.rows:
            row_commits = sorted({job.commit[:7] for job in rr.completed if job.commit})
            if len(row_commits) > 1:
                notes.append(f"{table.data} row {rr.label} ({rr.config}) averages jobs of "
                             f"{len(row_commits)} commits: {', '.join(row_commits)}")
            paths = {p for job in rr.completed if (p := numeric_path(job)) is not None}
            if len(paths) > 1:
                notes.append(f"{table.data} row {rr.label} ({rr.config}) averages jobs of "
                             f"{len(paths)} numeric paths (results.json `numeric_path`: "
                             "threads, kernels, CPU, torch)")
    return notes


def _notes(tables: Sequence[Table], jobs: Sequence[Job]) -> list[str]:
    notes = [f"`{_display(j.folder)}`: {j.note}" for j in jobs if j.note]
    notes += mixed_settings_notes(tables)
    notes += code_notes(tables)
    reduced = [rr for t in tables for rr in t.rows if rr.reduced and rr.jobs]
    if reduced:
        notes.append(f"{sum(len(rr.jobs) for rr in reduced)} job(s) ran a debug preset or a "
                     "truncated budget; they are shown in rows marked *(reduced)*, without the "
                     "paper's numbers or Δ (`src/report.py --compare-reduced` compares them too)")
    other = [j for j in jobs if j.task not in (None, "train")]
    if other:
        tasks = ", ".join(sorted({str(j.task) for j in other}))
        notes.append(f"{len(other)} job(s) of other tasks ({tasks}) are not in the tables")
    unplaced = [j for j in jobs if j.task in (None, "train") and not (j.data or j.model)]
    if unplaced:
        notes.append(f"{len(unplaced)} job(s) could not be placed in a table (no results.json "
                     "and no .hydra/ config); listed below")
    return notes


def _spread_words(tables: Sequence[Table]) -> str:
    """How our numbers are aggregated, in words true for these tables (n = 1 has no std)."""
    counts = {rr.test.n for t in tables for rr in t.rows if rr.test.n}
    if counts and max(counts) == 1:
        return "one run per row (n = 1), so no spread over seeds is shown"
    if 1 in counts:
        return ("mean ± sample std over seeds (n = completed runs; a row with n = 1 is a single "
                "run and shows no std)")
    return "mean ± sample std over seeds (n = completed runs)"


def render_markdown(tables: Sequence[Table], jobs: Sequence[Job], sources: Sequence[str]) -> str:
    """The whole report as Markdown: one table per data set, then the jobs that did not finish."""
    statuses = Counter(j.status for j in jobs).most_common()  # ties: first seen first
    summary = ", ".join(f"{n} {s}" for s, n in statuses)
    out = ["# Results report", "",
           f"{len(jobs)} jobs from {', '.join(f'`{s}`' for s in sources)}: {summary}.", "",
           "Ours: accuracy of the checkpoint with the best validation accuracy (train = running "
           f"training accuracy of that epoch, dropout on; train eval = that checkpoint on the "
           f"training split in eval mode, what the model fits), {_spread_words(tables)}; "
           "Δ test = ours − paper, in points. Params: trainable, without word embeddings; "
           "*paper conv.*: the same count under the convention that reproduces the paper's Para "
           "(DIN: GRUs counted with two weight blocks). Running jobs are counted in *runs*, not "
           "in the means.", ""]
    for table in tables:
        out += [title(table), "", _table_markdown(table), ""]
        out += _breakdown_markdown(table)
        other = [[rr.label, name, str(stat)] for rr in table.rows
                 for name, stat in rr.other_test.items()]
        if other:  # the runs' other metrics (their `metrics` config), test split, in %
            out += ["Other test metrics (%, mean ± std (runs)):", "",
                    _md_table(["row", "metric", "test"], other), ""]
    notes = _notes(tables, jobs)
    if notes:
        out += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    unfinished = [j for j in jobs if j.status != COMPLETED]
    out += ["## Jobs that did not complete", ""]
    if unfinished:
        out.append(_md_table(
            ["folder", "status", "config", "row", "error"],
            [[f"`{_display(j.folder)}`", j.status, _job_config(j),
              j.row.label if j.row else "–", j.error or ""] for j in unfinished]))
    else:
        out.append("None: every job completed.")
    return "\n".join(out) + "\n"


def _num(value: float | None) -> str | float:
    return "" if value is None else round(value, 4)


def _count_range(text: str) -> str:
    """``1289203`` or ``1289203-1300000`` for the CSV (no dash when there is no count)."""
    return text.replace("–", "-").strip("-")


def csv_rows(tables: Sequence[Table]) -> list[dict[str, Any]]:
    """One dict per table row (incl. "not run" rows); accuracies in %, blanks as ''."""
    out = []
    for table in tables:
        diagnostics = breakdowns.breakdown_stats([rr.completed for rr in table.rows])
        for i, rr in enumerate(table.rows):
            p = rr.paper
            out.append({
                "data": table.data, "layout": table.layout, "row": rr.label,
                "paper_table": p.table if p else "", "paper_row": p.row if p else "",
                "description": p.description if p else "", "model": rr.config.split(" ")[0],
                "dim": (p.dim if p else rr.dim) or "", "paper_para": (p.para if p else "") or "",
                "paper_para_count": (p.para_count if p else "") or "",
                "params_trainable": _count_range(rr.params(sep="")),
                "params_paper_convention": _count_range(rr.params("params_paper", sep="")),
                "paper_train": (p.train if rr.comparable else "") or "",
                "paper_test": p.test if rr.comparable else "",
                "train_mean": _num(rr.train.mean), "train_std": _num(rr.train.std),
                "train_n": rr.train.n, "train_eval_mean": _num(rr.train_eval.mean),
                "train_eval_std": _num(rr.train_eval.std), "val_mean": _num(rr.val.mean),
                "test_mean": _num(rr.test.mean), "test_std": _num(rr.test.std),
                "test_n": rr.test.n, "delta_test": _num(rr.delta), "status": rr.status,
                **rr.counts(), "seeds": " ".join(map(str, rr.seeds)),
                "folders": " ".join(_display(j.folder) for j in rr.jobs),
                "reduced_budget": rr.reduced or "",
                "other_test_metrics": "; ".join(f"{n}={_num(st.mean)}±{_num(st.std)}({st.n})"
                                                for n, st in rr.other_test.items()),
                "test_breakdowns": "; ".join(f"{n}={_num(st[i].mean)}±{_num(st[i].std)}"
                                             f"({st[i].n})" for n, st in diagnostics.items()
                                             if st[i].n),
            })
    return out


def render_csv(rows: Sequence[dict[str, Any]]) -> str:
    """``csv_rows`` as CSV text, columns in ``CSV_COLUMNS`` order."""
    return pd.DataFrame(list(rows), columns=list(CSV_COLUMNS)).to_csv(index=False,
                                                                     lineterminator="\n")
