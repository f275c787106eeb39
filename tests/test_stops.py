"""How runs stop: any Trainer budget (max_steps, ...), signals (SIGTERM), resuming, W&B groups."""

from __future__ import annotations

import csv
import inspect
import json
import logging
import os
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from google.protobuf.message import DecodeError

from entailment_lab import loggers, pipeline
from entailment_lab.errors import UserError
from entailment_lab.signals import RunInterruptedError
from tests.conftest import FAST, REPO, compose_cfg, file_overrides
from tests.entry_points import run_entry_point

LSTM = ["model=lstm", "dim=16", "model.net.mlp_size=32"]
SEEDED = ["trainer.deterministic=true", "seed=5", "eval_train=false"]


class SigtermAt(L.Callback):
    """Send this process SIGTERM when training epoch ``epoch`` starts (after ``epoch`` full
    epochs, each with its last.ckpt)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


def read(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


# --- item 2: every Trainer argument, and runs that stop before validating ---------------------
def test_every_trainer_argument_is_a_plain_key(tmp_path):
    cfg = compose_cfg(["trainer.max_steps=3", "trainer.limit_train_batches=2",
                       "trainer.val_check_interval=0.5", "trainer.accumulate_grad_batches=2",
                       "trainer.precision=bf16-mixed", "trainer.gradient_clip_val=1.0",
                       "trainer.max_time=00:00:10:00"], tmp_path)
    assert cfg.trainer.max_steps == 3 and cfg.trainer.accumulate_grad_batches == 2
    passed_elsewhere = {"self", "callbacks", "logger"}  # the callbacks and logger groups
    arguments = set(inspect.signature(L.Trainer.__init__).parameters) - passed_elsewhere
    assert not arguments - set(cfg.trainer), "Trainer arguments missing in conf/trainer"


def test_run_stopped_before_its_first_validation_tests_the_last_weights(pair_files, tmp_path,
                                                                         caplog):
    # 60 pairs in batches of 16: 4 steps an epoch; validation would come after the 4th.
    cfg = compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "trainer.max_steps=2"],
                      tmp_path)
    with caplog.at_level(logging.WARNING):
        metrics = pipeline.train(cfg)
    assert read(tmp_path)["status"] == "completed" and "test/acc" in metrics
    said = [r.getMessage() for r in caplog.records if "first validation" in r.getMessage()]
    assert len(said) == 1 and "testing the last weights" in said[0]
    assert not [r for r in caplog.records if "monitored key" in r.getMessage()]


# --- item 4: a stopped run says so, and resumes to the same result ----------------------------
def test_sigterm_interrupts_and_resuming_gives_the_uninterrupted_result(pair_files, tmp_path):
    base = [*LSTM, *FAST, *file_overrides(pair_files), *SEEDED, "trainer.max_epochs=3",
            "callbacks.early_stopping=null", "logger=wandb"]
    whole, first, second = tmp_path / "whole", tmp_path / "first", tmp_path / "second"
    expected = pipeline.train(compose_cfg(base, whole))

    killer = ["+callbacks.sigterm._target_=tests.test_stops.SigtermAt",
              "+callbacks.sigterm.epoch=2"]
    with pytest.raises(RunInterruptedError) as stopped:
        pipeline.train(compose_cfg([*base, *killer], first))
    assert stopped.value.exit_code == 143
    last = first / "checkpoints" / "last.ckpt"
    results = read(first)
    assert results["status"] == "interrupted"
    assert "SIGTERM" in results["error"] and f"ckpt_path={last}" in results["resume"]
    assert last.is_file() and [row["epoch"] for row in results["history"]] == [0, 1]

    metrics = pipeline.train(compose_cfg([*base, f"ckpt_path={last}"], second))
    resumed = read(second)
    assert resumed["status"] == "completed" and metrics["epochs"] == 3
    for key in ("test/acc", "test/loss", "val/acc_best", "train/acc_at_best", "train/loss_epoch"):
        assert metrics[key] == pytest.approx(expected[key], abs=1e-6), key
    assert resumed["history"] == read(whole)["history"]  # the same curve, epoch by epoch
    # Linked both ways, one W&B run.
    assert resumed["resumed_from"] == str(first.resolve())
    assert read(first)["resumed_by"] == [str(second.resolve())]
    assert resumed["wandb_run_id"] == results["wandb_run_id"]


def csv_rows(folder: Path, version: int = 0) -> list[dict[str, str]]:
    with (folder / "csv" / f"version_{version}" / "metrics.csv").open(newline="") as file:
        return list(csv.DictReader(file))


def test_resuming_in_place_keeps_the_csv_rows_of_the_earlier_epochs(pair_files, tmp_path):
    """Lightning's CSVLogger, untouched: a run resumed in its own folder logs its further epochs
    to the next ``csv/version_N``, and the earlier file keeps the epochs before the stop."""
    base = [*LSTM, *FAST, *file_overrides(pair_files), *SEEDED, "trainer.max_epochs=3",
            "callbacks.early_stopping=null", "logger=csv"]
    run = tmp_path / "run"
    killer = ["+callbacks.sigterm._target_=tests.test_stops.SigtermAt",
              "+callbacks.sigterm.epoch=2"]
    with pytest.raises(RunInterruptedError):
        pipeline.train(compose_cfg([*base, *killer], run))
    assert {row["epoch"] for row in csv_rows(run) if row.get("val/acc")} == {"0", "1"}
    pipeline.train(compose_cfg([*base, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"], run))
    assert {row["epoch"] for row in csv_rows(run) if row.get("val/acc")} == {"0", "1"}
    assert {row["epoch"] for row in csv_rows(run, 1) if row.get("val/acc")} == {"2"}


def test_sigterm_before_training_is_recorded_too(pair_files, tmp_path, monkeypatch):
    def killed(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(pipeline, "build_datamodule", killed)  # while reading the data
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterruptedError, match="start it again"):
        pipeline.train(compose_cfg([*LSTM, *FAST, *file_overrides(pair_files)], tmp_path))
    assert read(tmp_path)["status"] == "interrupted" and read(tmp_path)["resume"] is None
    assert signal.getsignal(signal.SIGTERM) is previous


def run_cli(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, str(REPO / "src" / "train.py"), *args], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_killed_cli_run_exits_non_zero_and_says_how_to_resume(pair_files, tmp_path):
    run = tmp_path / "run"
    proc = run_cli([*LSTM, *FAST, *file_overrides(pair_files), "trainer.max_epochs=100000",
                    "callbacks.early_stopping=null", "logger=none", f"hydra.run.dir={run}"],
                   tmp_path)
    last = run / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 300
    while not last.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 143, output[-3000:]
    results = read(run)
    assert results["status"] == "interrupted" and last.is_file()
    assert f"ckpt_path={last}" in results["resume"]
    log = (run / "train.log").read_text()
    assert "interrupted by SIGTERM" in log and "resume with: python src/train.py" in log
    assert output.count("interrupted by SIGTERM") == 1  # said once on the console

    # The printed command, ckpt_path alone, continues in the same folder with the run's own
    # config (its overrides come from the folder); here with a budget that ends.
    command = shlex.split(results["resume"])
    assert command == ["python", "src/train.py", f"ckpt_path={last}"]
    stopped_at = torch.load(last, weights_only=True)["epoch"]  # epochs may pass before the kill
    done = run_entry_point(command[1], [*command[2:], f"trainer.max_epochs={stopped_at + 3}"],
                           cwd=tmp_path,  # in this process: no signal to send
                           env={"WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    results = read(run)
    assert results["status"] == "completed" and "test/acc" in results["metrics"]
    epochs = [row["epoch"] for row in results["history"]]
    assert epochs == list(range(len(epochs))) and len(epochs) >= 3


# --- item 9: the W&B group, read back from the offline run -----------------------------------
def wandb_records(path: Path) -> list:
    """The records of an offline run file (``run-ID.wandb``: a LevelDB-style log of
    protobuf records, in blocks of 32 KiB, after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, records, chunks = path.read_bytes(), 32768, [], b""
    assert data[:4] == b":W&B"
    pos = 7
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        chunks += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = pb.Record()
            record.ParseFromString(chunks)
            records.append(record)
            chunks = b""
        elif kind == 0:
            break
    return records


def finished_records(run_file: Path, timeout: float = 30.0) -> list:
    """The offline run's records once its ``exit`` record is written (the file may still be
    being flushed when ``wandb.finish`` returns)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            records = wandb_records(run_file)
            if any(r.WhichOneof("record_type") == "exit" for r in records):
                return records
        except DecodeError:  # a record cut at the end of what is written so far
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, f"{run_file}: no exit record"
        time.sleep(0.2)


def test_wandb_group_is_in_the_run_settings_and_config(pair_files, tmp_path, monkeypatch):
    monkeypatch.setattr(loggers, "_sweep_group", lambda: "2026-11-23_10-00-00-abc123")
    cfg = compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "logger=wandb",
                       "trainer.max_epochs=1", "test=false", "eval_train=false"], tmp_path)
    pipeline.train(cfg)
    assert read(tmp_path)["wandb_group"] == "2026-11-23_10-00-00-abc123"
    [run_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    records = finished_records(run_file)
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_group == "2026-11-23_10-00-00-abc123"
    logger_cfg = [json.loads(item.value_json) for r in records
                  if r.WhichOneof("record_type") == "config" for item in r.config.update
                  if item.key == "logger"]
    assert logger_cfg and all(c["wandb"]["group"] == "2026-11-23_10-00-00-abc123"
                              for c in logger_cfg)
    debug_log = (run_file.parent / "logs" / "debug.log").read_text()
    assert "'group': None" not in debug_log and "'group': '2026-11-23_10-00-00-abc123'" \
        in debug_log


def test_report_reads_an_interrupted_and_resumed_job(tmp_path):
    from entailment_lab.report.collect import load_job
    from entailment_lab.report.job import INTERRUPTED

    (tmp_path / "results.json").write_text(json.dumps({
        "schema": 1, "status": "interrupted", "model": "lstm", "pid": 1,
        "error": "interrupted by SIGTERM (fit, epoch 1, step 5); last.ckpt kept",
        "resume": "python src/train.py ckpt_path=x", "resumed_by": ["/runs/b"]}))
    job = load_job(tmp_path)
    assert job.status == INTERRUPTED
    assert job.error == "interrupted by SIGTERM (fit, epoch 1, step 5); last.ckpt kept; " \
                        "resumed in /runs/b"


def test_resuming_a_finished_run_keeps_its_history(pair_files, tmp_path):
    # Nothing is left to train (the checkpoint's epoch is past max_epochs): the resumed job's
    # results.json still carries the restored per-epoch history.
    base = [*LSTM, *FAST, *file_overrides(pair_files), "callbacks.early_stopping=null"]
    pipeline.train(compose_cfg([*base, "trainer.max_epochs=2"], tmp_path / "first"))
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    pipeline.train(compose_cfg([*base, "trainer.max_epochs=1", f"ckpt_path={last}"],
                               tmp_path / "first"))
    assert [row["epoch"] for row in read(tmp_path / "first")["history"]] == [0, 1]


@pytest.mark.slow
def test_a_moved_run_folder_resumes_with_its_best_checkpoint(pair_files, tmp_path):
    # A run folder copied elsewhere (another disk, results synced home from a cluster) and
    # resumed there in place: its best checkpoint and best score follow it, so it tests what
    # an uninterrupted run tests. Lightning's own ModelCheckpoint restores them only into the
    # folder it wrote, and would test the best of the resumed epochs (epoch 2 here).
    base = [*LSTM, *FAST, *file_overrides(pair_files), *SEEDED, "optimizer.lr=0.05",
            "callbacks.early_stopping=null"]
    expected = pipeline.train(compose_cfg([*base, "trainer.max_epochs=4"], tmp_path / "whole"))
    # The case under test: the best epoch (val/acc 0.40) comes before the move, later ones lower.
    assert Path(read(tmp_path / "whole")["best_checkpoint"]).name == "epoch_001.ckpt"

    def first_two_epochs_then_move(name: str) -> Path:
        pipeline.train(compose_cfg([*base, "trainer.max_epochs=2"], tmp_path / "first"))
        return Path(shutil.move(tmp_path / "first", tmp_path / name))

    moved = first_two_epochs_then_move("moved")
    resume = ["trainer.max_epochs=4", f"ckpt_path={moved / 'checkpoints' / 'last.ckpt'}"]
    metrics = pipeline.train(compose_cfg([*base, *resume], moved))
    assert read(moved)["best_checkpoint"] == str(moved / "checkpoints" / "epoch_001.ckpt")
    for key in ("test/acc", "test/loss", "val/acc_best"):
        assert metrics[key] == pytest.approx(expected[key], abs=1e-6), key

    # With Lightning's class the state is lost: the run stops before testing, and says why.
    plain = first_two_epochs_then_move("plain")
    resume = ["trainer.max_epochs=4", f"ckpt_path={plain / 'checkpoints' / 'last.ckpt'}",
              "callbacks.model_checkpoint._target_=lightning.pytorch.callbacks.ModelCheckpoint"]
    with pytest.raises(UserError, match="lost its state when the run was resumed"):
        pipeline.train(compose_cfg([*base, *resume], plain))
    assert read(plain)["status"] == "failed" and "test/acc" not in read(plain)["metrics"]


def test_relocatable_checkpoint_reads_and_writes_lightnings_state_key():
    # Checkpoints written with Lightning's ModelCheckpoint (every run before this class) resume
    # into it, and the other way round.
    from lightning.pytorch.callbacks import ModelCheckpoint

    from entailment_lab.resume import RelocatableModelCheckpoint

    for kwargs in ({"monitor": "val/acc", "mode": "max"}, {"monitor": None}):
        assert RelocatableModelCheckpoint(**kwargs).state_key == ModelCheckpoint(**kwargs).state_key
