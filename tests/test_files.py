"""The atomic writers: whole files or none, and no temporary left behind; the code version
every results file records."""

from __future__ import annotations

import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from entailment_lab.files import write_bytes_atomic, write_figure_atomic, write_text_atomic
from entailment_lab.results import code_version


def test_text_is_written_whole_without_temporaries(tmp_path):
    path = tmp_path / "sub" / "report.md"
    write_text_atomic(path, "± Δ\n")
    write_text_atomic(path, "second\n")
    assert path.read_text(encoding="utf-8") == "second\n"
    assert [p.name for p in path.parent.iterdir()] == ["report.md"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "report.csv"
    write_bytes_atomic(path, b"old")

    def fail(self, target):
        raise OSError("disk full")

    monkeypatch.setattr(Path, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_bytes_atomic(path, b"new")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_figure_is_written_in_the_format_of_its_name(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    write_figure_atomic(tmp_path / "a.png", fig, dpi=50)
    write_figure_atomic(tmp_path / "a.svg", fig)
    plt.close(fig)
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "a.svg").read_bytes()


def test_code_version_names_the_commit_and_whether_tracked_files_changed(tmp_path):
    assert code_version(tmp_path)["commit"] is None  # not a git checkout: nothing to trace
    assert code_version(tmp_path)["dirty"] is None

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "model.py").write_text("x = 1\n")
    git("add", "model.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    clean = code_version(tmp_path)
    assert clean["commit"] == git("rev-parse", "HEAD") and clean["dirty"] is False
    (tmp_path / "notes.txt").write_text("untracked files do not change the code\n")
    assert code_version(tmp_path)["dirty"] is False
    (tmp_path / "model.py").write_text("x = 2\n")
    assert code_version(tmp_path)["dirty"] is True
