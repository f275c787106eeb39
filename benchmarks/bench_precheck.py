"""How long a command line takes to answer a mistake (``precheck.py``), as a user runs it.

Each command runs as a real process (``python src/train.py ...``), ``--rounds`` times; printed
per command: the exit status, the first line of stderr, the median wall time and the median CPU
time of the process (user + system: what it costs on an idle core, whatever else the machine
runs). Last, the medians over all commands, beside ``python -c "import lightning"`` (what every
answer cost before the check ran ahead of the imports). The machine's load is printed first:
on a busy machine wall times grow, CPU times do not.

    python benchmarks/bench_precheck.py
    python benchmarks/bench_precheck.py --rounds 5 --only 4
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

COMMANDS = [
    ["src/train.py", "model=din3"],
    ["src/train.py", "optimizer=adamw_typo"],
    ["src/train.py", "debug=tinyy"],
    ["src/train.py", "experiment=table2/row99"],
    ["src/train.py", "+optimiser.lr=0.1"],
    ["src/train.py", "trainer.max_epoch=1"],
    ["src/train.py", "embeddings.dim=64"],
    ["src/train.py", "trainer.accelerator=gpu"],
    ["src/train.py", "trainer.strategy=ddp_typo"],
    ["src/train.py", "trainer.max_time=abc"],
    ["src/train.py", "embeddings=glove840b"],
    ["src/train.py", "+extra_tests.x=MISSING"],
    ["src/train.py", "data.test_splits=[tset]"],
    ["src/train.py", "callbacks.early_stopping.monitor=val/accuracy"],
    ["src/train.py", "data.val_group_by=premis"],
    ["src/train.py", "trainer.devices=3"],
    ["src/train.py", "model=diin", "dim=300"],
    ["src/train.py", "model=lstm", "model.net.hidden_size=64"],
    ["src/train.py", "--help"],
]


def timed(args: list[str], cwd: str) -> tuple[float, float, int, str]:
    """Wall and CPU seconds of one process, its exit status and its first stderr line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src"),
                               "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[0]
    return wall, cpu, done.returncode, line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each command")
    parser.add_argument("--only", type=int, default=None, help="the first N commands only")
    args = parser.parse_args(argv)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores; {args.rounds} round(s)")
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as cwd:
        for command in COMMANDS[: args.only]:
            runs = [timed([str(REPO / command[0]), *command[1:]], cwd)
                    for _ in range(args.rounds)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            walls.append(wall)
            cpus.append(cpu)
            print(f"{wall:5.2f} s wall {cpu:5.2f} s cpu  exit {runs[0][2]}  "
                  f"{' '.join(command[1:])}: {runs[0][3][:90]}")
        base = [timed(["-c", "import lightning"], cwd) for _ in range(args.rounds)]
    print(f"median over {len(walls)} commands: {statistics.median(walls):.2f} s wall, "
          f"{statistics.median(cpus):.2f} s cpu")
    print(f'python -c "import lightning": {statistics.median(b[0] for b in base):.2f} s wall, '
          f"{statistics.median(b[1] for b in base):.2f} s cpu")
    return 0


if __name__ == "__main__":
    sys.exit(main())
