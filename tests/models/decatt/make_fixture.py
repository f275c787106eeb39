"""Make ``tests/models/decatt/decatt.pt``: our Decomposable Attention against a public PyTorch port.

Run by hand only, never by the tests, in an environment with torch::

    python tests/models/decatt/make_fixture.py /path/to/libowen2121/SNLI-decomposable-attention \
        [--out FILE]

The first argument is a checkout of libowen2121/SNLI-decomposable-attention (the fixture was
made at commit 5ac3eac); its ``encoder`` and ``atten`` classes (``models/baseline_snli.py``)
are imported from there, unmodified. The port has no intra-sentence attention (its class
``atten`` is the inter-sentence attention of Eq. 1-5 despite its docstring), so only the plain
model (Table 2 row 8) is compared.

The port reads harvardnlp/decomp-attn's preprocessed data: every sentence starts with ``<s>``
(its NULL token, a word of the vocabulary) and every batch holds pairs of one length, unpadded.
So each of the pairs below is fed to the port alone, ``<s>`` first, and to ours in one padded
batch (padding filled with random real word ids, masked), with NULL = the port's ``<s>`` vector.
Both get the port's random weights (N(0, 0.3²), so that the outputs are far from uniform) and
the same random word vectors, in float64 and eval mode (no dropout). Prints max |Δ| between the
log-probabilities.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # entailment_lab, tests.*

from entailment_lab.models.decatt import DecomposableAttention  # noqa: E402
from tests.references.upstream import Upstream  # noqa: E402

UPSTREAM = Upstream("libowen2121/SNLI-decomposable-attention",
                    "5ac3eacf7862ffebe480b3dd1d2dd29671c8a18f")  # used unmodified

VOCAB, EMBEDDING, HIDDEN, CLASSES = 30, 12, 10, 3
PARA_INIT = 0.3  # the port's N(0, para_init²) init; its default 0.01 gives near-uniform outputs
BOS = 2  # harvardnlp's <s> (1-based id 3) after the port's shift to 0-based ids
PREMISE_LENGTHS = [7, 3, 5, 1, 9]
HYPOTHESIS_LENGTHS = [4, 6, 1, 8, 2]


def load_port(checkout: Path) -> tuple[type, type]:
    sys.path.insert(0, str(checkout))
    from models.baseline_snli import atten, encoder

    return encoder, atten


def copy_weights(ours: DecomposableAttention, port_encoder: nn.Module, port_atten: nn.Module
                 ) -> None:
    """The port's weights into ours. Both MLPs are (Dropout, Linear, ReLU) × 2: layers 1 and 4."""
    pairs = [
        (ours.projection, port_encoder.input_linear),  # the bias-free projection
        (ours.F.net[1], port_atten.mlp_f[1]), (ours.F.net[4], port_atten.mlp_f[4]),  # attend
        (ours.G.net[1], port_atten.mlp_g[1]), (ours.G.net[4], port_atten.mlp_g[4]),  # compare
        (ours.H[0].net[1], port_atten.mlp_h[1]), (ours.H[0].net[4], port_atten.mlp_h[4]),
        (ours.H[1], port_atten.final_linear),  # aggregate: H's last linear map
    ]
    with torch.no_grad():
        for mine, theirs in pairs:
            mine.weight.copy_(theirs.weight)
            if theirs.bias is not None:
                mine.bias.copy_(theirs.bias)
        ours.embedding.weight.copy_(port_encoder.embedding.weight)
        ours.null_vector.copy_(port_encoder.embedding.weight[BOS])  # NULL = the port's <s>


def main() -> None:
    UPSTREAM.main(make, Path(__file__).with_name("decatt.pt"), __doc__)


def make(code: Path, out: Path) -> None:
    """Build both models, run them, write the fixture to ``out``; ``code``: the prepared
    third-party tree."""
    encoder_cls, atten_cls = load_port(code)

    torch.manual_seed(0)
    port_encoder = encoder_cls(VOCAB, EMBEDDING, HIDDEN, PARA_INIT).double().eval()
    port_atten = atten_cls(HIDDEN, CLASSES, PARA_INIT).double().eval()
    with torch.no_grad():  # the port's init is N(0, para_init²) already; word vectors random
        port_encoder.embedding.weight.normal_()

    config = {"num_classes": CLASSES, "hidden_size": HIDDEN, "dropout": 0.2,
              "intra_attention": False, "null_init": "unit"}
    embedding = nn.Embedding(VOCAB, EMBEDDING).double().requires_grad_(False)
    ours = DecomposableAttention(embedding, **config).double().eval()
    copy_weights(ours, port_encoder, port_atten)

    words = torch.arange(4, VOCAB)  # real words (0-3: harvardnlp's <blank>, <unk>, <s>, </s>)

    def sentences(lengths: list[int]) -> list[torch.Tensor]:
        return [words[torch.randint(len(words), (n,))] for n in lengths]

    def pad(sents: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        length = max(len(s) for s in sents)
        ids = words[torch.randint(len(words), (len(sents), length))]  # padding: real ids
        mask = torch.zeros(len(sents), length, dtype=torch.bool)
        for row, s in enumerate(sents):
            ids[row, : len(s)], mask[row, : len(s)] = s, True
        return ids, mask

    premises, hypotheses = sentences(PREMISE_LENGTHS), sentences(HYPOTHESIS_LENGTHS)
    with torch.no_grad():
        theirs = torch.cat([
            port_atten(*port_encoder(torch.cat([torch.tensor([BOS]), p])[None],
                                     torch.cat([torch.tensor([BOS]), h])[None]))
            for p, h in zip(premises, hypotheses, strict=True)])  # (pairs, classes) log-probs
        p_ids, p_mask = pad(premises)
        h_ids, h_mask = pad(hypotheses)
        logits = ours(p_ids, p_mask, h_ids, h_mask)["logits"]
        mine = torch.log_softmax(logits, dim=-1)
    print(f"max |Δ| log-probabilities = {(mine - theirs).abs().max().item():.3e} "
          f"(logits up to {logits.abs().max().item():.1f}; "
          f"predicted classes {theirs.argmax(-1).tolist()})")
    fixture = {
        "config": config, "word_vectors": embedding.weight.clone(),
        "state_dict": {k: v.clone() for k, v in ours.state_dict().items()},
        "premise": p_ids, "premise_mask": p_mask, "hypothesis": h_ids, "hypothesis_mask": h_mask,
        "port_log_probabilities": theirs.clone(),
    }
    torch.save(fixture, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
