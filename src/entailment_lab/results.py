"""The per-job results file (``results.json`` in the job folder).

Written atomically at the start (``status: running``) and at the end (``completed``,
``failed`` with the error, or ``interrupted`` with the command that resumes it), so a reader
(``report.py``) can tell finished, crashed, stopped and still-running jobs apart and never sees
half a file. From the first epoch on it holds the command that resumes the run (``resume``),
so even a run killed without a word (``kill -9``, a lost node) says how to continue it. (A run
resumed in another folder links both ways, ``resumed_from`` in the new file and ``resumed_by``
in the old one: ``resume.py``.)

A job that starts in a folder that already holds a ``results.json`` (a run resumed in place)
leaves that file as it is until its training starts (``ResultsFile.begin``): a start that fails
(a wrong override, a missing file) never overwrites the record of the run it meant to resume.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

from entailment_lab.files import write_text_atomic

RESULTS_FILE = "results.json"
SCHEMA_VERSION = 1


def results_json(data: dict[str, Any]) -> str:
    """A results file's text: indented JSON."""
    return json.dumps(data, indent=2, default=_jsonable) + "\n"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """``write_text_atomic`` of indented JSON."""
    write_text_atomic(path, results_json(data))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # tensors, numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


CODE_PATHS = ("src", "conf", "pyproject.toml")  # what a run's result depends on in a checkout


def code_version(source: str | Path = Path(__file__).parent) -> dict[str, Any]:
    """What code produced a result: the git commit of ``source``'s checkout, whether its code
    differs from that commit (``dirty``: a change to ``CODE_PATHS``, untracked files there
    included; docs and tests do not count), Python's and torch's versions.

    ``commit`` and ``dirty`` are ``None`` where ``source`` is not in a git checkout (a package
    installed from a wheel) or git is not installed; a figure from a dirty checkout cannot be
    traced to a commit, which is why the flag is recorded.
    """
    import torch  # here, not at import: the report reads results files without torch

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(source), *args], capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    top = git("rev-parse", "--show-toplevel") if commit else None
    status = git("-C", top, "status", "--porcelain", "--", *CODE_PATHS) if top else None
    return {"commit": commit, "dirty": None if status is None else bool(status),
            "python": platform.python_version(), "torch": torch.__version__}


def is_rank_zero() -> bool:
    """Whether this process is DDP rank 0 (imported here, not at module import: the report
    reads results files without loading torch and Lightning)."""
    from lightning.pytorch.utilities import rank_zero_only

    return rank_zero_only.rank == 0


def clean_number(value: Any) -> float | None:
    """A float for JSON, with NaN/inf as ``None``."""
    if value is None:
        return None
    value = float(value.item() if hasattr(value, "item") else value)
    return None if math.isnan(value) or math.isinf(value) else value


def run_folder(ckpt_path: str | Path) -> Path:
    """The job folder a checkpoint belongs to (``<job>/checkpoints/NAME.ckpt`` -> ``<job>``)."""
    folder = Path(ckpt_path).expanduser().resolve().parent
    return folder.parent if folder.name == "checkpoints" else folder


def resume_command(last_checkpoint: str | Path) -> str:
    """The command that resumes a run from its ``last.ckpt``: the run's own config and folder
    come with it (``precheck.resume_overrides``)."""
    return shlex.join(["python", "src/train.py", f"ckpt_path={last_checkpoint}"])


class ResultsFile:
    """Incrementally built results of one job.

    ``kept``: the folder held a results file when this one was made (a run resumed in place);
    nothing is written until ``begin`` (training starts), so a failed start keeps it.
    """

    def __init__(self, folder: str | Path, summary: dict[str, Any]) -> None:
        self.path = Path(folder) / RESULTS_FILE
        self.kept = self.path.is_file()
        self.started = time.time()
        self.data: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "status": "running",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "pid": os.getpid(),
            "code": code_version(),
            **summary,
        }

    def update(self, **fields: Any) -> None:
        self.data.update(fields)

    def begin(self) -> None:
        """Training starts: from now on this job's record replaces one the folder held."""
        self.kept = False

    def save(self) -> None:
        """Write the file (rank 0 only: in DDP every rank runs the job, one file results);
        not while the folder's earlier record is kept (``kept``)."""
        if not is_rank_zero() or self.kept:
            return
        self.data["wall_time_s"] = round(time.time() - self.started, 2)
        write_json_atomic(self.path, self.data)

    def finish(self, status: str, error: BaseException | None = None) -> None:
        self.data["status"] = status
        from entailment_lab.signals import RunInterruptedError  # here: no Lightning for readers

        if isinstance(error, RunInterruptedError):
            self.data.update(error=error.reason, resume=error.resume or self.data.get("resume"))
        elif error is not None:
            self.data["error"] = f"{type(error).__name__}: {error}"
        if status == "completed":
            self.data.pop("resume", None)  # nothing left to resume
        if self.kept:
            logging.getLogger(__name__).warning(
                "%s left as it was: this job %s before its training started", self.path, status)
        self.save()


def read_results(path: str | Path) -> dict[str, Any]:
    """Read a results file; a missing or unreadable one gives a ``status`` that says so."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {"status": "missing", "error": f"no {RESULTS_FILE} in {path.parent}"}
    except (OSError, json.JSONDecodeError) as err:
        return {"status": "unreadable", "error": f"{path}: {err}"}
