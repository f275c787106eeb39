"""The results report: collecting jobs, matching paper rows, aggregating seeds, the CLI."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from entailment_lab.errors import UserError
from entailment_lab.paper_tables import PAIR_ROWS, TABLE2, parse_count
from entailment_lab.report import (
    check_wandb_reachable,
    find_job_folders,
    jobs_from_wandb_runs,
    make_report,
    match_row,
    reduced_budget,
)
from entailment_lab.report.collect import load_job, process_alive
from tests.entry_points import run_entry_point

NOW = time.strftime("%Y-%m-%dT%H:%M:%S")


def write_job(folder: Path, *, status="completed", model="din1", dim=400, seed=1, data="snli",
              train=0.9, test=0.85, params=1_289_203, paper=1_008_403, experiment=None,
              tags=(), pid=None, error=None, overrides=None, inputs="pair", budget=None,
              stopped_by=None, code=None):
    """A results.json as ``pipeline.train`` writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    results = {
        "schema": 1, "status": status, "started": NOW, "pid": pid or os.getpid(),
        "task": "train", "model": model, "inputs": inputs, "dim": dim, "seed": seed,
        "data": data, "tags": list(tags),
        "choices": {"model": model, "data": data, "experiment": experiment, "debug": None,
                    "embeddings": "glove6b50d", "logger": "wandb"},
        "overrides": overrides if overrides is not None else [f"model={model}", f"seed={seed}"],
        "wall_time_s": 10.0, "params": {"trainable": params},
    }
    if code is not None:  # (commit, dirty)
        results["code"] = {"commit": code[0], "dirty": code[1], "python": "3.11.7",
                           "torch": "2.13.0+cpu"}
    if budget is not None:  # (max_epochs given, configured_max_epochs)
        results["budget"] = {"max_epochs": budget[0], "configured_max_epochs": budget[1]}
    if paper is not None:
        results["params"]["paper_convention"] = paper
    if status == "completed":
        results["metrics"] = {"val/acc_best": test, "train/acc_at_best": train, "test/acc": test,
                              "train/acc_eval": train + 0.02, "epochs": 3}
        if stopped_by is not None:
            results["metrics"]["stopped_by"] = stopped_by
    if error:
        results["error"] = error
    (folder / "results.json").write_text(json.dumps(results))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture()
def sweep(tmp_path):
    """A multirun folder: two rows x 3 seeds, a failed, a stale, an empty and a log-only job."""
    root = tmp_path / "multirun" / "2026-11-21" / "10-00-00-abcdef"
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    for i, (seed, acc) in enumerate([(1, 0.87), (2, 0.88), (3, 0.89)]):
        write_job(root / str(i), seed=seed, test=acc, train=acc + 0.02,
                  experiment="table2/row17")
    for i, (seed, acc) in enumerate([(1, 0.80), (2, 0.81), (3, 0.82)], start=3):
        write_job(root / str(i), model="lstm", dim=128, seed=seed, test=acc, params=620_547,
                  paper=None, tags=["table2", "row1"])
    write_job(root / "6", model="din2", dim=256, status="failed",
              error="RuntimeError: CUDA out of memory\nTraceback ...")
    write_job(root / "7", model="din2", dim=256, status="running", pid=dead_pid())
    (root / "8").mkdir()  # crashed before writing anything
    (root / "9").mkdir()
    (root / "9" / "train.log").write_text("[..][INFO] - start\n[..][ERROR] - killed by OOM\n")
    write_job(tmp_path / "outputs" / "sick_run", data="sick", test=0.84)  # DIN-1 on SICK
    return tmp_path


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_paper_tables_cover_table2_with_parsed_counts():
    assert [r.row for r in TABLE2] == list(range(1, 20))
    assert parse_count("1.4M") == 1_400_000 and parse_count("498k") == 498_000
    implemented = {r.row: (r.model, r.dim) for r in TABLE2 if r.implemented}
    assert implemented == {
        1: ("lstm", 128), 2: ("wbw_attention", 100), 3: ("dflstm", 600), 4: ("tclstm", 50),
        5: ("mlstm", 300), 6: ("lstmn", 300), 7: ("lstmn", 450), 8: ("decatt", 200),
        9: ("decatt_intra", 200), 10: ("rlstm", 300), 11: ("hyperlstm", 128),
        12: ("rlstm", 300), 13: ("din1", 256), 14: ("din2", 256), 15: ("din1", 324),
        16: ("din2", 324), 17: ("din1", 400), 18: ("din1_static", 400), 19: ("din2", 400)}
    assert [r.row for r in TABLE2 if r.authors_figure] == [10]


