"""Our LSTM baseline (Table 2 row 1) against facebookresearch/InferSent@48fe288.

``tests/models/lstm/lstm.pt`` holds the weights of InferSent's ``NLINet`` (``LSTMEncoder``,
``nonlinear_fc`` classifier: two tanh layers) copied into ours (``mlp_layers=2``), random word
vectors, five pairs of different lengths (the padding filled with real word ids, hidden by the
masks only) and the logits InferSent computed for them in float64. It was written by
``tests/models/lstm/make_fixture.py`` (run by hand with InferSent's code; nothing of it is needed
here). Ours must give the same logits.
"""

from __future__ import annotations

import pytest
import torch

from entailment_lab.models.lstm import LSTMEncoderClassifier
from tests.models.float64 import assert_reference_logits, reference_model

pytestmark = pytest.mark.usefixtures("one_thread")


def test_logits_equal_infersents():
    model, ref, _ = reference_model(LSTMEncoderClassifier, "lstm")
    with torch.no_grad():
        logits = model(ref["premise"], ref["premise_mask"], ref["hypothesis"],
                       ref["hypothesis_mask"])["logits"]
    assert_reference_logits(logits, ref["logits"])
