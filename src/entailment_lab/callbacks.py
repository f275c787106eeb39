"""What a run records, as a Lightning callback: ``results.json`` and the W&B run summary.

The pipeline only orchestrates (build, fit, test); this callback writes down what happened,
as lightning-hydra-template keeps ``train.py`` free of side effects.
"""

from __future__ import annotations

import logging
import math
import random
import sys
import time
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import EarlyStopping, RichProgressBar, Timer, TQDMProgressBar
from lightning.pytorch.loggers import WandbLogger

from entailment_lab import predictions
from entailment_lab.models import kernels
from entailment_lab.numeric_path import numeric_path
from entailment_lab.results import ResultsFile, clean_number

log = logging.getLogger(__name__)


class ResultsRecorder(L.Callback):
    """Keep ``results.json`` (and the W&B summary) current through one training job.

    - fit start: the parameter counts; the resolved config and the counts as every logger's
      hyper-parameters; the W&B run id (also stored in checkpoints, so resuming continues the
      same W&B run);
    - every training epoch: a ``history`` row (``train/acc``, ``train/loss_epoch``, and
      ``val/acc``, ``val/loss`` on validated epochs), kept in checkpoints so a resumed run
      has its whole validation curve (``src/curves.py``);
    - fit end: the last train/val metrics, ``train/acc_at_best``, the epochs run, what ended
      them (``stopped_by``, ``stop_reason``) and the best checkpoint;
    - each test loop: its metrics (``test/*``, ``<set>/*`` for a further test set such as
      ``test_mismatched`` or an extra test file, or ``train/*_eval`` when the module evaluates
      the training split), ``breakdowns`` (accuracy per class, per overlap bucket and per
      ``data.group_fields`` group of each set, ``module.breakdown``; in the W&B summary as
      ``<set>/acc_per_<breakdown>/<group>``, ``breakdown_summary``), ``predictions`` (each
      example's predicted and gold class, compact: ``predictions.py``) and, for the test
      split, the confusion matrix (a W&B table too);
    - every save: ``numeric_path`` (``numeric_path.py``: torch, device, CPU, threads, the fast
      paths that ran in this run, determinism switches).

    ``metrics`` holds everything recorded so far; ``pipeline.train`` returns it.
    """

    HISTORY_TRAIN = ("train/acc", "train/loss_epoch")
    HISTORY_VAL = ("val/acc", "val/loss")

    def __init__(self, results: ResultsFile, config: dict[str, Any]) -> None:
        self.results = results
        self.config = config
        self.history: list[dict[str, Any]] = []
        self.metrics: dict[str, float | int | None] = {}
        self.wandb_run_id: str | None = None
        self._validated = False
        self._kernel_calls = kernels.calls()  # the fast paths that ran before this run

    # --- fit ---------------------------------------------------------------------------------
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        params = pl_module.parameter_summary()
        log.info("parameters (trainable, without word embeddings): %s", params)
        self.results.update(params={k.removeprefix("params/"): v for k, v in params.items()},
                            history=self.history)  # a resumed run's earlier epochs, at once
        for lg in trainer.loggers:
            lg.log_hyperparams({**self.config, **params})
        for lg in _wandb(trainer):
            lg.experiment.summary.update(params)
            self.wandb_run_id = lg.version
            self.results.update(wandb_run_id=lg.version, wandb_group=lg.experiment.group or None)
        self._save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validated = not trainer.sanity_checking

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Validation runs inside the training epoch, so its metrics are already here; an
        # epoch without validation (check_val_every_n_epoch > 1) records training only.
        keys = self.HISTORY_TRAIN + (self.HISTORY_VAL if self._validated else ())
        row: dict[str, Any] = {"epoch": trainer.current_epoch}
        row.update(_numbers(trainer, keys))
        self.history.append(row)
        self._validated = False
        self.results.update(history=self.history)
        self._save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.metrics.update(_numbers(trainer, prefixes=("train/", "val/")))
        self.metrics["train/acc_at_best"] = clean_number(pl_module.train_acc_at_best)
        self.metrics["epochs"] = trainer.current_epoch
        self.metrics["stopped_by"] = stop_reason(trainer)
        checkpoint = trainer.checkpoint_callback
        best = getattr(checkpoint, "best_model_path", "") if checkpoint else ""
        self.results.update(history=self.history, best_checkpoint=best or None,
                            metrics=self.metrics)
        if trainer.is_global_zero:  # what the report reads back from W&B (a cap; train acc)
            summary = ("epochs", "stopped_by", "train/acc_at_best")
            for lg in _wandb(trainer):
                lg.experiment.summary.update({k: self.metrics[k] for k in summary
                                              if self.metrics.get(k) is not None})
        self._save(trainer)

    # --- test --------------------------------------------------------------------------------
    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = _numbers(trainer, prefixes=(f"{pl_module.eval_prefix}/",))
        if pl_module.eval_split == "train":  # train/*_eval only, not the fit's train/* values
            metrics = {k: v for k, v in metrics.items() if k.endswith("_eval")}
        elif pl_module.eval_split == "test":
            confusion = pl_module.test_confusion.compute().tolist()
            self.results.update(test_confusion_matrix=confusion, labels=pl_module.label_names)
            if trainer.is_global_zero:
                _log_confusion(trainer, confusion, pl_module.label_names)
        else:  # a further test set: its per-class figures are in its breakdown
            self.results.update(labels=pl_module.label_names)
        if pl_module.breakdowns:  # accuracy per class and per group of each test set
            self.results.update(breakdowns=dict(pl_module.breakdowns))
        stored = pl_module.predictions.get(pl_module.eval_prefix)
        if stored is not None:  # each example's prediction, in the set's order (compact)
            entries = dict(self.results.data.get("predictions") or {})
            entries[pl_module.eval_prefix] = predictions.entry(*stored)
            self.results.update(predictions=entries)
        self.metrics.update(metrics)
        self.results.update(metrics=self.metrics)
        if trainer.is_global_zero:
            groups = breakdown_summary(pl_module.eval_prefix,
                                       pl_module.breakdowns.get(pl_module.eval_prefix, {}))
            for lg in _wandb(trainer):
                lg.experiment.summary.update({k: v for k, v in {**metrics, **groups}.items()
                                              if v is not None})
        self._save(trainer)

    # --- checkpoints -------------------------------------------------------------------------
    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        from entailment_lab.module import CHECKPOINT_KEY

        if self.wandb_run_id:  # read by the pipeline before resuming (ckpt_path=)
            checkpoint.setdefault(CHECKPOINT_KEY, {})["wandb_run_id"] = self.wandb_run_id

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}  # resuming from last.ckpt keeps the earlier epochs

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict.get("history", []))

    def _save(self, trainer: L.Trainer) -> None:
        if trainer.is_global_zero:  # with the floating-point path the run has taken so far
            self.results.update(numeric_path=numeric_path(trainer.strategy.root_device,
                                                          self._kernel_calls))
            self.results.save()


