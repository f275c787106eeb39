"""A run stopped by SIGTERM or Ctrl+C: record where it stopped and how to resume it; link a run
resumed in another folder to the first one; keep a resumed run's best checkpoint its best."""

from __future__ import annotations

import logging
import shlex
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from entailment_lab.errors import UserError
from entailment_lab.results import ResultsFile, RunInterruptedError, add_resumed_by, run_folder

log = logging.getLogger(__name__)


def sigterm_raises() -> Callable[[], None]:
    """Make SIGTERM raise ``SIGTERMException`` outside Lightning's loops (reading the data,
    building the model), so such a stop is recorded too; inside them Lightning's own handler
    is in place and stops gracefully after the batch. Returns what restores the old handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        if signal.getsignal(signal.SIGTERM) is handler:  # not Lightning's (it calls this too)
            raise SIGTERMException

    previous = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)


def stop_signal(trainer: L.Trainer, err: BaseException) -> str | None:
    """The signal that stopped the run (Lightning: ``SIGTERMException``, or ``sys.exit(1)``
    after Ctrl+C), else ``None``."""
    if isinstance(err, SIGTERMException) or trainer.received_sigterm:
        return "SIGTERM"
    if isinstance(err, KeyboardInterrupt) or isinstance(err.__context__, KeyboardInterrupt):
        return "SIGINT"
    return None


def interruption(trainer: L.Trainer, stop: str, overrides: list[str],
                  folder: str) -> RunInterruptedError:
    """Where a stopped run stopped, and the command that resumes it in its own folder."""
    stage = trainer.state.fn.value if trainer.state.fn else "fit"
    where = f"{stage}, epoch {trainer.current_epoch}, step {trainer.global_step}"
    exit_code = 143 if stop == "SIGTERM" else 130
    last = next((Path(cb.dirpath) / "last.ckpt" for cb in trainer.checkpoint_callbacks
                 if isinstance(cb, ModelCheckpoint) and cb.dirpath
                 and (Path(cb.dirpath) / "last.ckpt").is_file()), None)
    if last is None:
        return RunInterruptedError(f"interrupted by {stop} ({where}) before any last.ckpt was "
                                   "saved: nothing to resume from, start it again", None,
                                   exit_code)
    kept = [o for o in overrides
            if not o.lstrip("+~").startswith(("ckpt_path=", "hydra.run.dir="))]
    resume = shlex.join(["python", "src/train.py", *kept, f"ckpt_path={last}",
                         f"hydra.run.dir={folder}"])
    return RunInterruptedError(f"interrupted by {stop} ({where}); last.ckpt kept", resume,
                               exit_code)


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
