"""LSTMN with deep attention fusion against an independent reference of the paper's equations.

Cheng, Dong & Lapata (2016), "Long Short-Term Memory-Networks for Machine Reading": the LSTMN of
§3.2 (Eq. 4-9), deep attention fusion of §4 (Eq. 11-16) and the pair classifier of §5.3. The
authors' code (Lua/Torch7) cannot run here, so this file is the check: one pair at a time, one
word at a time, each sentence cut to its true length, written from the equations with plain
tensor arithmetic. It imports nothing from ``entailment_lab`` but the model under test, and it
reads that model's weights only through the explicit name maps below (paper symbol ->
``state_dict`` key). The readings where the paper is silent (the first slot of the tapes, the
biases, the classifier's depth) are the ones ``docs/models/lstmn.md`` names under "Checked
against the paper's equations"; each is a parameter of the reference, not borrowed from the
model's code. float64 throughout.
"""

from __future__ import annotations

import pytest
import torch

from entailment_lab.models.lstmn import LSTMNDeepFusion
from tests.models.float64 import frozen_vectors, padded_pairs, training_gap

pytestmark = pytest.mark.usefixtures("one_thread")

Tensor = torch.Tensor

# Paper symbol -> state_dict key, for one LSTMN (prefix "reader." or "premise_reader.").
LSTMN_MAP = {
    "W_x": "attend_x.weight",  # Eq. 4, W_x (h, d)
    "b_a": "attend_x.bias",  # Eq. 4, the one bias inside the tanh (h,)
    "W_h": "attend_h.weight",  # Eq. 4, W_h (h, h)
    "W_hs": "attend_summary.weight",  # Eq. 4, W_h̃ (h, h)
    "v": "score.weight",  # Eq. 4, v (1, h)
    "W_gh": "gates_h.weight",  # Eq. 7, the h̃_t columns of W (4h, h), rows i, f, o, ĉ
    "W_gx": "gates_x.weight",  # Eq. 7, the x_t columns of W (4h, d)
    "b_g": "gates_x.bias",  # Eq. 7, bias (4h,)
}
# Deep attention fusion (§4), in the hypothesis LSTMN.
FUSION_MAP = {
    "W_x": "fusion.attend_x.weight",  # Eq. 11, W_x (h, d)
    "b_b": "fusion.attend_x.bias",  # Eq. 11, bias inside the tanh (h,)
    "W_gamma": "fusion.attend_source.weight",  # Eq. 11, W_γ (h, h)
    "W_gs": "fusion.attend_summary.weight",  # Eq. 11, W_γ̃ (h, h)
    "u": "fusion.score.weight",  # Eq. 11, u (1, h)
    "W_rg": "fusion.gate_source.weight",  # Eq. 14, the γ̃_t columns of W_r (h, h)
    "W_rx": "fusion.gate_x.weight",  # Eq. 14, the x_t columns of W_r (h, d)
    "b_r": "fusion.gate_x.bias",  # Eq. 14, bias (h,)
}
# §5.3: "a 2-layer neural network classifier with ReLU", then the softmax layer.
CLASSIFIER_MAP = {
    "W_1": "classifier.0.weight", "b_1": "classifier.0.bias",  # (h, 2h)
    "W_2": "classifier.2.weight", "b_2": "classifier.2.bias",  # (h, h)
    "W_out": "classifier.5.weight", "b_out": "classifier.5.bias",  # (C, h)
}


def take(state: dict[str, Tensor], names: dict[str, str], prefix: str = "") -> dict[str, Tensor]:
    """The weights named in ``names``; the score vectors v, u as plain (h,) vectors."""
    w = {symbol: state[prefix + key].clone() for symbol, key in names.items()}
    for symbol in ("v", "u"):
        if symbol in w:
            w[symbol] = w[symbol][0]
    return w


def softmax(scores: list[Tensor]) -> list[Tensor]:
    top = max(float(s.detach()) for s in scores)
    e = [torch.exp(s - top) for s in scores]
    total = sum(e)
    return [x / total for x in e]


def weighted_sum(weights: list[Tensor], vectors: list[Tensor]) -> Tensor:
    return sum(w * v for w, v in zip(weights, vectors, strict=True))


