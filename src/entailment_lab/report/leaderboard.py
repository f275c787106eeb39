"""The published results tables, generated from the committed per-run records.

Every figure that README.md and docs/RESULTS.md publish comes from ``results.json`` copies under
``docs/results/<study>/runs/`` (``report.py --copy-results``). This module reads them all, groups
them into rows (data set, model, dim, training-set size), and renders one Markdown table per
protocol plus the README's headline table. The tables live in the documents between markers:

    <!-- results:NAME -->
    ...generated...
    <!-- /results:NAME -->

``python src/report.py --leaderboard docs/results --write README.md docs/RESULTS.md`` (``make
results``) rewrites them; ``--check`` fails when a committed table differs from what the records
give, which CI runs (``tests/test_results_tables.py``). A row flags, by itself, what a reader must
know: runs with fewer epochs than their budget (reduced), runs of different commits, runs from a
checkout whose code differed from its commit (dirty), and fewer than three runs.
"""

from __future__ import annotations

import re
import shlex
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from entailment_lab.errors import UserError
from entailment_lab.report import breakdowns
from entailment_lab.report.aggregate import Stat
from entailment_lab.report.collect import collect_jobs, find_job_folders
from entailment_lab.report.job import COMPLETED, Job
from entailment_lab.report.match import reduced_budget
from entailment_lab.report.significance import significance_table

#: Protocols in the order the results page shows them: data name -> heading.
PROTOCOLS = {
    "snli_dev2test": "SNLI dev→test (train on SNLI dev less a premise-grouped validation carve, "
                     "8,840 / 1,002 pairs; test on SNLI test, 9,824 pairs)",
    "sick": "SICK-E (official splits: 4,439 / 495 / 4,906 pairs)",
    "sst5": "SST-5 (DCNN's table)",
    "sst2": "SST-2 (DCNN's table)",
    "trec": "TREC (DCNN's table)",
}
#: Protocols whose learning curves (runs with ``data.train_size``) the results page shows.
LEARNING_CURVE_PROTOCOLS = ("snli_dev2test",)
#: The README's headline: (label, model, dim) per row, one column per protocol.
HEADLINE_ROWS = (
    ("Lexical floor", "lexical", None), ("LSTM (row 1)", "lstm", 128),
    ("DecAtt (row 8)", "decatt", None), ("DIN-1 20×20 (row 17)", "din1", 400),
    ("DIN-2 20×20 (row 19)", "din2", 400), ("DIIN", "diin", None),
)
HEADLINE_PROTOCOLS = ("snli_dev2test", "sick")
# Overrides that say where a run was written or how it logged, not what it trained.
_NOT_A_SETTING = re.compile(r"^(hydra\.|logger=|callbacks\.rich_progress_bar|"
                            r"trainer\.enable_progress_bar|threads=|seed=)")
_MARKER = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:"
                     r"(?P=name) -->)", flags=re.S)


