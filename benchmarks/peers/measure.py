"""What every side of ``benchmarks/peer_speed.py`` measures the same way: the CPU's name and the
memory of one training epoch. Standard library only, Python >= 3.7: the peer drivers import
it from their own folder under their implementations' interpreters (TensorFlow 1.15 needs 3.7).

Memory, two figures (Linux ``/proc``; elsewhere only the first):

* ``peak_rss_mib``: the process's peak resident memory (``VmHWM``), imports and data
  included, the figure a user's machine must have;
* ``epoch_mib``: the peak during the epoch above the memory held when it starts (the kernel's
  high-water mark ``VmHWM`` is reset through ``/proc/self/clear_refs`` when the epoch starts,
  then read after it, minus ``VmRSS`` at the start): what training itself adds, whatever each
  framework holds after its imports.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shlex
import sys
import time
from pathlib import Path

STATUS = Path("/proc/self/status")


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


_peak_before_reset = 0.0  # VmHWM when ``EpochMemory.start`` reset it


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB.

    ``VmHWM`` where ``/proc`` has it (the peak of this program since it started: ``ru_maxrss``
    is not, as Linux carries a parent's peak across ``fork`` and ``exec``, so a driver started
    from a big process would report the parent's size), else ``ru_maxrss`` (KiB on Linux)."""
    high = _status_mib("VmHWM")
    if high is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return max(high, _peak_before_reset)


def _status_mib(key: str) -> float | None:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


class EpochMemory:
    """``start()`` when the epoch starts, ``mib()`` after it: its peak above its start."""

    def __init__(self) -> None:
        self.start_mib: float | None = None

    def start(self) -> None:
        global _peak_before_reset
        _peak_before_reset = peak_rss_mib()
        try:
            Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to VmRSS
        except OSError:
            self.start_mib = None
            return
        self.start_mib = _status_mib("VmRSS")

    def mib(self) -> float | None:
        high = _status_mib("VmHWM")
        if self.start_mib is None or high is None:
            return None
        return round(high - self.start_mib, 1)


class Epoch:
    """``with Epoch() as epoch:`` around one epoch's loop: its wall-clock and CPU seconds and
    its memory; ``epoch.fields()`` gives them as a record's keys."""

    def __enter__(self) -> Epoch:
        self.rss_before = peak_rss_mib()
        self.memory = EpochMemory()
        self.memory.start()
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        self.epoch_mib = self.memory.mib()

    def fields(self) -> dict:
        return {"epoch_s": round(self.wall, 3), "epoch_cpu_s": round(self.cpu, 3),
                "rss_before_mib": round(self.rss_before, 1),
                "peak_rss_mib": round(peak_rss_mib(), 1), "epoch_mib": self.epoch_mib,
                "machine": cpu_name(), "python": platform.python_version(),
                "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])}


def driver_arguments(doc: str, batch: int, seed: int) -> argparse.Namespace:
    """The command line every peer driver takes (``benchmarks/peer_speed.py`` calls it so):
    ``CHECKOUT --pairs FILE --batch B --threads T [--limit N] [--seed S] [--out RECORD]``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="the public implementation's checkout")
    parser.add_argument("--pairs", type=Path, required=True,
                        help="the training split, as benchmarks/peer_speed.py export writes it")
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="only the first N examples")
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--out", type=Path, help="where to write the record (JSON)")
    return parser.parse_args()


def read_pairs(path: Path, limit: int | None, who: str) -> list[tuple[list[str], list[str], int]]:
    """(premise tokens, hypothesis tokens, label) of each line; one line's error ends the run
    with the file, the line and what is wrong."""
    if not path.is_file():
        sys.exit(f"{who}: {path} does not exist (benchmarks/peer_speed.py export writes it)")
    pairs = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if limit is not None and len(pairs) >= limit:
                break
            try:
                record = json.loads(line)
                pairs.append((record["premise"].split(), record["hypothesis"].split(),
                              int(record["label"])))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as err:
                sys.exit(f"{who}: {path}, line {number}: expected a JSON object with premise, "
                         f"hypothesis and an int label ({type(err).__name__}: {err})")
    return pairs


def emit(record: dict, out: Path | None) -> None:
    """Print the record; write it to ``out`` where given."""
    text = json.dumps(record, indent=1)
    print(text)
    if out:
        out.write_text(text + "\n")
