"""The issue-50 benchmarks run end to end with their smallest options and print their tables:
``benchmarks/profile_step.py`` (the epoch's split), ``benchmarks/cost_growth.py`` (cost
against length and batch size) and ``benchmarks/small_products.py`` (MKL's small products
against an AVX-512 kernel).

``profile_step.py`` and ``small_products.py`` run in this process, as ``__main__`` with their
command line (the interpreter, torch and Lightning are loaded already: seconds a test fewer);
``cost_growth.py`` forks a process per point, so it runs in its own interpreter.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from entailment_lab.models.kernels import native

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """Run ``benchmarks/SCRIPT`` as ``__main__`` with ``args`` in ``tmp_path``; its status and
    its stdout and stderr."""
    threads = torch.get_num_threads()

    def run_main(script: str, *args: str) -> tuple[int | str | None, str, str]:
        monkeypatch.setattr(sys, "argv", [script, *args])
        monkeypatch.chdir(tmp_path)
        capsys.readouterr()
        status: int | str | None = 0
        try:
            runpy.run_path(str(REPO / "benchmarks" / script), run_name="__main__")
        except SystemExit as exit_:
            status = exit_.code
        out, err = capsys.readouterr()
        return status, out, err

    yield run_main
    torch.set_num_threads(threads)
    native.library.cache_clear()  # a run without a compiler on PATH is not remembered


def run(script: str, *args: str, cwd: Path) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


NUMBER = r"(-?\d+(?:\.\d+)?)"


def test_profile_step_prints_the_split(main) -> None:
    status, out, err = main("profile_step.py", "--model", "decatt", "--batches", "3",
                            "--warmup", "1", "data.batch_size=16")
    assert status == 0, err[-3000:]
    rows = {m.group(1).strip(): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(rf"^([a-zA-Z ]+?)\s+{NUMBER}\s+{NUMBER}%\s+{NUMBER} \|\s+"
                                 rf"{NUMBER}\s+{NUMBER}%$", out, re.MULTILINE)}
    parts = ["data", "forward", "backward", "optimiser", "loop and callbacks"]
    assert list(rows) == [*parts, "Trainer epoch"], out
    assert "3 steps" in out
    epoch = rows["Trainer epoch"][0]
    assert epoch > 0 and rows["Trainer epoch"][1] == 100.0
    # the parts add up to the epoch (printed to 2 decimals each)
    assert sum(rows[p][0] for p in parts) == pytest.approx(epoch, abs=0.05)
    assert rows["forward"][0] > 0 and rows["backward"][0] > 0, out
    framework, share = map(float, re.search(rf"{NUMBER} s = {NUMBER} % of the epoch",
                                            out).groups())
    assert framework == pytest.approx(
        epoch - sum(rows[p][0] for p in ("forward", "backward", "optimiser")), abs=0.04)
    assert 0 <= share <= 100
    assert re.search(r"Trainer epoch / bare loop = \d+\.\d+x \(CPU time \d+\.\d+x\)", out), out


@pytest.mark.slow
def test_cost_growth_prints_one_row_per_model_and_point(tmp_path: Path) -> None:
    """DIN-1 and DIIN (DecAtt runs the same code in tests/test_readme.py's tiny budget)."""
    out = run("cost_growth.py", "--quick", "--models", "din1", "diin", "--out",
              str(tmp_path / "plots"), cwd=tmp_path)
    rows = re.findall(rf"^(din1|diin|decatt)\s+(\d+)\s+(\d+)\s+{NUMBER}\s+{NUMBER}\s+"
                      rf"(\S+)\s+(\d+)\s+(\d+)$", out, re.MULTILINE)
    assert [(r[0], r[1], r[2]) for r in rows] == [("din1", "8", "8"), ("diin", "8", "8")], out
    for row in rows:
        assert float(row[3]) > 0
        assert int(row[6]) >= int(row[7]) > 0  # all aten events >= the kernel ops among them
    if sys.platform.startswith("linux"):
        assert all(float(r[5]) > 0 for r in rows), out
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "cost_growth_diin.png", "cost_growth_din1.png"]