@dataclass
class Row:
    """The completed runs of one setting on one data set."""

    data: str
    model: str
    dim: int | None
    train_size: int | None
    settings: tuple[str, ...] = ()  # the command line's overrides but the seed and logging
    jobs: list[Job] = field(default_factory=list)
    hypothesis_only: bool = False  # the premise replaced by a constant: a diagnostic baseline
    early_stopping: str = "None"  # the patience the runs trained under (a protocol changed)

    @property
    def tests(self) -> list[float]:
        return [j.test for j in self.jobs if j.test is not None]

    def cell(self, values: Sequence[float]) -> str:
        """``mean ± std (n)``; one run: ``value (1)``."""
        if not values:
            return "–"
        if len(values) == 1:
            return f"{values[0]:.1f} (1)"
        return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f} ({len(values)})"

    @property
    def flags(self) -> list[str]:
        """What a reader must know about these runs, said by the generator, not by prose."""
        out = []
        reduced = sorted({r for j in self.jobs if (r := reduced_budget(j))})
        if reduced:
            out.append(f"reduced ({', '.join(reduced)})")
        commits = {j.commit for j in self.jobs}
        if len(commits) > 1:
            out.append(f"{len(commits)} commits")
        stopped = sum(j.stopped_by == "early_stopping" for j in self.jobs)
        if stopped:
            out.append(f"{stopped} ended by early stopping (an earlier protocol)")
        dirty = sum(bool(j.dirty) for j in self.jobs)
        if dirty:
            out.append(f"{dirty} from a modified checkout")
        if len(self.tests) < 3:
            out.append(f"{len(self.tests)} run{'s' if len(self.tests) != 1 else ''}")
        return out

    @property
    def epochs(self) -> str:
        trained = sorted({j.epochs for j in self.jobs if j.epochs is not None})
        budget = sorted({j.max_epochs for j in self.jobs if j.max_epochs is not None})
        text = "–" if not trained else str(trained[0]) if len(trained) == 1 else \
            f"{trained[0]}–{trained[-1]}"
        return f"{text} of {'/'.join(map(str, budget))}" if budget else text

    @property
    def params(self) -> str:
        counts = sorted({j.params for j in self.jobs if j.params is not None})
        return "–" if not counts else f"{counts[0]:,}" + (f"–{counts[-1]:,}"
                                                         if len(counts) > 1 else "")

    @property
    def commits(self) -> str:
        return ", ".join(sorted({(j.commit or "not recorded")[:12] for j in self.jobs}))

    def records(self, root: Path) -> str:
        studies = sorted({_study(Path(j.folder), root) for j in self.jobs})
        return ", ".join(f"`{s}`" for s in studies)

    @property
    def command(self) -> str:
        """The runs' command line: their common settings, with their seeds as a sweep."""
        settings = list(self.settings)
        seeds = sorted({j.seed for j in self.jobs if j.seed is not None})
        sweep = ["-m", f"seed={','.join(map(str, seeds))}"] if len(seeds) > 1 else \
            [f"seed={seeds[0]}"] if seeds else []
        return shlex.join(["python", "src/train.py", *sweep[:1], *settings, *sweep[1:]])

    @property
    def label(self) -> str:
        size = f", {self.train_size:,} pairs" if self.train_size else ""
        extra = [s for s in self.settings if not s.startswith(_ROW_KEYS)]
        only = ", hypothesis only" if self.hypothesis_only else ""
        return f"{self.model}" + (f" d={self.dim}" if self.dim else "") + size + only + \
            "".join(f", `{s}`" for s in extra)


def _study(folder: Path, root: Path) -> str:
    """The study (``<study>`` of ``docs/results/<study>/runs/...``) a record belongs to."""
    try:
        return folder.resolve().relative_to(root.resolve()).parts[0]
    except ValueError:
        return str(folder)


# Overrides that the row's label already says (or that say where the data lies).
_ROW_KEYS = ("experiment=", "data_root=", "model=", "dim=", "data.train_size=",
             f"{breakdowns.HYPOTHESIS_ONLY}=")


def _settings(job: Job) -> tuple[str, ...]:
    """The overrides that say what a run trained, in one order (the experiment first, then by
    name), so that the same command typed in another order is the same row."""
    settings = {o.lstrip("+~") if o.startswith("+") else o for o in job.overrides
                if not _NOT_A_SETTING.match(o.lstrip("+~"))
                and o.lstrip("+~").lower() != f"{breakdowns.HYPOTHESIS_ONLY}=false"}  # the default
    return tuple(sorted(settings, key=lambda o: (not o.startswith("experiment="), o)))


def _train_size(job: Job) -> int | None:
    for override in job.overrides:
        key, _, value = override.partition("=")
        if key == "data.train_size" and value.isdigit():
            return int(value)
    return None


def load_rows(results_dir: str | Path) -> list[Row]:
    """Every completed run recorded under ``results_dir/*/runs``, grouped into rows."""
    root = Path(results_dir)
    studies = sorted(p for p in root.glob("*/runs") if find_job_folders(p))
    if not studies:
        raise UserError(f"{root}: no per-run records (no */runs/**/results.json); publish runs "
                        "with python src/report.py RUNS --out DIR --copy-results")
    rows: dict[tuple, Row] = {}
    for job in collect_jobs(studies):
        if job.status != COMPLETED or job.task != "train" or not job.model or not job.data:
            continue
        only = breakdowns.is_hypothesis_only(job)  # also when an experiment file set it
        key = (job.data, job.model, job.dim, _train_size(job), _settings(job),
               str(job.early_stopping), only)  # a protocol's stopping rule changed at a commit
        rows.setdefault(key, Row(job.data, job.model, job.dim, _train_size(job),
                                 _settings(job), hypothesis_only=only,
                                 early_stopping=str(job.early_stopping))).jobs.append(job)
    return list(rows.values())


def _protocol_rows(rows: Iterable[Row], data: str) -> list[Row]:
    """One protocol's rows on its whole training set, in table order: a hypothesis-only row
    after the model's full rows. (Smaller training sets: ``learning_curve_table``.)"""
    return sorted((r for r in rows if r.data == data and r.train_size is None),
                  key=lambda r: (r.model, r.dim or 0, r.hypothesis_only, r.settings))


