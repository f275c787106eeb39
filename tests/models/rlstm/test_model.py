"""Re-read LSTM: parameter counts of Table 2, attention maps, config values. Shapes, padding,
gradients, over-fitting and save/load: test_model_harness (with the knobs' variants below)."""

from __future__ import annotations

import pytest
import torch

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.rlstm import ReReadLSTM
from entailment_lab.paper_tables import TABLE2
from tests.conftest import check_premise_attention_map, frozen_embedding

VOCAB = 60
# Also through the harness's network checks (padding, gradients): the other readings.
HARNESS_VARIANTS = [["model.net.pooling=last", "model.net.premise_bidirectional=false"],
                    ["model.net.memory_in_gates=false"], ["model.net.memory_in_output=false"]]

pytestmark = pytest.mark.usefixtures("one_thread")


def count(**kwargs) -> int:
    model = ReReadLSTM(frozen_embedding(VOCAB, 300), num_classes=3, hidden_size=300, **kwargs)
    return count_trainable_parameters(model, exclude=model.embedding)


def test_parameter_count_matches_table_2():
    # 542,400 premise BiLSTM + 1,081,200 rLSTM gates + 270,300 attention + 91,203 classifier
    assert count() == 1_985_103
    for row in (10, 12):
        paper = next(r for r in TABLE2 if r.row == row)
        assert paper.para == "2.0M" and (paper.model, paper.dim) == ("rlstm", 300)
        assert round(count() / 1e6, 1) == paper.para_count / 1e6


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"mlp_layers": 0}, 1_985_103 - 90_300),                  # 1.9M
    ({"memory_in_gates": False}, 1_985_103 - 360_000),        # 1.6M
    ({"premise_bidirectional": False}, 1_985_103 + 180_000),  # 2.2M
    ({"memory_in_output": False}, 1_985_103),                 # no parameters of its own
])
def test_parameter_count_of_each_knob(kwargs, expected):
    assert count(**kwargs) == expected


def tiny(**kwargs) -> ReReadLSTM:
    return ReReadLSTM(frozen_embedding(VOCAB, 16), num_classes=3, hidden_size=12, dropout=0.0,
                      **kwargs)


def test_attention_normalises_over_real_premise_words():
    torch.manual_seed(2)
    out, _, h_mask = check_premise_attention_map(tiny(), VOCAB)
    assert (out["hypothesis_states"][~h_mask] == 0).all()


@pytest.mark.parametrize(
    "kwargs",
    [{"hidden_size": 0}, {"hidden_size": 15}, {"dropout": 1.0}, {"pooling": "max"},
     {"mlp_layers": -1}, {"memory_in_gates": False, "memory_in_output": False}],
)
def test_bad_config_raises_config_error(kwargs):
    with pytest.raises(ConfigError, match="model.net."):
        ReReadLSTM(frozen_embedding(VOCAB, 16), num_classes=3, **{"hidden_size": 12, **kwargs})
