"""Write tests/models/mlstm/mlstm.pt: our match-LSTM's weights, run through donghyeonk/match-lstm.

Run by hand only, never by the tests, with a Python that has torch and numpy and a checkout of
donghyeonk/match-lstm@f3886ab whose ``model.py`` carries two switches added for this check
(docs/models/mlstm.md, "Checked against"): ``config.mask_premise`` (Eq. 3's softmax over the
real premise words only; the port also gives weight to padding) and ``config.null_premise``
(a fixed zero premise state h^s_0, the paper's NULL, which the port does not have)::

    PYTHONPATH=src python tests/models/mlstm/make_fixture.py /path/to/match-lstm

Two cases, each a model built on both sides with the port's weights (redrawn from N(0, 0.5²))
copied into ours,
five pairs of different lengths, float64:

* ``separate``: ours with ``share_encoder=False, null_premise=False`` against the port with
  ``mask_premise`` on: the port's own architecture (two sentence LSTMs, no NULL);
* ``default``: ours as ``conf/model/mlstm.yaml`` builds it (one shared sentence LSTM, NULL)
  against the port with both switches on and its two sentence LSTMs given the same weights.

The port is also run without ``mask_premise`` on the first case, to print what its unmasked
softmax changes (not stored).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository: tests.*

from entailment_lab.models.mlstm import MatchLSTM
from tests.models.float64 import padded_batch
from tests.references.upstream import Upstream

OUT = Path(__file__).with_name("mlstm.pt")
UPSTREAM = Upstream("donghyeonk/match-lstm",
                    "f3886ab6832d738642e364be67bc36a6d7c42e5f", "match-lstm.patch")
VOCAB, EMB, HIDDEN = 30, 10, 8
PREMISE_LENGTHS, HYPOTHESIS_LENGTHS = (7, 3, 9, 1, 5), (4, 8, 2, 6, 1)
LSTM_PARAMS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
CELL_PARAMS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def their_config(**switches: bool) -> SimpleNamespace:
    """The port's ``config`` (main.py's arguments that model.py reads), on CPU, no dropout."""
    return SimpleNamespace(yes_cuda=0, embedding_dim=EMB, hidden_size=HIDDEN, num_classes=3,
                           dropout_fc=0.0, dropout_emb=0.0, **switches)


def our_state(theirs: nn.Module, vectors: torch.Tensor) -> dict[str, torch.Tensor]:
    """The port's weights under our names (every tensor as it is; w_e becomes a 1 x d map).
    With a shared encoder our state names the one LSTM twice, and the port's two are equal."""
    source = theirs.state_dict()
    state = {"embedding.weight": vectors}
    state.update({f"premise_lstm.{p}": source[f"lstm_prem.{p}"] for p in LSTM_PARAMS})
    state.update({f"hypothesis_lstm.{p}": source[f"lstm_hypo.{p}"] for p in LSTM_PARAMS})
    for ours_name, their_name in (("W_s", "w_s"), ("W_t", "w_t"), ("W_m", "w_m")):
        state[f"match.{ours_name}.weight"] = source[f"{their_name}.weight"]
    state["match.w_e.weight"] = source["w_e"][None, :]
    state.update({f"match.cell.{p}": source[f"lstm_match.{p}"] for p in CELL_PARAMS})
    state.update({f"classifier.{p}": source[f"fc.{p}"] for p in ("weight", "bias")})
    return {k: v.clone() for k, v in state.items()}


def their_logits(theirs: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The port's forward: (len, batch) ids, 0 after each sentence's end as its data loader
    pads them, and the lengths of each sentence."""
    premise, premise_mask, hypothesis, hypothesis_mask = batch
    with torch.no_grad():
        return theirs((premise * premise_mask).t().contiguous(), premise_mask.sum(1),
                      (hypothesis * hypothesis_mask).t().contiguous(), hypothesis_mask.sum(1))


def main() -> None:
    UPSTREAM.main(make, OUT, __doc__)


def make(code: Path, out: Path) -> None:
    """Build both models, run them, write the fixture to ``out``; ``code``: the prepared
    third-party tree."""
    sys.path.insert(0, str(code))
    from model import MatchLSTM as TheirMatchLSTM  # the port's model.py

    torch.set_default_dtype(torch.float64)  # the port makes its zero states in the default type
    generator = torch.Generator().manual_seed(48)
    vectors = torch.randn(VOCAB, EMB, generator=generator)
    vectors[0] = 0.0  # padding id 0
    batch = (*padded_batch(PREMISE_LENGTHS, VOCAB, generator),
             *padded_batch(HYPOTHESIS_LENGTHS, VOCAB, generator))
    embedding = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=0)

    cases = {}
    for name, share, null in (("separate", False, False), ("default", True, True)):
        torch.manual_seed(48)
        theirs = TheirMatchLSTM(their_config(mask_premise=True, null_premise=null),
                                vectors.numpy()).eval()
        with torch.no_grad():  # N(0, 0.5²) weights: logits that differ clearly between pairs
            for param in theirs.parameters():
                if param.requires_grad:
                    param.copy_(0.5 * torch.randn(param.shape, generator=generator))
            theirs.word_embed.weight.copy_(vectors)
        if share:  # one sentence LSTM: the port's hypothesis LSTM gets the premise LSTM's weights
            theirs.lstm_hypo.load_state_dict(theirs.lstm_prem.state_dict())
        config = {"hidden_size": HIDDEN, "dropout": 0.3, "share_encoder": share,
                  "null_premise": null, "attention_bias": False}
        ours = MatchLSTM(embedding, num_classes=3, **config).eval()
        ours.load_state_dict(our_state(theirs, vectors))
        reference = their_logits(theirs, batch)
        with torch.no_grad():
            logits = ours(*batch)["logits"]
        print(f"{name}: port logits range [{reference.min().item():.4f}, "
              f"{reference.max().item():.4f}]; max |ours - port| = "
              f"{(logits - reference).abs().max().item():.3g}")
        if name == "separate":
            theirs.config.mask_premise = False
            unmasked = their_logits(theirs, batch)
            print(f"  the port with its unmasked softmax: max |ours - port| = "
                  f"{(logits - unmasked).abs().max().item():.3g}")
        cases[name] = {"config": config, "state_dict": ours.state_dict(), "logits": reference}

    premise, premise_mask, hypothesis, hypothesis_mask = batch
    torch.save({
        "source": "donghyeonk/match-lstm@f3886ab model.MatchLSTM (+ mask_premise, null_premise)",
        "embeddings": vectors, "premise": premise, "premise_mask": premise_mask,
        "hypothesis": hypothesis, "hypothesis_mask": hypothesis_mask, "cases": cases,
    }, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
