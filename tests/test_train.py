"""End-to-end: train / test / eval / resume / determinism through the real configs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ProgressBar

from entailment_lab.errors import ConfigError
from entailment_lab.pipeline import build_callbacks, evaluate, load_trained, train
from tests.conftest import FAST, REPO, compose_cfg, file_overrides
from tests.entry_points import run_entry_point
from tests.test_stops import finished_records

LSTM = ["model=lstm", "dim=16", "model.net.mlp_size=32"]


def test_fast_dev_run_writes_results(pair_files, tmp_path):
    cfg = compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "debug=fast"], tmp_path)
    metrics = train(cfg)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "completed" and results["model"] == "lstm"
    assert results["params"]["trainable"] > 0
    assert "test/acc" in metrics and len(results["test_confusion_matrix"]) == 3
    code = results["code"]  # which code produced it: this checkout's commit
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()
    if head:  # a clone (CI, a user's); an exported tree has no commit to record
        assert code["commit"] == head and isinstance(code["dirty"], bool)
    assert code["torch"] == torch.__version__


def test_progress_bar_switched_off_on_the_trainer(pair_files, tmp_path):
    # trainer.enable_progress_bar=false drops the callbacks group's bar (Lightning refuses both).
    fast = [o for o in FAST if not o.startswith("callbacks.rich_progress_bar")]
    cfg = compose_cfg([*LSTM, *fast, *file_overrides(pair_files), "debug=fast",
                       "trainer.enable_progress_bar=false"], tmp_path)
    assert cfg.callbacks.rich_progress_bar is not None
    assert not any(isinstance(c, ProgressBar) for c in build_callbacks(cfg, has_logger=False))
    assert "test/acc" in train(cfg)


def test_overfit_fixture_reaches_full_training_accuracy(pair_files, tmp_path):
    cfg = compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "trainer.max_epochs=40",
                       "callbacks.early_stopping=null", "scheduler=none", "optimizer.lr=0.01",
                       "model.net.dropout=0.0", "data.batch_size=60", "test=false"], tmp_path)
    metrics = train(cfg)
    assert metrics["train/acc"] == 1.0


def test_results_hold_eval_mode_train_accuracy_and_the_validation_curve(pair_files, tmp_path):
    cfg = compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "trainer.max_epochs=4",
                       "trainer.check_val_every_n_epoch=2", "callbacks.early_stopping=null"],
                      tmp_path)
    metrics = train(cfg)
    results = json.loads((tmp_path / "results.json").read_text())
    # The best checkpoint on the training split in eval mode, beside the dropout-on mean.
    assert 0.0 <= metrics["train/acc_eval"] <= 1.0 and "train/acc_at_best" in metrics
    assert results["metrics"]["train/acc_eval"] == metrics["train/acc_eval"]
    assert "test/acc" in metrics  # the train pass did not replace the test metrics
    history = results["history"]
    assert [row["epoch"] for row in history] == [0, 1, 2, 3]
    assert all("train/acc" in row for row in history)
    # Validation ran after epochs 1 and 3 only: no stale val/acc in the other rows.
    assert ["val/acc" in row for row in history] == [False, True, False, True]


@pytest.fixture(scope="module")
def trained_run(pair_files, tmp_path_factory):
    """Two epochs with checkpoints (deterministic), shared by the eval/resume tests."""
    out = tmp_path_factory.mktemp("run")
    cfg = compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "trainer.max_epochs=2",
                       "trainer.deterministic=true", "seed=3"], out)
    return out, train(cfg)


def test_eval_reproduces_test_accuracy_from_the_checkpoint(trained_run, tmp_path):
    out, metrics = trained_run
    results = json.loads((out / "results.json").read_text())
    cfg = compose_cfg([f"ckpt_path={results['best_checkpoint']}", "split=test",
                       "trainer.enable_model_summary=false"], tmp_path, config_name="eval")
    evaluated = evaluate(cfg)
    assert evaluated["test/acc"] == pytest.approx(metrics["test/acc"])
    module, _, run_cfg = load_trained(results["best_checkpoint"])
    assert run_cfg.model.name == "lstm" and module.num_trainable == results["params"]["trainable"]


def test_same_seed_same_metrics(trained_run, pair_files, tmp_path):
    _, first = trained_run
    cfg = compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "trainer.max_epochs=2",
                       "trainer.deterministic=true", "seed=3"], tmp_path)
    again = train(cfg)
    for key in ("val/acc_best", "test/acc", "train/loss_epoch"):
        assert again[key] == pytest.approx(first[key], abs=1e-6), key


def test_resume_from_last_checkpoint_continues(trained_run, pair_files, tmp_path):
    out, _ = trained_run
    first = tmp_path / "first"  # a copy: resuming writes into the first run's checkpoints
    shutil.copytree(out / "checkpoints", first / "checkpoints")
    last = first / "checkpoints" / "last.ckpt"
    step = torch.load(last, weights_only=False)["global_step"]
    cfg = compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "trainer.max_epochs=3",
                       f"ckpt_path={last}", "seed=3"], tmp_path / "second")
    metrics = train(cfg)
    assert metrics["epochs"] == 3  # continued from epoch 2, one more epoch
    resumed = torch.load(last, weights_only=False)
    assert resumed["epoch"] == 2 and resumed["global_step"] > step


@pytest.mark.parametrize(("overrides", "stopped_by"), [
    (["trainer.max_epochs=2"], "max_epochs"),
    # lr 0: validation accuracy never improves after the first epoch; patience 0 stops at once
    (["trainer.max_epochs=4", "optimizer.lr=0.0", "callbacks.early_stopping.patience=0"],
     "early_stopping"),
    # a stop after the very first epoch (stopped_epoch 0): any accuracy reaches threshold 0;
    # only Lightning releases with EarlyStopping.stopping_reason can tell it from no stop
    pytest.param(["trainer.max_epochs=4", "+callbacks.early_stopping.stopping_threshold=0.0"],
                 "early_stopping", marks=pytest.mark.skipif(
                     not hasattr(EarlyStopping(monitor="val/acc"), "stopping_reason"),
                     reason="this Lightning has no EarlyStopping.stopping_reason")),
    (["trainer.max_epochs=4", "trainer.max_time=00:00:00:00"], "max_time"),
    (["trainer.max_epochs=4", "trainer.max_steps=1", "trainer.limit_val_batches=0"], "max_steps"),
])
def test_results_record_what_ended_training(overrides, stopped_by, pair_files, tmp_path):
    """results.json says which limit ended the fit, so the report can tell a run a safety cap
    cut short from one its early stopping or its epoch budget ended."""
    metrics = train(compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "eval_train=false",
                                 "test=false", *overrides], tmp_path))
    assert metrics["stopped_by"] == stopped_by
    recorded = json.loads((tmp_path / "results.json").read_text())["metrics"]
    assert recorded["stopped_by"] == stopped_by
    assert metrics["epochs"] == 2 if stopped_by == "max_epochs" else metrics["epochs"] < 4


def test_bad_dim_is_a_config_error(pair_files, tmp_path):
    cfg = compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "dim=-3", "debug=fast"],
                      tmp_path)
    with pytest.raises(ConfigError, match="dim"):
        train(cfg)
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "failed"


def run_cli(args: list[str], cwd: Path, env: dict | None = None, own_process: bool = False
            ) -> subprocess.CompletedProcess:
    """``python src/train.py ARGS``: in this process (tests/entry_points.py), or in a process of
    its own where the run needs one (DDP starts its other ranks from the command line)."""
    env = {"WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", **(env or {})}
    if not own_process:
        return run_entry_point("src/train.py", args, cwd=cwd, env=env)
    return subprocess.run([sys.executable, str(REPO / "src" / "train.py"), *args], cwd=cwd,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=600)


def test_cli_user_error_is_one_line_without_traceback(tmp_path):
    proc = run_cli(["data.files.train=/nonexistent/train.jsonl", "hydra.run.dir=" + str(tmp_path)],
                   tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["error: data.files.train=/nonexistent/train.jsonl: no "
                                        "such file; data files are read from the folder the "
                                        "command runs in"]
    assert not list(tmp_path.iterdir())  # refused before Hydra made anything


@pytest.mark.slow
def test_multirun_two_jobs_two_wandb_runs_one_group(pair_files, tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", *LSTM, *FAST, *file_overrides(pair_files), "seed=1,2", "debug=tiny",
                    "logger=wandb", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [j.name for j in jobs] == ["0", "1"]
    groups, run_ids = set(), set()
    for job in jobs:
        results = json.loads((job / "results.json").read_text())
        assert results["status"] == "completed"
        runs = list((job / "wandb").glob("offline-run-*/run-*.wandb"))
        assert len(runs) == 1, f"{job}: expected one W&B run, found {runs}"
        finished_records(runs[0])  # W&B may still be flushing the file
        assert results["wandb_group"].encode() in runs[0].read_bytes()  # the group is recorded
        groups.add(results["wandb_group"])
        run_ids.add(results["wandb_run_id"])
    assert len(groups) == 1 and len(run_ids) == 2  # two runs, one group


def test_required_values_are_named_before_any_data_is_read(tmp_path):
    cfg = compose_cfg(["data=sick", "data.files.train=x.jsonl", *FAST], tmp_path)
    with pytest.raises(ConfigError, match=r"not set: data\.files\.test, data\.files\.validation"):
        train(cfg)
    cfg = compose_cfg(["model=lstm", "dim=abc", *FAST], tmp_path)
    with pytest.raises(ConfigError,
                       match=r"^dim='abc': must be an integer >= 1 or null, e\.g\. dim=256$"):
        train(cfg)


def test_bad_din_dim_fails_before_reading_data(tmp_path):
    if not (REPO / "conf/model/din1.yaml").exists():
        pytest.skip("no DIN")
    # data.files.train is no corpus: a data error would come second, the dim error first.
    files = {split: tmp_path / f"{split}.jsonl" for split in ("train", "validation", "test")}
    for path in files.values():
        path.write_text("not json\n")
    cfg = compose_cfg(["model=din1", "dim=300", *file_overrides(files), *FAST], tmp_path)
    with pytest.raises(ConfigError, match=r"dim=300 must be a perfect square"):
        train(cfg)


def test_resume_keeps_the_wandb_run(pair_files, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    base = [*LSTM, *FAST, *file_overrides(pair_files), "logger=wandb", "test=false"]
    train(compose_cfg([*base, "trainer.max_epochs=1"], first))
    run_id = json.loads((first / "results.json").read_text())["wandb_run_id"]
    train(compose_cfg([*base, "trainer.max_epochs=2",
                       f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}"], second))
    assert json.loads((second / "results.json").read_text())["wandb_run_id"] == run_id
    # The run's W&B summary says what ended training (report --wandb judges caps by it).
    (run,) = (first / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
    finished_records(run)  # W&B may still be flushing the file
    assert b"stopped_by" in run.read_bytes()