def test_profile_step_builds_a_past_network(main) -> None:
    """``--net-commit``: the network's model file at a commit (here HEAD), the rest as today."""
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip("not a git checkout")
    status, out, err = main("profile_step.py", "--model", "din1", "--dim", "16", "--batches",
                            "2", "--warmup", "1", "--no-bare", "--net-commit", "HEAD")
    assert status == 0, err[-3000:]
    assert "# din1 (network of HEAD), dim 16" in out, out


def test_profile_step_names_a_commit_it_cannot_read(main) -> None:
    status, _, _ = main("profile_step.py", "--model", "din1", "--dim", "16", "--batches", "1",
                        "--net-commit", "no-such-commit")
    assert status == ("--net-commit no-such-commit: src/entailment_lab/models/din.py (for "
                      "entailment_lab.models.din.DIN) could not be read at that commit")


def test_past_network_gets_the_knobs_it_has(capsys: pytest.CaptureFixture[str]) -> None:
    """A past class without today's contract or knobs: wrapped, built, the rest named."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import torch
    from omegaconf import OmegaConf
    from profile_step import build_past_net

    from entailment_lab.models.base import Network

    class Old(torch.nn.Module):  # a network from before a knob existed
        def __init__(self, embedding: torch.nn.Embedding, num_classes: int, dim: int) -> None:
            super().__init__()
            self.out = torch.nn.Linear(dim, num_classes)

    wrapped = type("Old", (Old, Network), {})
    cfg = OmegaConf.create({"_target_": "x.Old", "dim": 4, "new_knob": "a"})
    net = build_past_net(wrapped, cfg, torch.nn.Embedding(3, 2), 3)
    assert isinstance(net, Network) and net.out.in_features == 4
    assert "has no knob new_knob: left out" in capsys.readouterr().out


def test_small_products_times_both_and_checks_the_kernel(main) -> None:
    """benchmarks/small_products.py: one row per m with both rates, and the package's C kernel
    equal to torch's operations to float32 rounding. Status 3 (the kernel is not built: no C
    compiler or no AVX-512F) is a skip, with the message it prints."""
    status, out, err = main("small_products.py", "--dims", "16", "20", "--n", "8", "--reps", "2",
                            "--rounds", "1")
    if status == 3:
        pytest.skip(out.strip() or err.strip())
    assert status == 0, err[-3000:]
    rows = re.findall(rf"^(\d+)\s+{NUMBER}\s+{NUMBER} \|\s+{NUMBER}\s+{NUMBER} \|\s+{NUMBER}x \| "
                      r"(\S+)$", out, re.MULTILINE)
    assert [row[0] for row in rows] == ["16", "20"], out
    for row in rows:
        assert all(float(v) > 0 for v in row[1:6]) and float(row[6]) < 1e-5, row


def test_small_products_refuses_sizes_its_kernel_cannot_hold(main) -> None:
    status, _, err = main("small_products.py", "--dims", "17")
    assert status == 2 and "--dims [17]: each m must be one of (16, 18, 20)" in err


def test_small_products_says_why_it_cannot_measure(main, tmp_path, monkeypatch) -> None:
    """Without a C compiler on PATH: lines that say so, status 3, no traceback."""
    monkeypatch.setenv("PATH", str(tmp_path))
    native.library.cache_clear()
    status, out, err = main("small_products.py", "--dims", "20")
    assert status == 3 and "Traceback" not in err
    assert "no C compiler on PATH" in out and "not measured" in out


def test_lightning_floor_prints_both_networks(main) -> None:
    status, out, err = main("lightning_floor.py", "--steps", "20", "--rounds", "1")
    assert status == 0, err
    rows = [line for line in out.splitlines() if "tensors," in line]
    assert [row.split(",")[0] for row in rows] == ["2 tensors", "32 tensors"]
    for row in rows:
        figures = [float(x) for x in re.findall(NUMBER, row.split(",", 1)[1])]
        assert len(figures) == 5 and all(f > 0 for f in figures[:3])
