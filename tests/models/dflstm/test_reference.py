"""DF-LSTM against an independent reference of the paper's equations (float64).

Liu, Qiu, Chen & Huang, "Deep Fusion LSTMs for Text Semantic Matching" (ACL 2016): the LSTM of
Eq. 2-4, the two interdependent LSTMs of Eq. 6-8, the external memories of Eq. 9-11, the attention
read of Eq. 12-16, the history H of Eq. 17 and the softmax on h_{n,m} (§5.1). The reference below
shares no module, helper or index arithmetic with ``models/dflstm.py``: it walks one unpadded pair
cell by cell in row-major order with plain Python loops, keeps every state in a dictionary keyed by
the cell, and takes its weights from the model's ``state_dict`` through the explicit name mapping
of ``paper_weights``. Every reading it makes is listed in ``docs/models/dflstm.md`` ("Checked
against the paper's equations").
"""

from __future__ import annotations

import pytest
import torch

from entailment_lab.models.dflstm import DeepFusionLSTM
from tests.models.float64 import training_gap

VOCAB, EMB, UNITS, K = 30, 5, 3, 2  # UNITS = d per LSTM (dim = 2d), K = memory size (Eq. 9)
GATES = ("c", "o", "i", "f")  # T_{A,b}'s output blocks [c̃; o; i; f] (Eq. 2)

Weights = dict[str, torch.Tensor]


def paper_weights(state: dict[str, torch.Tensor], layers: int, separate: bool) -> Weights:
    """The paper's matrices, by name, from our model's state_dict (the explicit mapping).

    ``layers.{l}.lstm_x.affine`` is T_{A,b} of the x-LSTM (Eq. 7): weight (4d, d_in + 2d) with
    row blocks [c̃; o; i; f] and columns acting on [z; H] = [z; r^(x); r^(y)]; ``lstm_y`` likewise
    (Eq. 8). ``layers.{l}.attention.{a}`` is the align function g of Eq. 16 kept as the three
    column blocks of W_a ∈ R^{d×(d + d + d_in)}, acting on [M_k; r; z]: ``W_memory``,
    ``W_read``, ``W_input`` (bias-free), and v ∈ R^d (``v.weight``). One g serves both memories
    (a = 0), or a = 0 serves M^(x) and a = 1 M^(y). ``classifier`` is the softmax layer (§5.1).
    """
    weights: Weights = {"E": state["embedding.weight"], "W_s": state["classifier.weight"],
                        "b_s": state["classifier.bias"]}
    for layer in range(layers):
        for side in ("x", "y"):
            T = state[f"layers.{layer}.lstm_{side}.affine.weight"]  # (4d, d_in + 2d)
            b = state[f"layers.{layer}.lstm_{side}.affine.bias"]  # (4d,)
            d = T.size(0) // 4
            for g, gate in enumerate(GATES):
                weights[f"T_{gate}^{side},{layer}"] = T[g * d:(g + 1) * d]  # (d, d_in + 2d)
                weights[f"b_{gate}^{side},{layer}"] = b[g * d:(g + 1) * d]
            a = 1 if separate and side == "y" else 0
            prefix = f"layers.{layer}.attention.{a}"
            weights[f"W_a^{side},{layer}"] = torch.cat(
                [state[f"{prefix}.W_memory.weight"], state[f"{prefix}.W_read.weight"],
                 state[f"{prefix}.W_input.weight"]], dim=1)  # (d, d + d + d_in)
            weights[f"v^{side},{layer}"] = state[f"{prefix}.v.weight"][0]  # (d,)
    return weights


def sigmoid(v: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + torch.exp(-v))


