"""A run stopped by SIGTERM or Ctrl+C: record where it stopped and how to resume it; link a run
resumed in another folder to the first one."""

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
