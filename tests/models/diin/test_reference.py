"""Our DIIN against the authors' TensorFlow code (YichenGong/Densely-Interactive-Inference-Network
@cb2c23b).

``tests/models/diin/diin.pt`` holds a small DIIN of ours (its constructor arguments, vocabulary,
word-vector size and ``state_dict``: random weights and biases), five SNLI dev pairs as our
ids and masks, the inputs the authors' graph was fed (everything padded to
``sequence_length`` = 16; character ids and exact-match features), and the logits that graph
computed in float32 from our weights copied into its variables: ``logits_masked`` with the
encoder outputs zeroed at padding before the interaction layer (as ours does),
``logits_released`` as the code was released. It was written by
``tests/models/diin/make_fixture.py`` (run by hand with TensorFlow 1.15 and the authors' checkout;
nothing of either is needed here). The mapping and the adaptations: docs/models/diin.md,
"Checked against YichenGong/Densely-Interactive-Inference-Network@cb2c23b".
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from entailment_lab.models.diin import DIIN, exact_match_feature, fit_length
from tests.models.float64 import load_fixture

TOLERANCE = 1e-6  # their graph runs in float32 (its casts and variables say so); measured 1.3e-7

pytestmark = pytest.mark.usefixtures("one_thread")


def build(ref: dict) -> DIIN:
    embedding = nn.Embedding(len(ref["vocab"]), ref["emb_dim"], padding_idx=0)
    model = DIIN(embedding, 3, ref["vocab"], **ref["config"])
    model.load_state_dict(ref["state_dict"])
    return model.double().eval()


def logits_of(model: DIIN, ref: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(ref["premise"], ref["premise_mask"], ref["hypothesis"],
                     ref["hypothesis_mask"])["logits"]


def unpadded(ref: dict) -> torch.Tensor:
    """Pairs whose premise and hypothesis both fill ``sequence_length``: (batch,) bool."""
    length = ref["config"]["sequence_length"]
    return torch.stack([
        fit_length(ref[name], length).all(1) for name in ("premise_mask", "hypothesis_mask")
    ]).all(0)


def test_logits_equal_the_authors_graph():
    ref = load_fixture("diin")
    logits = logits_of(build(ref), ref)
    assert logits.shape == (5, 3)
    torch.testing.assert_close(logits, ref["logits_masked"].double(), rtol=0, atol=TOLERANCE)


def test_released_code_reads_padding():
    """As released, the authors' code does not mask the interaction image: a pair without
    padding gives our logits, every padded pair differs (their padded cells hold the encoding
    of the <PAD> word, not zero)."""
    ref = load_fixture("diin")
    logits = logits_of(build(ref), ref)
    full = unpadded(ref)
    assert full.sum() == 1 and (~full).sum() == 4
    released = ref["logits_released"].double()
    torch.testing.assert_close(logits[full], released[full], rtol=0, atol=TOLERANCE)
    assert ((logits[~full] - released[~full]).abs().amax(1) > 1e-2).all()


def test_their_inputs_are_our_features():
    """The characters and exact-match features fed to their graph are our model's own."""
    ref = load_fixture("diin")
    model = build(ref)
    fed, length = ref["their_inputs"], ref["config"]["sequence_length"]
    keys = model.match_keys
    for side, other in (("premise", "hypothesis"), ("hypothesis", "premise")):
        ids = fit_length(ref[side], length)
        assert torch.equal(fed[side], ids)
        assert torch.equal(fed[f"{side}_char"], model.char_ids[ids])
        match = exact_match_feature(keys[ref[side]], ref[f"{side}_mask"], keys[ref[other]],
                                    ref[f"{other}_mask"])
        assert torch.equal(fed[f"{side}_exact_match"], fit_length(match, length))
    assert fed["premise_exact_match"].sum() > 0 and (fed["premise"] == 1).any()  # <unk> too