class EpochSeed(L.Callback):
    """Seed the random generators from (seed, epoch) at the first batch of every epoch.

    Lightning restores weights, optimiser, schedule and loops from a checkpoint, not the random
    generators. Seeding each epoch makes a run resumed from an epoch-end checkpoint
    (``last.ckpt``) draw the same dropout masks as an uninterrupted run with the same seed; the
    order of the batches is already a function of (seed, epoch) (``BucketBatchSampler``).
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            seed = (self.seed * 1_000_003 + trainer.current_epoch) % 2**32
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)  # every device's generator too


class AdagradReset(L.Callback):
    """Restart Adagrad's squared-gradient sums every ``every_n_epochs`` epochs.

    The DCNN authors' Matlab release (as F. Godin's Lasagne port reproduces it, ``trainDCNN.py``
    ``--adagrad_reset 5``) sets the accumulators back to their initial value after every fifth
    epoch, so the step sizes, which only shrink under Adagrad, grow back. Here each sum returns
    to its parameter group's ``initial_accumulator_value``. Other optimisers are left alone.
    The reset happens as epoch 5, 10, ... (0-based) starts, so a run resumed from the
    checkpoint written at the end of the epoch before resets like an uninterrupted one.
    """

    def __init__(self, every_n_epochs: int = 5) -> None:
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        self.every_n_epochs = every_n_epochs

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == 0 or trainer.current_epoch % self.every_n_epochs:
            return
        for optimizer in trainer.optimizers:
            if not isinstance(optimizer, torch.optim.Adagrad):
                continue
            for group in optimizer.param_groups:
                for p in group["params"]:
                    state = optimizer.state.get(p)
                    if state and "sum" in state:
                        state["sum"].fill_(group["initial_accumulator_value"])


def stop_reason(trainer: L.Trainer) -> str | None:
    """What ended a finished fit: ``"max_epochs"`` (the whole budget), ``"early_stopping"``,
    ``"max_time"``, ``"max_steps"``, or ``None`` where none of these says it did (e.g. a
    callback that set ``trainer.should_stop``). Checked in this order, so a run whose last
    epoch coincides with a cap counts as whole. The report uses it to tell a run that a safety
    cap (``trainer.max_time``) cut short from one it did not (``report.match``)."""
    if trainer.max_epochs is not None and 0 <= trainer.max_epochs <= trainer.current_epoch:
        return "max_epochs"
    if any(_early_stopped(cb) for cb in trainer.early_stopping_callbacks):
        return "early_stopping"
    remaining = [cb.time_remaining() for cb in trainer.callbacks if isinstance(cb, Timer)]
    if any(r is not None and r <= 0 for r in remaining):
        return "max_time"
    if 0 <= trainer.max_steps <= trainer.global_step:
        return "max_steps"
    return None


def _early_stopped(callback: EarlyStopping) -> bool:
    """Whether ``callback`` stopped the fit. Lightning >= 2.6 records why
    (``stopping_reason``); older releases only ``stopped_epoch``, which is 0 both for a stop
    after the first epoch and for no stop, so there a stop after epoch 0 reads as none."""
    reason = getattr(callback, "stopping_reason", None)
    if reason is not None:
        return reason.name != "NOT_STOPPED"
    return callback.stopped_epoch > 0


def _wandb(trainer: L.Trainer) -> list[WandbLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]


def _numbers(trainer: L.Trainer, keys: tuple[str, ...] = (),
             prefixes: tuple[str, ...] = ()) -> dict[str, float | None]:
    """``trainer.callback_metrics`` named in ``keys`` or starting with one of ``prefixes``."""
    return {k: clean_number(v) for k, v in trainer.callback_metrics.items()
            if k in keys or (prefixes and k.startswith(prefixes))}


def breakdown_summary(name: str, breakdown: dict[str, Any]) -> dict[str, float | None]:
    """A test set's breakdowns (``module.breakdown``) as W&B summary keys: the accuracy of each
    group, ``<set>/acc_per_<breakdown>/<group>`` (``test_matched/acc_per_genre/fiction``,
    ``test/acc_per_overlap/100%``, ``test/acc_per_class/neutral``); ``None`` for an empty
    group. ``results.json`` keeps the same figures with their sizes (``breakdowns``)."""
    return {f"{name}/acc_per_{key.removeprefix('per_')}/{group}": cell["acc"]
            for key, groups in breakdown.items() if isinstance(groups, dict)
            for group, cell in groups.items()}


def log_eval_summary(trainer: L.Trainer, metrics: dict[str, Any],
                     breakdowns: dict[str, dict[str, Any]]) -> None:
    """``eval.py``'s figures as the W&B run's summary, under the names a training run gives
    them: each set's metrics (``test_mismatched/acc``) and its breakdowns' groups
    (``breakdown_summary``). Does nothing without a W&B logger."""
    loggers = _wandb(trainer)
    if not loggers or not trainer.is_global_zero:
        return
    summary = dict(metrics)
    for name, breakdown in breakdowns.items():
        summary.update(breakdown_summary(name, breakdown))
    for lg in loggers:
        lg.experiment.summary.update({k: v for k, v in summary.items() if v is not None})


def _log_confusion(trainer: L.Trainer, confusion: list[list[int]], labels: list[str]) -> None:
    loggers = _wandb(trainer)
    if not loggers:
        return
    import wandb

    rows = [[gold, pred, confusion[i][j]] for i, gold in enumerate(labels)
            for j, pred in enumerate(labels)]
    for lg in loggers:
        lg.experiment.log({"test/confusion_matrix": wandb.Table(
            columns=["gold", "predicted", "count"], data=rows)})


class _Throttled:
    """A progress bar that redraws at most every ``refresh_seconds`` (and at each loop's last
    batch), whatever the step's pace.

    Lightning's bars count steps (``refresh_rate``), and its rich bar computes the logged
    metrics and redraws the console at every step whatever that rate: about a millisecond a
    step, more than a small model's GPU step (docs/peer_speed.md, "the framework's cost").
    Only Lightning's public hooks are overridden: a skipped call is never needed, since each
    update sets the bar's absolute position.
    """

    refresh_seconds: float
    _last_draw: float = -math.inf

    def _due(self, batch_idx: int, total: float | int | None) -> bool:
        now = time.monotonic()
        last = total is not None and batch_idx + 1 >= total
        if last or now - self._last_draw >= self.refresh_seconds:
            self._last_draw = now
            return True
        return False

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if self._due(batch_idx, self.total_train_batches):  # type: ignore[attr-defined]
            super().on_train_batch_end(trainer, pl_module, outputs, batch,  # type: ignore[misc]
                                       batch_idx)

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        total = self.total_val_batches_current_dataloader  # type: ignore[attr-defined]
        if self._due(batch_idx, total):
            super().on_validation_batch_end(trainer, pl_module, outputs,  # type: ignore[misc]
                                            batch, batch_idx, dataloader_idx)

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                          batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._due(batch_idx, self.total_test_batches_current_dataloader):  # type: ignore[attr-defined]
            super().on_test_batch_end(trainer, pl_module, outputs, batch,  # type: ignore[misc]
                                      batch_idx, dataloader_idx)


class ThrottledRichProgressBar(_Throttled, RichProgressBar):
    """Lightning's rich bar, redrawn at most every ``refresh_seconds`` (``_Throttled``)."""

    def __init__(self, refresh_seconds: float = 0.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.refresh_seconds = refresh_seconds


class ThrottledTQDMProgressBar(_Throttled, TQDMProgressBar):
    """Lightning's tqdm bar, redrawn at most every ``refresh_seconds`` (``_Throttled``)."""

    def __init__(self, refresh_seconds: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**{"refresh_rate": 1, **kwargs})
        self.refresh_seconds = refresh_seconds


def progress_bar(refresh_seconds: float | None = None, **kwargs: Any) -> L.Callback:
    """Lightning's rich progress bar in a terminal, redrawn at most twice a second; outside
    one (a log file, a pipe, CI) the plain tqdm bar, which stays on one line per update instead
    of wrapping its metrics, every 10 seconds. ``refresh_seconds`` sets the interval; other
    keyword arguments go to the bar (e.g. ``leave``, or a step count ``refresh_rate``)."""
    if sys.stdout.isatty():
        return ThrottledRichProgressBar(**_given(refresh_seconds=refresh_seconds), **kwargs)
    return ThrottledTQDMProgressBar(**_given(refresh_seconds=refresh_seconds), **kwargs)


def _given(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}
