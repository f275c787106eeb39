"""LSTMN with deep attention fusion: parameter counts of Table 2, attention maps, config values.
Shapes, padding, gradients, over-fitting and save/load: test_model_harness."""

from __future__ import annotations

import pytest
import torch

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.lstmn import LSTMNDeepFusion
from entailment_lab.paper_tables import TABLE2, parse_count
from tests.conftest import frozen_embedding, padded_pair_details

VOCAB = 60
# Also through the harness's network checks (padding, gradients): the other reading.
HARNESS_VARIANTS = [["model.net.shared_reader=false", "model.net.initial_slot=false"]]

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**kwargs) -> LSTMNDeepFusion:
    return LSTMNDeepFusion(frozen_embedding(VOCAB, 12), num_classes=3, hidden_size=10, **kwargs)


def paper_count(h: int, d: int = 300, classes: int = 3) -> int:
    """docs/models/lstmn.md: the hypothesis LSTMN 6h² + 5hd + 6h, the fusion 3h² + 2hd + 3h,
    the classifier 3h² + 2h + (h + 1)·classes."""
    return 12 * h * h + 7 * h * d + 11 * h + (h + 1) * classes


@pytest.mark.parametrize(("row", "hidden", "expected"), [(6, 300, 1_714_203),
                                                         (7, 450, 3_381_303)])
def test_parameter_count_matches_table_2(row, hidden, expected):
    model = LSTMNDeepFusion(frozen_embedding(VOCAB, 300), num_classes=3, hidden_size=hidden)
    assert count_trainable_parameters(model, exclude=model.embedding) == expected
    assert paper_count(hidden) == expected and model.paper_parameter_count() is None
    printed = next(r for r in TABLE2 if r.row == row)
    assert printed.para == f"{round(expected / 1e5) / 10}M"  # 1.7M, 3.4M as printed
    assert parse_count(printed.para) == round(expected, -5)


def test_cheng_et_al_table_3_100d_deep_fusion_count():
    """The same arithmetic gives the paper's own 100-d row (Cheng et al. Table 3: 330k)."""
    model = LSTMNDeepFusion(frozen_embedding(VOCAB, 300), num_classes=3, hidden_size=100)
    assert count_trainable_parameters(model, exclude=model.embedding) == 331_403


def test_separate_premise_reader_adds_one_lstmn():
    model = LSTMNDeepFusion(frozen_embedding(VOCAB, 300), num_classes=3, hidden_size=300,
                            shared_reader=False)
    h, d = 300, 300
    assert count_trainable_parameters(model, exclude=model.embedding) == (
        1_714_203 + 6 * h * h + 5 * h * d + 6 * h) == 2_706_003


@pytest.mark.parametrize("slot", [True, False])
def test_attention_maps_normalise_over_real_earlier_slots(slot):
    torch.manual_seed(4)
    model = tiny(initial_slot=slot).eval()
    n0 = int(slot)
    out, p_mask, h_mask = padded_pair_details(model, VOCAB)
    intra_p, intra_h = out["intra_attention_premise"], out["intra_attention_hypothesis"]
    inter = out["inter_attention"]
    assert intra_p.shape == (2, 6, n0 + 6) and intra_h.shape == (2, 5, n0 + 5)
    assert inter.shape == (2, 5, n0 + 6)

    for maps, mask, slots in ((intra_p, p_mask, out["premise_slot_mask"]),
                              (intra_h, h_mask, out["hypothesis_slot_mask"])):
        length = maps.shape[1]
        # Step t reads slots j < n0 + t (earlier words and the initial slot) that are real.
        earlier = torch.arange(n0 + length)[None, :] < (n0 + torch.arange(length))[:, None]
        allowed = earlier[None] & slots[:, None, :]  # (B, L, n0 + L)
        assert maps[~allowed].abs().max() == 0
        sums = maps.sum(-1)[mask]  # real steps
        first = torch.zeros_like(mask)
        first[:, 0] = True
        expected = torch.ones_like(sums) if slot else (~first[mask]).float()
        torch.testing.assert_close(sums, expected)  # without a slot, word 1 has nothing to read
    # Inter-attention: every real hypothesis step sums to 1 over the real premise slots.
    assert inter.masked_select(~out["premise_slot_mask"][:, None, :]).abs().max() == 0
    torch.testing.assert_close(inter.sum(-1)[h_mask], torch.ones(int(h_mask.sum())))
    # Padding of the second premise (3 words) gets no weight.
    assert inter[1, :, n0 + 3:].abs().max() == 0 and intra_p[1, :, n0 + 3:].abs().max() == 0
    maps = model.heatmaps(out, ["a"] * 6, ["b"] * 2, index=0)
    assert maps["inter_attention"].values.shape == (2, n0 + 6)
    assert maps["intra_attention_premise"].values.shape == (6, n0 + 6)


@pytest.mark.parametrize(
    "kwargs",
    [{"hidden_size": 0}, {"hidden_size": 2.5}, {"dropout": 1.0}, {"dropout": -0.1},
     {"shared_reader": "yes"}, {"initial_slot": 1}],
)
def test_bad_config_raises_config_error(kwargs):
    with pytest.raises(ConfigError, match=f"model.net.{next(iter(kwargs))}"):
        LSTMNDeepFusion(frozen_embedding(VOCAB, 12), num_classes=3, **kwargs)
