"""Re-read LSTM against an independent reference of its equations R1-R9.

Sha, Chang, Sui & Li (COLING 2016), "Reading and Thinking: Re-read LSTM Unit for Textual
Entailment Recognition". The paper's text was not available to this project (see
``docs/models/rlstm.md``, "Sources"), so R1-R9 are the reconstruction that document writes out;
the public re-implementation (DyNet) could not be installed here. This file checks that the
model computes exactly those equations: one pair at a time, one word at a time, each sentence
cut to its true length, with plain tensor arithmetic (the premise LSTM too, written out from
the LSTM equations). It imports nothing from ``entailment_lab`` but the model under test and
reads its weights only through the explicit name maps below (symbol -> ``state_dict`` key).
float64 throughout.
"""

from __future__ import annotations

import pytest
import torch

from entailment_lab.models.rlstm import ReReadLSTM
from tests.models.float64 import frozen_vectors, padded_pairs, training_gap

pytestmark = pytest.mark.usefixtures("one_thread")

Tensor = torch.Tensor

# R1: the premise LSTM, per direction; rows of the gate blocks in the order i, f, g, o, and the
# two bias vectors of PyTorch's layout (their sum is the one bias of the LSTM equations).
LSTM_MAP = {"W_x": "weight_ih_l0{}", "W_h": "weight_hh_l0{}", "b_1": "bias_ih_l0{}",
            "b_2": "bias_hh_l0{}"}
RLSTM_MAP = {
    "W": "rlstm.W.weight", "b": "rlstm.W.bias",  # R5: W x_t + b, rows i, f, g, o (4k, d)
    "U": "rlstm.U.weight",  # R5: U h_{t-1} (4k, k)
    "W_p": "rlstm.W_p.weight", "W_m": "rlstm.W_m.weight", "W_c": "rlstm.W_c.weight",  # R2
    "w": "rlstm.w.weight",  # R3 (1, k)
}


def sigmoid(x: Tensor) -> Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


def lstm(w: dict[str, Tensor], words: list[Tensor]) -> list[Tensor]:
    """h_t = o ⊙ tanh(c_t), c_t = f ⊙ c_{t-1} + i ⊙ g over ``words``, from zero states."""
    k = w["W_h"].shape[1]
    h = c = torch.zeros(k, dtype=torch.float64)
    out = []
    for x in words:
        pre = w["W_x"] @ x + w["W_h"] @ h + w["b_1"] + w["b_2"]
        i, f, g, o = sigmoid(pre[:k]), sigmoid(pre[k:2 * k]), torch.tanh(pre[2 * k:3 * k]), \
            sigmoid(pre[3 * k:])
        c = f * c + i * g
        h = o * torch.tanh(c)
        out.append(h)
    return out


def reference(state: dict[str, Tensor], premise: list[Tensor], hypothesis: list[Tensor], *,
              memory_in_gates: bool, memory_in_output: bool, pooling: str) -> Tensor:
    """Logits (C,) of one pair of word-vector lists (eval mode: no dropout)."""
    # R1: P = [→h; ←h] (a BiLSTM over the real premise words) or one LSTM.
    fwd = {s: state["premise_lstm." + key.format("")] for s, key in LSTM_MAP.items()}
    P = lstm(fwd, premise)
    if "premise_lstm.weight_ih_l0_reverse" in state:
        bwd = {s: state["premise_lstm." + key.format("_reverse")] for s, key in LSTM_MAP.items()}
        back = lstm(bwd, premise[::-1])[::-1]
        P = [torch.cat([a, b]) for a, b in zip(P, back, strict=True)]
    w = {s: state[key] for s, key in RLSTM_MAP.items()}
    V = state.get("rlstm.V.weight")  # R5: V m_t (4k, k), absent without memory_in_gates
    k = w["U"].shape[1]
    h = c = m = torch.zeros(k, dtype=torch.float64)
    hs = []
    for x in hypothesis:
        # R2: M_t = tanh(W^p P + (W^m m_{t-1} + W^c c_{t-1}) ⊗ e); R3: α_t = softmax(wᵀ M_t)
        q = w["W_m"] @ m + w["W_c"] @ c
        scores = torch.stack([(w["w"] @ torch.tanh(w["W_p"] @ p + q))[0] for p in P])
        alpha = torch.exp(scores - scores.max())
        alpha = alpha / alpha.sum()
        m = sum(a * p for a, p in zip(alpha, P, strict=True))  # R4: m_t = Σ_τ α_tτ P_τ
        pre = w["W"] @ x + w["U"] @ h + w["b"] + (V @ m if memory_in_gates else 0.0)  # R5
        i, f, g, o = sigmoid(pre[:k]), sigmoid(pre[k:2 * k]), torch.tanh(pre[2 * k:3 * k]), \
            sigmoid(pre[3 * k:])
        c = f * c + i * g  # R6
        h = o * torch.tanh(c) + (o * torch.tanh(m) if memory_in_output else 0.0)  # R7
        hs.append(h)
    pooled = sum(hs) / len(hs) if pooling == "mean" else hs[-1]  # R8
    # R9: tanh layers (classifier.0, .3, ... : Linear, Tanh, Dropout each), then the output layer.
    layer, z = 0, pooled
    while f"classifier.{layer + 3}.weight" in state:
        z = torch.tanh(state[f"classifier.{layer}.weight"] @ z + state[f"classifier.{layer}.bias"])
        layer += 3
    return state[f"classifier.{layer}.weight"] @ z + state[f"classifier.{layer}.bias"]