def lstm(w: Weights, side: str, layer: int, z: torch.Tensor, H: torch.Tensor,
         c_prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 2-4 with H in place of h_{t−1}: [c̃; o; i; f] = [tanh; σ; σ; σ](T_{A,b}[z; H]),
    c = c̃ ⊙ i + c_prev ⊙ f, h = o ⊙ tanh(c)."""
    u = torch.cat([z, H])
    pre = {g: w[f"T_{g}^{side},{layer}"] @ u + w[f"b_{g}^{side},{layer}"] for g in GATES}
    c = torch.tanh(pre["c"]) * sigmoid(pre["i"]) + c_prev * sigmoid(pre["f"])  # Eq. 3
    return sigmoid(pre["o"]) * torch.tanh(c), c  # Eq. 4


def read(w: Weights, side: str, layer: int, memory: list[torch.Tensor], r_prev: torch.Tensor,
         z: torch.Tensor, d: int) -> torch.Tensor:
    """Eq. 12-16: a_k = softmax_k g(M_k, r_prev, z), g(a, b, c) = vᵀ tanh(W_a [a; b; c]);
    r = Σ_k a_k M_k. An empty memory (the sentence start) reads 0."""
    if not memory:
        return torch.zeros(d, dtype=torch.float64)
    scores = [w[f"v^{side},{layer}"] @ torch.tanh(w[f"W_a^{side},{layer}"]
                                                  @ torch.cat([slot, r_prev, z]))
              for slot in memory]  # Eq. 16
    top = max(float(s.detach()) for s in scores)  # a constant shift
    exps = [torch.exp(s - top) for s in scores]
    total = sum(exps)
    return sum((e / total) * slot for e, slot in zip(exps, memory, strict=True))  # Eq. 12-15


def reference_logits(premise: list[int], hypothesis: list[int], w: Weights, *, layers: int,
                     d: int, k_max: int, misreading: str = "") -> torch.Tensor:
    """Eq. 6-17 and the softmax layer on one unpadded pair (cells 0-based): logits (classes,)."""
    n, m = len(premise), len(hypothesis)
    zero = torch.zeros(d, dtype=torch.float64)
    z_x = {(i, j): w["E"][premise[i]] for i in range(n) for j in range(m)}  # x_i at every j
    z_y = {(i, j): w["E"][hypothesis[j]] for i in range(n) for j in range(m)}  # y_j at every i
    for layer in range(layers):
        hx: dict[tuple[int, int], torch.Tensor] = {}
        cx: dict[tuple[int, int], torch.Tensor] = {}
        rx: dict[tuple[int, int], torch.Tensor] = {}
        hy: dict[tuple[int, int], torch.Tensor] = {}
        cy: dict[tuple[int, int], torch.Tensor] = {}
        ry: dict[tuple[int, int], torch.Tensor] = {}
        for i in range(n):
            for j in range(m):
                # Eq. 9-11: M^(x)_{i,j} = {h^(x)_{i−K,j} … h^(x)_{i−1,j}},
                #           M^(y)_{i,j} = {h^(y)_{i,j−K} … h^(y)_{i,j−1}} (slots inside the pair)
                M_x = [hx[i - k, j] for k in range(1, k_max + 1) if i - k >= 0]
                if misreading == "x memory along j":
                    M_x = [hx[i, j - k] for k in range(1, k_max + 1) if j - k >= 0]
                M_y = [hy[i, j - k] for k in range(1, k_max + 1) if j - k >= 0]
                # Eq. 14 reads with r^(x)_{i−1,j}, Eq. 15 with r^(y)_{i,j−1}
                prev_x = (i, j - 1) if misreading == "x reads along j" else (i - 1, j)
                rx[i, j] = read(w, "x", layer, M_x, rx.get(prev_x, zero), z_x[i, j], d)
                ry[i, j] = read(w, "y", layer, M_y, ry.get((i, j - 1), zero), z_y[i, j], d)
                H = torch.cat([rx[i, j], ry[i, j]])  # Eq. 17
                c_prev_x = cx.get((i, j - 1) if misreading == "x cell along j" else (i - 1, j),
                                  zero)
                hx[i, j], cx[i, j] = lstm(w, "x", layer, z_x[i, j], H, c_prev_x)  # Eq. 7
                hy[i, j], cy[i, j] = lstm(w, "y", layer, z_y[i, j], H,
                                          cy.get((i, j - 1), zero))  # Eq. 8
        z_x, z_y = hx, hy  # a stacked layer reads its own stream's state below (our reading)
    match = torch.cat([z_x[n - 1, m - 1], z_y[n - 1, m - 1]])  # h_{n,m}, Eq. 6
    return w["W_s"] @ match + w["b_s"]  # the softmax layer (§5.1; softmax in the loss)


PAIRS = [([4, 9, 2, 2, 8], [6, 1, 13]), ([11], [3, 5, 7, 19]), ([15, 6, 2], [8]),
         ([1, 12, 3, 9, 4, 20], [2, 14]), ([5, 16], [9, 9, 1, 6, 3])]


def padded(sentences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (padding slots hold word 21, so only the mask hides them) and mask."""
    width = max(map(len, sentences))
    ids = torch.tensor([s + [21] * (width - len(s)) for s in sentences])
    mask = torch.tensor([[True] * len(s) + [False] * (width - len(s)) for s in sentences])
    return ids, mask


CONFIGS = {
    "one layer, one align function": {},
    "one align function per memory": {"separate_attention": True},
    "two stacked layers": {"num_layers": 2},
}


def run_both(kwargs: dict, misreading: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(5)
    embedding = torch.nn.Embedding(VOCAB, EMB, padding_idx=0)
    torch.nn.init.normal_(embedding.weight)
    model = DeepFusionLSTM(embedding, num_classes=3, dim=2 * UNITS, memory_size=K,
                           init_range=0.5, **kwargs).double().eval()
    with torch.no_grad():  # sharper attention, so that a misread memory or read shows
        for name, parameter in model.named_parameters():
            if ".attention." in name:
                parameter.mul_(6.0)
    layers = kwargs.get("num_layers", 1)
    w = paper_weights(model.state_dict(), layers, kwargs.get("separate_attention", False))
    p_ids, p_mask = padded([p for p, _ in PAIRS])
    h_ids, h_mask = padded([h for _, h in PAIRS])
    with torch.no_grad():
        ours = model(p_ids, p_mask, h_ids, h_mask)["logits"]
        theirs = torch.stack([reference_logits(p, h, w, layers=layers, d=UNITS, k_max=K,
                                               misreading=misreading) for p, h in PAIRS])
    return ours, theirs


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_model_equals_the_equation_reference(name):
    """Five pairs of lengths 1-6 in one padded batch; K = 2 < the longer sentences, so memories
    fill, slide and start empty."""
    ours, theirs = run_both(CONFIGS[name])
    assert ours.dtype == torch.float64 and ours.abs().max() > 0.1  # not a degenerate check
    torch.testing.assert_close(ours, theirs, rtol=0.0, atol=1e-12)


@pytest.mark.parametrize("misreading", ["x reads along j", "x memory along j", "x cell along j"])
def test_the_reference_tells_a_misreading_apart(misreading):
    """The comparison can fail: the same weights under another reading give other logits, at
    least 1e-8 apart (the previous read moves the logits least: 2.5e-4 here) against the 1e-16
    of the model and the reference."""
    ours, theirs = run_both({}, misreading)
    assert (ours - theirs).abs().max() > 1e-8


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_training_forward_and_gradients_equal_the_equation_reference(name):
    """Training mode (dropout 0, the default): the logits and every weight's gradient of the
    cross-entropy against the reference's autograd (``float64.training_gap``)."""
    kwargs = CONFIGS[name]
    torch.manual_seed(5)
    embedding = torch.nn.Embedding(VOCAB, EMB, padding_idx=0)
    torch.nn.init.normal_(embedding.weight)
    model = DeepFusionLSTM(embedding, num_classes=3, dim=2 * UNITS, memory_size=K,
                           init_range=0.5, dropout=0.0, **kwargs).double()
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            if ".attention." in parameter_name:
                parameter.mul_(6.0)
    layers = kwargs.get("num_layers", 1)
    p_ids, p_mask = padded([p for p, _ in PAIRS])
    h_ids, h_mask = padded([h for _, h in PAIRS])

    def expected(state: dict[str, torch.Tensor]) -> torch.Tensor:
        w = paper_weights(state, layers, kwargs.get("separate_attention", False))
        return torch.stack([reference_logits(p, h, w, layers=layers, d=UNITS, k_max=K)
                            for p, h in PAIRS])

    inputs = {"premise": p_ids, "premise_mask": p_mask, "hypothesis": h_ids,
              "hypothesis_mask": h_mask}
    logit, grad = training_gap(model, inputs, torch.tensor([0, 1, 2, 1, 0]), expected)
    assert logit < 1e-12 and grad < 1e-10, (logit, grad)
