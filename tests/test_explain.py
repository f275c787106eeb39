"""Heat maps: explain.py writes Fig. 2 / Fig. 3 PNGs for a DIN checkpoint."""

import json
from pathlib import Path

import pytest

from entailment_lab.explain import explain_dir
from entailment_lab.pipeline import train
from tests.conftest import FAST, REPO, compose_cfg, file_overrides
from tests.entry_points import run_entry_point

pytestmark = pytest.mark.skipif(not (REPO / "conf/model/din1.yaml").exists(), reason="no DIN")


def test_explain_writes_both_heatmaps(pair_files, tmp_path):
    run = tmp_path / "run"
    cfg = compose_cfg(["model=din1", "dim=16", *FAST, *file_overrides(pair_files),
                       "trainer.max_epochs=1", "test=false"], run)
    train(cfg)
    ckpt = json.loads((run / "results.json").read_text())["best_checkpoint"]
    premise, hypothesis = "a young man is riding a bike in the park .", "a person is riding ."
    proc = run_entry_point("src/explain.py", [f"ckpt_path={ckpt}", f"premise={premise}",
                                              f"hypothesis={hypothesis}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Beside the checkpoint's run, one folder per pair; no new folder anywhere else.
    out = Path(explain_dir(ckpt, premise, hypothesis, "unused"))
    assert out.parent == run / "explain"
    assert out.name.startswith("a-young-man-is-riding--a-person-is-riding-")
    for name in ("interaction.png", "gates.png"):
        assert (out / name).stat().st_size > 5000
    assert (out / "explain.log").is_file()
    assert not (tmp_path / "outputs").exists() and not (REPO / "outputs/explain").exists()
    console = proc.stdout + proc.stderr
    assert "prediction:" in console
    assert "OOV rate" not in console  # the shape-only embedding before the trained weights


def test_explain_dir_per_pair():
    ckpt = "outputs/train/D/T-1/checkpoints/epoch_004.ckpt"
    first = explain_dir(ckpt, "A man sleeps .", "A person rests .", "fallback")
    assert first.startswith("outputs/train/D/T-1/explain/a-man-sleeps--a-person-rests-")
    assert explain_dir(ckpt, "A man sleeps .", "Nobody rests .", "fallback") != first
    assert explain_dir("run/last.ckpt", "a", "b", "x").startswith("run/explain/a--b-")
    assert explain_dir(None, None, None, "outputs/explain") == "outputs/explain"


def test_heatmaps_of_test_pairs_are_logged_to_wandb(pair_files, tmp_path):
    cfg = compose_cfg(["model=din1", "dim=16", *FAST, *file_overrides(pair_files),
                       "trainer.max_epochs=1", "logger=wandb"], tmp_path)
    train(cfg)
    images = list(tmp_path.glob("wandb/offline-run-*/files/media/images/test/heatmaps_*.png"))
    assert len(images) == 6  # 3 pairs x (Fig. 2 interaction, Fig. 3 gates)
