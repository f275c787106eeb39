"""HyperLSTM cell against the authors' TensorFlow cell: hardmaru/supercell@063b01e, HyperLSTMCell.

``tests/models/hyperlstm/hyperlstm.pt`` holds, for layer norm on (the default of both) and off: our
``HyperLSTM``'s constructor arguments and random float64 weights, one padded batch of five
sequences (lengths 7, 3, 5, 1, 6; the padding random vectors, not zeros) and the output that
supercell's ``HyperLSTMCell`` gave at each sequence's last real step with the same weights
copied into its variables (the mapping: ``tests/models/hyperlstm/make_fixture.py``, which made the
file by hand with TensorFlow 2.21's ``tf.compat.v1``; docs/models/hyperlstm.md, "Checked against
hardmaru/supercell@063b01e"). The tests need no TensorFlow: they rebuild our encoder with the
stored weights and compare. supercell has no sentence-pair classifier, so the cell is what is
compared; the classifier around it is the LSTM baseline's.
"""

from __future__ import annotations

import math

import pytest
import torch

from entailment_lab.models.hyperlstm import HyperLSTM
from tests.models.float64 import load_fixture

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def reference() -> dict:
    return load_fixture("hyperlstm")


def build(case: dict) -> HyperLSTM:
    model = HyperLSTM(**case["config"]).double().eval()
    model.load_state_dict(case["state_dict"])
    return model


@pytest.mark.parametrize("case", ["layer_norm", "plain"])
def test_final_states_equal_supercell_hyperlstmcell(reference, case):
    """Max |Δ| was 2.0e-15 (layer norm) and 3.3e-16 (plain) when the fixture was made."""
    model = build(reference["cases"][case])
    with torch.no_grad():
        ours = model(reference["inputs"], reference["mask"])
    theirs = reference["cases"][case]["supercell_final_h"]
    assert theirs.abs().max() > 0.1  # not a degenerate all-zero output
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", ["layer_norm", "plain"])
def test_parameter_count_equals_supercell_variables(reference, case):
    """Every supercell variable has one counterpart here (the hyper LSTM's bias included)."""
    model = build(reference["cases"][case])
    count = sum(p.numel() for p in model.parameters())
    assert count == reference["cases"][case]["supercell_parameter_count"]


def test_hyper_input_matrix_has_one_glorot_bound_as_in_supercell():
    """supercell's hyper LSTM multiplies concat([x_t, h_{t-1}]) by one (D + N, 4Ñ) matrix with
    TensorFlow's default Glorot-uniform initialiser: bound sqrt(6 / (D + N + 4Ñ)) for both the
    x and the h rows (each part with its own Glorot bound would be wider)."""
    torch.manual_seed(0)
    D, N, Nh = 300, 128, 64
    encoder = HyperLSTM(D, N, Nh, 8)
    bound = math.sqrt(6.0 / (D + N + 4 * Nh))
    for weight in (encoder.hyper_W_x, encoder.hyper_W_hx):
        assert weight.abs().max() <= bound
        assert weight.abs().max() > 0.99 * bound
