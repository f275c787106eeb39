"""A new model is one ``Network`` subclass plus one config file, and nothing else.

The toy model below lives only in this test; a config file written here registers it (through
Hydra's search path, as a user's own config folder would). It then trains, evaluates and is
explained through the real pipeline, and the hooks of the contract are called as documented.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import torch
from torch import nn

from entailment_lab.errors import ConfigError
from entailment_lab.explain import explain_pair
from entailment_lab.models.base import HeatMap, Network
from entailment_lab.models.common import masked_mean
from entailment_lab.pipeline import evaluate, load_trained, train
from tests.conftest import FAST, compose_cfg, file_overrides

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS_SEEN: list[int] = []  # what set_training_step received, across instances


class WordMatch(Network):
    """Toy pair model: mean word vectors of P and H -> linear; its map is word similarity."""

    def __init__(self, embedding: nn.Embedding, num_classes: int, hidden_size: int = 8,
                 l2: float = 0.0) -> None:
        super().__init__()
        self.validate_config(hidden_size=hidden_size, l2=l2)
        self.embedding, self.l2 = embedding, l2
        self.project = nn.Linear(embedding.embedding_dim, hidden_size)
        self.output = nn.Linear(2 * hidden_size, num_classes)

    @classmethod
    def validate_config(cls, *, hidden_size: int, l2: float, **_: Any) -> None:
        if hidden_size < 1:
            raise ConfigError(f"model.net.hidden_size must be >= 1, got {hidden_size}")

    def forward(self, premise: torch.Tensor, premise_mask: torch.Tensor,
                hypothesis: torch.Tensor, hypothesis_mask: torch.Tensor,
                return_details: bool = False) -> dict[str, torch.Tensor]:
        p = self.project(self.embedding(premise))  # (batch, len_p, hidden)
        h = self.project(self.embedding(hypothesis))  # (batch, len_h, hidden)
        pair = torch.cat([masked_mean(p, premise_mask), masked_mean(h, hypothesis_mask)], -1)
        out = {"logits": self.output(pair)}
        if return_details:
            out["similarity"] = torch.sigmoid(h @ p.transpose(1, 2))  # (batch, len_h, len_p)
        return out

    def regularization_loss(self) -> torch.Tensor:
        return self.l2 * self.output.weight.pow(2).sum()

    def paper_parameter_count(self) -> int:
        return 1234

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        values = details["similarity"][index, : len(hypothesis), : len(premise)].detach()
        return {"similarity": HeatMap(values, list(hypothesis), list(premise), "Similarity",
                                      "premise word", "hypothesis word", "sigmoid(h·p)")}

    def set_training_step(self, step: int) -> None:
        STEPS_SEEN.append(step)


@pytest.fixture
def toy_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A config folder holding only ``model/word_match.yaml``; returns the search-path override."""
    folder = tmp_path_factory.mktemp("user_conf")
    (folder / "model").mkdir()
    (folder / "model" / "word_match.yaml").write_text(
        "name: word_match\n"
        "default_dim: null\n"
        "net:\n"
        f"  _target_: {__name__}.WordMatch\n"
        "  hidden_size: 8\n"
        "  l2: 0.001\n"
    )
    return f"hydra.searchpath=[file://{folder}]"


def test_a_new_model_trains_evaluates_and_explains(toy_config, pair_files, tmp_path):
    STEPS_SEEN.clear()
    cfg = compose_cfg([toy_config, "model=word_match", *FAST, *file_overrides(pair_files),
                       "trainer.max_epochs=2"], tmp_path / "train")
    metrics = train(cfg)
    assert 0.0 <= metrics["test/acc"] <= 1.0
    results = json.loads((tmp_path / "train" / "results.json").read_text())
    assert results["status"] == "completed" and results["inputs"] == "pair"
    assert results["params"]["paper_convention"] == 1234  # the hook reached the results
    assert len(results["history"]) == 2
    steps_per_epoch = -(-60 // 16)  # 60 training pairs, batch 16
    assert list(range(2 * steps_per_epoch)) == STEPS_SEEN  # the trainer's global step, each step

    ckpt = results["best_checkpoint"]
    cfg = compose_cfg([f"ckpt_path={ckpt}", "split=validation"], tmp_path / "eval",
                      config_name="eval")
    assert 0.0 <= evaluate(cfg)["validation/acc"] <= 1.0

    module, _, _ = load_trained(ckpt)
    explained = explain_pair(module, "a man is sleeping", "a person sleeps")
    assert set(explained["figures"]) == {"similarity"}


def test_a_bad_value_of_a_new_model_fails_before_data_is_read(toy_config, tmp_path):
    cfg = compose_cfg([toy_config, "model=word_match", "model.net.hidden_size=0", *FAST],
                      tmp_path)  # the hub is offline here: reading the data would fail second
    with pytest.raises(ConfigError, match="hidden_size must be >= 1"):
        train(cfg)
    cfg = compose_cfg([toy_config, "model=word_match", "+model.net.hiden_size=4", *FAST],
                      tmp_path)
    with pytest.raises(ConfigError, match="hiden_size is not a knob of WordMatch"):
        train(cfg)


def test_a_target_outside_the_contract_is_named(tmp_path):
    cfg = compose_cfg(["model=lstm", "model.net._target_=torch.nn.Linear", *FAST], tmp_path)
    with pytest.raises(ConfigError, match="torch.nn.Linear is not a subclass of"):
        train(cfg)
    cfg = compose_cfg(["model=lstm", "model.net._target_=my_models.NoSuchNet", *FAST], tmp_path)
    with pytest.raises(ConfigError,
                       match="model.net._target_='my_models.NoSuchNet': cannot import it"):
        train(cfg)
