"""Resuming a run: ``ckpt_path=.../last.ckpt`` continues it where it stopped.

The whole resume path lives here: what the checkpoint brings back (vocabulary, W&B run id and
group), the two-way link between a run resumed in another folder and the first one, the
checkpoint callbacks that keep their best score when the folder moved, and the check before
testing that the checkpoint called best is the run's best. Lightning restores the weights,
optimiser, schedule, loops and callback states itself (``trainer.fit(ckpt_path=...)``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig

from entailment_lab.checkpoints import checkpoint_metadata
from entailment_lab.data.text import Vocabulary
from entailment_lab.errors import UserError
from entailment_lab.results import (
    RESULTS_FILE,
    ResultsFile,
    is_rank_zero,
    read_results,
    resume_command,
    run_folder,
    write_json_atomic,
)

log = logging.getLogger(__name__)


@dataclass
class Resumed:
    """What a resumed run takes from its checkpoint and where the first run lives."""

    vocab: Vocabulary
    wandb_run_id: str | None
    wandb_group: str | None
    origin: Path | None  # the first run's folder when resumed in another one, else None


def resume(cfg: DictConfig, results: ResultsFile) -> Resumed | None:
    """``cfg.ckpt_path``'s vocabulary and W&B run, with the link to the first run's folder
    written both ways; ``None`` for a new run."""
    if not cfg.get("ckpt_path"):
        return None
    _, meta = checkpoint_metadata(cfg.ckpt_path)
    return Resumed(vocab=Vocabulary(meta["vocab"]), wandb_run_id=meta.get("wandb_run_id"),
                   wandb_group=_wandb_group(meta.get("config") or {}),
                   origin=link_resumed_run(cfg, results))


def _wandb_group(config: dict[str, Any]) -> str | None:
    """The W&B group recorded in a run's resolved config (a checkpoint's), if any."""
    loggers = config.get("logger") or {}
    return next((node.get("group") for node in loggers.values()
                 if isinstance(node, dict) and "Wandb" in str(node.get("_target_"))
                 and node.get("group")), None)


def link_resumed_run(cfg: DictConfig, results: ResultsFile) -> Path | None:
    """Resumed in another folder: ``resumed_from`` here, ``resumed_by`` in the first run's;
    returns that first run's folder (``None`` when resuming in place)."""
    origin = run_folder(cfg.ckpt_path)
    here = Path(cfg.paths.output_dir).resolve()
    if origin == here:
        return None
    results.update(resumed_from=str(origin))
    add_resumed_by(origin, here)
    return origin


def checkpoints_stay_in(origin: Path, here: Path, callbacks: list[L.Callback]) -> None:
    """A run resumed in another folder keeps writing its checkpoints in the first folder:
    Lightning restores a ``ModelCheckpoint``'s best score only into the same ``dirpath``, and
    without it the best checkpoint would be chosen among the resumed epochs only."""
    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.dirpath \
                and Path(callback.dirpath).resolve().parent == here:
            callback.dirpath = str(origin / Path(callback.dirpath).name)
            log.info("resumed from %s: its checkpoints continue in %s", origin, callback.dirpath)


class RelocatableModelCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` that follows its run folder when the folder is moved.

    Lightning restores a checkpoint callback's best score and top-k bookkeeping only when the
    run resumes into the ``dirpath`` the checkpoint was written in. A run folder copied or moved
    elsewhere (another disk, a cluster's results synced home) and resumed there in place
    (``ckpt_path=NEW/checkpoints/last.ckpt hydra.run.dir=NEW``) would forget its best score:
    the best of the resumed epochs alone would become "best" and be tested as the run's
    result. When the stored best checkpoint is found in this ``dirpath`` under its own name,
    the stored paths are moved here before Lightning reads them; otherwise Lightning's rule
    (and its warning) stands, and ``check_best_checkpoint`` stops the run before testing.
    """

    @property
    def state_key(self) -> str:
        """Lightning's own key (its class name, not ours): checkpoints written by either
        class resume into either."""
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__,
                                         1)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old, new = state_dict.get("dirpath"), self.dirpath
        best = state_dict.get("best_model_path") or ""
        if old and new and Path(old) != Path(new) \
                and (not best or (Path(new) / Path(best).name).is_file()):
            def moved(path: str) -> str:
                return str(Path(new) / Path(path).name) if path and Path(path).parent == Path(old) \
                    else path
            state_dict = {
                **state_dict, "dirpath": new,
                **{key: moved(state_dict[key]) for key in
                   ("best_model_path", "kth_best_model_path", "last_model_path")
                   if state_dict.get(key)},
                "best_k_models": {moved(path): score for path, score
                                  in (state_dict.get("best_k_models") or {}).items()}}
            log.info("checkpoint folder moved from %s to %s: its best checkpoint and score "
                     "follow it", old, new)
        super().load_state_dict(state_dict)


def last_checkpoint(trainer: L.Trainer) -> Path | None:
    """The run's ``last.ckpt`` once a checkpoint callback has written it, else ``None``."""
    return next((Path(cb.dirpath) / "last.ckpt" for cb in trainer.checkpoint_callbacks
                 if isinstance(cb, ModelCheckpoint) and cb.dirpath
                 and (Path(cb.dirpath) / "last.ckpt").is_file()), None)


class ResumeCommand(L.Callback):
    """Keeps in ``results.json`` the command that resumes the run, from its first
    ``last.ckpt`` on (written as the next epoch starts, right after that checkpoint), so that
    a run killed without a word (``kill -9``, a lost node) says how to continue it. Also
    tells the results file that training has started (``ResultsFile.begin``): a folder's
    earlier record (a run resumed in place) is replaced from here on, never by a failed start.
    """

    def __init__(self, results: ResultsFile) -> None:
        self.results = results

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.results.begin()

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer)

    def _record(self, trainer: L.Trainer) -> None:
        last = last_checkpoint(trainer)
        command = resume_command(last) if last else None
        if command and self.results.data.get("resume") != command and trainer.is_global_zero:
            self.results.update(resume=command)
            self.results.save()


def add_resumed_by(folder: Path, resumed_by: str | Path) -> None:
    """Record in ``folder``'s results file that the job in ``resumed_by`` continues it."""
    path = folder / RESULTS_FILE
    if not is_rank_zero() or not path.is_file():
        return
    data = read_results(path)
    if "schema" not in data:  # unreadable: leave it as it is
        return
    links = [*data.get("resumed_by", []), str(resumed_by)]
    data["resumed_by"] = list(dict.fromkeys(links))
    write_json_atomic(path, data)


def check_best_checkpoint(trainer: L.Trainer, best_val_acc: float | None) -> None:
    """Before testing: the checkpoint the callback calls best must hold the run's best
    validation accuracy (``best_val_acc``, the module's own maximum, restored on resume).

    They differ when a resumed run's checkpoint callback did not get its state back (its
    ``dirpath`` or arguments changed since the checkpoint was written): the callback's "best"
    is then the best of the resumed epochs only, and testing it would be a wrong result.
    """
    callback = trainer.checkpoint_callback
    if not isinstance(callback, ModelCheckpoint) or callback.monitor != "val/acc" \
            or callback.best_model_score is None or best_val_acc is None:
        return
    kept = float(callback.best_model_score)
    if kept < best_val_acc - 1e-6:
        raise UserError(
            f"the best checkpoint {callback.best_model_path} has val/acc {kept:.4f}, but this "
            f"run's best validation was {best_val_acc:.4f}: its checkpoint callback lost its "
            "state when the run was resumed (its folder or the callback's settings changed "
            "since the checkpoint was written). Nothing was tested; test the best epoch's "
            "checkpoint (see results.json 'history') with python src/eval.py ckpt_path=... "
            "split=test")