def sigmoid(x: Tensor) -> Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


def read(w: dict[str, Tensor], words: list[Tensor], tape_h: list[Tensor], tape_c: list[Tensor],
         fusion: dict[str, Tensor] | None = None, gammas: list[Tensor] | None = None,
         alphas: list[Tensor] | None = None
         ) -> tuple[list[Tensor], list[Tensor], list[list[Tensor]]]:
    """One LSTMN over ``words`` (each (d,)), its tapes starting as given (slot 0 or empty).

    With ``fusion``, the inter-attention over the source tapes γ (hidden) and α (memory).
    Returns the hidden and memory vectors of the words and the inter-attention weights p^t.
    """
    tape_h, tape_c = list(tape_h), list(tape_c)
    n = w["W_h"].shape[0]
    W = torch.cat([w["W_gh"], w["W_gx"]], dim=1)  # Eq. 7's W·[h̃_t, x_t]: (4h, h + d)
    h_tilde_prev = torch.zeros(n, dtype=W.dtype)  # h̃_0
    gamma_tilde_prev = torch.zeros(n, dtype=W.dtype)  # γ̃_0
    hs, cs, inter = [], [], []
    for x in words:
        if tape_h:
            # Eq. 4: a_i^t = vᵀ tanh(W_h h_i + W_x x_t + W_h̃ h̃_{t-1}), i over the slots so far
            a = [w["v"] @ torch.tanh(w["W_h"] @ h_i + w["W_x"] @ x + w["W_hs"] @ h_tilde_prev
                                     + w["b_a"]) for h_i in tape_h]
            s = softmax(a)  # Eq. 5
            h_tilde, c_tilde = weighted_sum(s, tape_h), weighted_sum(s, tape_c)  # Eq. 6
        else:  # an empty tape: the empty sum of Eq. 6
            h_tilde, c_tilde = torch.zeros(n, dtype=W.dtype), torch.zeros(n, dtype=W.dtype)
        pre = W @ torch.cat([h_tilde, x]) + w["b_g"]  # Eq. 7
        i, f, o = sigmoid(pre[:n]), sigmoid(pre[n:2 * n]), sigmoid(pre[2 * n:3 * n])
        c_hat = torch.tanh(pre[3 * n:])
        c = f * c_tilde + i * c_hat  # Eq. 8
        if fusion is not None:
            # Eq. 11: b_j^t = uᵀ tanh(W_γ γ_j + W_x x_t + W_γ̃ γ̃_{t-1})
            b = [fusion["u"] @ torch.tanh(fusion["W_gamma"] @ g_j + fusion["W_x"] @ x
                                          + fusion["W_gs"] @ gamma_tilde_prev + fusion["b_b"])
                 for g_j in gammas]
            p = softmax(b)  # Eq. 12
            gamma_tilde, alpha_tilde = weighted_sum(p, gammas), weighted_sum(p, alphas)  # Eq. 13
            W_r = torch.cat([fusion["W_rg"], fusion["W_rx"]], dim=1)
            r = sigmoid(W_r @ torch.cat([gamma_tilde, x]) + fusion["b_r"])  # Eq. 14
            c = r * alpha_tilde + c  # Eq. 15: r_t ⊙ α̃_t + f_t ⊙ c̃_t + i_t ⊙ ĉ_t
            gamma_tilde_prev = gamma_tilde
            inter.append(p)
        h = o * torch.tanh(c)  # Eq. 9 / Eq. 16
        tape_h.append(h)
        tape_c.append(c)
        hs.append(h)
        cs.append(c)
        h_tilde_prev = h_tilde
    return hs, cs, inter


