"""Every model config trains one batch end to end (fast_dev_run) through the real pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from entailment_lab.pipeline import evaluate, train
from tests.conftest import FAST, compose_cfg, file_overrides

SMALL = {  # shrink each model so one batch takes well under a second
    "lstm": ["dim=16", "model.net.mlp_size=16"],
    "decatt": ["model.net.hidden_size=16"],
    "decatt_intra": ["model.net.hidden_size=16"],
    "dcnn": ["model.net.mlp_hidden_size=16"],
    "dflstm": ["dim=16", "model.net.memory_size=3"],
    "tclstm": ["dim=8", "model.net.num_layers=2", "model.net.mlp_size=8"],
    "diin": ["data.max_length=8", "model.net.dense_layers=2", "model.net.growth_rate=4",
             "model.net.char_filters=8", "model.net.dense_blocks=2"],
    "din1": ["dim=16"],
    "din2": ["dim=16"],
    "din1_static": ["dim=16"],
    "lexical": ["model.net.num_buckets=4096"],
    "rlstm": ["dim=16"],
    "mlstm": ["dim=16"],
    "wbw_attention": ["dim=16"],
    "lstmn": ["dim=16"],
    "hyperlstm": ["dim=8", "model.net.hyper_size=8", "model.net.embedding_size=4"],
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


def test_sentence_model_on_sentence_data(sentence_files, tmp_path):
    cfg = compose_cfg(["model=dcnn_sentence", "data=sst5", *FAST, *file_overrides(sentence_files),
                       "debug=fast"], tmp_path)
    metrics = train(cfg)
    assert 0.0 <= metrics["test/acc"] <= 1.0
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results["test_confusion_matrix"]) == 5


def test_decatt_adagrad_state_starts_at_the_papers_accumulator(tmp_path):
    """Parikh et al.: Adagrad "with the default initial accumulator value of 0.1" (PyTorch's
    default is 0): the recipe's optimiser really starts there."""
    import hydra

    cfg = compose_cfg(["model=decatt"], tmp_path)
    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer = hydra.utils.instantiate(cfg.optimizer)(params=[weight])
    assert torch.equal(optimizer.state[weight]["sum"], torch.full((3,), 0.1))
    weight.grad = torch.tensor([1.0, 0.0, -2.0])
    optimizer.step()  # lr * g / sqrt(0.1 + g²): a bounded first step, not lr * sign(g)
    expected = -0.05 * weight.grad / torch.sqrt(0.1 + weight.grad**2)
    assert torch.allclose(weight.detach(), expected)


def test_lexical_model_trains_and_evaluates(pair_files, tmp_path):
    """The lexical floor runs through the same pipeline as every neural model: checkpoint,
    eval-mode train accuracy, results.json, and eval.py from the checkpoint alone."""
    cfg = compose_cfg(["model=lexical", "model.net.num_buckets=4096", *FAST,
                       *file_overrides(pair_files), "trainer.max_epochs=3"], tmp_path)
    metrics = train(cfg)
    assert 0.0 <= metrics["train/acc_eval"] <= 1.0 and 0.0 <= metrics["test/acc"] <= 1.0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["budget"] == {"max_epochs": 3, "configured_max_epochs": 100}  # the recipe's
    best = results["best_checkpoint"]
    evaluated = evaluate(compose_cfg([f"ckpt_path={best}", "split=test",
                                      "trainer.enable_model_summary=false"], tmp_path / "eval",
                                     config_name="eval"))
    assert evaluated["test/acc"] == pytest.approx(metrics["test/acc"])
