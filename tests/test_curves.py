"""curves.py: validation curves and the learning curve from results.json files, a panel or a
line per row of the report (``report.rows``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from entailment_lab.curves import (
    learning_curve_table,
    load_rows,
    plot_learning_curve,
    plot_validation_curves,
    run_labels,
    write_learning_curve_markdown,
)

WHOLE = 8840  # the training pairs of the whole split


def write_run(folder, model, seed, train_size, test, history, status="completed"):
    """A results.json as a run of ``model=MODEL [data.train_size=N] seed=SEED`` writes it
    (``train_size`` = ``WHOLE``: the whole training split, no ``data.train_size``)."""
    folder.mkdir(parents=True)
    sized = [f"data.train_size={train_size}"] if train_size != WHOLE else []
    (folder / "results.json").write_text(json.dumps({
        "schema": 1, "status": status, "task": "train", "model": model, "dim": None,
        "seed": seed, "data": "snli_dev2test", "data_stats": {"train/size": train_size},
        "overrides": ["experiment=protocols/snli_dev2test", f"model={model}", *sized,
                      f"seed={seed}"],
        "metrics": {"test/acc": test, "val/acc_best": max(h["val/acc"] for h in history)},
        "history": history}))


@pytest.fixture()
def runs(tmp_path):
    curve = [{"epoch": e, "val/acc": v, "train/acc": v + 0.1} for e, v in
             enumerate([0.4, 0.5, 0.55, 0.54])]
    for seed, (small, large) in enumerate([(0.50, 0.60), (0.52, 0.62)], start=1):
        write_run(tmp_path / f"a{seed}", "lexical", seed, 1000, small, curve)
        write_run(tmp_path / f"b{seed}", "lexical", seed, WHOLE, large, curve)
    write_run(tmp_path / "failed", "lexical", 3, WHOLE, 0.99, curve, status="failed")
    return tmp_path


def test_learning_curve_aggregates_completed_runs_over_seeds(runs):
    table = learning_curve_table(load_rows([runs]))
    assert table["train_size"].tolist() == [1000, WHOLE]  # the whole set at its recorded pairs
    row = table[table["train_size"] == WHOLE].iloc[0]
    assert row["count"] == 2  # the failed run is left out
    assert row["mean"] == pytest.approx(61.0) and row["std"] == pytest.approx(2 ** 0.5)


def test_a_model_run_on_one_size_only_is_no_learning_curve(runs):
    write_run(runs / "c1", "lstm", 1, WHOLE, 0.6, [{"epoch": 0, "val/acc": 0.5}])
    assert set(learning_curve_table(load_rows([runs]))["model"]) == {"lexical"}


def test_both_plots_and_the_table_are_written(runs, tmp_path):
    loaded = load_rows([runs])
    out = tmp_path / "out"
    paths = [plot_validation_curves(loaded, out), plot_learning_curve(loaded, out),
             write_learning_curve_markdown(loaded, out)]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert "61.00 ± 1.41 (2)" in (out / "learning_curve.md").read_text()


def _figure(runs, tmp_path, monkeypatch):
    """The validation-curve figure of the runs below ``runs``, not saved."""
    import entailment_lab.curves as curves

    figures = {}
    monkeypatch.setattr(curves, "save_figures",
                        lambda figs, out, dpi: figures.update(figs) or [out / "x.png"])
    plot_validation_curves(load_rows([runs]), tmp_path / "out")
    return figures["validation_curves"]


def test_a_learning_curve_gets_one_validation_panel_per_training_size(runs, tmp_path, monkeypatch):
    """A panel is a row of the report: runs of one model on several sizes are not drawn in one
    panel (their epochs differ)."""
    write_run(runs / "c1", "lstm", 1, WHOLE, 0.6, [{"epoch": 0, "val/acc": 0.5}])
    titles = [ax.get_title() for ax in _figure(runs, tmp_path, monkeypatch).axes
              if ax.get_title()]
    assert titles == ["lexical, 1,000 pairs — snli_dev2test", "lexical — snli_dev2test",
                      "lstm — snli_dev2test"]


def test_each_run_is_labelled_by_its_seed_and_epochs_count_from_0(runs, tmp_path, monkeypatch):
    ax = _figure(runs, tmp_path, monkeypatch).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["seed 1", "seed 2"]
    curves = [line for line in ax.get_lines() if line.get_label().startswith("seed")]
    assert [list(line.get_xdata()) for line in curves] == [[0, 1, 2, 3]] * 2  # as recorded
    best = [line for line in ax.get_lines() if not line.get_label().startswith("seed")]
    assert [(list(b.get_xdata()), list(b.get_ydata())) for b in best] == \
        [([2], [pytest.approx(55.0)])] * 2  # the best epoch, as history counts it


def test_runs_of_one_row_that_share_a_seed_are_told_apart_by_folder(tmp_path):
    write_run(tmp_path / "study_a" / "0", "lstm", 42, WHOLE, 0.6, [{"epoch": 0, "val/acc": .5}])
    write_run(tmp_path / "study_b" / "0", "lstm", 42, WHOLE, 0.6, [{"epoch": 0, "val/acc": .5}])
    write_run(tmp_path / "study_b" / "1", "lstm", 7, WHOLE, 0.6, [{"epoch": 0, "val/acc": .5}])
    [row] = load_rows([tmp_path])
    # the row counts seed 42 once (rows.newest_per_seed); labelled together, the two records
    # are told apart by their folders
    assert len(row.jobs) == 2 and len(row.replaced) == 1
    assert sorted(run_labels([*row.jobs, *row.replaced])) == [
        "seed 42 (study_a/0)", "seed 42 (study_b/0)", "seed 7"]


def test_cli_says_what_is_wrong_with_a_bad_path(tmp_path, capsys):
    import runpy
    import sys

    script = str(Path(__file__).resolve().parents[1] / "src" / "curves.py")
    argv = sys.argv
    (tmp_path / "empty").mkdir()
    one_size = tmp_path / "one_size"  # --learning-curve: no run on a smaller training set
    write_run(one_size / "0", "lstm", 1, WHOLE, 0.6, [{"epoch": 0, "val/acc": 0.5}])
    try:
        for path, message, extra in [(tmp_path / "nope", "no such folder", []),
                                     (tmp_path / "empty", "no completed training run", []),
                                     (one_size, "no setting has completed runs on smaller "
                                      "training sets", ["--learning-curve"])]:
            sys.argv = [script, str(path), "--out", str(tmp_path / "out"), *extra]
            with pytest.raises(SystemExit) as stop:
                runpy.run_path(script, run_name="__main__")
            err = capsys.readouterr().err
            assert stop.value.code == 1 and message in err and err.count("\n") == 1
    finally:
        sys.argv = argv
    assert not (tmp_path / "out").exists()  # a failure writes nothing
