"""What the training loop does around a step, kept cheap (issue 61, "a framework that costs
nothing per step"; figures: docs/peer_speed.md): the progress bar redraws by time, not at every
step, and the training step logs its epoch metrics once an epoch, with every epoch's values
still recorded."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from entailment_lab import callbacks
from entailment_lab.callbacks import ThrottledRichProgressBar, ThrottledTQDMProgressBar
from entailment_lab.module import ClassifierModule
from entailment_lab.pipeline import train
from tests.conftest import FAST, compose_cfg, file_overrides

pytestmark = pytest.mark.usefixtures("one_thread")


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.log("loss", batch.sum(), prog_bar=True)
        return self.layer(batch).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("bar_class", [ThrottledTQDMProgressBar, ThrottledRichProgressBar])
def test_the_bar_redraws_by_time_and_at_the_last_batch(bar_class, tmp_path, monkeypatch):
    bar = bar_class(refresh_seconds=3600.0)
    drawn: list[int] = []
    parent = bar_class.__mro__[2]  # Lightning's bar, after _Throttled
    original = parent.on_train_batch_end

    def record(self, trainer, pl_module, outputs, batch, batch_idx):
        drawn.append(batch_idx)
        original(self, trainer, pl_module, outputs, batch, batch_idx)

    monkeypatch.setattr(parent, "on_train_batch_end", record)
    trainer = L.Trainer(max_epochs=2, callbacks=[bar], logger=False, accelerator="cpu",
                        enable_checkpointing=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    trainer.fit(Tiny(), DataLoader(torch.randn(25, 2), batch_size=None))
    # epoch 0: its first batch (the first draw) and its last; epoch 1: its last only
    assert drawn == [0, 24, 24]


def test_progress_bar_picks_the_bar_and_passes_its_settings(monkeypatch):
    monkeypatch.setattr(callbacks.sys.stdout, "isatty", lambda: False, raising=False)
    bar = callbacks.progress_bar(refresh_seconds=2.0, leave=True)
    assert isinstance(bar, ThrottledTQDMProgressBar) and bar.refresh_seconds == 2.0
    assert bar.refresh_rate == 1  # every step may draw: the time decides
    assert callbacks.progress_bar().refresh_seconds == 10.0  # a log file: every 10 s
    monkeypatch.setattr(callbacks.sys.stdout, "isatty", lambda: True, raising=False)
    rich = callbacks.progress_bar()
    assert isinstance(rich, ThrottledRichProgressBar) and rich.refresh_seconds == 0.5


def test_epoch_metrics_are_logged_once_an_epoch_and_recorded_every_epoch(pair_files, tmp_path,
                                                                         monkeypatch):
    logged: list[tuple[str, int]] = []
    original = ClassifierModule.log

    def spy(self, name, value, *args, **kwargs):
        if self.training and name.startswith("train/"):
            logged.append((name, self.current_epoch))
        return original(self, name, value, *args, **kwargs)

    monkeypatch.setattr(ClassifierModule, "log", spy)
    cfg = compose_cfg(["model=lstm", "dim=16", *FAST, *file_overrides(pair_files),
                       "trainer.max_epochs=3", "trainer.log_every_n_steps=2", "test=false",
                       "eval_train=false"], tmp_path)
    train(cfg)
    for epoch in range(3):
        assert logged.count(("train/loss_epoch", epoch)) == 1
        assert logged.count(("train/acc", epoch)) == 1
    steps = sum(1 for name, _ in logged if name == "train/loss_step")
    assert steps >= 3  # every epoch's first batch, and every log_every_n_steps-th step
    history = json.loads((tmp_path / "results.json").read_text())["history"]
    assert [row["epoch"] for row in history] == [0, 1, 2]
    assert all(0 <= row["train/acc"] <= 1 and row["train/loss_epoch"] > 0 for row in history)
