"""TC-LSTMs: parameter counts against row 4's Para and row 4's experiment, the diagonal wavefront
against a cell-by-cell loop over the model's own modules in all four directions (outputs and
gradients; the equations themselves: test_reference.py), dynamic pooling,
initialisation, config errors. Shapes, padding, gradients, over-fitting and save/load:
test_model_harness."""

from __future__ import annotations

from functools import partial

import hydra
import pytest
import torch

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.tclstm import TightlyCoupledLSTM
from tests.conftest import (
    assert_rows_match_reference,
    compose_cfg,
    frozen_embedding,
    pad_with_noise,
    random_sentences,
)

VOCAB = 60
pad_batch = partial(pad_with_noise, vocab_size=VOCAB)
HARNESS_OVERRIDES = ["model.net.num_layers=2"]  # two stacked blocks: the wiring, half the time
# Also through the harness's network checks (padding, gradients): the other readings.
HARNESS_VARIANTS = [["model.net.share_directions=false", "model.net.mlp_size=0"],
                    ["model.net.pool_rows=2", "model.net.pool_cols=2"]]

pytestmark = pytest.mark.usefixtures("one_thread")


def small_model(**kwargs) -> TightlyCoupledLSTM:
    torch.manual_seed(1)
    return TightlyCoupledLSTM(frozen_embedding(VOCAB, 8), num_classes=3,
                              **{"dim": 6, "num_layers": 2, "mlp_size": 5, **kwargs})


def count(model: TightlyCoupledLSTM) -> int:
    return count_trainable_parameters(model, exclude=model.embedding)


def unit(inputs: int, d: int = 50) -> int:
    """One TC-LSTM unit: T_{A,b} from [inputs; h_{i,j−1}; h_{i−1,j}] to the 5 gate blocks."""
    return (inputs + 2 * d) * 5 * d + 5 * d


HEAD = (2 * 1 * 50) * 50 + 50 + 50 * 3 + 3  # pooled 2 × 1 × 50 -> FC 50 -> 3 classes
# Row 4 with the defaults (d = 50, 4 blocks, one unit for all four directions): tclstm.md.
ROW4 = unit(2 * 300) + 3 * unit(50) + HEAD  # 300-d word vectors (ours)
ROW4_100D = unit(2 * 100) + 3 * unit(50) + HEAD  # the paper's 100-d GloVe vectors


def test_parameter_count_of_row_4():
    assert (unit(600), unit(200), unit(50), HEAD) == (175_250, 75_250, 37_750, 5_203)
    model = TightlyCoupledLSTM(frozen_embedding(VOCAB, 300), num_classes=3)
    assert count(model) == ROW4 == 293_703 and model.paper_parameter_count() is None
    paper_inputs = TightlyCoupledLSTM(frozen_embedding(VOCAB, 100), num_classes=3)
    assert count(paper_inputs) == ROW4_100D == 193_703
    # Row 4 prints 190k (189,500 .. 190,499). Neither count is that: 300-d vectors give 294k
    # (their first block alone, 175,250, leaves 14,750 for the three stacked blocks and the
    # classifier); the paper's 100-d vectors give 194k, 3,703 (1.9 %) above 190k.
    assert [f"{c / 1e3:.0f}k" for c in (ROW4, ROW4_100D)] == ["294k", "194k"]
    # Without the fully connected layer (pooled vector straight to the softmax): 189k.
    no_fc = TightlyCoupledLSTM(frozen_embedding(VOCAB, 100), num_classes=3, mlp_size=0)
    assert count(no_fc) == ROW4_100D - HEAD + (100 * 3 + 3) == 188_803


