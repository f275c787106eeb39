"""The atomic writers: whole files or none, and no temporary left behind."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from entailment_lab.files import write_bytes_atomic, write_figure_atomic, write_text_atomic


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