def test_one_model_two_rows_counts_under_the_reimplementation(tmp_path):
    """rLSTM is rows 10 (Sha et al.'s own figure) and 12 (the DIN paper's implementation): a
    run that declares no row counts under row 12; one that declares row 10 stays there."""
    write_job(tmp_path / "plain", model="rlstm", dim=300, overrides=["model=rlstm"])
    write_job(tmp_path / "row10", model="rlstm", dim=300, experiment="table2/row10")
    assert match_row(load_job(tmp_path / "plain"))[0].row == 12
    assert match_row(load_job(tmp_path / "row10")) == (TABLE2[9], None)


def test_finds_every_job_folder_including_empty_ones(sweep):
    folders = find_job_folders(sweep / "multirun")
    assert sorted(f.name for f in folders) == [str(i) for i in range(10)]


def test_sweep_report_aggregates_seeds_and_shows_every_row(sweep):
    report = make_report([sweep / "multirun", sweep / "outputs"], out=sweep / "out", plot=False)
    rows = read_csv(sweep / "out" / "report.csv")
    snli = {r["row"]: r for r in rows if r["data"] == "snli"}
    assert len(snli) == 20  # Table 2's 19 rows + DIIN, run or not
    row17 = snli["17"]
    assert float(row17["test_mean"]) == pytest.approx(88.0)
    assert float(row17["test_std"]) == pytest.approx(1.0)  # sample std of 87, 88, 89
    assert row17["test_n"] == "3" and row17["seeds"] == "1 2 3"
    assert float(row17["delta_test"]) == pytest.approx(0.0, abs=1e-9)
    assert float(row17["train_mean"]) == pytest.approx(90.0)
    assert float(row17["train_eval_mean"]) == pytest.approx(92.0)  # eval mode, best ckpt
    assert row17["params_trainable"] == "1289203"
    assert row17["params_paper_convention"] == "1008403"
    row1 = snli["1"]
    assert float(row1["test_mean"]) == pytest.approx(81.0)
    assert float(row1["delta_test"]) == pytest.approx(-0.8)
    assert row1["params_paper_convention"] == ""
    assert snli["13"]["status"] == "not run"
    assert snli["11"]["status"] == "not run"  # every Table 2 row has a model now
    assert not any(r["status"] == "not implemented" for r in rows)
    assert snli["14"]["status"] == "1 stale (process gone), 1 failed"
    assert len(rows) == sum(len(t.rows) for t in report.tables)

    md = report.markdown
    assert "| 17 | 20×20D DIN-1 (din1 d=400) | 1.0M | 1,289,203 | 1,008,403 | 90.5 | 88.0 | " \
           "90.00 ± 1.00 (3) | 92.00 ± 1.00 (3) | 88.00 ± 1.00 (3) | +0.00 | 3 done |" in md
    assert "| 1 | 128D LSTM encoder (lstm d=128) | 1.4M | 620,547 | – |" in md
    unfinished = md.split("## Jobs that did not complete")[1]
    assert "RuntimeError: CUDA out of memory |" in unfinished and "Traceback" not in unfinished
    assert "stale (process gone)" in unfinished
    assert "no results.json" in unfinished and "killed by OOM" in unfinished
    assert "folder is empty" in unfinished
    assert (sweep / "out" / "report.md").read_text() == md


def test_sick_runs_get_their_own_table_without_snli_numbers(sweep):
    report = make_report([sweep / "outputs"], out=sweep / "out", plot=False)
    assert [t.data for t in report.tables] == ["sick"]
    row17 = next(r for r in report.tables[0].rows if r.label == "17")
    assert row17.test.mean == pytest.approx(84.0)
    assert row17.delta is None and not row17.comparable  # SNLI's 88.0 is not SICK's
    assert "## SICK" in report.markdown and "88.0" not in report.markdown.split("## SICK")[1]
    models = {r.paper.model for r in report.tables[0].rows}
    assert models <= {r.model for r in PAIR_ROWS} and "dcnn_sentence" not in models


