"""Our word-by-word attention (Table 2 row 2) against codedecde/Recognizing-Textual-Entailment
@1908f9e, a PyTorch implementation of Rocktäschel et al.'s model.

``tests/models/wbw_attention/wbw_attention.pt`` holds our model's weights (random, k = 8, 10-d word
vectors), five pairs of different lengths (the padding filled with real word ids, hidden by the
masks only), and the logits and attention weights α that the implementation's word-by-word
attention (``RTE._attn_rnn_forward``: Eq. 11-13), its ``_combine_last`` (Eq. 14) and its softmax
layer computed in float64 with our weights, on the premise outputs Y and hypothesis outputs h_t
of our own LSTMs (its encoder is a GRU, so only the attention and output layers are compared;
docs/models/wbw_attention.md). Written by ``tests/models/wbw_attention/make_fixture.py``, run by
hand with that code; nothing of it is needed here. A misreading of Eq. 11-14 (r_t for r_{t-1},
no tanh in Eq. 13, r_N of the wrong word) changes α or the logits far beyond the tolerance.
"""

from __future__ import annotations

import pytest
import torch

from entailment_lab.models.wbw_attention import WordByWordAttention
from tests.models.float64 import assert_reference_logits, reference_model

pytestmark = pytest.mark.usefixtures("one_thread")


def test_logits_and_attention_equal_the_reference():
    model, ref, _ = reference_model(WordByWordAttention, "wbw_attention")
    with torch.no_grad():
        out = model(ref["premise"], ref["premise_mask"], ref["hypothesis"],
                    ref["hypothesis_mask"], return_details=True)
    torch.testing.assert_close(out["attention"], ref["attention"], rtol=0, atol=1e-12)
    assert_reference_logits(out["logits"], ref["logits"])
