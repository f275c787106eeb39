"""curves.py: validation curves and the learning curve from results.json files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from entailment_lab.curves import (
    learning_curve_table,
    load_runs,
    plot_learning_curve,
    plot_validation_curves,
    write_learning_curve_markdown,
)


def write_run(folder, model, seed, train_size, test, history, status="completed"):
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "status": status, "task": "train", "model": model, "dim": None, "seed": seed,
        "data": "snli_dev2test", "data_stats": {"train/size": train_size},
        "metrics": {"test/acc": test, "val/acc_best": max(h["val/acc"] for h in history)},
        "history": history}))


@pytest.fixture()
def runs(tmp_path):
    curve = [{"epoch": e, "val/acc": v, "train/acc": v + 0.1} for e, v in
             enumerate([0.4, 0.5, 0.55, 0.54])]
    for seed, (small, large) in enumerate([(0.50, 0.60), (0.52, 0.62)], start=1):
        write_run(tmp_path / f"a{seed}", "lexical", seed, 1000, small, curve)
        write_run(tmp_path / f"b{seed}", "lexical", seed, 8840, large, curve)
    write_run(tmp_path / "failed", "lexical", 3, 8840, 0.99, curve, status="failed")
    return tmp_path


def test_learning_curve_aggregates_completed_runs_over_seeds(runs):
    table = learning_curve_table(load_runs([runs]))
    row = table[table["train_size"] == 8840].iloc[0]
    assert row["count"] == 2  # the failed run is left out
    assert row["mean"] == pytest.approx(61.0) and row["std"] == pytest.approx(2 ** 0.5)


def test_both_plots_and_the_table_are_written(runs, tmp_path):
    loaded = load_runs([runs])
    out = tmp_path / "out"
    paths = [plot_validation_curves(loaded, out), plot_learning_curve(loaded, out),
             write_learning_curve_markdown(loaded, out)]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert "61.00 ± 1.41 (2)" in (out / "learning_curve.md").read_text()


def test_a_learning_curve_gets_one_validation_panel_per_training_size(runs, tmp_path, monkeypatch):
    """Runs of one model on several sizes are not drawn in one panel (their epochs differ)."""
    import entailment_lab.curves as curves

    figures = {}
    monkeypatch.setattr(curves, "save_figures",
                        lambda figs, out, dpi: figures.update(figs) or [out / "x.png"])
    write_run(runs / "c1", "lstm", 1, 8840, 0.6, [{"epoch": 0, "val/acc": 0.5}])
    plot_validation_curves(load_runs([runs]), tmp_path / "out")
    titles = [ax.get_title() for ax in figures["validation_curves"].axes if ax.get_title()]
    assert titles == ["lexical — snli_dev2test, 1,000 pairs",
                      "lexical — snli_dev2test, 8,840 pairs", "lstm — snli_dev2test"]


def test_cli_says_what_is_wrong_with_a_bad_path(tmp_path, capsys):
    import runpy
    import sys

    script = str(Path(__file__).resolve().parents[1] / "src" / "curves.py")
    argv = sys.argv
    try:
        for path, message in [(tmp_path / "nope", "no such folder"),
                              (tmp_path, "no completed training run")]:
            sys.argv = [script, str(path), "--out", str(tmp_path / "out")]
            with pytest.raises(SystemExit) as stop:
                runpy.run_path(script, run_name="__main__")
            assert stop.value.code == 1 and message in capsys.readouterr().err
    finally:
        sys.argv = argv
    assert not (tmp_path / "out").exists()  # a failure writes nothing
