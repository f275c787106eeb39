"""DCNN against the public Theano/Lasagne port, FredericGodin/DynamicCNN@694cf6c.

``tests/models/dcnn/dcnn.pt`` holds what the port computed (float64, dropout off, one sentence at
a time, as the paper models a sentence) for seven random sentences of 1 to 31 words, with one
set of random weights drawn in the port's layout and mapped to ours
(``tests/models/dcnn/make_fixture.py``, run by hand with the port's checkout; the mapping is in its
docstring and in docs/models/dcnn.md, "Checked against"):

* ``sentence``: the port's own network (``networks.buildDCNNPaper``: folding after both
  convolutions, k of Eq. 4 from the convolution's length, tanh, dense softmax layer), its
  logits, log-probabilities and top-layer features; ours is ``DCNNClassifier`` in the
  ``dcnn_sentence`` configuration (``folding=[true, true]``, ``k_length=convolution``).
* ``encoder_one_fold``: the port's layer classes stacked with one fold before the top pooling
  (the paper's Fig. 3, our pair model's folding), its sentence features; ours is the encoder
  of ``DCNNPairClassifier`` with ``folding=[false, true]``, ``k_length=convolution``.

Ours runs the seven sentences as one padded batch (masks) and one at a time; both must give the
port's per-sentence numbers.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from entailment_lab.models.dcnn import DCNNClassifier, DCNNPairClassifier
from tests.models.float64 import load_fixture

pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = 1e-12  # float64 on both sides; the fixture was made at max |Δ| 3.3e-15


@pytest.fixture(scope="module")
def reference() -> dict:
    return load_fixture("dcnn")


def sentence_model(reference: dict) -> DCNNClassifier:
    case = reference["sentence"]
    embedding = nn.Embedding(case["vocab_size"], case["dim"])
    model = DCNNClassifier(embedding, case["num_classes"], **case["config"]).double().eval()
    model.load_state_dict(case["state_dict"])
    return model


def test_fixture_is_the_port_and_a_range_of_lengths(reference):
    assert reference["port"] == "FredericGodin/DynamicCNN@694cf6c"
    lengths = reference["mask"].sum(dim=1).tolist()
    assert lengths == sorted(set(lengths)) and lengths[0] == 1 and lengths[-1] > 20


def test_sentence_model_gives_the_ports_scores_on_a_padded_batch(reference):
    case = reference["sentence"]
    with torch.no_grad():
        out = sentence_model(reference)(reference["ids"], reference["mask"], return_details=True)
    torch.testing.assert_close(out["features"], case["features"], rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(out["logits"], case["logits"], rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(out["logits"].log_softmax(dim=-1), case["log_probs"], rtol=0,
                               atol=TOLERANCE)


def test_sentence_model_gives_the_ports_scores_one_sentence_at_a_time(reference):
    model, case = sentence_model(reference), reference["sentence"]
    for n, length in enumerate(reference["mask"].sum(dim=1).tolist()):
        ids, mask = reference["ids"][n : n + 1, :length], reference["mask"][n : n + 1, :length]
        with torch.no_grad():
            logits = model(ids, mask)["logits"]
        torch.testing.assert_close(logits[0], case["logits"][n], rtol=0, atol=TOLERANCE)


def test_one_fold_encoder_of_the_pair_model_gives_the_ports_features(reference):
    case = reference["encoder_one_fold"]
    config = dict(case["config"])
    vocab_size, dim = case["embedding"].shape
    assert config.pop("input_size") == dim
    model = DCNNPairClassifier(nn.Embedding(vocab_size, dim), 3, **config).double().eval()
    model.embedding.weight.data.copy_(case["embedding"])
    model.encoder.load_state_dict(case["state_dict"])
    ids, mask = reference["ids"], reference["mask"]
    with torch.no_grad():
        out = model(ids, mask, ids.flip(0), mask.flip(0), return_details=True)
    torch.testing.assert_close(out["premise_features"], case["features"], rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(out["hypothesis_features"], case["features"].flip(0), rtol=0,
                               atol=TOLERANCE)
