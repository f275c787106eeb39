"""Decomposable Attention with intra-sentence attention against the paper's equations.

Parikh, Täckström, Das & Uszkoreit, "A Decomposable Attention Model for Natural Language
Inference" (EMNLP 2016), Table 2 row 9. No public implementation has the intra-sentence
attention with the distance biases, so this file is an independent reference: a plain loop
over one unpadded pair at a time, word by word, written from the paper's text. It imports
nothing from ``entailment_lab`` but the model under test, whose weights it reads by the explicit
name mapping ``REFERENCE_NAMES``. The readings where the paper is silent are listed in
docs/models/decatt.md, "Intra-sentence attention checked against the paper's equations"; the
reference follows them and names them where they are used.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from entailment_lab.models.decatt import DecomposableAttention

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB, EMB, HIDDEN, CLASSES = 30, 12, 10, 3
PREMISE_LENGTHS = (7, 3, 5, 1, 12)  # 12 words + NULL: distances up to 12 > max_distance
HYPOTHESIS_LENGTHS = (4, 6, 1, 8, 2)

# Reference name -> our state_dict key. Every key of the model must be mapped (asserted below).
# Each feed-forward net is Dropout, Linear, ReLU, Dropout, Linear, ReLU: layers 1 and 4.
REFERENCE_NAMES = {
    "E": "embedding.weight",  # word vectors, one row per word id
    "NULL": "null_vector",  # the NULL token's word vector
    "W_proj": "projection.weight",  # word vectors -> h, no bias
    "F_intra.W1": "intra.F_intra.net.1.weight", "F_intra.b1": "intra.F_intra.net.1.bias",
    "F_intra.W2": "intra.F_intra.net.4.weight", "F_intra.b2": "intra.F_intra.net.4.bias",
    "d": "intra.distance_bias",  # d[k]: the bias of bucket k (Eq. 8)
    "F.W1": "F.net.1.weight", "F.b1": "F.net.1.bias",
    "F.W2": "F.net.4.weight", "F.b2": "F.net.4.bias",
    "G.W1": "G.net.1.weight", "G.b1": "G.net.1.bias",
    "G.W2": "G.net.4.weight", "G.b2": "G.net.4.bias",
    "H.W1": "H.0.net.1.weight", "H.b1": "H.0.net.1.bias",
    "H.W2": "H.0.net.4.weight", "H.b2": "H.0.net.4.bias",
    "H.W_out": "H.1.weight", "H.b_out": "H.1.bias",  # H's last linear map to the classes
}


# ---- the reference: one unpadded pair, lists of 1-d vectors, no batching, no masks ----

def _dot(u: torch.Tensor, v: torch.Tensor) -> float:
    return float(sum(float(x) * float(y) for x, y in zip(u, v, strict=True)))


def _relu_layer(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # ReLU(W x + b), one output unit at a time
    return torch.tensor([max(0.0, _dot(w[k], x) + float(b[k])) for k in range(w.shape[0])],
                        dtype=torch.float64)


def _mlp(p: dict[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    """The paper's feed-forward nets F, F_intra, G and H's body: two ReLU layers (§4)."""
    return _relu_layer(p[f"{name}.W2"], p[f"{name}.b2"], _relu_layer(p[f"{name}.W1"],
                                                                     p[f"{name}.b1"], x))


def _softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _weighted_sum(weights: list[float], vectors: list[torch.Tensor]) -> torch.Tensor:
    out = torch.zeros_like(vectors[0])
    for w, v in zip(weights, vectors, strict=True):
        out = out + w * v
    return out


def bucket(i: int, j: int, max_distance: int) -> int:
    """Index of the bias d_{i-j}: "all distances greater than [max_distance] words share the same
    bias". Reading: the distance is |i - j| (d_{i-j} = d_{j-i}) over positions that count NULL
    as position 0, and distances >= max_distance share the last bias (max_distance + 1 biases;
    the only reading that gives the paper's 582k parameters)."""
    return min(abs(i - j), max_distance)


def sentence_representation(p: dict[str, torch.Tensor], words: list[int],
                            max_distance: int) -> tuple[list[torch.Tensor], list[list[float]]]:
    """a-bar_i = [a_i, a'_i] for NULL + words, and the intra-attention weights (rows i)."""
    # Input: NULL first, then the words; each word vector is projected to h (§4, no bias).
    vectors = [p["NULL"]] + [p["E"][w] for w in words]
    a = [torch.mv(p["W_proj"], x) for x in vectors]
    n = len(a)
    # Eq. 7: f_ij = F_intra(a_i)^T F_intra(a_j), for every i, j of the sentence (NULL included).
    g = [_mlp(p, "F_intra", a_i) for a_i in a]
    f = [[_dot(g[i], g[j]) for j in range(n)] for i in range(n)]
    # Eq. 8: a'_i = sum_j exp(f_ij + d_{i-j}) / sum_k exp(f_ik + d_{i-k}) a_j, j = i included.
    weights = [_softmax([f[i][j] + float(p["d"][bucket(i, j, max_distance)])
                         for j in range(n)]) for i in range(n)]
    a_prime = [_weighted_sum(weights[i], a) for i in range(n)]
    # a-bar_i := [a_i, a'_i], the input of every later step.
    return [torch.cat([a[i], a_prime[i]]) for i in range(n)], weights


def reference_logits(p: dict[str, torch.Tensor], premise: list[int], hypothesis: list[int],
                     max_distance: int) -> tuple[torch.Tensor, list[list[float]],
                                                 list[list[float]]]:
    a_bar, intra_a = sentence_representation(p, premise, max_distance)
    b_bar, intra_b = sentence_representation(p, hypothesis, max_distance)
    la, lb = len(a_bar), len(b_bar)
    # Eq. 1: e_ij = F(a-bar_i)^T F(b-bar_j).
    fa = [_mlp(p, "F", x) for x in a_bar]
    fb = [_mlp(p, "F", x) for x in b_bar]
    e = [[_dot(fa[i], fb[j]) for j in range(lb)] for i in range(la)]
    # Eq. 2: beta_i = sum_j softmax over j of e_ij times b-bar_j;
    #        alpha_j = sum_i softmax over i of e_ij times a-bar_i.
    beta = [_weighted_sum(_softmax(e[i]), b_bar) for i in range(la)]
    alpha = [_weighted_sum(_softmax([e[i][j] for i in range(la)]), a_bar) for j in range(lb)]
    # Eq. 3: v1_i = G([a-bar_i, beta_i]), v2_j = G([b-bar_j, alpha_j]).
    v1_i = [_mlp(p, "G", torch.cat([a_bar[i], beta[i]])) for i in range(la)]
    v2_j = [_mlp(p, "G", torch.cat([b_bar[j], alpha[j]])) for j in range(lb)]
    # Eq. 4: v1 = sum_i v1_i, v2 = sum_j v2_j (NULL's comparison included).
    v1 = _weighted_sum([1.0] * la, v1_i)
    v2 = _weighted_sum([1.0] * lb, v2_j)
    # Eq. 5: y-hat = H([v1, v2]); H is a two-layer ReLU net and a linear map to the classes.
    body = _mlp(p, "H", torch.cat([v1, v2]))
    logits = torch.tensor([_dot(p["H.W_out"][c], body) + float(p["H.b_out"][c])
                           for c in range(p["H.W_out"].shape[0])], dtype=torch.float64)
    return logits, intra_a, intra_b


# ---- the model under test, with random weights, and the comparison ----

def _model(max_distance: int) -> tuple[DecomposableAttention, dict[str, torch.Tensor]]:
    """Our model in float64 / eval with random weights large enough to give non-uniform maps."""
    generator = torch.Generator().manual_seed(48)
    embedding = nn.Embedding(VOCAB, EMB).double().requires_grad_(False)
    model = DecomposableAttention(embedding, CLASSES, hidden_size=HIDDEN, dropout=0.2,
                                  intra_attention=True, max_distance=max_distance).double().eval()
    state = model.state_dict()
    assert sorted(state) == sorted(REFERENCE_NAMES.values())  # the mapping covers every tensor
    with torch.no_grad():
        for ours in state.values():
            ours.copy_(0.3 * torch.randn(ours.shape, generator=generator, dtype=torch.float64))
        embedding.weight.copy_(torch.randn(VOCAB, EMB, generator=generator, dtype=torch.float64))
        # distinct biases, each about as large as the scores f_ij, so a wrong bucket shows
        state["intra.distance_bias"].copy_(torch.linspace(1.5, -1.5, max_distance + 1,
                                                          dtype=torch.float64))
    params = {name: model.state_dict()[key].clone() for name, key in REFERENCE_NAMES.items()}
    return model, params


def _batch(lengths: tuple[int, ...], generator: torch.Generator) -> tuple[list[list[int]],
                                                                           torch.Tensor,
                                                                           torch.Tensor]:
    """Unpadded sentences, and the padded batch with padding holding real word ids."""
    width = max(lengths)
    ids = torch.randint(0, VOCAB, (len(lengths), width), generator=generator)
    mask = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    return [ids[k, :n].tolist() for k, n in enumerate(lengths)], ids, mask


@pytest.mark.parametrize("max_distance", [3, 10])  # 10: the paper's
def test_model_equals_the_papers_equations(max_distance):
    model, params = _model(max_distance)
    generator = torch.Generator().manual_seed(7)
    premises, premise, premise_mask = _batch(PREMISE_LENGTHS, generator)
    hypotheses, hypothesis, hypothesis_mask = _batch(HYPOTHESIS_LENGTHS, generator)
    with torch.no_grad():
        out = model(premise, premise_mask, hypothesis, hypothesis_mask, return_details=True)

    rows = [reference_logits(params, a, b, max_distance)
            for a, b in zip(premises, hypotheses, strict=True)]
    theirs = torch.stack([logits for logits, _, _ in rows])
    assert (theirs.max(dim=0).values - theirs.min(dim=0).values).min() > 0.05  # pairs differ
    for k, (_, intra_a, intra_b) in enumerate(rows):
        la, lb = PREMISE_LENGTHS[k] + 1, HYPOTHESIS_LENGTHS[k] + 1
        for ours, ref, n in ((out["intra_attention_premise"], intra_a, la),
                             (out["intra_attention_hypothesis"], intra_b, lb)):
            ref = torch.tensor(ref, dtype=torch.float64)
            if n > 2:  # the maps are neither uniform nor one-hot
                assert 1.5 / n < ref.max(dim=1).values.mean() < 0.95
            torch.testing.assert_close(ours[k, :n, :n], ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(out["logits"], theirs, rtol=0, atol=1e-12)
