"""DF-LSTM: parameter counts, the grid recurrence against a cell-by-cell loop over the model's
own modules (the equations themselves: test_reference.py), memory attention,
initialisation, config errors. Shapes, padding, gradients, over-fitting and save/load:
test_model_harness."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.dflstm import DeepFusionLSTM
from tests.conftest import (
    assert_rows_match_reference,
    frozen_embedding,
    pad_with_noise,
    random_sentences,
)

VOCAB = 60
pad_batch = partial(pad_with_noise, vocab_size=VOCAB)
HARNESS_OVERRIDES = ["model.net.memory_size=3"]  # memories shorter than the sentences
# Also through the harness's network checks (padding, gradients): K longer than a sentence
# (the config's 9), and stacked layers with an align function per memory.
HARNESS_VARIANTS = [["model.net.memory_size=9"],
                    ["model.net.separate_attention=true", "model.net.num_layers=2"]]

pytestmark = pytest.mark.usefixtures("one_thread")


def small_model(**kwargs) -> DeepFusionLSTM:
    torch.manual_seed(1)
    return DeepFusionLSTM(frozen_embedding(VOCAB, 16), num_classes=3, **{"dim": 16, **kwargs})


def count(model: DeepFusionLSTM) -> int:
    return count_trainable_parameters(model, exclude=model.embedding)


# dim=600 (300 + 300 units), 300-d word vectors, 3 classes; arithmetic in docs/models/dflstm.md.
ROW3 = 2 * (4 * 300 * (300 + 600) + 4 * 300) + (300 * (300 + 300 + 300) + 300) + (600 * 3 + 3)


def test_parameter_count_of_row_3():
    model = DeepFusionLSTM(frozen_embedding(VOCAB, 300), num_classes=3, dim=600)
    assert ROW3 == 2_434_503
    assert count(model) == ROW3 and model.paper_parameter_count() is None
    # The printed 2.8M is not this model's count (it is another "Liu et al. 2016" model's):
    # 2,434,503 shows as 2.4M; even a second align function (2,704,803) shows as 2.7M.
    assert f"{ROW3 / 1e6:.1f}M" == "2.4M"
    separate = DeepFusionLSTM(frozen_embedding(VOCAB, 300), num_classes=3, dim=600,
                              separate_attention=True)
    assert count(separate) == ROW3 + 270_300 == 2_704_803


def test_parameter_count_of_the_papers_own_snli_model():
    """Liu et al.'s SNLI run: 100 units per LSTM, 100-d vectors (Table 1/2 of their paper)."""
    model = DeepFusionLSTM(frozen_embedding(VOCAB, 100), num_classes=3, dim=200)
    assert count(model) == 2 * (400 * 300 + 400) + (100 * 300 + 100) + (200 * 3 + 3) == 271_503


def test_stacked_layers_read_the_state_below():
    model = DeepFusionLSTM(frozen_embedding(VOCAB, 300), num_classes=3, dim=600, num_layers=2)
    layer = ROW3 - 1_803  # layer 2 reads 300-d states, as layer 1 reads 300-d words
    assert count(model) == 2 * layer + 1_803 == 4_867_203


