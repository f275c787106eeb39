"""Opening a checkpoint runs no code: plain data in, ``weights_only=True`` out, the rest refused."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from entailment_lab.checkpoints import read_checkpoint
from entailment_lab.errors import ConfigError
from entailment_lab.module import CHECKPOINT_KEY, plain_data
from entailment_lab.pipeline import evaluate, load_trained, train
from tests.conftest import FAST, compose_cfg, file_overrides
from tests.entry_points import run_entry_point

LSTM = ["model=lstm", "dim=16", "model.net.mlp_size=32"]


@pytest.fixture(scope="module")
def run(pair_files, tmp_path_factory) -> Path:
    """Two epochs with best and last checkpoints."""
    out = tmp_path_factory.mktemp("run")
    train(compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), "trainer.max_epochs=2",
                       "eval_train=false", "seed=5"], out))
    return out


class _WritesFile:
    """Pickles as a call to ``exec`` that creates ``marker``: what a hostile checkpoint does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",)


def crafted_checkpoint(path: Path, marker: Path) -> Path:
    """A checkpoint that looks like ours but whose pickle would write ``marker``."""
    torch.save({"state_dict": {}, "epoch": 0,
                CHECKPOINT_KEY: {"vocab": ["<pad>", "<unk>", "a"], "config": {},
                                 "label_names": ["yes", "no"], "note": _WritesFile(marker)}},
               path)
    return path


@pytest.fixture
def crafted(tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "pwned.txt"
    ckpt = crafted_checkpoint(tmp_path / "shared.ckpt", marker)
    # The file is a real threat: the old unrestricted load would have written the marker.
    control = tmp_path / "control.txt"
    torch.load(crafted_checkpoint(tmp_path / "control.ckpt", control), weights_only=False)
    assert control.exists()
    return ckpt, marker


def test_checkpoints_hold_only_plain_data(run):
    for ckpt in (run / "checkpoints").glob("*.ckpt"):
        assert torch.serialization.get_unsafe_globals_in_checkpoint(str(ckpt)) == []
        meta = torch.load(ckpt, weights_only=True)[CHECKPOINT_KEY]
        assert isinstance(meta["config"], dict) and meta["config"]["model"]["name"] == "lstm"
        assert meta["vocab"][:2] == ["<pad>", "<unk>"] and meta["label_names"][0] == "entailment"


def test_resume_and_eval_load_weights_only(run, pair_files, tmp_path, monkeypatch):
    """Every load, Lightning's resume (optimiser, scheduler, callbacks) included, succeeds
    when torch is forced to ``weights_only=True``."""
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")
    metrics = train(compose_cfg([*LSTM, *FAST, *file_overrides(pair_files),
                                 "trainer.max_epochs=3", "eval_train=false", "seed=5",
                                 f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"], tmp_path))
    assert metrics["epochs"] == 3 and "test/acc" in metrics
    best = json.loads((run / "results.json").read_text())["best_checkpoint"]
    evaluated = evaluate(compose_cfg([f"ckpt_path={best}", "trainer.enable_model_summary=false"],
                                     tmp_path / "eval", config_name="eval"))
    assert 0.0 <= evaluated["test/acc"] <= 1.0


def test_crafted_checkpoint_is_refused_and_runs_nothing(crafted, pair_files, tmp_path,
                                                        monkeypatch):
    ckpt, marker = crafted
    with pytest.raises(ConfigError, match=r"refused: its pickle refers to '(builtins\.)?exec'"):
        load_trained(ckpt)  # eval.py, explain.py and predict.py
    with pytest.raises(ConfigError, match="refused"):
        evaluate(compose_cfg([f"ckpt_path={ckpt}"], tmp_path / "eval", config_name="eval"))
    # Resume: refused before Lightning opens it, even where the environment asks torch for
    # unrestricted loads by default.
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(ConfigError, match="refused"):
        train(compose_cfg([*LSTM, *FAST, *file_overrides(pair_files), f"ckpt_path={ckpt}"],
                          tmp_path / "resume"))
    assert not marker.exists()


def test_lightning_loader_refuses_the_crafted_checkpoint(crafted):
    ckpt, marker = crafted
    strategy = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).strategy
    with pytest.raises(Exception, match="Weights only load failed"):
        strategy.load_checkpoint(ckpt)  # what trainer.fit / test(ckpt_path=...) call
    assert not marker.exists()


def test_cli_refuses_the_crafted_checkpoint_in_one_line(crafted, tmp_path):
    ckpt, marker = crafted
    proc = run_entry_point("src/predict.py", [f"ckpt_path={ckpt}", "premise=a man .",
                                              "hypothesis=a person .",
                                              f"hydra.run.dir={tmp_path / 'job'}"])
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: ckpt_path: '{ckpt}' refused")
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


def test_files_that_are_not_checkpoints_get_one_line(tmp_path):
    text = tmp_path / "notes.ckpt"
    text.write_text("not a checkpoint")
    with pytest.raises(ConfigError, match="not a readable PyTorch checkpoint"):
        read_checkpoint(text)
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {}}, other)
    with pytest.raises(ConfigError, match="not written by this project's train.py"):
        load_trained(other)
    with pytest.raises(ConfigError, match="no such checkpoint"):
        read_checkpoint(tmp_path / "missing.ckpt")


def test_plain_data_converts_config_and_numpy_and_rejects_objects():
    value = {"cfg": OmegaConf.create({"a": [1, 2], "b": {"c": "x"}}), "n": np.float64(0.5),
             "i": np.int64(3), "t": (1, "a"), "p": Path("/x/y"), "none": None}
    plain = plain_data(value)
    assert plain == {"cfg": {"a": [1, 2], "b": {"c": "x"}}, "n": 0.5, "i": 3, "t": [1, "a"],
                     "p": "/x/y", "none": None}
    assert type(plain["n"]) is float and type(plain["i"]) is int
    with pytest.raises(TypeError, match=r"meta\.bad: cannot store a value of type object"):
        plain_data({"bad": object()}, "meta")
