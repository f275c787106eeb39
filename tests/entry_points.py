"""Run an entry point (``src/*.py``) in the test's own process, as a user's shell runs it.

Starting a fresh interpreter costs seconds a test, most of it importing torch and Lightning,
which every test process has loaded already. ``run_entry_point`` gives what
``subprocess.run([sys.executable, script, *args], capture_output=True, text=True)`` gives: the
exit status (``sys.exit("error: ...")`` is 1, with its message on stderr, as the interpreter
prints it; an uncaught exception is 1 with its traceback), and everything printed or logged.
What a run changes in the process is put back afterwards: the environment, the working folder,
``sys.argv``, the logging handlers Hydra installs and Hydra's global state.

Tests of what only a separate process shows (signals, DDP ranks, two processes started in the
same second) start one.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import runpy
import subprocess
import sys
import traceback
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra

REPO = Path(__file__).resolve().parents[1]


def run_entry_point(script: str | Path, args: Sequence[str] = (), cwd: str | Path | None = None,
                    env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python SCRIPT ARGS`` (``SCRIPT`` relative to the repository) in this process, in
    ``cwd``, with ``env`` added to the environment."""
    path = Path(script) if Path(script).is_absolute() else REPO / script
    argv = [str(path), *args]
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    status = 0
    GlobalHydra.instance().clear()  # a test's compose() leaves it set; @hydra.main refuses that
    try:
        os.environ.update(env or {})
        sys.argv = argv
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as exit_:
                if isinstance(exit_.code, str):
                    print(exit_.code, file=sys.stderr)
                status = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
            except Exception:  # what the interpreter would print, then status 1
                traceback.print_exc()
                status = 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        for handler in root.handlers[:]:
            if handler not in saved_handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in saved_handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(saved_level)
        GlobalHydra.instance().clear()
    return subprocess.CompletedProcess([sys.executable, *argv], status, out.getvalue(),
                                       err.getvalue())
