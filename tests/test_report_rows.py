"""One row identity for every report (``report/rows.py``): which settings split rows, the one
aggregation, the flags (numeric paths included), the protocols as data, and no import circle
among the report's modules."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from entailment_lab.errors import UserError
from entailment_lab.report import make_report
from entailment_lab.report.collect import load_job
from entailment_lab.report.leaderboard import (
    PROTOCOLS_FILE,
    generated_tables,
    load_declarations,
    load_rows,
    protocol_table,
)
from entailment_lab.report.rows import Stat, group_rows, stat
from tests.conftest import REPO
from tests.test_report import write_job

PROTOCOL = ["experiment=protocols/snli_dev2test", "data_root=../shared/data", "model=lstm"]
# The form numeric_path.py writes (abridged).
PATH = {"torch": "2.13.0+cpu", "device": "cpu",
        "threads": {"count": 1, "chosen_by": "threads=1", "detail": "threads=1"},
        "kernels": {"interaction": ["C small_products"]},
        "cpu": {"model": "AMD EPYC 9654", "vector_extensions": ["avx2", "avx512f"]},
        "determinism": {"deterministic_algorithms": False}}


def run(folder: Path, seed: int, overrides: list[str], test: float = 0.6,
        numeric_path: object = None, dim: int = 128) -> Path:
    """A completed LSTM run on SNLI dev→test with ``overrides`` (and its seed), as recorded."""
    write_job(folder, model="lstm", dim=dim, seed=seed, data="snli_dev2test", test=test,
              paper=None, overrides=[*overrides, f"seed={seed}"])
    if numeric_path is not None:
        record = json.loads((folder / "results.json").read_text())
        record["numeric_path"] = numeric_path
        (folder / "results.json").write_text(json.dumps(record))
    return folder


def rows_of(*folders: Path) -> list:
    return group_rows(load_job(f) for f in folders)


def test_stat_is_the_mean_and_sample_std_of_what_was_recorded():
    assert stat([87.0, 88.0, 89.0, None]) == Stat(88.0, 1.0, 3)
    assert stat([61.0]) == Stat(61.0, None, 1) and stat([]) == Stat() == stat([None])
    assert (stat([87.0, 88.0, 89.0]).cell(".1f"), str(stat([61.0])), str(stat([]))) == \
        ("88.0 ± 1.0 (3)", "61.00 (1)", "–")


def test_the_seed_and_where_a_run_wrote_or_read_split_no_row(tmp_path):
    """What does not change what a run trains: the seed, where it was written or logged, its
    threads and devices, where the data files lie, a ``dim`` typed that is the default."""
    rows = rows_of(
        run(tmp_path / "a", 1, PROTOCOL),
        run(tmp_path / "b", 2, [*PROTOCOL[:1], "data_root=/srv/shared/data", "model=lstm",
                                "hydra.run.dir=x", "logger=csv", "threads=2",
                                "trainer.devices=1", "callbacks.rich_progress_bar=null"]),
        run(tmp_path / "c", 3, [*PROTOCOL, "dim=128", "+tags=[again]"]))
    [row] = rows
    assert row.label == "lstm d=128" and row.seeds == [1, 2, 3]
    # the command: the experiment first, the spelling most of the runs used
    assert row.command_overrides == tuple(PROTOCOL)


def test_a_setting_on_the_command_line_splits_rows_and_names_itself(tmp_path):
    rows = rows_of(run(tmp_path / "a", 1, PROTOCOL),
                   run(tmp_path / "b", 1, [*PROTOCOL, "optimizer.lr=0.01"]),
                   run(tmp_path / "c", 1, [*PROTOCOL, "+model.net.mlp_layers=2"]),
                   run(tmp_path / "d", 1, [*PROTOCOL, "data.train_size=1000"]),
                   run(tmp_path / "e", 1, [*PROTOCOL, "data.hypothesis_only=true"]))
    assert [r.label for r in rows] == [
        "lstm d=128", "lstm d=128, `optimizer.lr=0.01`", "lstm d=128, `model.net.mlp_layers=2`",
        "lstm d=128, 1,000 pairs", "lstm d=128, hypothesis only"]


def test_runs_that_took_different_numeric_paths_are_flagged(tmp_path):
    """results.json's ``numeric_path`` (threads, kernels, CPU, torch): runs of one row that
    differ there say so; a record without one (older runs), or with something else under the
    key, is left out; how the threads were chosen is not the path."""
    other = {**PATH, "kernels": {}, "threads": {**PATH["threads"], "count": 2}}
    chosen = {**PATH, "threads": {"count": 1, "chosen_by": "threads=auto",
                                  "detail": "threads=auto (load 0.3 on 2 cores)"}}
    runs = tmp_path / "study" / "runs"
    folders = [run(runs / "0", 1, PROTOCOL, numeric_path=PATH),
               run(runs / "1", 2, PROTOCOL, numeric_path=chosen),
               run(runs / "2", 3, PROTOCOL),  # before numeric_path was recorded
               run(runs / "3", 4, PROTOCOL, numeric_path="not a mapping")]
    assert rows_of(*folders)[0].flags == []
    run(runs / "4", 5, PROTOCOL, numeric_path=other)
    [row] = load_rows(tmp_path)
    assert row.flags == ["2 numeric paths"]
    table = protocol_table([row], "snli_dev2test", tmp_path)
    assert table.splitlines()[2].endswith("| `study` | 2 numeric paths |")
    notes = make_report([runs], out=tmp_path / "report", plot=False).markdown
    assert "averages jobs of 2 numeric paths" in notes


def test_a_line_of_the_sweep_report_that_gathers_rows_says_how_they_differ(tmp_path):
    run(tmp_path / "a", 1, PROTOCOL)
    run(tmp_path / "b", 2, [*PROTOCOL, "optimizer.lr=0.01"])
    markdown = make_report([tmp_path], out=tmp_path / "out", plot=False).markdown
    assert "mixes settings, averaged together: the defaults (1 job); `optimizer.lr=0.01` " \
           "(1 job)" in markdown


def test_a_new_protocol_reaches_the_tables_by_its_declaration_alone(tmp_path):
    runs = tmp_path / "results" / "hans_study" / "runs"
    for seed, acc in ((1, 0.50), (2, 0.52), (3, 0.54)):
        write_job(runs / str(seed), model="lstm", dim=128, seed=seed, data="hans", test=acc,
                  paper=None, overrides=["experiment=protocols/hans", "model=lstm",
                                         f"seed={seed}"])
    declared = PROTOCOLS_FILE.read_text(encoding="utf-8")
    assert "hans" not in generated_tables(tmp_path / "results")  # not declared: no table
    protocols = tmp_path / "protocols.yaml"
    protocols.write_text(declared.replace("\nheadline:", '''
  - data: hans
    heading: "HANS (McCoy et al. 2019)"

headline:''').replace("protocols: [snli_dev2test, sick]", "protocols: [sick, hans]"),
                         encoding="utf-8")
    tables = generated_tables(tmp_path / "results", protocols)
    assert tables["hans"].splitlines()[2].startswith("| lstm d=128 | 1,289,203 | 52.0 ± 2.0 (3) |")
    assert "hans_breakdown" in tables and "hans_learning_curve" not in tables
    header, _, *lines = tables["headline"].splitlines()
    assert header == "| model | SICK-E | HANS |"
    assert "| LSTM (row 1) | no per-run records (run folders lost) | 52.0 ± 2.0 (3) |" in lines


@pytest.mark.parametrize(("edit", "message"), [
    (("heading: \"SICK-E", "title: \"SICK-E"), r"line 15: protocols\[1\]: missing heading"),
    (("learning_curve: true", "learning_curve: yes please"),
     r"line 12: protocols\[0\]: learning_curve must be a bool"),
    (("    - {label: \"DIIN\", model: diin}", "    - {label: \"DIIN\", model: diin, size: 1}"),
     r"line 32: headline.rows\[5\]: unknown key size \(known: label, model, dim\)"),
    (("protocols: [snli_dev2test, sick]", "protocols: [snli_dev2test, mnli]"),
     r"line 25: headline.protocols: expected a list of the protocols' data names"),
    (("protocols:   ", "protocols: ["), "cannot read the protocols: while parsing"),
])
def test_a_wrong_protocols_file_is_one_line_with_its_line_and_field(tmp_path, edit, message):
    text = PROTOCOLS_FILE.read_text(encoding="utf-8")
    assert edit[0] in text
    bad = tmp_path / "protocols.yaml"
    bad.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    with pytest.raises(UserError, match=message) as err:
        load_declarations(bad)
    assert "\n" not in str(err.value) and str(bad) in str(err.value)


def test_the_report_modules_import_each_other_in_no_circle():
    """Imports among ``report/`` (those under ``TYPE_CHECKING`` too) form no loop: a record
    type never names a type above it."""
    package = REPO / "src" / "entailment_lab" / "report"
    modules = {p.stem for p in package.glob("*.py")} - {"__init__"}
    edges: dict[str, set[str]] = {}
    for name in modules:
        tree = ast.parse((package / f"{name}.py").read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "entailment_lab.report":
                found |= {a.name for a in node.names} & modules
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "entailment_lab.report."):
                found.add(node.module.rsplit(".", 1)[1])
        edges[name] = found

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n}))
                   for n in edges[start])

    assert edges["job"] == set()  # the record types, on the ground floor
    assert [m for m in sorted(modules) if reaches(m, m, set())] == []


def test_the_committed_declarations_name_every_published_protocol():
    declarations = load_declarations()
    assert [p.data for p in declarations.protocols] == ["snli_dev2test", "sick", "sst5", "sst2",
                                                        "trec"]
    text = (REPO / "docs" / "RESULTS.md").read_text(encoding="utf-8")
    for protocol in declarations.protocols:
        assert f"<!-- results:{protocol.data} -->" in text, protocol.data


def test_decatt_records_from_before_it_read_dim_join_the_rows_of_its_width(tmp_path):
    """DecAtt recorded ``dim: null`` until its width became ``dim`` (200 by default): an old
    and a new record of one setting make one row, at d=200."""
    old, new = tmp_path / "old", tmp_path / "new"
    for folder, seed, dim in ((old, 1, None), (new, 2, 200)):
        write_job(folder, model="decatt", dim=dim, seed=seed, data="sick", test=0.77,
                  paper=None, overrides=["experiment=protocols/sick", "model=decatt",
                                         f"seed={seed}"])
    [row] = rows_of(old, new)
    assert (row.model, row.dim, len(row.jobs)) == ("decatt", 200, 2)


def test_a_seed_run_again_counts_once_in_its_row_with_its_newest_record(tmp_path):
    """A re-run of a seed (to store its test predictions, say) replaces the earlier record of
    that seed in the row's mean, and the row says so."""
    old = [run(tmp_path / "old" / str(s), s, PROTOCOL, test=0.60) for s in (1, 2, 3)]
    new = run(tmp_path / "new" / "0", 1, PROTOCOL, test=0.62)
    for folder, started in ((old[0], "2026-11-20T10:00:00"), (new, "2026-11-28T10:00:00")):
        record = json.loads((folder / "results.json").read_text())
        record["started"] = started
        (folder / "results.json").write_text(json.dumps(record))
    [row] = rows_of(*old, new)
    assert sorted(j.seed for j in row.jobs) == [1, 2, 3]
    assert [j.folder for j in row.jobs][0] == str(new) and row.tests == [62.0, 60.0, 60.0]
    assert [j.folder for j in row.replaced] == [str(old[0])]
    assert row.flags == ["1 earlier record of a re-run seed left out"]
