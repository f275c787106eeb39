"""Word-by-word attention: parameter counts of Table 2, conditional encoding, attention maps,
config values. Shapes, padding, gradients, over-fitting and save/load: test_model_harness."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.wbw_attention import WordByWordAttention
from entailment_lab.paper_tables import TABLE2
from tests.conftest import (
    check_premise_attention_map,
    frozen_embedding,
    pad_with_noise,
    random_sentences,
)

VOCAB = 60
pad_batch = partial(pad_with_noise, vocab_size=VOCAB)
# Also through the harness's network checks (padding, gradients): the other readings.
HARNESS_VARIANTS = [["model.net.condition_on=state", "model.net.delimiter=false"],
                    ["model.net.delimiter=false"], ["model.net.single_lstm_bias=true"]]

pytestmark = pytest.mark.usefixtures("one_thread")


def small(**kwargs: object) -> WordByWordAttention:
    return WordByWordAttention(frozen_embedding(VOCAB, 12), num_classes=3, hidden_size=8, **kwargs)


# k = 100, 300-d vectors, 3 classes (docs/models/wbw_attention.md): projection 30,100, two LSTMs
# 2·80,800, W^y W^h W^r W^t 40,000, w 100, W^p W^x 20,000, softmax layer 303.
@pytest.mark.parametrize(("single_bias", "expected"), [(False, 252_103), (True, 251_303)])
def test_parameter_count_matches_table_2(single_bias, expected):
    model = WordByWordAttention(frozen_embedding(VOCAB, 300), num_classes=3, hidden_size=100,
                                single_lstm_bias=single_bias)
    delimiter = 300  # a word vector: in the true count, not in the paper's
    assert count_trainable_parameters(model, exclude=model.embedding) == expected + delimiter
    assert model.paper_parameter_count() == expected
    row = next(r for r in TABLE2 if r.row == 2)
    assert row.para == "250k" and round(expected, -4) == row.para_count  # DIN: 2 figures
    if not single_bias:  # the paper's own Table 1 prints 252k
        assert round(expected, -3) == 252_000
    without = WordByWordAttention(frozen_embedding(VOCAB, 300), num_classes=3, hidden_size=100,
                                  single_lstm_bias=single_bias, delimiter=False)
    assert count_trainable_parameters(without, exclude=without.embedding) == expected
    assert without.paper_parameter_count() is None


@pytest.mark.parametrize("condition_on", ["cell", "state"])
def test_hypothesis_lstm_starts_from_the_premise_state(condition_on):
    torch.manual_seed(4)
    model = small(condition_on=condition_on).eval()
    seen = {}
    model.premise_lstm.register_forward_hook(lambda m, args, out: seen.update(premise=out[1]))
    model.hypothesis_lstm.register_forward_pre_hook(lambda m, args: seen.update(start=args[1]))
    p_ids, p_mask = pad_batch(random_sentences((6, 2, 4), VOCAB))
    model(p_ids, p_mask, *pad_batch(random_sentences((3, 5, 1), VOCAB)))
    (h_L, c_L), (h_0, c_0) = seen["premise"], seen["start"]
    torch.testing.assert_close(c_0, c_L)  # c_L at each premise's own last word
    torch.testing.assert_close(h_0, h_L if condition_on == "state" else torch.zeros_like(h_L))


def test_attention_maps_normalise_over_the_real_premise():
    torch.manual_seed(5)
    check_premise_attention_map(small(), VOCAB)


def test_single_lstm_bias_freezes_the_second_bias_at_zero():
    model = small(single_lstm_bias=True)
    for lstm in (model.premise_lstm, model.hypothesis_lstm):
        assert not lstm.bias_hh_l0.requires_grad and lstm.bias_hh_l0.abs().max() == 0


@pytest.mark.parametrize(
    "kwargs",
    [{"hidden_size": 0}, {"hidden_size": 2.5}, {"dropout": 1.0}, {"condition_on": "hidden"},
     {"delimiter": "yes"}, {"single_lstm_bias": 1}],
)
def test_bad_config_raises_config_error(kwargs):
    config = {"hidden_size": 8, **kwargs}
    with pytest.raises(ConfigError, match="model.net."):
        WordByWordAttention(frozen_embedding(VOCAB, 12), num_classes=3, **config)
    with pytest.raises(ConfigError, match="model.net."):
        WordByWordAttention.check_config(config)