def learning_curve_table(rows: Iterable[Row], data: str, root: Path) -> str:
    """Test accuracy against the number of training pairs (``data.train_size``): a line per
    setting that has runs on smaller training sets, its whole-set row (same settings, same
    stopping rule) as the last column."""
    rows = [r for r in rows if r.data == data]

    def curve_key(row: Row) -> tuple:
        settings = tuple(s for s in row.settings if not s.startswith("data.train_size="))
        return row.model, row.dim or 0, row.hypothesis_only, settings, row.early_stopping

    curves: dict[tuple, dict[int | None, Row]] = {}
    for row in rows:
        if row.train_size is not None:
            curves.setdefault(curve_key(row), {})[row.train_size] = row
    if not curves:
        return "No per-run records of smaller training sets for this protocol yet.\n"
    for row in rows:
        if row.train_size is None and curve_key(row) in curves:
            curves[curve_key(row)][None] = row
    sizes = sorted({size for curve in curves.values() for size in curve if size is not None})
    lines = ["| model | " + " | ".join(f"{n:,} pairs" for n in sizes) + " | whole training "
             "set | records (docs/results/) | flags |", "|---|" + "---|" * (len(sizes) + 3)]
    commands = []
    for key in sorted(curves):
        curve = curves[key]
        smaller = sorted(n for n in curve if n is not None)
        first = curve[smaller[0]]
        label = first.label.replace(f", {first.train_size:,} pairs", "")
        cells = [curve[n].cell(curve[n].tests) if n in curve else "–" for n in [*sizes, None]]
        jobs = [j for r in curve.values() for j in r.jobs]
        studies = sorted({_study(Path(j.folder), root) for j in jobs})
        flags = sorted({f for r in curve.values() for f in r.flags if not f.endswith("commits")})
        commits = {j.commit for j in jobs}
        if len(commits) > 1:
            flags.append(f"{len(commits)} commits")
        lines.append(f"| {label} | " + " | ".join(cells) + " | " +
                     ", ".join(f"`{s}`" for s in studies) + f" | {'; '.join(flags) or '–'} |")
        # one sweep over the smaller sizes (the whole-set row's command is in the table above)
        command = first.command.replace(f"data.train_size={smaller[0]}",
                                        f"data.train_size={','.join(map(str, smaller))}")
        if " -m " not in command:
            command = command.replace("src/train.py", "src/train.py -m", 1)
        commands.append(f"{len(commands) + 1}. {label}: `{command}`")
    return "\n".join(lines) + "\n\nCommands (data_root is the folder of the data files):\n\n" \
        + "\n".join(commands) + "\n"


def protocol_table(rows: Iterable[Row], data: str, root: Path) -> str:
    """One protocol's table: a row per setting, full training set first."""
    chosen = _protocol_rows(rows, data)
    if not chosen:
        return "No per-run records for this protocol yet.\n"
    lines = ["| model | params | test % | best val % | epochs (of budget) | commit | records "
             "(docs/results/) | flags |", "|---|---|---|---|---|---|---|---|"]
    commands = []
    for i, row in enumerate(chosen, start=1):
        vals = [j.val for j in row.jobs if j.val is not None]
        lines.append(f"| {row.label} | {row.params} | {row.cell(row.tests)} | {row.cell(vals)} "
                     f"| {row.epochs} | {row.commits} | {row.records(root)} | "
                     f"{'; '.join(row.flags) or '–'} |")
        commands.append(f"{i}. {row.label}: `{row.command}`")
    return "\n".join(lines) + "\n\nCommands (data_root is the folder of the data files):\n\n" + \
        "\n".join(commands) + "\n"


