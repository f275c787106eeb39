"""Re-read LSTM: parameter count of Table 2, masking, attention maps, gradients, a tiny overfit."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.rlstm import ReReadLSTM
from entailment_lab.paper_tables import TABLE2
from tests.conftest import (
    assert_gradients_reach_every_parameter,
    assert_padding_invariant,
    fits_exactly,
    frozen_embedding,
    pad_with_noise,
    random_sentences,
)

VOCAB = 60
pad_batch = partial(pad_with_noise, vocab_size=VOCAB)

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


@pytest.mark.parametrize("kwargs", [{}, {"pooling": "last", "premise_bidirectional": False},
                                    {"memory_in_gates": False}])
def test_padding_does_not_change_logits(kwargs):
    torch.manual_seed(1)
    model = tiny(**kwargs)
    assert_padding_invariant(model, VOCAB)


def test_attention_normalises_over_real_premise_words():
    torch.manual_seed(2)
    model = tiny().eval()
    p_ids, p_mask = pad_batch(random_sentences((6, 3), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences((2, 5), VOCAB))
    out = model(p_ids, p_mask, h_ids, h_mask, return_details=True)
    attention = out["attention"]
    assert attention.shape == (2, 5, 6)  # (batch, len_h, len_p)
    # Each real hypothesis step's weights sum to 1 over the real premise words...
    torch.testing.assert_close(attention.sum(2)[h_mask], torch.ones(2 + 5))
    # ...padded premise words get none, and padded hypothesis steps have all-zero rows.
    pair_mask = h_mask[:, :, None] & p_mask[:, None, :]
    assert attention[~pair_mask].abs().max() == 0
    maps = model.heatmaps(out, ["p"] * 3, ["h"] * 5, index=1)
    assert maps["attention"].values.shape == (5, 3)
    assert (out["hypothesis_states"][~h_mask] == 0).all()


@pytest.mark.parametrize("kwargs", [{}, {"memory_in_gates": False}, {"memory_in_output": False}])
def test_gradients_reach_every_trainable_parameter(kwargs):
    torch.manual_seed(3)
    model = tiny(**kwargs)
    p_ids, p_mask = pad_batch(random_sentences((7, 4, 9), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences((4, 6, 3), VOCAB))
    assert_gradients_reach_every_parameter(model, (p_ids, p_mask, h_ids, h_mask),
                                           torch.tensor([0, 1, 2]))


def test_overfits_24_random_pairs():
    torch.manual_seed(4)
    model = ReReadLSTM(frozen_embedding(VOCAB, 16), num_classes=3, hidden_size=16, dropout=0.0)
    p_ids, p_mask = pad_batch(random_sentences(torch.randint(3, 9, (24,)), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences(torch.randint(2, 7, (24,)), VOCAB))
    labels = torch.arange(24) % 3
    assert fits_exactly(model, (p_ids, p_mask, h_ids, h_mask), labels, lr=1e-2)


@pytest.mark.parametrize(
    "kwargs",
    [{"hidden_size": 0}, {"hidden_size": 15}, {"dropout": 1.0}, {"pooling": "max"},
     {"mlp_layers": -1}, {"memory_in_gates": False, "memory_in_output": False}],
)
def test_bad_config_raises_config_error(kwargs):
    with pytest.raises(ConfigError, match="model.net."):
        ReReadLSTM(frozen_embedding(VOCAB, 16), num_classes=3, **{"hidden_size": 12, **kwargs})
