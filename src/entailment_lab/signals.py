"""A run stopped by SIGTERM or Ctrl+C: where it stopped, and the command that resumes it.

Inside Lightning's loops its own SIGTERM handler stops the fit after the batch; outside them
(reading the data, building the model) ``sigterm_raises`` makes SIGTERM an exception, so such a
stop is recorded too. Either way the run ends as a ``RunInterruptedError`` whose message says
how to resume, and the entry point exits with the shell's status (143 SIGTERM, 130 Ctrl+C).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException


class RunInterruptedError(Exception):
    """A run stopped by a signal (SIGTERM, Ctrl+C); the message says where and how to resume.

    ``resume`` is the command that continues it (``None`` without a checkpoint to resume
    from); ``exit_code`` is the shell's for the signal (143 for SIGTERM, 130 for Ctrl+C).
    """

    def __init__(self, reason: str, resume: str | None, exit_code: int) -> None:
        super().__init__(f"{reason}; resume with: {resume}" if resume else reason)
        self.reason = reason
        self.resume = resume
        self.exit_code = exit_code


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


def interruption(trainer: L.Trainer, stop: str) -> RunInterruptedError:
    """Where a stopped run stopped, and the command that resumes it in its own folder with its
    own config (``ckpt_path`` alone: ``precheck.resume_overrides``)."""
    from entailment_lab.results import resume_command
    from entailment_lab.resume import last_checkpoint

    stage = trainer.state.fn.value if trainer.state.fn else "fit"
    where = f"{stage}, epoch {trainer.current_epoch}, step {trainer.global_step}"
    exit_code = 143 if stop == "SIGTERM" else 130
    last = last_checkpoint(trainer)
    if last is None:
        return RunInterruptedError(f"interrupted by {stop} ({where}) before any last.ckpt was "
                                   "saved: nothing to resume from, start it again", None,
                                   exit_code)
    return RunInterruptedError(f"interrupted by {stop} ({where}); last.ckpt kept",
                               resume_command(last), exit_code)
