"""The published results tables, generated from the committed per-run records.

Every figure that README.md and docs/RESULTS.md publish comes from ``results.json`` copies under
``docs/results/<study>/runs/`` (``report.py --copy-results``). This module reads them all, groups
them into rows (``rows``: data set, model, dim, training-set size, settings) and renders one
Markdown table per protocol plus the README's headline table. Which protocols, in which order,
and the headline's rows are data (``src/entailment_lab/protocols.yaml``), so a new protocol
needs no code edit. The tables live in the documents between markers:

    <!-- results:NAME -->
    ...generated...
    <!-- /results:NAME -->

``python src/report.py --leaderboard docs/results --write README.md docs/RESULTS.md`` (``make
results``) rewrites them; ``--check`` fails when a committed table differs from what the records
give, which CI runs (``tests/test_results_tables.py``). A row flags, by itself, what a reader must
know (``rows.flags``): runs with fewer epochs than their budget (reduced), runs of different
commits or numeric paths, runs from a checkout whose code differed from its commit (dirty), and
fewer than three runs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from entailment_lab.errors import UserError
from entailment_lab.report import breakdowns
from entailment_lab.report.collect import collect_jobs, find_job_folders
from entailment_lab.report.job import COMPLETED, Job
from entailment_lab.report.rows import (
    ACROSS,
    TRAIN_SIZE,
    Row,
    Stat,
    across,
    count_range,
    group_rows,
    learning_curves,
)
from entailment_lab.report.significance import significance_table

#: What the tables show, declared as data beside the paper rows (``paper_tables.py``).
PROTOCOLS_FILE = Path(__file__).resolve().parents[1] / "protocols.yaml"
_MARKER = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:"
                     r"(?P=name) -->)", flags=re.S)


@dataclass(frozen=True)
class Protocol:
    """One protocol's tables: the ``data.name`` its runs record, and its heading."""

    data: str
    heading: str
    learning_curve: bool = False  # also a table of its runs on smaller training sets


@dataclass(frozen=True)
class Declarations:
    """``protocols.yaml``: the protocols in page order, and the README's headline."""

    protocols: tuple[Protocol, ...]
    headline_protocols: tuple[str, ...]
    headline_rows: tuple[tuple[str, str, int | None], ...]  # (label, model, dim)


class _Mapping(dict):
    line = 0  # where the mapping starts in its file (1-based)


class _LineLoader(yaml.SafeLoader):
    """A safe YAML loader whose mappings know their line, for one-line errors."""


