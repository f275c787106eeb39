"""Our LSTM baseline (Table 2 row 1) against facebookresearch/InferSent@48fe288.

``tests/references/lstm.pt`` holds the weights of InferSent's ``NLINet`` (``LSTMEncoder``,
``nonlinear_fc`` classifier: two tanh layers) copied into ours (``mlp_layers=2``), random word
vectors, five pairs of different lengths (the padding filled with real word ids, hidden by the
masks only) and the logits InferSent computed for them in float64. It was written by
``tests/references/make_lstm.py`` (run by hand with InferSent's code; nothing of it is needed
here). Ours must give the same logits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from entailment_lab.models.lstm import LSTMEncoderClassifier

FIXTURE = Path(__file__).parent / "references" / "lstm.pt"

pytestmark = pytest.mark.usefixtures("one_thread")


def test_logits_equal_infersents():
    ref = torch.load(FIXTURE, weights_only=True)
    embedding = nn.Embedding.from_pretrained(ref["embeddings"], freeze=True, padding_idx=0)
    model = LSTMEncoderClassifier(embedding, num_classes=3, **ref["config"]).double().eval()
    model.load_state_dict(ref["state_dict"])
    with torch.no_grad():
        logits = model(ref["premise"], ref["premise_mask"], ref["hypothesis"],
                       ref["hypothesis_mask"])["logits"]
    theirs = ref["logits"]
    assert (theirs.max(dim=0).values - theirs.min(dim=0).values).min() > 0.05  # pairs differ
    assert logits.dtype == torch.float64 and logits.shape == (5, 3)
    torch.testing.assert_close(logits, theirs, rtol=0, atol=1e-12)
