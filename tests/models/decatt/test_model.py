"""Decomposable Attention: parameter counts of Table 2, attention maps, config values, the
recipe's Adagrad. Shapes, padding, gradients, over-fitting and save/load: test_model_harness."""

from __future__ import annotations

import hydra
import pytest
import torch

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.decatt import DecomposableAttention
from tests.conftest import compose_cfg, frozen_embedding, padded_pair_details

VOCAB = 60


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(("intra", "expected"), [(False, 381_803), (True, 582_214)])
def test_parameter_count_matches_table_2(intra, expected):
    model = DecomposableAttention(frozen_embedding(VOCAB, 300), num_classes=3,
                                  intra_attention=intra)
    assert count_trainable_parameters(model, exclude=model.embedding) == expected
    assert model.paper_parameter_count() == expected


def test_trainable_null_is_a_word_vector_in_the_paper_count():
    model = DecomposableAttention(frozen_embedding(VOCAB, 300), num_classes=3, null_trainable=True)
    assert count_trainable_parameters(model, exclude=model.embedding) == 381_803 + 300
    assert model.paper_parameter_count() == 381_803


def test_attention_maps_shapes_and_normalisation():
    model = DecomposableAttention(frozen_embedding(VOCAB, 300), num_classes=3,
                                  intra_attention=True).eval()
    out, p_mask, h_mask = padded_pair_details(model, VOCAB)
    to_h, to_p = out["attention_premise_to_hypothesis"], out["attention_hypothesis_to_premise"]
    assert to_h.shape == to_p.shape == (2, 7, 6)  # (batch, len_p + 1, len_h + 1)
    assert out["intra_attention_premise"].shape == (2, 7, 7)
    # Rows over the hypothesis (real premise rows) and columns over the premise sum to 1.
    torch.testing.assert_close(to_h.sum(2)[out["premise_mask"]], torch.ones(6 + 3 + 2))
    torch.testing.assert_close(to_p.sum(1)[out["hypothesis_mask"]], torch.ones(2 + 5 + 2))
    # Padding gets no weight and padded words have all-zero maps; NULL (index 0) is real.
    pair_mask = out["premise_mask"][:, :, None] & out["hypothesis_mask"][:, None, :]
    assert to_h[~pair_mask].abs().max() == 0 and to_p[~pair_mask].abs().max() == 0
    assert not pair_mask[0, :, 3:].any() and not pair_mask[1, 4:, :].any()
    assert out["premise_mask"][:, 0].all()


@pytest.mark.parametrize(
    "kwargs",
    [{"hidden_size": 0}, {"dropout": 1.0}, {"max_distance": -1}, {"init_std": 0.0},
     {"null_init": "zeros"}],
)
def test_bad_config_raises_config_error(kwargs):
    with pytest.raises(ConfigError):
        DecomposableAttention(frozen_embedding(VOCAB, 300), num_classes=3, **kwargs)


def test_adagrad_state_starts_at_the_papers_accumulator(tmp_path):
    """Parikh et al.: Adagrad "with the default initial accumulator value of 0.1" (PyTorch's
    default is 0): the recipe's optimiser really starts there."""
    cfg = compose_cfg(["model=decatt"], tmp_path)
    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer = hydra.utils.instantiate(cfg.optimizer)(params=[weight])
    assert torch.equal(optimizer.state[weight]["sum"], torch.full((3,), 0.1))
    weight.grad = torch.tensor([1.0, 0.0, -2.0])
    optimizer.step()  # lr * g / sqrt(0.1 + g²): a bounded first step, not lr * sign(g)
    expected = -0.05 * weight.grad / torch.sqrt(0.1 + weight.grad**2)
    assert torch.allclose(weight.detach(), expected)