def _mapping(loader: _LineLoader, node: yaml.MappingNode) -> _Mapping:
    mapping = _Mapping(loader.construct_mapping(node, deep=True))
    mapping.line = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_declarations(path: str | Path = PROTOCOLS_FILE) -> Declarations:
    """Read ``protocols.yaml``; a wrong entry is one line naming the file, line and field."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LineLoader)  # a SafeLoader
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"{path}: cannot read the protocols: "
                        f"{' '.join(str(err).split())}") from err

    def fail(where: Any, field: str, what: str) -> UserError:
        line = f", line {where.line}" if isinstance(where, _Mapping) else ""
        return UserError(f"{path}{line}: {field}: {what}")

    def entries(node: Any, field: str, known: dict[str, type], required: set[str]
                ) -> list[_Mapping]:
        if not isinstance(node, list) or not all(isinstance(e, dict) for e in node):
            raise fail(data, field, "expected a list of mappings")
        for i, entry in enumerate(node):
            missing = sorted(required - set(entry))
            unknown = sorted(set(entry) - set(known))
            wrong = [k for k, kind in known.items() if entry.get(k) is not None
                     and not isinstance(entry[k], kind)]
            if missing or unknown or wrong:
                what = (f"missing {', '.join(missing)}" if missing else
                        f"unknown key {unknown[0]} (known: {', '.join(known)})" if unknown else
                        f"{wrong[0]} must be a {known[wrong[0]].__name__}")
                raise fail(entry, f"{field}[{i}]", what)
        return node

    if not isinstance(data, dict) or not isinstance(data.get("headline"), dict):
        raise fail(data, "top level", "expected the mappings protocols: and headline:")
    protocols = tuple(Protocol(e["data"], e["heading"], bool(e.get("learning_curve")))
                      for e in entries(data.get("protocols"), "protocols",
                                       {"data": str, "heading": str, "learning_curve": bool},
                                       {"data", "heading"}))
    headline = data["headline"]
    names = headline.get("protocols")
    known = [p.data for p in protocols]
    if not isinstance(names, list) or not names or any(n not in known for n in names):
        raise fail(headline, "headline.protocols", f"expected a list of the protocols' data "
                   f"names ({', '.join(known)}), got {names!r}")
    rows = entries(headline.get("rows"), "headline.rows",
                   {"label": str, "model": str, "dim": int}, {"label", "model"})
    return Declarations(protocols, tuple(names),
                        tuple((r["label"], r["model"], r.get("dim")) for r in rows))


def _study(folder: Path, root: Path) -> str:
    """The study (``<study>`` of ``docs/results/<study>/runs/...``) a record belongs to."""
    try:
        return folder.resolve().relative_to(root.resolve()).parts[0]
    except ValueError:
        return str(folder)


def _records(jobs: Iterable[Job], root: Path) -> str:
    """The studies (``docs/results/<study>``) whose records hold ``jobs``."""
    return ", ".join(f"`{s}`" for s in sorted({_study(Path(j.folder), root) for j in jobs}))


def _epochs(row: Row) -> str:
    """``30 of 30``: the epochs the runs trained (a range where they differ) of their budget."""
    trained = count_range((j.epochs for j in row.jobs), sep="")
    budget = sorted({j.max_epochs for j in row.jobs if j.max_epochs is not None})
    text = "–" if trained == "–" else trained
    return f"{text} of {'/'.join(map(str, budget))}" if budget else text


def _commits(row: Row) -> str:
    return ", ".join(sorted({(j.commit or "not recorded")[:12] for j in row.jobs}))


def _command(row: Row) -> str:
    """The runs' command line: their common settings, with their seeds as a sweep."""
    seeds = sorted({j.seed for j in row.jobs if j.seed is not None})
    sweep = ["-m", f"seed={','.join(map(str, seeds))}"] if len(seeds) > 1 else \
        [f"seed={seeds[0]}"] if seeds else []
    return shlex.join(["python", "src/train.py", *sweep[:1], *row.command_overrides, *sweep[1:]])


def _cell(row: Row, metric: str = "test") -> str:
    return row.stat(metric).cell(".1f")


def load_rows(results_dir: str | Path) -> list[Row]:
    """Every completed training run recorded under ``results_dir/*/runs``, grouped into rows."""
    root = Path(results_dir)
    studies = sorted(p for p in root.glob("*/runs") if find_job_folders(p))
    if not studies:
        raise UserError(f"{root}: no per-run records (no */runs/**/results.json); publish runs "
                        "with python src/report.py RUNS --out DIR --copy-results")
    return group_rows(job for job in collect_jobs(studies) if job.status == COMPLETED
                      and job.task == "train" and job.model and job.data)


def _order(row: Row) -> tuple[Any, ...]:
    """Table order: by model and size, a hypothesis-only row after the model's full rows, then
    by command line."""
    return row.model, row.dim or 0, row.hypothesis_only, row.command_overrides


def _protocol_rows(rows: Iterable[Row], data: str) -> list[Row]:
    """One protocol's rows on its whole training set, in table order. (Smaller training sets:
    ``learning_curve_table``.)"""
    return sorted((r for r in rows if r.data == data and r.train_size is None), key=_order)


