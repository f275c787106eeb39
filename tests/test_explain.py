"""Heat maps: explain.py writes Fig. 2 / Fig. 3 PNGs for a DIN checkpoint."""

import json
import subprocess
import sys

import pytest

from entailment_lab.pipeline import train
from tests.conftest import FAST, REPO, compose_cfg, file_overrides

pytestmark = pytest.mark.skipif(not (REPO / "conf/model/din1.yaml").exists(), reason="no DIN")


def test_explain_writes_both_heatmaps(pair_files, tmp_path):
    run = tmp_path / "run"
    cfg = compose_cfg(["model=din1", "dim=16", *FAST, *file_overrides(pair_files),
                       "trainer.max_epochs=1", "test=false"], run)
    train(cfg)
    ckpt = json.loads((run / "results.json").read_text())["best_checkpoint"]
    out = tmp_path / "explain"
    proc = subprocess.run(
        [sys.executable, str(REPO / "src/explain.py"), f"ckpt_path={ckpt}",
         "premise=a young man is riding a bike in the park .",
         "hypothesis=a person is riding a bike .", f"hydra.run.dir={out}"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("interaction.png", "gates.png"):
        assert (out / name).stat().st_size > 5000
    assert "prediction:" in proc.stdout + proc.stderr


def test_heatmaps_of_test_pairs_are_logged_to_wandb(pair_files, tmp_path):
    cfg = compose_cfg(["model=din1", "dim=16", *FAST, *file_overrides(pair_files),
                       "trainer.max_epochs=1", "logger=wandb"], tmp_path)
    train(cfg)
    images = list(tmp_path.glob("wandb/offline-run-*/files/media/images/test/heatmaps_*.png"))
    assert len(images) == 6  # 3 pairs x (Fig. 2 interaction, Fig. 3 gates)
