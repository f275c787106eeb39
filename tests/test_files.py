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


def test_code_version_names_the_commit_and_whether_the_code_changed(tmp_path):
    assert code_version(tmp_path)["commit"] is None  # not a git checkout: nothing to trace
    assert code_version(tmp_path)["dirty"] is None

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    git("init", "-q")
    for name in ("src/lab/model.py", "conf/train.yaml", "docs/RESULTS.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x: 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    package = tmp_path / "src" / "lab"  # asked from inside the package, as a run does
    clean = code_version(package)
    assert clean["commit"] == git("rev-parse", "HEAD") and clean["dirty"] is False
    (tmp_path / "docs" / "RESULTS.md").write_text("a docs edit is not a code change\n")
    (tmp_path / "notes.txt").write_text("nor is a file outside the code\n")
    assert code_version(package)["dirty"] is False
    (tmp_path / "conf" / "train.yaml").write_text("x: 2\n")
    assert code_version(package)["dirty"] is True
    git("checkout", "--", "conf")
    (tmp_path / "src" / "lab" / "new_model.py").write_text("y = 1\n")  # untracked, but code
    assert code_version(package)["dirty"] is True
