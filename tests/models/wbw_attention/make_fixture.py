"""Write wbw_attention.pt (beside this file): our word-by-word attention model's weights, with
the attention and output layers (Eq. 11-14 and the softmax layer) computed by
codedecde/Recognizing-Textual-Entailment's ``RTE`` model.

Run by hand only, never by the tests, with a Python that has torch, numpy and scikit-learn and a
checkout of codedecde/Recognizing-Textual-Entailment@1908f9e converted to Python 3 (``2to3 -w
rte_model.py utils.py recurrent_BatchNorm.py``; no other change)::

    PYTHONPATH=src python tests/models/wbw_attention/make_fixture.py /path/to/checkout

That implementation encodes the sentences with GRUs (the paper: LSTMs, ours too), so its
encoder cannot take our weights: the check covers the part that matches by design. Our model
runs on five pairs; its premise outputs Y and hypothesis outputs h_t (taken with forward hooks on
our two LSTMs, the delimiter step dropped) go into the implementation's word-by-word attention
recurrence (``_attn_rnn_forward``: Eq. 11-13), its ``_combine_last`` (Eq. 14) and its softmax
layer ``out``, which carry our weights (transposed: it computes ``x @ W``). Its recurrent batch
normalisation (not in the paper) is made the identity through its own settings: eps 0, scale 1,
shift 0, running mean 0 and variance 1, eval mode. The fixture stores its logits and α.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository: tests.*

from entailment_lab.models.wbw_attention import WordByWordAttention
from tests.models.float64 import padded_batch
from tests.references.upstream import Upstream

OUT = Path(__file__).with_name("wbw_attention.pt")
UPSTREAM = Upstream("codedecde/Recognizing-Textual-Entailment",
                    "1908f9ebe20d73c97357739f7bc041503a4f6304", "rte-2to3.patch")
VOCAB, EMB, K = 30, 10, 8
CONFIG = {"hidden_size": K, "dropout": 0.1, "delimiter": True, "condition_on": "cell",
          "single_lstm_bias": False}
PREMISE_LENGTHS, HYPOTHESIS_LENGTHS = (7, 3, 9, 1, 5), (4, 8, 2, 6, 1)


def their_options() -> dict:
    """The ``options`` its ``run_rte.py`` passes: word-by-word attention, linear output."""
    return {"EMBEDDING_DIM": EMB, "HIDDEN_DIM": K, "CLASSES_2_IX": {"a": 0, "b": 1, "c": 2},
            "USE_PRETRAINED": False, "WBW_ATTN": True, "MAX_LEN": 30, "DROPOUT": 0.1,
            "LAST_NON_LINEAR": False}


def copy_weights(ours: WordByWordAttention, theirs: nn.Module) -> None:
    """Our attention and output weights into theirs. Mapping: W_y, W_h, W_r, W_t, W_p, W_x (k×k
    parameters used as ``x @ W``) = our nn.Linear weights transposed; W_alpha (k×1) = w.weight
    transposed; out (nn.Linear k → 3) = classifier."""
    with torch.no_grad():
        for name in ("W_y", "W_h", "W_r", "W_t", "W_p", "W_x"):
            getattr(theirs, name).copy_(getattr(ours, name).weight.t())
        theirs.W_alpha.copy_(ours.w.weight.t())
        theirs.out.load_state_dict(ours.classifier.state_dict())
        for norm in (theirs.batch_norm_h_r, theirs.batch_norm_r_r):  # made the identity
            norm.eps = 0.0
            norm.weight.fill_(1.0)
            norm.bias.zero_()


def main() -> None:
    UPSTREAM.main(make, OUT, __doc__)


def make(code: Path, path: Path) -> None:
    """Build both models, run them, write the fixture to ``path``; ``code``: the prepared
    third-party tree."""
    sys.path.insert(0, str(code))
    import rte_model  # its rte_model.py

    rte_model.dtype = torch.DoubleTensor  # its module-level tensor type, used for its zero states
    generator = torch.Generator().manual_seed(48)
    vectors = torch.randn(VOCAB, EMB, dtype=torch.float64, generator=generator)
    vectors[0] = 0.0  # padding id 0
    embedding = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=0)
    ours = WordByWordAttention(embedding, num_classes=3, **CONFIG).double().eval()
    with torch.no_grad():  # N(0, 0.5²) weights: attention far from uniform, tanh not saturated
        for param in ours.parameters():
            if param.requires_grad:
                param.copy_(0.5 * torch.randn(param.shape, dtype=param.dtype,
                                              generator=generator))
    theirs = rte_model.RTE(list(range(VOCAB - 1)), their_options()).double().eval()
    copy_weights(ours, theirs)

    premise, premise_mask = padded_batch(PREMISE_LENGTHS, VOCAB, generator)
    hypothesis, hypothesis_mask = padded_batch(HYPOTHESIS_LENGTHS, VOCAB, generator)
    seen = {}
    ours.premise_lstm.register_forward_hook(lambda m, a, out: seen.update(Y=out[0]))
    ours.hypothesis_lstm.register_forward_hook(lambda m, a, out: seen.update(H=out[0]))
    with torch.no_grad():
        out = ours(premise, premise_mask, hypothesis, hypothesis_mask, return_details=True)
        Y, _ = nn.utils.rnn.pad_packed_sequence(seen["Y"], total_length=premise.shape[1])
        H, _ = nn.utils.rnn.pad_packed_sequence(seen["H"], total_length=1 + hypothesis.shape[1])
        H = H[1:]  # (len_h, B, k): the delimiter step dropped, as in our Eq. 11-14
        mask_p, mask_h = premise_mask.t().double(), hypothesis_mask.t().double()  # (len, B)
        r_0 = torch.zeros(len(PREMISE_LENGTHS), K, dtype=torch.float64)
        r_N, alpha = theirs._attn_rnn_forward(H, mask_h, r_0, Y, mask_p)  # Eq. 11-13
        last = hypothesis_mask.sum(1) - 1
        h_N = H[last, torch.arange(len(last))]  # each row's last hypothesis output
        logits = theirs.out(theirs._combine_last(r_N, h_N))  # Eq. 14, softmax layer
    alpha = alpha.transpose(0, 1) * hypothesis_mask[:, :, None]  # (B, len_h, len_p), 0 at pads
    print(f"their logits range [{logits.min().item():.4f}, {logits.max().item():.4f}]; "
          f"max |ours - theirs|: logits {(out['logits'] - logits).abs().max().item():.3g}, "
          f"attention {(out['attention'] - alpha).abs().max().item():.3g}")
    torch.save({
        "source": "codedecde/Recognizing-Textual-Entailment@1908f9e rte_model.RTE "
                  "(_attn_rnn_forward, _combine_last, out) on our encoder's Y and h_t",
        "config": CONFIG, "embeddings": vectors, "state_dict": ours.state_dict(),
        "premise": premise, "premise_mask": premise_mask,
        "hypothesis": hypothesis, "hypothesis_mask": hypothesis_mask,
        "logits": logits, "attention": alpha,
    }, path)
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