def test_row_4_experiment_runs_the_pinned_count(tmp_path):
    """conf/experiment/table2/row04.yaml builds the network with the paper's 100-d word vectors:
    193,703 parameters, the count nearest the printed 190k among the readings we can justify
    (docs/models/tclstm.md, "Parameter count"), and its own recipe (conf/recipe/tclstm.yaml)."""
    cfg = compose_cfg(["experiment=table2/row04"], tmp_path)
    assert (cfg.dim, cfg.embeddings.dim, cfg.data.lowercase) == (50, 100, True)
    assert cfg.embeddings.path.endswith("glove.6B.100d.txt") and not cfg.embeddings.freeze
    net = hydra.utils.instantiate(cfg.model.net, embedding=frozen_embedding(VOCAB, 100),
                                  num_classes=3)
    assert count(net) == ROW4_100D == 193_703 and abs(count(net) - 190_000) == 3_703
    assert cfg.optimizer.lr == 0.005 and cfg.optimizer.weight_decay == 1e-5
    # Readings of the unread sizes that land on 190k (189,500 .. 190,499) exist, but each fixes
    # a size no text we could read supports: 3 x 3 pooling straight to the softmax, or a 14-unit
    # fully connected layer after 2 x 1 pooling. Kept as knobs, not as row 4's configuration.
    grid = unit(2 * 100) + 3 * unit(50)
    pool_3x3 = TightlyCoupledLSTM(frozen_embedding(VOCAB, 100), num_classes=3, pool_rows=3,
                                  pool_cols=3, mlp_size=0)
    assert count(pool_3x3) == grid + (3 * 3 * 50) * 3 + 3 == 189_853
    fc_14 = TightlyCoupledLSTM(frozen_embedding(VOCAB, 100), num_classes=3, mlp_size=14)
    assert count(fc_14) == grid + (2 * 50) * 14 + 14 + 14 * 3 + 3 == 189_959


def test_parameter_count_with_a_unit_per_direction():
    """Four units per block (one per direction, as a BiLSTM has one per direction): 4 × the
    grid part; even the paper's 100-d vectors then give 759k, four times row 4's Para."""
    for e, expected in ((300, 1_159_203), (100, 759_203)):
        model = TightlyCoupledLSTM(frozen_embedding(VOCAB, e), num_classes=3,
                                   share_directions=False)
        assert count(model) == 4 * (unit(2 * e) + 3 * unit(50)) + HEAD == expected
    single = TightlyCoupledLSTM(frozen_embedding(VOCAB, 300), num_classes=3, directions=1,
                                share_directions=False)
    assert count(single) == ROW4  # one direction, one unit: the shared count


