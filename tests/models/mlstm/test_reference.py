"""Our match-LSTM (Table 2 row 5) against donghyeonk/match-lstm@f3886ab, a PyTorch port.

``tests/models/mlstm/mlstm.pt`` holds random word vectors, five pairs of different lengths (the
padding filled with real word ids, hidden by the masks only) and, for two configurations, the
port's weights copied into ours and the logits the port computed in float64: ``separate`` (two
sentence LSTMs, no NULL: the port's own architecture) and ``default``
(``conf/model/mlstm.yaml``'s: one shared sentence LSTM and the NULL premise state). The port ran
with two switches added in a scratch copy: its attention softmax masked to the real premise
words (Eq. 3; it also weighs padding) and a NULL state h^s_0 = 0 for the second case
(docs/models/mlstm.md). Written by ``tests/models/mlstm/make_fixture.py``, run by hand with the
port's code; nothing of it is needed here.
"""

from __future__ import annotations

import pytest
import torch

from entailment_lab.models.mlstm import MatchLSTM
from tests.models.float64 import assert_reference_logits, reference_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("case", ["separate", "default"])
def test_logits_equal_the_ports(case):
    model, ref, stored = reference_model(MatchLSTM, "mlstm", case)
    with torch.no_grad():
        logits = model(ref["premise"], ref["premise_mask"], ref["hypothesis"],
                       ref["hypothesis_mask"])["logits"]
    assert_reference_logits(logits, stored["logits"])