def test_partial_sweep_counts_running_and_failed_jobs(tmp_path):
    write_job(tmp_path / "0", model="din2", dim=400, seed=1, test=0.87)
    write_job(tmp_path / "1", model="din2", dim=400, seed=2, status="running")  # this process
    write_job(tmp_path / "2", model="din2", dim=400, seed=3, status="failed", error="E: x")
    write_job(tmp_path / "3", model="din1", dim=324, status="failed", error="E: y")
    write_job(tmp_path / "4", model="din1", dim=324, status="failed", error="E: z")
    report = make_report([tmp_path], plot=False)
    rows = {r.label: r for r in report.tables[0].rows}
    assert rows["19"].status == "1 done, 1 running, 1 failed"
    assert rows["19"].test.n == 1 and str(rows["19"].test) == "87.00 (1)"
    assert rows["15"].status == "failed (2)"
    assert (tmp_path / "report.md").is_file() and (tmp_path / "report.csv").is_file()


def test_rows_are_matched_by_experiment_tags_then_config(tmp_path):
    write_job(tmp_path / "a", model="din1_static", experiment="table2/row18")
    write_job(tmp_path / "b", model="din1", dim=256, tags=["table2", "row13", "din1", "d256"])
    write_job(tmp_path / "c", model="din2", dim=400, experiment="table2/row17")  # overridden
    write_job(tmp_path / "d", model="lstm", dim=64, paper=None)  # no paper row
    write_job(tmp_path / "e", model="decatt", dim=None, paper=None)
    jobs = {Path(j.folder).name: j for j in make_report([tmp_path], plot=False).jobs}
    assert jobs["a"].row.row == 18 and jobs["b"].row.row == 13 and jobs["e"].row.row == 8
    assert jobs["c"].row.row == 19 and "declares row 17" in jobs["c"].note
    assert jobs["d"].row is None
    md = (tmp_path / "report.md").read_text()
    assert "| – | lstm d=64 (no paper row) |" in md and "declares row 17" in md


def test_sentence_data_uses_the_dcnn_layout(tmp_path):
    for seed, acc in [(1, 0.47), (2, 0.49)]:
        write_job(tmp_path / f"s{seed}", model="dcnn_sentence", dim=None, data="sst5", seed=seed,
                  test=acc, params=30_000, paper=None)
    report = make_report([tmp_path], plot=False)
    (table,) = report.tables
    assert table.layout == "sentence" and [r.label for r in table.rows] == ["DCNN"]
    assert table.rows[0].delta == pytest.approx(48.0 - 48.5)
    assert "| DCNN | DCNN, SST fine-grained (dcnn_sentence) | 30,000 | 48.5 |" in report.markdown


def test_a_sentence_model_on_new_data_gets_the_sentence_layout(tmp_path):
    # The layout comes from what the model reads (Network.inputs, stored in results.json),
    # not from a list of model names: a new sentence model needs no report change.
    write_job(tmp_path / "a", model="my_cnn", dim=None, data="my_reviews", inputs="sentence")
    write_job(tmp_path / "b", model="lstm", dim=64, data="my_pairs")
    layouts = {t.data: t.layout for t in make_report([tmp_path], plot=False).tables}
    assert layouts == {"my_reviews": "sentence", "my_pairs": "pair"}


def test_mixed_settings_within_a_row_are_flagged(tmp_path):
    write_job(tmp_path / "0", seed=1, overrides=["seed=1"])
    write_job(tmp_path / "1", seed=2, overrides=["seed=2", "optimizer.lr=0.01"])
    md = make_report([tmp_path], plot=False).markdown
    assert "mixes settings" in md and "`optimizer.lr=0.01` (1 job)" in md


def test_where_the_data_files_lie_is_not_a_setting(tmp_path):
    """``data_root`` spelt relative in one run and absolute in another is the same protocol."""
    write_job(tmp_path / "0", seed=1, overrides=["seed=1", "data_root=../shared/data"])
    write_job(tmp_path / "1", seed=2, overrides=["seed=2", "data_root=/srv/shared/data"])
    assert "mixes settings" not in make_report([tmp_path], plot=False).markdown