def headline_table(rows: Sequence[Row], root: Path) -> str:
    """The README's table: the headline models on the two NLI protocols, full training sets."""
    heads = [PROTOCOLS[p].split(" (")[0] for p in HEADLINE_PROTOCOLS]
    lines = ["| model | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for label, model, dim in HEADLINE_ROWS:
        cells = []
        for data in HEADLINE_PROTOCOLS:
            found = [r for r in rows if r.data == data and r.model == model and
                     r.dim in (dim, None) and r.train_size is None and
                     r.label.count("`") == 0 and  # the model's own settings, no extra knob
                     not r.hypothesis_only and
                     not any(f.startswith("reduced") for f in r.flags)]
            # today's protocol first (every run trained its budget), then the most runs
            found.sort(key=lambda r: (any("early stopping" in f for f in r.flags), -len(r.tests)))
            cells.append(found[0].cell(found[0].tests) if found else
                         "no per-run records (run folders lost)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def breakdown_table(rows: Iterable[Row], data: str) -> str:
    """One protocol's diagnostics, a line per row of its table (same order, same numbers):
    test accuracy per gold class, per word-overlap bucket (and genre) where the records have
    them, and the accuracy of each further evaluated set; then, for each further set that
    recorded its own breakdowns, the same columns for it."""
    numbered = [(i, r) for i, r in enumerate(_protocol_rows(rows, data), start=1) if r.tests]
    if not numbered:
        return "No per-run records for this protocol yet.\n"
    groups = [[j for j in r.jobs if j.test is not None] for _, r in numbered]
    stats = breakdowns.breakdown_stats(groups)
    out = [_caption(stats), ""]
    out += _stats_table(numbered, groups, stats)
    for name in breakdowns.evaluated_sets(groups):
        stats = breakdowns.breakdown_stats(groups, split=name, further=False)
        if stats:
            out += ["", f"`{name}`:", ""]
            out += _stats_table(numbered, groups, stats)
    return "\n".join(out) + "\n"


def _caption(stats: dict[str, list[Stat]]) -> str:
    """What the breakdown columns are, in words true for these columns."""
    parts = ["test accuracy % per gold class (its recall)"]
    if any(c.startswith("overlap ") for c in stats):
        parts.append("per word-overlap bucket (the share of the hypothesis's words found in "
                     "the premise)")
    if any(c.startswith("genre ") for c in stats):
        parts.append("per genre")
    if any(c.endswith(" acc") for c in stats):
        parts.append("and the accuracy on each further test set")
    return (f"{', '.join(parts)[0].upper()}{', '.join(parts)[1:]}: mean ± std over the row's "
            "runs; # is the row's number in the commands above; (n): only n of its runs "
            "recorded it; –: none did (or the group was empty).")


def _stats_table(numbered: Sequence[tuple[int, Row]], groups: Sequence[Sequence[Job]],
                 stats: dict[str, list[Stat]]) -> list[str]:
    """Markdown lines: a line per row that recorded any of ``stats`` (columns)."""
    if not stats:
        return ["No breakdowns recorded for these runs."]
    lines = ["| # | model | " + " | ".join(stats) + " |", "|---|---|" + "---|" * len(stats)]
    for i, ((number, row), jobs) in enumerate(zip(numbered, groups, strict=True)):
        if any(column[i].n for column in stats.values()):
            cells = [breakdowns.spread(column[i], len(jobs)) for column in stats.values()]
            lines.append(f"| {number} | {row.label} | " + " | ".join(cells) + " |")
    return lines


def generated_tables(results_dir: str | Path) -> dict[str, str]:
    """Marker name -> Markdown: ``headline``, one table per protocol, and each protocol's
    diagnostics (``NAME_breakdown``)."""
    root = Path(results_dir)
    rows = load_rows(root)
    tables = {"headline": headline_table(rows, root)}
    tables.update({data: protocol_table(rows, data, root) for data in PROTOCOLS})
    tables.update({f"{data}_breakdown": breakdown_table(rows, data) for data in PROTOCOLS})
    tables.update({f"{data}_learning_curve": learning_curve_table(rows, data, root)
                   for data in LEARNING_CURVE_PROTOCOLS})
    tables["significance"] = significance_table(rows)  # paired tests between rows
    return tables


def fill_markers(text: str, tables: dict[str, str], where: str) -> str:
    """``text`` with the body between each ``results:NAME`` marker pair replaced."""
    def body(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in tables:
            raise UserError(f"{where}: marker results:{name} names no generated table; the "
                            f"tables are {', '.join(tables)}")
        return f"{match.group(1)}{tables[name]}{match.group(4)}"
    return _MARKER.sub(body, text)


def update_documents(results_dir: str | Path, documents: Sequence[str | Path],
                     check: bool = False) -> list[Path]:
    """Rewrite (or, with ``check``, compare) the generated tables of ``documents``; returns the
    documents that changed (or would change)."""
    from entailment_lab.files import write_text_atomic

    tables = generated_tables(results_dir)
    changed = []
    for document in map(Path, documents):
        text = document.read_text(encoding="utf-8")
        if not _MARKER.search(text):
            raise UserError(f"{document}: no <!-- results:NAME --> markers to fill")
        new = fill_markers(text, tables, str(document))
        if new != text:
            changed.append(document)
            if not check:
                write_text_atomic(document, new)
    return changed
