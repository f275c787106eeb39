"""Decomposable Attention against libowen2121/SNLI-decomposable-attention@5ac3eac (PyTorch).

``tests/models/decatt/decatt.pt`` holds our model's constructor arguments, its state (the port's
random weights copied in, NULL = the port's ``<s>`` word vector), the word vectors, one padded
batch of five pairs (premises of 7, 3, 5, 1, 9 words, hypotheses of 4, 6, 1, 8, 2; padding
filled with real word ids, masked) and the log-probabilities the port's ``encoder`` + ``atten``
gave for each pair fed alone, unpadded, ``<s>`` first, in float64. It was made by hand with
``tests/models/decatt/make_fixture.py`` (the weight mapping is there and in docs/models/decatt.md,
"Checked against libowen2121/SNLI-decomposable-attention@5ac3eac"). The port has no
intra-sentence attention, so only the plain model (Table 2 row 8) is compared. The test needs
no third-party code.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from entailment_lab.models.decatt import DecomposableAttention
from tests.models.float64 import assert_reference_logits, load_fixture

pytestmark = pytest.mark.usefixtures("one_thread")


def test_log_probabilities_equal_the_port():
    """Max |Δ| was 1.8e-15 when the fixture was made."""
    ref = load_fixture("decatt")
    vectors = ref["word_vectors"]
    embedding = nn.Embedding(*vectors.shape).double().requires_grad_(False)
    model = DecomposableAttention(embedding, **ref["config"]).double().eval()
    model.load_state_dict(ref["state_dict"])
    torch.testing.assert_close(model.embedding.weight, vectors, rtol=0, atol=0)
    with torch.no_grad():
        logits = model(ref["premise"], ref["premise_mask"], ref["hypothesis"],
                       ref["hypothesis_mask"])["logits"]
    assert_reference_logits(torch.log_softmax(logits, dim=-1), ref["port_log_probabilities"])