def test_job_without_results_is_placed_by_its_hydra_config(tmp_path):
    job = tmp_path / "0"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "config.yaml").write_text(
        "task_name: train\nseed: 5\ndim: ${model.default_dim}\ntags: []\n"
        "model: {name: din1, default_dim: 324}\ndata: {name: snli}\n")
    (job / ".hydra" / "hydra.yaml").write_text(
        "hydra:\n  runtime: {choices: {model: din1, experiment: null}}\n"
        "  overrides: {task: [model=din1]}\n")
    report = make_report([tmp_path], plot=False)
    row15 = next(r for r in report.tables[0].rows if r.label == "15")
    assert row15.status == "1 no results.json" and row15.jobs[0].seed == 5


def test_png_is_written(sweep):
    report = make_report([sweep / "multirun", sweep / "outputs"], out=sweep / "out")
    png = sweep / "out" / "report.png"
    assert png in report.files and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000


def test_wandb_offline_fails_fast_with_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    start = time.monotonic()
    with pytest.raises(UserError, match="WANDB_MODE=offline"):
        make_report([], out=tmp_path, wandb_project="entity/project", wandb_group="g")
    assert time.monotonic() - start < 2


def test_wandb_unreachable_fails_fast(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    start = time.monotonic()
    with pytest.raises(UserError, match="cannot reach the W&B API at 127.0.0.1:9"):
        make_report([], out=tmp_path, wandb_project="entity/project", wandb_group="g")
    assert time.monotonic() - start < 5


def test_wandb_runs_become_jobs():
    run = SimpleNamespace(
        id="abc", url="https://wandb.ai/e/p/runs/abc", state="finished", tags=["table2", "row17"],
        config={"model": {"name": "din1"}, "dim": 400, "seed": 2, "data": {"name": "snli"}},
        summary_metrics={"test/acc": 0.875, "train/acc_at_best": 0.9,
                         "params/trainable": 1_289_203})
    crashed = SimpleNamespace(id="def", url=None, state="crashed", tags=[],
                              config={"model.name": "din2", "dim": 256, "data.name": "snli"},
                              summary_metrics={})
    raw = SimpleNamespace(id="ghi", url=None, state="running", tags=[], summary_metrics={},
                          config={"model": {"value": {"name": "lstm"}}, "dim": {"value": 128},
                                  "data": {"value": {"name": "snli", "hypothesis_only": True}}})
    done, failed, running = jobs_from_wandb_runs([run, crashed, raw], "e/p")
    # the premise hidden (data.hypothesis_only in the run's config): a row of its own
    assert running.diagnostics.hypothesis_only and not done.diagnostics.hypothesis_only
    assert (running.status, running.model, running.dim, running.row.row) == ("running", "lstm",
                                                                             128, 1)
    assert (done.status, done.model, done.dim, done.row.row) == ("completed", "din1", 400, 17)
    assert done.test == pytest.approx(87.5) and done.params == 1_289_203
    assert (failed.status, failed.model, failed.row.row) == ("failed", "din2", 14)
    assert failed.folder == "wandb:e/p/def"
    assert done.overrides == [] and reduced_budget(done) is None


def test_wandb_runs_with_a_truncated_budget_are_reduced():
    trainer = {"limit_train_batches": 4, "limit_val_batches": 1.0, "max_steps": -1,
               "fast_dev_run": False, "overfit_batches": 0.0, "max_time": None}
    run = SimpleNamespace(id="t", url=None, state="finished", tags=[], summary_metrics={},
                          config={"model": {"name": "din1"}, "dim": 400, "data": {"name": "snli"},
                                  "trainer": trainer})
    (job,) = jobs_from_wandb_runs([run], "e/p")
    assert reduced_budget(job) == "trainer.limit_train_batches=4"


@pytest.mark.parametrize(("summary", "reduced"), [
    ({"epochs": 30, "stopped_by": "max_epochs"}, None),
    ({"epochs": 12, "stopped_by": "early_stopping"}, None),
    ({"epochs": 12, "stopped_by": "max_time"}, "trainer.max_time=00:02:00:00"),
    ({}, "trainer.max_time=00:02:00:00"),  # a run logged before W&B summaries said
])
def test_wandb_runs_tell_a_binding_time_cap_from_one_that_did_not_bind(summary, reduced):
    trainer = {"max_epochs": 30, "max_steps": -1, "max_time": "00:02:00:00"}
    run = SimpleNamespace(id="t", url=None, state="finished", tags=[], summary_metrics=summary,
                          config={"model": {"name": "din1"}, "dim": 400, "data": {"name": "snli"},
                                  "trainer": trainer})
    (job,) = jobs_from_wandb_runs([run], "e/p")
    assert reduced_budget(job) == reduced


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python src/report.py ARGS``, in this process (tests/entry_points.py)."""
    return run_entry_point("src/report.py", args, env=env)


def test_cli_nonexistent_path_is_one_line_error(tmp_path):
    proc = run_cli(str(tmp_path / "nope"))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert "no such folder" in proc.stderr


def test_cli_wandb_offline_is_one_line_error(tmp_path):
    proc = run_cli("--wandb", "e/p", "--group", "g", env={"WANDB_MODE": "offline"})
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("error: --wandb needs the W&B API")


def test_cli_writes_the_report_into_the_first_path(sweep):
    proc = run_cli(str(sweep / "multirun"), "--no-plot")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# Results report")
    assert (sweep / "multirun" / "report.md").read_text() == proc.stdout


_RECORD_COLUMNS = ("data", "row", "model", "dim", "params_trainable", "train_mean", "train_std",
                   "train_eval_mean", "val_mean", "test_mean", "test_std", "test_n", "seeds",
                   "completed", "failed", "reduced_budget")


def test_copied_results_rebuild_the_same_report(sweep):
    """--copy-results keeps every results.json below OUT/runs; the report rebuilt from those
    copies alone gives the same figures for every row that has a results.json."""
    runs = [sweep / "multirun", sweep / "outputs" / "sick_run"]
    published = make_report(runs, out=sweep / "docs", plot=False, copy_results=True)
    copied = sorted(p.relative_to(sweep / "docs" / "runs").as_posix()
                    for p in (sweep / "docs" / "runs").rglob("results.json"))
    sweep_copy = "multirun/2026-11-21/10-00-00-abcdef"
    assert copied == sorted([f"{sweep_copy}/{i}/results.json" for i in range(8)]
                            + ["sick_run/results.json"])  # 8 and 9 wrote no results.json
    assert sweep / "docs" / "runs" in published.files
    rebuilt = make_report([sweep / "docs" / "runs"], out=sweep / "rebuilt", plot=False)
    assert len(rebuilt.jobs) == len(published.jobs) - 2

    def records(path):
        return [{c: row[c] for c in _RECORD_COLUMNS} for row in read_csv(path)
                if row["completed"] != "0" or row["failed"] != "0"]

    assert records(sweep / "rebuilt" / "report.csv") == records(sweep / "docs" / "report.csv")
    assert records(sweep / "docs" / "report.csv")  # the comparison is not empty


def test_copies_name_no_folder_of_this_machine(sweep, monkeypatch):
    monkeypatch.chdir(sweep)  # runs are started from the repository root
    run = sweep / "outputs" / "sick_run"
    data = json.loads((run / "results.json").read_text())
    data["best_checkpoint"] = str(run / "checkpoints" / "epoch_003.ckpt")
    data["resume"] = f"python src/train.py ckpt_path={run}/checkpoints/last.ckpt"
    (run / "results.json").write_text(json.dumps(data))
    make_report([sweep / "outputs"], out=sweep / "docs", plot=False, copy_results=True)
    copy = (sweep / "docs" / "runs" / "outputs" / "sick_run" / "results.json").read_text()
    assert str(sweep) not in copy
    copied = json.loads(copy)
    assert copied["best_checkpoint"] == "outputs/sick_run/checkpoints/epoch_003.ckpt"
    assert copied["resume"].endswith("ckpt_path=outputs/sick_run/checkpoints/last.ckpt")
    assert copied["metrics"] == data["metrics"]  # the figures are untouched


def test_copy_results_replaces_the_earlier_copies(sweep):
    out = sweep / "docs"
    make_report([sweep / "multirun", sweep / "outputs"], out=out, plot=False, copy_results=True)
    assert (out / "runs" / "outputs" / "sick_run" / "results.json").is_file()
    make_report([sweep / "multirun"], out=out, plot=False, copy_results=True)
    assert not (out / "runs" / "outputs").exists()  # no copy of a run the report left out
    assert (out / "runs" / "multirun").is_dir()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_a_failed_swap_keeps_the_earlier_copies_and_writes_no_report(sweep, monkeypatch):
    out = sweep / "docs"
    make_report([sweep / "outputs"], out=out, plot=False, copy_results=True)
    before = (out / "runs" / "outputs" / "sick_run" / "results.json").read_bytes()
    (out / "report.md").unlink()
    rename = Path.rename

    def fail_into_place(self, target):  # the new copies cannot be renamed into place
        if self.name.endswith(".tmp") and Path(target) == out / "runs":
            raise OSError("disk full")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", fail_into_place)
    with pytest.raises(OSError, match="disk full"):
        make_report([sweep / "multirun"], out=out, plot=False, copy_results=True)
    assert (out / "runs" / "outputs" / "sick_run" / "results.json").read_bytes() == before
    assert not (out / "runs" / "multirun").exists()
    assert sorted(p.name for p in out.iterdir()) == ["report.csv", "runs"]  # nothing new


@pytest.mark.parametrize("out", [None, "multirun/2026-11-21"])
def test_copies_inside_a_run_folder_are_refused_before_writing(sweep, out):
    with pytest.raises(UserError, match="inside the run folder"):
        make_report([sweep / "multirun"], out=sweep / out if out else None, plot=False,
                    copy_results=True)
    assert not list((sweep / "multirun").rglob("runs"))
    assert not list((sweep / "multirun").rglob("report.*"))


def test_two_runs_copied_to_the_same_place_are_refused(tmp_path):
    write_job(tmp_path / "a" / "run")
    write_job(tmp_path / "b" / "run", seed=2)
    with pytest.raises(UserError, match="two jobs would be copied"):
        make_report([tmp_path / "a" / "run", tmp_path / "b" / "run"], out=tmp_path / "docs",
                    plot=False, copy_results=True)
    assert not (tmp_path / "docs").exists()


def test_cli_copy_results(sweep):
    proc = run_cli(str(sweep / "outputs"), "--out", str(sweep / "docs"), "--no-plot",
                   "--copy-results")
    assert proc.returncode == 0, proc.stderr
    assert (sweep / "docs" / "runs" / "outputs" / "sick_run" / "results.json").is_file()


def test_the_code_each_row_ran_is_named_and_a_mix_of_commits_is_flagged(tmp_path):
    a, b = "a" * 40, "b" * 40
    write_job(tmp_path / "0", seed=1, code=(a, False))
    write_job(tmp_path / "1", seed=2, code=(b, True))
    write_job(tmp_path / "2", seed=3)  # written before results.json recorded its code
    write_job(tmp_path / "3", model="lstm", dim=128, seed=1, paper=None, code=(a, False))
    markdown = make_report([tmp_path], plot=False).markdown
    assert ("code of the completed jobs: `aaaaaaa` (2 jobs); `bbbbbbb` (1 job); no recorded "
            "commit (1 job); 1 of them ran code that differed from its commit") in markdown
    assert "row 17 (din1 d=400) averages jobs of 2 commits: aaaaaaa, bbbbbbb" in markdown
    assert markdown.count("averages jobs of") == 1  # the LSTM row ran one commit


def test_wandb_runs_already_read_from_folders_count_once(monkeypatch, tmp_path):
    write_job(tmp_path / "0", seed=1, test=0.88)
    results = json.loads((tmp_path / "0" / "results.json").read_text())
    (tmp_path / "0" / "results.json").write_text(json.dumps({**results, "wandb_run_id": "r0"}))

    def run(run_id, seed):
        return SimpleNamespace(id=run_id, url=None, state="finished", tags=[], summary_metrics={
            "test/acc": 0.86}, config={"model": {"name": "din1"}, "dim": 400, "seed": seed,
                                       "data": {"name": "snli"}})

    class FakeApi:
        def __init__(self, timeout=None):
            pass

        def runs(self, path, filters=None, lazy=True):
            assert path == "e/p" and filters == {"group": "g"} and lazy is False
            return [run("r0", 1), run("r1", 2)]

    monkeypatch.setattr("entailment_lab.report.wandb_runs.check_wandb_reachable", lambda: None)
    monkeypatch.setitem(sys.modules, "wandb", SimpleNamespace(Api=FakeApi))
    report = make_report([tmp_path], wandb_project="e/p", wandb_group="g", plot=False)
    row17 = next(r for r in report.tables[0].rows if r.label == "17")
    assert sorted(j.test for j in row17.jobs) == pytest.approx([86.0, 88.0])


@pytest.mark.parametrize(("args", "message"), [
    ((), "give at least one folder"),
    (("--group", "g", "."), "--group needs --wandb"),
    (("--wandb", "no-slash"), "ENTITY/PROJECT"),
])
def test_cli_argument_errors(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 1 and message in proc.stderr and proc.stderr.count("\n") == 1


def test_a_failed_plot_writes_no_report_files(monkeypatch, sweep):
    def fail(tables):
        raise RuntimeError("no renderer")

    monkeypatch.setattr("entailment_lab.report.plot.plot_png", fail)
    with pytest.raises(RuntimeError, match="no renderer"):
        make_report([sweep / "multirun"], out=sweep / "out")
    assert not (sweep / "out").exists() or not any((sweep / "out").iterdir())


def test_wandb_server_that_never_answers_times_out(monkeypatch):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
    start = time.monotonic()
    with listener, pytest.raises(UserError, match="within 0.5 s: timed out"):
        check_wandb_reachable(timeout=0.5)
    assert time.monotonic() - start < 3


def test_a_reused_pid_makes_a_running_job_stale():
    old = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600))
    assert process_alive(os.getpid(), NOW)
    assert not process_alive(os.getpid(), old)  # this process started after the job
    assert not process_alive(dead_pid(), NOW) and not process_alive(None, NOW)


def _debug_job(folder, **kwargs):
    write_job(folder, **kwargs)
    results = json.loads((folder / "results.json").read_text())
    results["choices"]["debug"] = "tiny"
    (folder / "results.json").write_text(json.dumps(results))


def test_reduced_budget_runs_are_marked_and_not_compared(tmp_path):
    write_job(tmp_path / "full", seed=1, test=0.86, experiment="table2/row17")
    _debug_job(tmp_path / "tiny", seed=1, test=0.40, experiment="table2/row17")
    write_job(tmp_path / "short", seed=2, test=0.41, experiment="table2/row17",
              overrides=["experiment=table2/row17", "trainer.limit_train_batches=4"])
    write_job(tmp_path / "longer", model="decatt", dim=200, seed=1, test=0.85,
              overrides=["model=decatt", "trainer.max_epochs=90"])  # more than the recipe's 60
    report = make_report([tmp_path], plot=False)
    rows = {r["row"]: r for r in read_csv(tmp_path / "report.csv") if r["data"] == "snli"}
    assert float(rows["17"]["test_mean"]) == pytest.approx(86.0)  # only the full run
    assert rows["17"]["delta_test"] != "" and rows["17"]["reduced_budget"] == ""
    reduced = rows["17 (reduced)"]
    assert reduced["completed"] == "2" and reduced["test_n"] == "2"
    assert reduced["reduced_budget"] == "debug=tiny, trainer.limit_train_batches=4"
    assert reduced["delta_test"] == "" and reduced["paper_test"] == ""
    assert rows["8"]["delta_test"] != "" and "8 (reduced)" not in rows
    order = [r.label for r in report.tables[0].rows]
    assert order.index("17 (reduced)") == order.index("17") + 1
    assert "reduced budget (debug=tiny, trainer.limit_train_batches=4): not compared" in \
        report.markdown
    assert "--compare-reduced" in report.markdown
    compared = make_report([tmp_path], plot=False, compare_reduced=True)
    row17 = next(rr for rr in compared.tables[0].rows if rr.label == "17")
    assert row17.test.n == 3 and row17.delta is not None


def test_budget_recorded_at_run_time_decides_what_is_reduced(tmp_path):
    """A run records its config's epoch budget; the report judges a command-line
    ``trainer.max_epochs`` against that, not against the recipe files of today's checkout
    (``decatt_intra``'s recipe inherits its budget; the old check fell back to 30 for it)."""
    cut = ["model=decatt_intra", "trainer.max_epochs=45"]
    write_job(tmp_path / "cut", model="decatt_intra", dim=None, overrides=cut, budget=(45, 60))
    write_job(tmp_path / "long", model="decatt_intra", dim=None, budget=(90, 60),
              overrides=["model=decatt_intra", "trainer.max_epochs=90"])
    assert reduced_budget(load_job(tmp_path / "cut")) == "trainer.max_epochs=45"
    assert reduced_budget(load_job(tmp_path / "long")) is None


def test_a_time_cap_reduces_a_run_only_where_it_stopped_it(tmp_path):
    """``trainer.max_time`` is a safety cap: a run that still trained every epoch of its budget
    (results.json metrics "epochs" = budget), or that its early stopping ended, is whole; one
    the cap stopped is reduced."""
    cap = ["model=din1", "trainer.max_time=00:01:40:00"]
    write_job(tmp_path / "whole", overrides=cap, budget=(3, 3))  # write_job trains 3 epochs
    write_job(tmp_path / "cut", overrides=cap, budget=(30, 30))
    write_job(tmp_path / "running", overrides=cap, budget=(3, 3), status="running")
    assert reduced_budget(load_job(tmp_path / "whole")) is None
    assert reduced_budget(load_job(tmp_path / "cut")) == "trainer.max_time=00:01:40:00"
    assert reduced_budget(load_job(tmp_path / "running")) == "trainer.max_time=00:01:40:00"
    # What ended the fit, where results.json records it (metrics "stopped_by"): early stopping
    # before the budget's last epoch is the protocol's rule, not the cap's doing.
    write_job(tmp_path / "stopped", overrides=cap, budget=(30, 30), stopped_by="early_stopping")
    write_job(tmp_path / "timed_out", overrides=cap, budget=(30, 30), stopped_by="max_time")
    assert reduced_budget(load_job(tmp_path / "stopped")) is None
    assert reduced_budget(load_job(tmp_path / "timed_out")) == "trainer.max_time=00:01:40:00"


def test_single_runs_are_not_called_a_mean_over_seeds(tmp_path):
    write_job(tmp_path / "a", seed=1, experiment="table2/row17")
    md = make_report([tmp_path], plot=False).markdown
    assert "one run per row (n = 1)" in md and "mean ±" not in md.split("## SNLI")[0]
    write_job(tmp_path / "b", seed=2, experiment="table2/row17")
    md = make_report([tmp_path], plot=False).markdown
    assert "mean ± sample std over seeds" in md


def test_plot_labels_do_not_overlap(tmp_path):
    from matplotlib.text import Text

    from entailment_lab.report.plot import plot_figure

    # Rows 18 and 19 (1.9M, 86.2 / 87.2) and our 18 / 19 near each other, on a wide y range.
    for i, (model, test) in enumerate([("din1_static", 0.40), ("din2", 0.405), ("din1", 0.41)]):
        write_job(tmp_path / str(i), model=model, dim=400, test=test, params=1_900_000 + i,
                  experiment=None)
    report = make_report([tmp_path], plot=False)
    fig = plot_figure(report.tables)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.axes[0].texts if t.get_text()]
    assert {"18", "19"} <= {t.get_text() for t in texts}
    boxes = [Text.get_window_extent(t, renderer) for t in texts]  # the text, no leader line
    overlaps = [(texts[i].get_text(), texts[j].get_text()) for i in range(len(boxes))
                for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]
    assert not overlaps
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_copies_of_runs_from_another_checkout_name_no_folder_of_this_machine(sweep, tmp_path,
                                                                           monkeypatch):
    """A study published from the main checkout of runs made in a clean worktree elsewhere:
    the paths are made relative to the run's own checkout, not only the working directory."""
    worktree = tmp_path / "worktree"
    (worktree / "multirun" / "study").mkdir(parents=True)
    (worktree / ".git").write_text("gitdir: /elsewhere/.git/worktrees/w\n")  # a worktree's
    run = worktree / "multirun" / "study" / "0"
    shutil.copytree(sweep / "outputs" / "sick_run", run)
    data = json.loads((run / "results.json").read_text())
    data["best_checkpoint"] = str(run / "checkpoints" / "epoch_003.ckpt")
    (run / "results.json").write_text(json.dumps(data))
    monkeypatch.chdir(sweep)
    make_report([worktree / "multirun" / "study"], out=sweep / "docs", plot=False,
                copy_results=True)
    copy = json.loads((sweep / "docs" / "runs" / "study" / "0" / "results.json").read_text())
    assert copy["best_checkpoint"] == "multirun/study/0/checkpoints/epoch_003.ckpt"
