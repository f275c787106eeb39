"""Decomposable Attention: parameter counts of Table 2, masking, gradients, a tiny overfit."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.decatt import DecomposableAttention
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


@pytest.mark.parametrize("intra", [False, True])
def test_padding_does_not_change_logits(intra):
    torch.manual_seed(1)
    model = DecomposableAttention(frozen_embedding(VOCAB, 300), num_classes=3,
                                  intra_attention=intra)
    assert_padding_invariant(model, VOCAB)


def test_attention_maps_shapes_and_normalisation():
    model = DecomposableAttention(frozen_embedding(VOCAB, 300), num_classes=3,
                                  intra_attention=True).eval()
    p_ids, p_mask = pad_batch(random_sentences((6, 3), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences((2, 5), VOCAB))
    out = model(p_ids, p_mask, h_ids, h_mask, return_details=True)
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


@pytest.mark.parametrize("intra", [False, True])
def test_gradients_reach_every_trainable_parameter(intra):
    torch.manual_seed(2)
    model = DecomposableAttention(frozen_embedding(VOCAB, 300), num_classes=3,
                                  intra_attention=intra)
    # Lengths > 11 so that every distance bucket 0..10 occurs.
    p_ids, p_mask = pad_batch(random_sentences((13, 6, 9), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences((4, 12, 7), VOCAB))
    assert_gradients_reach_every_parameter(model, (p_ids, p_mask, h_ids, h_mask),
                                           torch.tensor([0, 1, 2]))


def test_overfits_24_random_pairs():
    embedding = frozen_embedding(VOCAB, 50, seed=3)
    model = DecomposableAttention(embedding, num_classes=3, hidden_size=64, dropout=0.0)
    p_ids, p_mask = pad_batch(random_sentences(torch.randint(3, 9, (24,)), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences(torch.randint(2, 7, (24,)), VOCAB))
    labels = torch.arange(24) % 3
    assert fits_exactly(model, (p_ids, p_mask, h_ids, h_mask,), labels, lr=3e-3)


@pytest.mark.parametrize(
    "kwargs",
    [{"hidden_size": 0}, {"dropout": 1.0}, {"max_distance": -1}, {"init_std": 0.0},
     {"null_init": "zeros"}],
)
def test_bad_config_raises_config_error(kwargs):
    with pytest.raises(ConfigError):
        DecomposableAttention(frozen_embedding(VOCAB, 300), num_classes=3, **kwargs)
