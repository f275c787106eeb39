"""``benchmarks/gpu_check.py``'s parts that a CPU can check quickly: adding a missing package
from its wheel, SNLI-length batches, the epoch projection, and the refusals (one line each).
The whole check runs as ``make gpu-check DEVICE=cpu`` in CI."""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_check  # noqa: E402


def fake_wheel(folder: Path, dist: str, version: str, module: str) -> Path:
    """A pure-Python wheel holding ``module`` (a package with one constant)."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{module}/__init__.py", "ANSWER = 42\n")
        archive.writestr(f"{dist.replace('-', '_')}-{version}.dist-info/METADATA",
                         f"Name: {dist}\nVersion: {version}\n")
    return wheel


def test_a_missing_package_is_unpacked_from_its_wheel(tmp_path, monkeypatch):
    module = "gpu_check_fake_pkg"
    monkeypatch.setattr(gpu_check, "WHEELS", [(module, "gpu-check-fake-pkg", "1.0")])
    monkeypatch.setattr(sys, "path", list(sys.path))
    fake_wheel(tmp_path / "wheels", "gpu-check-fake-pkg", "1.0", module)
    assert importlib.util.find_spec(module) is None
    assert gpu_check.ensure_packages(tmp_path / "wheels") == ["gpu-check-fake-pkg 1.0"]
    assert importlib.import_module(module).ANSWER == 42
    assert (tmp_path / "wheels" / "site" / module / "__init__.py").is_file()
    sys.modules.pop(module)


def test_a_missing_package_without_its_wheel_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "WHEELS", [("gpu_check_absent", "gpu-check-absent", "2.0")])
    with pytest.raises(SystemExit) as stop:
        gpu_check.ensure_packages(tmp_path / "empty")
    message = str(stop.value)
    assert "\n" not in message and "gpu-check-absent 2.0" in message
    assert "make gpu-wheels" in message


def test_installed_packages_are_left_alone(tmp_path):
    assert gpu_check.ensure_packages(tmp_path / "none") == []  # this venv has every one


def test_the_wheel_list_is_pinned_to_what_the_tests_run_with():
    from importlib.metadata import version

    for module, dist, pinned in gpu_check.WHEELS:
        if module in gpu_check.PYTHON_310_ONLY and sys.version_info >= (3, 11):
            continue
        assert version(dist) == pinned, dist


def test_snli_length_batches_have_snli_lengths_and_are_bucketed():
    batches = gpu_check.snli_batches(batch_size=32, count=60, max_length=48, data=None)
    assert len(batches) == 60
    first = batches[0]
    assert set(first) == {"premise", "premise_mask", "hypothesis", "hypothesis_mask", "label"}
    lengths = {side: [int(n) for b in batches for n in b[f"{side}_mask"].sum(1)]
               for side in ("premise", "hypothesis")}
    assert statistics.mean(lengths["premise"]) == pytest.approx(14.1, abs=0.5)
    assert statistics.mean(lengths["hypothesis"]) == pytest.approx(8.3, abs=0.3)
    spans = []
    for b in batches:
        mask = b["premise_mask"]
        assert mask.any(1).all() and mask[:, 0].all()  # right-padded, no empty sentence
        assert (b["premise"][~mask] == 0).all() and (b["premise"][mask] >= 2).all()
        spans.append(int(mask.sum(1).max() - mask.sum(1).min()))
    assert statistics.median(spans) <= 1  # bucketed: a batch's premises have about one length
    # capped at the model's maximum length
    capped = gpu_check.snli_batches(batch_size=8, count=20, max_length=10, data=None)
    assert max(b["premise"].shape[1] for b in capped) <= 10


def test_lengths_can_come_from_a_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"premise": "a b c d e", "hypothesis": "x y", "label": 0}\n'
                    '{"premise": "skipped", "hypothesis": "no gold", "label": -1}\n')
    assert set(gpu_check.pair_lengths(20, 48, str(path), seed=1)) == {(5, 2)}


def test_projection_is_steps_times_step_time_plus_validation():
    rows = [{"experiment": "table2/row01", "model": "lstm", "batch": 128, "epochs": 20,
             "ms_per_step": 10.0, "eval_ms_per_batch": 2.0},
            {"experiment": "table2/diin", "model": "diin", "batch": 70, "epochs": 10,
             "ms_per_step": 100.0, "eval_ms_per_batch": 20.0}]
    out = gpu_check.project(rows)
    lstm = (math.ceil(549_367 / 128) * 10.0 + math.ceil(9_842 / 128) * 2.0) / 1000
    assert out["rows"][0]["epoch_s"] == pytest.approx(lstm)
    assert out["table2_hours"] == pytest.approx(3 * 20 * lstm / 3600)
    diin = (math.ceil(549_367 / 70) * 100.0 + math.ceil(9_842 / 70) * 20.0) / 1000
    assert out["diin_hours"] == pytest.approx(3 * 10 * diin / 3600)


def test_every_table2_row_and_diin_is_projected():
    experiments = gpu_check.table2_experiments()
    assert experiments[:19] == [f"table2/row{i:02d}" for i in range(1, 20)]
    assert experiments[19:] == ["table2/diin"]
    assert set(gpu_check.TIMED.values()) <= set(experiments)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU runs the check")
def test_cuda_without_a_gpu_is_refused_in_one_line():
    with pytest.raises(SystemExit) as stop:
        gpu_check.main(["--device", "cuda", "--wheels", str(REPO / ".gpu-wheels")])
    assert "no CUDA device" in str(stop.value) and "DEVICE=cpu" in str(stop.value)
