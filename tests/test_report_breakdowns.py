"""The diagnostics in the reports: accuracy per gold class (from ``breakdowns`` or the test
confusion matrix), per word-overlap bucket and genre, further test sets, and hypothesis-only
runs as rows of their own. Every record here is a small synthetic ``results.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from entailment_lab.report import make_report
from entailment_lab.report.breakdowns import (
    from_record,
    further_sets,
    per_class_from_confusion,
)
from entailment_lab.report.leaderboard import (
    breakdown_table,
    fill_markers,
    generated_tables,
    headline_table,
    load_rows,
    protocol_table,
    update_documents,
)
from tests.test_report import write_job

LABELS = ["entailment", "neutral", "contradiction"]
# rows = gold: recall 80 / 60 / 50 %, and 60 / 80 / 70 % (test accuracy 63.3 and 70.0 %)
CONFUSION = ([[8, 2, 0], [1, 6, 3], [0, 5, 5]], [[6, 4, 0], [2, 8, 0], [0, 3, 7]])
BUCKETS = ("0-25%", "25-50%", "50-75%", "75-100%", "100%")


def breakdown(per_class: tuple[float, ...], overlap: tuple[float, ...] | None = None,
              genre: dict[str, float] | None = None) -> dict[str, Any]:
    """One evaluated set's ``breakdowns`` entry as ``module.breakdown`` writes it."""
    out: dict[str, Any] = {"size": 30, "per_class": {
        label: {"n": 10, "acc": acc} for label, acc in zip(LABELS, per_class, strict=True)}}
    if overlap is not None:
        out["overlap"] = {b: {"n": 6, "acc": acc} for b, acc in zip(BUCKETS, overlap,
                                                                   strict=True)}
    if genre is not None:
        out["genre"] = {g: {"n": 15, "acc": acc} for g, acc in genre.items()}
    return out


def record(folder: Path, *, seed: int = 1, test: float = 0.65, model: str = "lstm",
           data: str = "snli_dev2test", confusion: list | None = None,
           breakdowns: dict | None = None, metrics: dict | None = None,
           hypothesis_only: bool | None = None, only_override: bool = False) -> Path:
    """A completed run's results.json (``tests.test_report.write_job``) with diagnostics."""
    overrides = [f"experiment=protocols/{data}", f"model={model}", f"seed={seed}"]
    if only_override:  # first: a row sorted by its overrides alone would come before the full
        overrides.insert(0, "data.hypothesis_only=true")
    write_job(folder, model=model, dim=128, seed=seed, data=data, test=test, paper=None,
              experiment=f"protocols/{data}", overrides=overrides)
    path = folder / "results.json"
    results = json.loads(path.read_text())
    results["labels"] = LABELS
    results["test_confusion_matrix"] = confusion or CONFUSION[seed % 2 - 1]
    if breakdowns is not None:
        results["breakdowns"] = breakdowns
    if hypothesis_only is not None:
        results["hypothesis_only"] = hypothesis_only
    results["metrics"].update(metrics or {})
    path.write_text(json.dumps(results))
    return path


def runs(root: Path, study: str) -> Path:
    return root / study / "runs"


def line_of(table: str, start: str) -> str:
    """The one table line that begins with ``start``."""
    found = [ln for ln in table.splitlines() if ln.startswith(start)]
    assert len(found) == 1, (start, table)
    return found[0]


def test_per_class_accuracy_is_the_recall_of_each_gold_row():
    assert per_class_from_confusion(CONFUSION[0], LABELS) == pytest.approx(
        {"entailment": 80.0, "neutral": 60.0, "contradiction": 50.0})
    assert per_class_from_confusion([[0, 0], [1, 3]], ["a", "b"]) == {"a": None, "b": 75.0}
    assert per_class_from_confusion([[1, 2]], ["a", "b"]) == {}  # not square: no figures


def test_breakdowns_win_over_the_confusion_matrix_and_further_sets_are_named():
    old = from_record({"test_confusion_matrix": CONFUSION[0], "labels": LABELS})
    assert old.sets == {"test": {"per_class": pytest.approx(
        {"entailment": 80.0, "neutral": 60.0, "contradiction": 50.0})}}
    new = from_record({"test_confusion_matrix": CONFUSION[0], "labels": LABELS,
                       "breakdowns": {"test": breakdown((0.9, 0.5, 0.1), (.1, .2, .3, .4, None))}})
    assert new.sets["test"]["per_class"] == pytest.approx(
        {"entailment": 90.0, "neutral": 50.0, "contradiction": 10.0})
    assert new.sets["test"]["overlap"]["0-25%"] == pytest.approx(10.0)
    assert new.sets["test"]["overlap"]["100%"] is None  # an empty bucket
    assert further_sets({"train/acc": .9, "val/acc": .8, "test/acc": .7, "train/acc_eval": .9,
                         "test/acc_per_class/neutral": .5, "test_mismatched/acc": .61,
                         "hans/acc": .5, "hans/loss": 1.0}) == pytest.approx(
        {"test_mismatched": 61.0, "hans": 50.0})
    assert not old.hypothesis_only
    assert from_record({"hypothesis_only": True}).hypothesis_only
    assert from_record({"overrides": ["+data.hypothesis_only=true"]}).hypothesis_only
    # a multirun's jobs record booleans as Hydra's sweeper writes them back
    assert from_record({"overrides": ["data.hypothesis_only=True"]}).hypothesis_only
    assert not from_record({"overrides": ["data.hypothesis_only=False"]}).hypothesis_only