def reference_logits(model: DeepFusionLSTM, p: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """One unpadded pair, cell by cell in row-major order, straight from Eq. 7-17."""
    x, y = model.embedding(p), model.embedding(h)
    K, zero = model.memory_size, torch.zeros(model.hidden_size)
    states: list[dict[tuple[int, int], dict[str, torch.Tensor]]] = [{} for _ in model.layers]

    def read(attention, memory: list[torch.Tensor], previous: torch.Tensor, z: torch.Tensor):
        if not memory:
            return zero
        M = torch.stack(memory)  # (slots, d)
        g = attention.v(torch.tanh(attention.W_memory(M) + attention.W_read(previous)
                                   + attention.W_input(z))).squeeze(-1)  # Eq. 16
        return torch.softmax(g, dim=0) @ M  # Eq. 12-15

    for i in range(len(p)):
        for j in range(len(h)):
            z_x, z_y = x[i], y[j]
            for fusion, s in zip(model.layers, states, strict=True):
                def get(key: str, cell: tuple[int, int], s=s) -> torch.Tensor:
                    return s[cell][key] if cell in s else zero
                r_x = read(fusion.attention_x, [s[i - k, j]["h_x"] for k in range(1, K + 1)
                                                if i - k >= 0], get("r_x", (i - 1, j)), z_x)
                r_y = read(fusion.attention_y, [s[i, j - k]["h_y"] for k in range(1, K + 1)
                                                if j - k >= 0], get("r_y", (i, j - 1)), z_y)
                H = torch.cat([r_x, r_y])[None]  # Eq. 17
                h_x, c_x = fusion.lstm_x(z_x[None], H, get("c_x", (i - 1, j))[None])  # Eq. 7
                h_y, c_y = fusion.lstm_y(z_y[None], H, get("c_y", (i, j - 1))[None])  # Eq. 8
                s[i, j] = {"h_x": h_x[0], "c_x": c_x[0], "r_x": r_x,
                           "h_y": h_y[0], "c_y": c_y[0], "r_y": r_y}
                z_x, z_y = h_x[0], h_y[0]
    last = states[-1][len(p) - 1, len(h) - 1]
    return model.classifier(torch.cat([last["h_x"], last["h_y"]]))  # Eq. 6, §5.1


@pytest.mark.parametrize("kwargs", [{"memory_size": 3},
                                    {"memory_size": 2, "num_layers": 2,
                                     "separate_attention": True}])
def test_diagonal_wavefront_equals_the_cell_by_cell_recurrence(kwargs):
    """Every pair of a padded batch (lengths 1 to 14, memory shorter and longer than a sentence)
    gets the logits of the equations run on that pair alone."""
    assert_rows_match_reference(small_model(**kwargs), reference_logits, (5, 14, 1, 9),
                                (4, 7, 3, 1), VOCAB)


def test_memory_attention_normalises_over_earlier_real_positions():
    K = 3
    model = small_model(memory_size=K).eval()
    p_ids, p_mask = pad_batch(random_sentences((6, 2), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences((2, 5), VOCAB))
    out = model(p_ids, p_mask, h_ids, h_mask, return_details=True)
    a_x, a_y = out["memory_attention_premise"], out["memory_attention_hypothesis"]
    assert a_x.shape == a_y.shape == (2, 6, 5, K)
    assert out["matching_grid"].shape == (2, 6, 5, 16)
    grid_mask = out["grid_mask"]
    i = torch.arange(6)[:, None, None]
    j = torch.arange(5)[None, :, None]
    k = torch.arange(1, K + 1)[None, None, :]
    for weights, earlier in ((a_x, i - k >= 0), (a_y, j - k >= 0)):
        real = grid_mask[..., None] & earlier  # slot k of a real cell holds a real position
        assert weights[~real].abs().max() == 0  # padding and the sentence start: no weight
        has_memory = real.any(-1)
        torch.testing.assert_close(weights.sum(-1)[has_memory],
                                   torch.ones(int(has_memory.sum())))
        assert (weights.sum(-1)[~has_memory] == 0).all()  # first word: nothing to read, r = 0
    # The matching vector is the grid's cell at both true last words.
    torch.testing.assert_close(out["matching_vector"][1], out["matching_grid"][1, 1, 4])
    assert out["matching_grid"][~grid_mask].abs().max() == 0


def test_heatmaps_cover_the_real_words():
    model = small_model(memory_size=3).eval()
    p_ids, p_mask = pad_batch(random_sentences((4, 2), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences((3, 3), VOCAB))
    details = model(p_ids, p_mask, h_ids, h_mask, return_details=True)
    maps = model.heatmaps(details, ["a", "b"], ["c", "d", "e"], index=1)
    assert maps["matching"].values.shape == (3, 2)  # hypothesis rows × premise columns
    assert maps["matching"].values.min() >= 0.0 and maps["matching"].values.max() <= 1.0
    assert maps["memory_premise"].values.shape == (1, 2)
    assert maps["memory_hypothesis"].values.shape == (1, 3)
    torch.testing.assert_close(maps["memory_hypothesis"].values.sum(), torch.tensor(1.0))


def test_initialisation_orthogonal_lstm_blocks_uniform_rest():
    model = DeepFusionLSTM(frozen_embedding(VOCAB, 16), num_classes=3, dim=16, init_range=0.1)
    for block in model.layers[0].lstm_x.affine.weight.split(8, dim=0):  # (d, d_in + 2d) per gate
        torch.testing.assert_close(block @ block.T, torch.eye(8), rtol=1e-5, atol=1e-5)
    for name, parameter in model.named_parameters():
        if not name.endswith("affine.weight") and not name.startswith("embedding."):
            assert parameter.abs().max() <= 0.1, name


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [({"dim": 15}, "dim"), ({"dim": 0}, "dim"), ({"memory_size": 0}, "memory_size"),
     ({"num_layers": 0}, "num_layers"), ({"dropout": 1.0}, "dropout"),
     ({"init_range": 0.0}, "init_range")],
)
def test_bad_config_raises_config_error_naming_the_knob(kwargs, knob):
    with pytest.raises(ConfigError, match=f"model.net.{knob}"):
        DeepFusionLSTM(frozen_embedding(VOCAB, 16), num_classes=3, **kwargs)
    with pytest.raises(ConfigError, match=f"model.net.{knob}"):
        DeepFusionLSTM.check_config({"dim": 600, **kwargs})