def reference(state: dict[str, Tensor], premise: list[Tensor], hypothesis: list[Tensor],
              initial_slot: bool) -> tuple[Tensor, Tensor]:
    """Logits (C,) and the inter-attention map (ℓ_H, n0 + ℓ_P) of one pair of word-vector lists."""
    shared = not any(k.startswith("premise_reader.") for k in state)
    hyp_w = take(state, LSTMN_MAP, "reader.")
    prem_w = hyp_w if shared else take(state, LSTMN_MAP, "premise_reader.")
    fusion = take(state, FUSION_MAP)
    cls = take(state, CLASSIFIER_MAP)
    n = hyp_w["W_h"].shape[0]
    zero = torch.zeros(n, dtype=torch.float64)
    # Premise LSTMN (Eq. 4-9); tapes start with a zero slot (h_0, c_0) or empty.
    slot = ([zero], [zero]) if initial_slot else ([], [])
    ph, pc, _ = read(prem_w, premise, *slot)
    # Hypothesis LSTMN with deep fusion (Eq. 4-16). The source tapes are the premise's whole
    # tapes, slot 0 included; the hypothesis tapes start with the premise's final (h, c).
    gammas, alphas = slot[0] + ph, slot[1] + pc
    start = ([ph[-1]], [pc[-1]]) if initial_slot else ([], [])
    hh, _, inter = read(hyp_w, hypothesis, *start, fusion=fusion, gammas=gammas, alphas=alphas)
    # §5.3: average pooling of each hidden tape (the words' slots), concatenation, classifier.
    u = sum(ph) / len(ph)
    v = sum(hh) / len(hh)
    z = torch.relu(cls["W_1"] @ torch.cat([u, v]) + cls["b_1"])
    z = torch.relu(cls["W_2"] @ z + cls["b_2"])
    return cls["W_out"] @ z + cls["b_out"], torch.stack([torch.stack(p) for p in inter])


VOCAB, D, H = 40, 7, 6
LENGTHS = [(5, 3), (2, 6), (7, 1), (1, 4)]  # (premise, hypothesis) lengths: every mix


@pytest.mark.parametrize(("shared", "slot"), [(True, True), (False, True), (True, False),
                                              (False, False)])
def test_model_equals_the_equations(shared, slot):
    torch.manual_seed(7)
    model = LSTMNDeepFusion(frozen_vectors(VOCAB, D), num_classes=3, hidden_size=H,
                            shared_reader=shared, initial_slot=slot).double().eval()
    state = {k: v.detach() for k, v in model.state_dict().items()}
    inputs = padded_pairs(LENGTHS, VOCAB, seed=3)
    p_ids, h_ids = inputs["premise"], inputs["hypothesis"]
    with torch.no_grad():
        out = model(**inputs, return_details=True)
    vectors = state["embedding.weight"]
    n0 = int(slot)
    worst = 0.0
    for b, (lp, lh) in enumerate(LENGTHS):
        logits, inter = reference(state, list(vectors[p_ids[b, :lp]]),
                                  list(vectors[h_ids[b, :lh]]), slot)
        torch.testing.assert_close(out["logits"][b], logits, rtol=0, atol=1e-12)
        torch.testing.assert_close(out["inter_attention"][b, :lh, : n0 + lp], inter,
                                   rtol=0, atol=1e-12)
        worst = max(worst, float((out["logits"][b] - logits).abs().max()))
    assert worst < 1e-12


@pytest.mark.parametrize(("shared", "slot"), [(True, True), (False, False)])
def test_training_forward_and_gradients_equal_the_equations(shared, slot):
    """Training mode, dropout 0: the logits and every weight's gradient of the cross-entropy
    against the reference's autograd (``float64.training_gap``)."""
    torch.manual_seed(7)
    model = LSTMNDeepFusion(frozen_vectors(VOCAB, D), num_classes=3, hidden_size=H,
                            shared_reader=shared, initial_slot=slot, dropout=0.0).double()
    inputs = padded_pairs(LENGTHS, VOCAB, seed=3)
    p_ids, h_ids = inputs["premise"], inputs["hypothesis"]

    def expected(state: dict[str, Tensor]) -> Tensor:
        vectors = state["embedding.weight"]
        return torch.stack([reference(state, list(vectors[p_ids[b, :lp]]),
                                      list(vectors[h_ids[b, :lh]]), slot)[0]
                            for b, (lp, lh) in enumerate(LENGTHS)])

    logit, grad = training_gap(model, inputs, torch.tensor([0, 1, 2, 1]), expected)
    assert logit < 1e-12 and grad < 1e-10, (logit, grad)