def test_per_class_columns_from_old_records_and_overlap_only_where_recorded(tmp_path):
    study = runs(tmp_path, "old")
    for seed in (1, 2):  # records before `breakdowns`: per class from the confusion matrix
        record(study / str(seed), seed=seed)
    table = breakdown_table(load_rows(tmp_path), "snli_dev2test")
    assert "| # | model | entailment | neutral | contradiction |" in table
    assert line_of(table, "| 1 |") == "| 1 | lstm d=128 | 70.0 ± 14.1 | 70.0 ± 14.1 | 60.0 ± 14.1 |"
    assert "overlap" not in table

    # a run of another model that recorded overlap buckets: its columns appear, the old row
    # shows – there
    record(runs(tmp_path, "new") / "0", model="decatt", breakdowns={
        "test": breakdown((0.7, 0.6, 0.5), (0.4, 0.5, 0.6, 0.7, 0.9))})
    table = breakdown_table(load_rows(tmp_path), "snli_dev2test")
    assert "| overlap 0-25% | overlap 25-50% | overlap 50-75% | overlap 75-100% | overlap 100% |" \
        in table
    assert line_of(table, "| 1 | decatt") == \
        "| 1 | decatt d=128 | 70.0 | 60.0 | 50.0 | 40.0 | 50.0 | 60.0 | 70.0 | 90.0 |"
    assert line_of(table, "| 2 | lstm") == \
        "| 2 | lstm d=128 | 70.0 ± 14.1 | 70.0 ± 14.1 | 60.0 ± 14.1 | – | – | – | – | – |"
    assert "word-overlap bucket" in table.splitlines()[0]


def test_a_row_whose_runs_recorded_overlap_in_part_says_how_many(tmp_path):
    study = runs(tmp_path, "mixed")
    record(study / "1", seed=1)  # no breakdowns
    record(study / "2", seed=2, breakdowns={"test": breakdown((0.6, 0.8, 0.7),
                                                              (0.1, 0.2, 0.3, 0.4, 0.5))})
    table = breakdown_table(load_rows(tmp_path), "snli_dev2test")
    assert line_of(table, "| 1 |").split(" | ")[5] == "10.0 (1)"  # overlap 0-25%: 1 of 2 runs


@pytest.mark.parametrize("only_override", [True, False], ids=["override", "results flag"])
def test_a_hypothesis_only_run_is_a_row_of_its_own(tmp_path, only_override):
    full, only = runs(tmp_path, "full"), runs(tmp_path, "hyp")
    for seed, acc in ((1, 0.70), (2, 0.72)):
        record(full / str(seed), seed=seed, test=acc)
    for seed, acc in ((1, 0.50), (2, 0.52), (3, 0.54)):  # more runs than the full model
        record(only / str(seed), seed=seed, test=acc, hypothesis_only=True,
               only_override=only_override)
    rows = load_rows(tmp_path)
    assert sorted((r.label, len(r.jobs)) for r in rows) == [
        ("lstm d=128", 2), ("lstm d=128, hypothesis only", 3)]
    table = protocol_table(rows, "snli_dev2test", tmp_path)
    lines = [ln for ln in table.splitlines() if ln.startswith("| lstm")]
    assert lines[0].startswith("| lstm d=128 | 1,289,203 | 71.0 ± 1.4 (2) |")  # full model first
    assert lines[1].startswith("| lstm d=128, hypothesis only | 1,289,203 | 52.0 ± 2.0 (3) |")
    assert "`data.hypothesis_only=true`" not in table.split("Commands")[0]  # said in words
    if only_override:  # the command reproduces the run
        assert "-m experiment=protocols/snli_dev2test data.hypothesis_only=true model=lstm " \
            "seed=1,2,3" in table
    # the README's headline shows the full model, never the baseline (which has more runs)
    assert "| LSTM (row 1) | 71.0 ± 1.4 (2) |" in headline_table(rows, tmp_path)
    assert "| 2 | lstm d=128, hypothesis only |" in breakdown_table(rows, "snli_dev2test")