def learning_curve_table(rows: Iterable[Row], data: str, root: Path) -> str:
    """Test accuracy against the number of training pairs (``data.train_size``): a line per
    setting that has runs on smaller training sets, its whole-set row (same settings, same
    stopping rule) as the last column."""
    curves = learning_curves(r for r in rows if r.data == data)
    if not curves:
        return "No per-run records of smaller training sets for this protocol yet.\n"
    sizes = sorted({size for curve in curves.values() for size in curve if size is not None})
    lines = ["| model | " + " | ".join(f"{n:,} pairs" for n in sizes) + " | whole training "
             "set | records (docs/results/) | flags |", "|---|" + "---|" * (len(sizes) + 3)]
    commands = []

    def first(curve: dict[int | None, Row]) -> Row:
        return curve[min(n for n in curve if n is not None)]

    for curve in sorted(curves.values(), key=lambda c: _order(first(c))):
        smaller = sorted(n for n in curve if n is not None)
        label = first(curve).label.replace(f", {smaller[0]:,} pairs", "")
        cells = [_cell(curve[n]) if n in curve else "–" for n in [*sizes, None]]
        jobs = [j for r in curve.values() for j in r.jobs]
        # each size's own flags, and what differs across the whole curve
        flags = sorted({f for r in curve.values() for f in r.flags if not f.endswith(ACROSS)})
        flags += across(jobs)
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_records(jobs, root)} | "
                     f"{'; '.join(flags) or '–'} |")
        # one sweep over the smaller sizes (the whole-set row's command is in the table above)
        command = _command(first(curve)).replace(
            f"{TRAIN_SIZE}={smaller[0]}", f"{TRAIN_SIZE}={','.join(map(str, smaller))}")
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
        params = count_range(j.params for j in row.jobs)
        lines.append(f"| {row.label} | {params} | {_cell(row)} | {_cell(row, 'val')} "
                     f"| {_epochs(row)} | {_commits(row)} | {_records(row.jobs, root)} | "
                     f"{'; '.join(row.flags) or '–'} |")
        commands.append(f"{i}. {row.label}: `{_command(row)}`")
    return "\n".join(lines) + "\n\nCommands (data_root is the folder of the data files):\n\n" + \
        "\n".join(commands) + "\n"


def headline_table(rows: Sequence[Row], root: Path,
                   declarations: Declarations | None = None) -> str:
    """The README's table: the headline models (``protocols.yaml``'s ``headline``) on its
    protocols, whole training sets; a column's title is its protocol's heading up to " (".
    ``root``, the records' folder, is not read: the cells name no records."""
    declarations = declarations or load_declarations()
    headings = {p.data: p.heading for p in declarations.protocols}
    heads = [headings[p].split(" (")[0] for p in declarations.headline_protocols]
    lines = ["| model | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for label, model, dim in declarations.headline_rows:
        cells = []
        for data in declarations.headline_protocols:
            found = [r for r in rows if r.data == data and r.model == model and
                     r.dim in (dim, None) and r.train_size is None and
                     r.label.count("`") == 0 and  # the model's own settings, no extra knob
                     not r.hypothesis_only and
                     not any(f.startswith("reduced") for f in r.flags)]
            # today's protocol first (every run trained its budget), then the most runs
            found.sort(key=lambda r: (any("early stopping" in f for f in r.flags), -len(r.tests)))
            cells.append(_cell(found[0]) if found else "no per-run records (run folders lost)")
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


def generated_tables(results_dir: str | Path,
                     protocols: str | Path = PROTOCOLS_FILE) -> dict[str, str]:
    """Marker name -> Markdown: ``headline``, one table per protocol of ``protocols`` (a
    ``protocols.yaml``), each protocol's diagnostics (``NAME_breakdown``) and, where declared,
    its learning curve (``NAME_learning_curve``)."""
    declarations = load_declarations(protocols)
    root = Path(results_dir)
    rows = load_rows(root)
    tables = {"headline": headline_table(rows, root, declarations)}
    names = [p.data for p in declarations.protocols]
    tables.update({data: protocol_table(rows, data, root) for data in names})
    tables.update({f"{data}_breakdown": breakdown_table(rows, data) for data in names})
    tables.update({f"{p.data}_learning_curve": learning_curve_table(rows, p.data, root)
                   for p in declarations.protocols if p.learning_curve})
    # paired tests between the headline protocols' rows
    tables["significance"] = significance_table(rows, declarations.headline_protocols)
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
                     check: bool = False, protocols: str | Path = PROTOCOLS_FILE) -> list[Path]:
    """Rewrite (or, with ``check``, compare) the generated tables of ``documents``; returns the
    documents that changed (or would change)."""
    from entailment_lab.files import write_text_atomic

    tables = generated_tables(results_dir, protocols)
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
