"""How soon a training run starts, and how heavy it is by then (issue 61, "fast answers, light
processes"): the time from the process's start to its first training step, and its resident
memory just before that step.

Each round runs ``src/train.py`` in a fresh process, as a user types it (default:
``experiment=demo``, the README's first command, on the generated demo corpus), with one more
callback, ``FirstStep`` (this file), which at the first training batch records

- **wall s**: seconds since the process started (the kernel's start time of the process, so the
  interpreter's own start-up counts);
- **CPU s**: the process's CPU seconds by then (user + system). On a busy machine the wall clock
  also counts the time the process waited for a core; the CPU time is close to what an idle
  core would take (one thread: the imports and the data preparation are serial);
- **RSS MiB**: its resident memory then (``VmRSS``), and the high-water mark (``VmHWM``);
- **modules**: whether ``wandb``, ``datasets``, ``matplotlib`` and ``hydra`` were imported by then;

and ends the process (exit status 0 without training further). The demo corpus is written on the
first round if it is missing; the rounds after that read it, as a user's second run does, so
the first round is left out of the summary unless it is the only one (``--rounds``).

    python benchmarks/startup.py                                  # 3 rounds, experiment=demo
    python benchmarks/startup.py --rounds 5 model=decatt          # other overrides: a run's
    python benchmarks/startup.py --imports torch lightning datasets  # each import alone

``--imports`` measures the floor under a run: for each module, a fresh interpreter that only
imports it, its CPU seconds and resident MiB after the import.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REPORT_VARIABLE = "ENTAILMENT_LAB_FIRST_STEP_REPORT"
WATCHED = ("wandb", "datasets", "matplotlib", "hydra", "lightning", "pandas")


def _status(field: str) -> float:
    """A ``/proc/self/status`` memory field in MiB."""
    with open("/proc/self/status", encoding="ascii") as f:
        line = next(line for line in f if line.startswith(f"{field}:"))
    return int(line.split()[1]) / 1024


def _process_start() -> float:
    """This process's start as a ``time.time()`` value (Linux: ``/proc/self/stat`` field 22,
    in clock ticks since boot)."""
    with open("/proc/self/stat", encoding="ascii") as f:
        ticks = int(f.read().rpartition(")")[2].split()[19])
    with open("/proc/uptime", encoding="ascii") as f:
        uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def _first_step_class() -> type:
    """``FirstStep``, a Lightning callback for the run's process. Built on first use
    (``startup.FirstStep`` resolves through the module's ``__getattr__``), so this benchmark's
    own process never imports Lightning (seconds a call)."""
    import lightning as L

    class FirstStep(L.Callback):
        """At the first training batch, write the figures to ``$ENTAILMENT_LAB_FIRST_STEP_REPORT``
        (JSON) and end the process."""

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                                 batch_idx: int) -> None:
            times = os.times()
            report = {"wall_s": time.time() - _process_start(),
                      "cpu_s": times.user + times.system,
                      "rss_mib": _status("VmRSS"), "hwm_mib": _status("VmHWM"),
                      "imported": [m for m in WATCHED if m in sys.modules]}
            Path(os.environ[REPORT_VARIABLE]).write_text(json.dumps(report))
            sys.stdout.flush()
            os._exit(0)  # the figures are taken: no training, no clean-up

    return FirstStep


def __getattr__(name: str) -> Any:
    if name == "FirstStep":
        globals()["FirstStep"] = cls = _first_step_class()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def one_round(overrides: list[str], work: Path, index: int) -> dict[str, Any]:
    """One fresh ``src/train.py`` process; its figures at the first training step."""
    report = work / f"round{index}.json"
    env = {**os.environ, REPORT_VARIABLE: str(report), "WANDB_MODE": "offline",
           "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"),
                                          os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(ROOT / "src" / "train.py"), *overrides,
               "+callbacks.first_step._target_=startup.FirstStep",
               f"hydra.run.dir={work / f'run{index}'}"]
    run = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    if run.returncode != 0 or not report.exists():
        sys.exit(f"round {index}: src/train.py failed ({run.returncode}): "
                 f"{(run.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(report.read_text())


IMPORT_PROBE = ("import importlib, json, os, sys; importlib.import_module(sys.argv[1]); "
                "t = os.times(); status = open('/proc/self/status').read(); "
                "print(json.dumps([t.user + t.system, "
                "int(status.split('VmRSS:')[1].split()[0]) / 1024]))")


def imports(modules: list[str]) -> None:
    """Each module imported alone in a fresh interpreter: CPU seconds, resident MiB."""
    print(f"# each import alone in a fresh interpreter; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'module':24s} {'CPU s':>6s} {'RSS MiB':>8s}")
    for module in modules:
        done = subprocess.run([sys.executable, "-c", IMPORT_PROBE, module], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        if done.returncode != 0:
            print(f"{module:24s} not importable: {done.stderr.strip().splitlines()[-1]}")
            continue
        cpu, rss = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{module:24s} {cpu:6.2f} {rss:8.0f}")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes (default 3)")
    parser.add_argument("--imports", nargs="+", metavar="MODULE",
                        help="instead: each module's import alone (CPU s, resident MiB)")
    parser.add_argument("overrides", nargs="*", default=["experiment=demo"],
                        help="src/train.py overrides (default: experiment=demo)")
    args = parser.parse_args(argv)
    if args.imports:
        imports(args.imports)
        return []
    work = Path(tempfile.mkdtemp(prefix="startup_"))
    overrides = [*args.overrides, f"paths.data_dir={work / 'data'}"]
    rounds = [one_round(overrides, work, i) for i in range(args.rounds)]
    load = os.getloadavg()[0]
    print(f"# src/train.py {' '.join(args.overrides)}: {args.rounds} fresh processes, "
          f"{os.cpu_count()} cores, load average {load:.1f} at the end")
    print(f"{'round':>5s} {'wall s':>7s} {'CPU s':>6s} {'RSS MiB':>8s} {'peak MiB':>9s}  imported")
    for i, r in enumerate(rounds):
        print(f"{i:5d} {r['wall_s']:7.2f} {r['cpu_s']:6.2f} {r['rss_mib']:8.0f} "
              f"{r['hwm_mib']:9.0f}  {', '.join(r['imported'])}")
    kept = rounds[1:] or rounds  # round 0 writes the demo corpus
    print(f"median of rounds {'1..' if len(rounds) > 1 else ''}{len(rounds) - 1}: "
          f"first step {statistics.median(r['wall_s'] for r in kept):.2f} s after start "
          f"(CPU {statistics.median(r['cpu_s'] for r in kept):.2f} s), "
          f"{statistics.median(r['rss_mib'] for r in kept):.0f} MiB resident before it "
          "(issue 61: <= 3 s on an idle core, <= 450 MiB)")
    return rounds


if __name__ == "__main__":
    main()
