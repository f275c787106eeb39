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

import platform
import resource
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