def reference_logits(model: TightlyCoupledLSTM, p: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """One unpadded pair, cell by cell, each direction walked from its own corner with its own
    neighbours ((i∓1, j), (i, j∓1)), straight from the TC-LSTM unit, the aggregation layer, the
    dynamic pooling and the classifier."""
    x, y = model.embedding(p), model.embedding(h)
    n, m, d = len(p), len(h), model.hidden_size
    zero = torch.zeros(d)
    below: dict[tuple[int, int], torch.Tensor] = {}
    for layer, block in enumerate(model.blocks):
        summed = {(i, j): torch.zeros(d) for i in range(n) for j in range(m)}
        for k, (back_p, back_h) in enumerate(model.directions):
            unit_index = 0 if block.weight.size(0) == 1 else k  # shared or per direction
            W, b = block.weight[unit_index], block.bias[unit_index, 0]
            step_i, step_j = (1, -1)[back_p], (1, -1)[back_h]
            hs: dict[tuple[int, int], torch.Tensor] = {}
            cs: dict[tuple[int, int], torch.Tensor] = {}
            for i in (range(n - 1, -1, -1) if back_p else range(n)):
                for j in (range(m - 1, -1, -1) if back_h else range(m)):
                    left, up = (i, j - step_j), (i - step_i, j)  # neighbours already done
                    z = torch.cat([x[i], y[j]]) if layer == 0 else below[i, j]
                    gates = torch.cat([z, hs.get(left, zero), hs.get(up, zero)]) @ W + b
                    c_tilde, o, ig, f_left, f_up = gates.chunk(5)
                    cs[i, j] = (torch.tanh(c_tilde) * torch.sigmoid(ig)
                                + cs.get(left, zero) * torch.sigmoid(f_left)
                                + cs.get(up, zero) * torch.sigmoid(f_up))
                    hs[i, j] = torch.sigmoid(o) * torch.tanh(cs[i, j])
                    summed[i, j] = summed[i, j] + hs[i, j]
        below = summed
    p_regions, q_regions = model.pool

    def region(k: int, chunks: int, length: int) -> range:
        start = k * length // chunks
        return range(start, max((k + 1) * length // chunks, start + 1))

    pooled = torch.stack([
        torch.stack([torch.stack([below[i, j] for i in region(a, p_regions, n)
                                  for j in region(c, q_regions, m)]).max(0).values
                     for c in range(q_regions)]) for a in range(p_regions)])  # (p, q, d)
    return model.classifier(pooled.flatten()[None])[0]


@pytest.mark.parametrize("kwargs", [{},
                                    {"share_directions": False, "pool_rows": 3, "pool_cols": 2,
                                     "mlp_size": 0},
                                    {"directions": 1, "num_layers": 1}])
def test_diagonal_wavefront_equals_the_cell_by_cell_recurrence(kwargs):
    """Every pair of a padded batch (lengths 1 to 7, shorter than the pooling grid too) gets the
    logits of the equations run on that pair alone, in every direction."""
    assert_rows_match_reference(small_model(**kwargs), reference_logits, (5, 7, 1, 3),
                                (4, 2, 3, 1), VOCAB)


@pytest.mark.parametrize("kwargs", [{}, {"share_directions": False, "pool_rows": 3}])
def test_gradients_equal_the_cell_by_cell_recurrences(kwargs):
    """The wavefront's reordering (index_select in, split per diagonal, index_select back) gives
    the weights the gradients of the equations run pair by pair."""
    model = small_model(**kwargs).double()
    premises = random_sentences((5, 2, 4), VOCAB)
    hypotheses = random_sentences((3, 4, 1), VOCAB)
    weights = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    params = [p for p in model.parameters() if p.requires_grad]
    logits = model(*pad_batch(premises), *pad_batch(hypotheses))["logits"]
    batched = torch.autograd.grad((logits * weights).sum(), params)
    reference = sum((reference_logits(model, p, h) * w).sum()
                    for p, h, w in zip(premises, hypotheses, weights, strict=True))
    for got, want in zip(batched, torch.autograd.grad(reference, params), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def test_details_grid_is_zero_on_padding_and_pooling_reads_real_cells_only():
    model = small_model(pool_rows=2, pool_cols=1).eval()
    p_ids, p_mask = pad_batch(random_sentences((6, 2), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences((2, 5), VOCAB))
    out = model(p_ids, p_mask, h_ids, h_mask, return_details=True)
    grid, grid_mask, pooled = out["interaction_grid"], out["grid_mask"], out["pooled"]
    assert grid.shape == (2, 6, 5, 6) and pooled.shape == (2, 2, 1, 6)
    assert grid[~grid_mask].abs().max() == 0
    # Pair 1 is 2 × 5: premise regions {0} and {1}, the hypothesis whole.
    torch.testing.assert_close(pooled[1, 0, 0], grid[1, 0, :5].max(0).values)
    torch.testing.assert_close(pooled[1, 1, 0], grid[1, 1, :5].max(0).values)
    maps = model.heatmaps(out, ["a", "b"], ["c", "d", "e", "f", "g"], index=1)
    assert maps["interaction"].values.shape == (5, 2)  # hypothesis rows × premise columns
    assert maps["interaction"].values.min() >= 0.0 and maps["interaction"].values.max() <= 1.0


def test_initialisation_uniform():
    model = TightlyCoupledLSTM(frozen_embedding(VOCAB, 8), num_classes=3, dim=6, init_range=0.05)
    for name, parameter in model.named_parameters():
        if not name.startswith("embedding."):
            assert parameter.abs().max() <= 0.05, name


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [({"dim": 0}, "dim"), ({"num_layers": 0}, "num_layers"), ({"directions": 2}, "directions"),
     ({"share_directions": "yes"}, "share_directions"), ({"pool_rows": 0}, "pool_rows"),
     ({"pool_cols": 1.5}, "pool_cols"), ({"mlp_size": -1}, "mlp_size"),
     ({"dropout": 1.0}, "dropout"), ({"init_range": 0.0}, "init_range")],
)
def test_bad_config_raises_config_error_naming_the_knob(kwargs, knob):
    with pytest.raises(ConfigError, match=f"model.net.{knob}"):
        TightlyCoupledLSTM(frozen_embedding(VOCAB, 8), num_classes=3, **kwargs)
    with pytest.raises(ConfigError, match=f"model.net.{knob}"):
        TightlyCoupledLSTM.check_config({"dim": 50, **kwargs})