def test_further_test_sets_get_columns_and_their_own_breakdowns(tmp_path):
    study = runs(tmp_path, "mnli")
    genres = {"fiction": 0.6, "government": 0.7}
    for seed, mismatched in ((1, 0.60), (2, 0.64)):
        record(study / str(seed), seed=seed, metrics={"test_mismatched/acc": mismatched},
               breakdowns={"test": breakdown((0.8, 0.6, 0.5), genre=genres),
                           "test_mismatched": breakdown((0.7, 0.5, 0.4),
                                                        genre={"letters": 0.65})})
    record(runs(tmp_path, "plain") / "1", model="decatt")  # evaluated on test only
    table = breakdown_table(load_rows(tmp_path), "snli_dev2test")
    main, mismatched = table.split("`test_mismatched`:")
    assert "| genre fiction | genre government | test_mismatched acc |" in main
    assert line_of(main, "| 2 |").endswith("| 60.0 ± 0.0 | 70.0 ± 0.0 | 62.0 ± 2.8 |")
    assert line_of(main, "| 1 | decatt").endswith("| – | – | – |")
    assert "genre letters" in mismatched and "genre fiction" not in mismatched
    assert line_of(mismatched, "| 2 |") == \
        "| 2 | lstm d=128 | 70.0 ± 0.0 | 50.0 ± 0.0 | 40.0 ± 0.0 | 65.0 ± 0.0 |"
    assert "| 1 | decatt" not in mismatched  # no breakdowns of that set: no line
    assert "further test set" in main.splitlines()[0]


def test_generated_tables_add_a_breakdown_block_per_protocol_and_documents_pick(tmp_path):
    record(runs(tmp_path, "s") / "1")
    tables = generated_tables(tmp_path)
    assert {"snli_dev2test_breakdown", "sick_breakdown"} <= set(tables)
    assert "No per-run records" in tables["sick_breakdown"]
    doc = tmp_path / "doc.md"  # a document with one breakdown block and no other table
    doc.write_text("x\n<!-- results:snli_dev2test_breakdown -->\n"
                   "<!-- /results:snli_dev2test_breakdown -->\ny\n")
    assert update_documents(tmp_path, [doc]) == [doc]
    assert "| 1 | lstm d=128 | 80.0 | 60.0 | 50.0 |" in doc.read_text()
    assert fill_markers(doc.read_text(), tables, "doc") == doc.read_text()


def test_the_sweep_report_has_per_class_and_overlap_tables(tmp_path):
    sweep = tmp_path / "sweep"
    for seed in (1, 2):
        record(sweep / str(seed), seed=seed, data="snli", metrics={"hans/acc": 0.5 + seed / 100},
               breakdowns={"test": breakdown((0.6 + seed / 10, 0.5, 0.4),
                                             (0.1, 0.2, 0.3, 0.4, 0.5)),
                           "hans": breakdown((0.9, 0.1, 0.2))})
    record(sweep / "3", seed=1, data="snli", test=0.5, hypothesis_only=True,
           only_override=True)
    text = make_report([sweep], out=tmp_path / "out", plot=False).markdown
    section = text.split("Accuracy on `test`")[1].split("\n\n", 2)[1]
    assert "| row " in section and "| overlap 0-25% |" in section
    full = line_of(section, "| 1 (lstm d=128)")
    assert "75.00 ± 7.07" in full and "10.00" in full
    only = line_of(section, "| 1 (hypothesis only) (lstm d=128)")
    assert "80.00 | 60.00 | 50.00 | – |" in only  # from its confusion matrix, no overlap
    # the baseline is its own row of the paper table, not averaged in nor compared
    main = text.split("## SNLI")[1].split("Accuracy on")[0]
    assert "hypothesis only (premise replaced by a constant)" in line_of(main, "| 1 (hypothesis")
    assert "65.00 ± 0.00 (2)" in line_of(main, "| 1 | 128D")
    assert "| hans acc |" in section and "51.50 ± 0.71 |" in full  # a further test set
    hans = text.split("Accuracy on `hans`")[1].split("\n\n", 2)[1]
    assert line_of(hans, "| 1 (lstm d=128)").startswith("| 1 (lstm d=128) | 90.00 ± 0.00 |")
    assert "hypothesis only" not in hans  # that run was not evaluated on it
    csv_rows = (tmp_path / "out" / "report.csv").read_text().splitlines()
    assert "overlap 0-25%=10.0±0.0(2)" in next(r for r in csv_rows if r.startswith("snli,pair,1,"))