VOCAB, D, K = 40, 7, 6
LENGTHS = [(5, 3), (2, 6), (7, 1), (1, 4)]  # (premise, hypothesis) lengths: every mix


@pytest.mark.parametrize("kwargs", [
    {},
    {"premise_bidirectional": False, "pooling": "last"},
    {"memory_in_gates": False},
    {"memory_in_output": False, "mlp_layers": 0},
    {"mlp_layers": 2},
])
def test_model_equals_the_equations(kwargs):
    torch.manual_seed(5)
    model = ReReadLSTM(frozen_vectors(VOCAB, D), num_classes=3, hidden_size=K,
                       **kwargs).double().eval()
    state = {k: v.detach() for k, v in model.state_dict().items()}
    inputs = padded_pairs(LENGTHS, VOCAB, seed=11)
    p_ids, h_ids = inputs["premise"], inputs["hypothesis"]
    with torch.no_grad():
        logits = model(**inputs)["logits"]
    vectors = state["embedding.weight"]
    readings = {"memory_in_gates": kwargs.get("memory_in_gates", True),
                "memory_in_output": kwargs.get("memory_in_output", True),
                "pooling": kwargs.get("pooling", "mean")}
    for b, (lp, lh) in enumerate(LENGTHS):
        expected = reference(state, list(vectors[p_ids[b, :lp]]), list(vectors[h_ids[b, :lh]]),
                             **readings)
        torch.testing.assert_close(logits[b], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kwargs", [{}, {"premise_bidirectional": False, "pooling": "last",
                                         "mlp_layers": 2}])
def test_training_forward_and_gradients_equal_the_equations(kwargs):
    """Training mode, dropout 0: the logits and every weight's gradient of the cross-entropy
    against the reference's autograd (``float64.training_gap``)."""
    torch.manual_seed(5)
    model = ReReadLSTM(frozen_vectors(VOCAB, D), num_classes=3, hidden_size=K, dropout=0.0,
                       **kwargs).double()
    inputs = padded_pairs(LENGTHS, VOCAB, seed=11)
    p_ids, h_ids = inputs["premise"], inputs["hypothesis"]

    def expected(state: dict[str, Tensor]) -> Tensor:
        vectors = state["embedding.weight"]
        return torch.stack([reference(state, list(vectors[p_ids[b, :lp]]),
                                      list(vectors[h_ids[b, :lh]]), memory_in_gates=True,
                                      memory_in_output=True,
                                      pooling=kwargs.get("pooling", "mean"))
                            for b, (lp, lh) in enumerate(LENGTHS)])

    logit, grad = training_gap(model, inputs, torch.tensor([0, 1, 2, 1]), expected)
    assert logit < 1e-12 and grad < 1e-10, (logit, grad)
