"""Write tests/models/lstm/lstm.pt: our LSTM baseline's weights, run through InferSent's NLINet.

Run by hand only, never by the tests, with a Python that has torch and numpy and a checkout of
facebookresearch/InferSent@48fe288 (the last commit with ``train_nli.py``) whose ``models.py``
has three changes for a CPU and today's torch (docs/models/lstm.md lists them)::

    PYTHONPATH=src python tests/models/lstm/make_fixture.py /path/to/InferSent

InferSent's ``LSTMEncoder`` (unidirectional, the last state of each sentence) and its
``nonlinear_fc`` classifier are our architecture with ``mlp_layers=2``: the weights map one to
one (same ``nn.LSTM`` gate order, same ``nn.Sequential`` indices). A model is built on each side,
InferSent's weights (redrawn from N(0, 0.5²)) are copied into ours, both read the same five
pairs in float64, and the fixture stores InferSent's logits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository: tests.*

from entailment_lab.models.lstm import LSTMEncoderClassifier
from tests.models.float64 import padded_batch
from tests.references.upstream import Upstream

OUT = Path(__file__).with_name("lstm.pt")
UPSTREAM = Upstream("facebookresearch/InferSent",
                    "48fe28847b9927f22cb85e1121454336b46af860", "infersent.patch")
VOCAB, EMB, HIDDEN, FC = 30, 10, 12, 16
CONFIG = {"hidden_size": HIDDEN, "mlp_size": FC, "mlp_layers": 2, "dropout": 0.1}
# InferSent's keys for LSTMEncoder + the nonlinear classifier (train_nli.py's config_nli_model).
THEIR_CONFIG = {"n_words": VOCAB, "word_emb_dim": EMB, "enc_lstm_dim": HIDDEN,
                "n_enc_layers": 1, "dpout_model": 0.0, "dpout_fc": 0.1, "fc_dim": FC,
                "bsize": 5, "n_classes": 3, "pool_type": "max", "nonlinear_fc": 1,
                "encoder_type": "LSTMEncoder", "use_cuda": False}
PREMISE_LENGTHS, HYPOTHESIS_LENGTHS = (7, 3, 9, 1, 5), (4, 8, 2, 6, 1)


def their_batch(vectors: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> tuple:
    """InferSent's input, as its ``data.get_batch`` builds it: (len, batch, dim) word vectors,
    zero after each sentence's end, and the lengths as a numpy array."""
    return (vectors[ids] * mask[..., None]).transpose(0, 1).contiguous(), \
        mask.sum(1).numpy().astype(np.int64)


def main() -> None:
    UPSTREAM.main(make, OUT, __doc__)


def make(code: Path, out: Path) -> None:
    """Build both models, run them, write the fixture to ``out``; ``code``: the prepared
    third-party tree."""
    sys.path.insert(0, str(code))
    from models import NLINet  # InferSent's models.py

    torch.manual_seed(48)
    generator = torch.Generator().manual_seed(48)
    vectors = torch.randn(VOCAB, EMB, dtype=torch.float64, generator=generator)
    vectors[0] = 0.0  # padding id 0
    theirs = NLINet(THEIR_CONFIG).double().eval()
    with torch.no_grad():  # N(0, 0.5²) weights: logits that differ clearly between pairs
        for param in theirs.parameters():
            param.copy_(0.5 * torch.randn(param.shape, dtype=param.dtype, generator=generator))

    embedding = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=0)
    ours = LSTMEncoderClassifier(embedding, num_classes=3, **CONFIG).double().eval()
    # The mapping: their enc_lstm is our encoder.lstm (same nn.LSTM, gates i, f, g, o; b_ih and
    # b_hh); their classifier Sequential(Dropout, Linear, Tanh, Dropout, Linear, Tanh, Dropout,
    # Linear) is our classifier.mlp, index for index.
    mapping = {f"encoder.lstm.{name}": f"encoder.enc_lstm.{name}"
               for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")}
    mapping.update({f"classifier.mlp.{i}.{p}": f"classifier.{i}.{p}"
                    for i in (1, 4, 7) for p in ("weight", "bias")})
    source = theirs.state_dict()
    state = {ours_name: source[their_name].clone() for ours_name, their_name in mapping.items()}
    state["embedding.weight"] = vectors
    missing, unexpected = ours.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) == {"encoder.embedding.weight"}, (missing, unexpected)

    premise, premise_mask = padded_batch(PREMISE_LENGTHS, VOCAB, generator)
    hypothesis, hypothesis_mask = padded_batch(HYPOTHESIS_LENGTHS, VOCAB, generator)
    with torch.no_grad():
        their_logits = theirs(their_batch(vectors, premise, premise_mask),
                              their_batch(vectors, hypothesis, hypothesis_mask))
        our_logits = ours(premise, premise_mask, hypothesis, hypothesis_mask)["logits"]
    delta = (their_logits - our_logits).abs().max().item()
    print(f"InferSent logits {tuple(their_logits.shape)}, range "
          f"[{their_logits.min().item():.4f}, {their_logits.max().item():.4f}]; "
          f"max |ours - InferSent| = {delta:.3g}")
    torch.save({
        "source": "facebookresearch/InferSent@48fe288 models.NLINet (LSTMEncoder, nonlinear_fc)",
        "config": CONFIG, "embeddings": vectors, "state_dict": ours.state_dict(),
        "premise": premise, "premise_mask": premise_mask,
        "hypothesis": hypothesis, "hypothesis_mask": hypothesis_mask,
        "logits": their_logits,
    }, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
