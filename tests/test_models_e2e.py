"""Every model config trains one batch end to end (fast_dev_run) through the real pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from entailment_lab.data.demo import write_jsonl
from entailment_lab.pipeline import train
from tests.conftest import FAST, compose_cfg, file_overrides

SMALL = {  # shrink each model so one batch takes well under a second
    "lstm": ["dim=16", "model.net.mlp_size=16"],
    "decatt": ["model.net.hidden_size=16"],
    "decatt_intra": ["model.net.hidden_size=16"],
    "dcnn": ["model.net.mlp_hidden_size=16"],
    "diin": ["model.net.max_length=8", "model.net.dense_layers=2", "model.net.growth_rate=4",
             "model.net.char_filters=8", "model.net.dense_blocks=2"],
    "din1": ["dim=16"],
    "din2": ["dim=16"],
    "din1_static": ["dim=16"],
}
PAIR_MODELS = [m for m in SMALL if (Path(__file__).parents[1] / f"conf/model/{m}.yaml").exists()]


@pytest.mark.parametrize("model", PAIR_MODELS)
def test_pair_model_fast_dev_run(model, pair_files, tmp_path):
    cfg = compose_cfg([f"model={model}", *SMALL[model], *FAST, *file_overrides(pair_files),
                       "debug=fast"], tmp_path)
    metrics = train(cfg)
    assert 0.0 <= metrics["test/acc"] <= 1.0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "completed" and results["params"]["trainable"] > 0


@pytest.fixture(scope="module")
def sentence_files(tmp_path_factory) -> dict[str, str]:
    """A tiny 5-class sentence corpus in the SST schema (``sentence``, ``label``)."""
    words = ["awful", "bad", "fine", "good", "great"]
    rows = [{"sentence": f"the film is {words[i % 5]} and {words[(i * 7) % 5]} .", "label": i % 5}
            for i in range(40)]
    folder = tmp_path_factory.mktemp("sst")
    return {s: str(write_jsonl(rows, folder / f"{s}.jsonl")) for s in ("train", "validation",
                                                                       "test")}


def test_sentence_model_on_sentence_data(sentence_files, tmp_path):
    cfg = compose_cfg(["model=dcnn_sentence", "data=sst5", *FAST, *file_overrides(sentence_files),
                       "debug=fast"], tmp_path)
    metrics = train(cfg)
    assert 0.0 <= metrics["test/acc"] <= 1.0
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results["test_confusion_matrix"]) == 5


def test_decatt_learns_with_its_paper_optimiser(pair_files, tmp_path):
    """Adagrad 0.05 on DecAtt's N(0, 0.01²) init: a bad Adagrad setting kept it at chance."""
    cfg = compose_cfg(["model=decatt", "model.net.hidden_size=32", "model.net.dropout=0.0",
                       *FAST, *file_overrides(pair_files), "trainer.max_epochs=40",
                       "callbacks.early_stopping=null", "data.batch_size=15", "test=false"],
                      tmp_path)
    assert cfg.optimizer._target_ == "torch.optim.Adagrad" and cfg.optimizer.lr == 0.05
    assert train(cfg)["train/acc"] >= 0.6  # chance is 1/3; accumulator 0.1 gave exactly that
