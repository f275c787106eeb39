"""DIN against an independent reference of the paper's equations (Eq. 3-22).

Huo & Liu (2018), "Dynamic interactive network over matrix-space for recognizing textual
entailment". No public implementation exists. ``tests/models/din/reference.py``
and ``padded.py`` check the fast code against slower formulations, but they are not
independent of it: they run the model's own modules (the encoder ``nn.GRU``, ``fc``,
``output``, dropout, the embedding), take the readings of the text from the model's knobs, and
the padded one shares ``masked_mean`` with the model package. This file shares none of that: it
imports nothing from ``entailment_lab`` but the model under test, reads the model's weights only
through the explicit name map below (paper symbol -> ``state_dict`` key), and computes one pair,
one word, one m×m matrix at a time with plain tensor arithmetic, each sentence cut to its true
length. Every reading of the text that the equations leave open is an argument of the reference
(``docs/models/din.md``, "Checked against the paper's equations"). float64 throughout.

One departure of the default model from the printed equations is known and kept visible here:
the encoder (Eq. 3-6) and the ablation's GRU are PyTorch's ``nn.GRU`` (``encoder_gru="torch"``),
whose candidate applies the reset gate after the recurrent product and has a second bias inside
it, ``tanh(W_x x + b_x + r ⊙ (W_h h + b_h))``, while Eq. 5 applies it before:
``tanh(W'_h·[r ⊙ h, x] + b'_h)``. ``gru(..., reset="after")`` is that form, written out, and the
default model is compared with it; ``test_default_departs_from_eq_5`` shows the gap.

Inference (eval mode, no gradients) and training take different code: training runs the
recurrences as autograd Functions with hand-written backwards, and in float32 on one thread
(AVX-512, a C compiler, m = 16, 18 or 20) their products and the encoder's gate arithmetic in C
kernels. So the comparison is made on both paths: the logits of inference, and the training
forward (dropout 0) with the gradient of the cross-entropy with respect to every trainable
weight, against the reference's own autograd through the plain arithmetic below — in float64
at m = 3 for every reading, and in float32 at m = 16 (the kernels' path where they apply).
``encoder_gru="paper"`` is Eq. 3-6 as printed: ``test_encoder_is_eq_5`` compares it with
``gru(..., reset="before")`` through its own name map (``PAPER_GRU_MAP``).
"""

from __future__ import annotations

import pytest
import torch

from entailment_lab.models.din import DIN
from tests.models.float64 import frozen_vectors, padded_pairs, training_gap

pytestmark = pytest.mark.usefixtures("one_thread")

Tensor = torch.Tensor

# Paper symbol -> state_dict key. The GRUs are PyTorch's layout: rows (r, z, n) of
# weight_ih / weight_hh, two bias vectors; ``gru_weights`` turns them into Eq. 3-6's blocks.
DIN_MAP = {
    "E": "embedding.weight",  # word vectors x'_τ, x_t (rows: ids)
    "W_trans_P": "transform_p.W_trans", "b_trans_P": "transform_p.b_trans",  # Eq. 7, c = h'_τ
    "W_trans_H": "transform_h.W_trans", "b_trans_H": "transform_h.b_trans",  # Eq. 7, c = x_t
    "W_inter": "interaction.W_inter", "b_inter": "interaction.b_inter",  # Eq. 8
    "W_fc": "fc.weight", "b_fc": "fc.bias",  # Eq. 21
    "W_output": "output.weight", "b_output": "output.bias",  # Eq. 22
}
# Eq. 15-16 (DIN-1, m×m each) and Eq. 18-19 (DIN-2, d×d and d): gate g = z, r, h is index 0, 1, 2.
CONTROL_MAP = {"W_con": "control.W_con", "b_con": "control.b_con", "B_con": "control.B_con",
               # DIN-1 "split" reading: a second generated matrix for the W̃_t part
               "W_con_x": "control.W_con_x", "b_con_x": "control.b_con_x",
               # DIN-2 "row_scale" reading: static matrices scaled by the generated vector
               "U_h": "control.U_h", "U_x": "control.U_x"}
GATES = {"z": 0, "r": 1, "h": 2}
# encoder_gru="paper" (Eq. 3-6 as printed): gate g = z, r, h is row block 0, 1, 2 of each key;
# W_g·[h, x] is [weight_h block | weight_x block], one bias per gate.
PAPER_GRU_MAP = {"W_x": "weight_x", "W_h": "weight_h", "b": "bias"}


def sigmoid(x: Tensor) -> Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


def gru_weights(state: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """Eq. 3-6's blocks from an ``nn.GRU``'s parameters (weights for [h, x], as the text).

    Eq. 3 interpolates ``(1 − z) h + z h̃``; PyTorch's ``(1 − z_pt) n + z_pt h``, so the paper's
    update gate is ``1 − z_pt = σ(−a)``: its block and bias are the negated ones.
    """
    W_x, W_h = state[prefix + "weight_ih_l0"], state[prefix + "weight_hh_l0"]
    b_x, b_h = state[prefix + "bias_ih_l0"], state[prefix + "bias_hh_l0"]
    (Wx_r, Wx_z, Wx_n), (Wh_r, Wh_z, Wh_n) = W_x.chunk(3), W_h.chunk(3)
    (bx_r, bx_z, bx_n), (bh_r, bh_z, bh_n) = b_x.chunk(3), b_h.chunk(3)
    return {
        "W_z": -torch.cat([Wh_z, Wx_z], 1), "b_z": -(bx_z + bh_z),  # Eq. 4
        "W_r": torch.cat([Wh_r, Wx_r], 1), "b_r": bx_r + bh_r,  # Eq. 6
        "W_h": torch.cat([Wh_n, Wx_n], 1), "b_h": bx_n + bh_n,  # Eq. 5 (bias folded)
        "W_hh": Wh_n, "W_hx": Wx_n, "b_hh": bh_n, "b_hx": bx_n,  # the "after" form's parts
    }


def paper_gru_weights(state: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """Eq. 3-6's blocks from an ``encoder_gru="paper"`` GRU (``PAPER_GRU_MAP``); no sign flip."""
    W_x, W_h, b = (state[prefix + PAPER_GRU_MAP[k]] for k in ("W_x", "W_h", "b"))
    w = {}
    for g, i in GATES.items():
        d = W_h.shape[1]
        rows = slice(i * d, (i + 1) * d)
        w[f"W_{g}"] = torch.cat([W_h[rows], W_x[rows]], 1)  # on [h_{t-1}, x_t]
        w[f"b_{g}"] = b[rows]
    w["W_hh"] = W_h[2 * d:]  # its shape gives the state size
    return w


def gru(w: dict[str, Tensor], xs: list[Tensor], reset: str) -> list[Tensor]:
    """Eq. 3-6 over ``xs`` from h_0 = 0. ``reset="before"``: Eq. 5 as printed; ``"after"``:
    the candidate of ``nn.GRU`` (the model's encoder), ``tanh(W_hx x + b_hx + r ⊙ (W_hh h +
    b_hh))``."""
    h = torch.zeros(w["W_hh"].shape[0], dtype=torch.float64)
    out = []
    for x in xs:
        hx = torch.cat([h, x])
        z = sigmoid(w["W_z"] @ hx + w["b_z"])  # Eq. 4
        r = sigmoid(w["W_r"] @ hx + w["b_r"])  # Eq. 6
        if reset == "before":
            h_tilde = torch.tanh(w["W_h"] @ torch.cat([r * h, x]) + w["b_h"])  # Eq. 5
        else:
            h_tilde = torch.tanh(w["W_hx"] @ x + w["b_hx"] + r * (w["W_hh"] @ h + w["b_hh"]))
        h = (1 - z) * h + z * h_tilde  # Eq. 3
        out.append(h)
    return out


def vectorize(M: Tensor) -> Tensor:
    """VECTORIZE: an m×m matrix -> its d = m² entries, row by row."""
    return torch.stack([M[i, j] for i in range(M.shape[0]) for j in range(M.shape[1])])


def to_matrix(v: Tensor, m: int) -> Tensor:
    """TO-MATRIX, the inverse of ``vectorize``."""
    return torch.stack([torch.stack([v[i * m + j] for j in range(m)]) for i in range(m)])


def transform(W_trans: Tensor, b_trans: Tensor, c: Tensor) -> Tensor:
    """Eq. 7: W̃[i, j] = tanh(Σ_k W_trans[i, j, k] c[k] + b_trans[i, j])."""
    m = W_trans.shape[0]
    return torch.stack([torch.stack([torch.tanh(W_trans[i, j] @ c + b_trans[i, j])
                                     for j in range(m)]) for i in range(m)])


def reference(state: dict[str, Tensor], premise: list[int], hypothesis: list[int], *,
              variant: str, din1_weights: str = "shared", din2_weights: str = "diagonal",
              din2_input: str = "hypothesis_matrix", static_input: str = "word",
              interaction_init: str = "zeros", encoder_gru: str = "torch",
              encoder_reset: str | None = None) -> Tensor:
    """Logits (C,) of one pair of id lists, eval mode (no dropout). The keyword arguments are
    the readings of the text (docs/models/din.md). ``encoder_gru`` says how the GRUs with static
    weights (the encoder, row 18's) are stored and written: "torch" (``nn.GRU``'s parameters,
    its candidate) or "paper" (``PAPER_GRU_MAP``, Eq. 5); ``encoder_reset`` overrides the
    candidate's form ("before": Eq. 5, "after": ``nn.GRU``'s)."""
    weights = gru_weights if encoder_gru == "torch" else paper_gru_weights
    reset = encoder_reset or ("after" if encoder_gru == "torch" else "before")
    p = {s: state[k] for s, k in DIN_MAP.items()}
    c = {s: state[k] for s, k in CONTROL_MAP.items() if k in state}
    x_p = [p["E"][i] for i in premise]  # x'_τ (Eq. 1-2)
    x_h = [p["E"][i] for i in hypothesis]  # x_t
    h_p = gru(weights(state, "encoder."), x_p, reset)  # Eq. 3-6, h'_τ
    Wt_p = [transform(p["W_trans_P"], p["b_trans_P"], h) for h in h_p]  # Eq. 7, W̃'_τ
    Wt_h = [transform(p["W_trans_H"], p["b_trans_H"], x) for x in x_h]  # Eq. 7, W̃_t
    m = Wt_h[0].shape[0]

    # Eq. 8: for each t, W^t_τ = tanh(W̃'_τ W̃_t + W_inter W^t_{τ-1} + b_inter), τ = 1..ℓ_P.
    W_out = []
    for Wt in Wt_h:
        W = Wt.clone() if interaction_init == "hypothesis" else torch.zeros(m, m,
                                                                             dtype=torch.float64)
        for Wp in Wt_p:
            W = torch.tanh(Wp @ Wt + p["W_inter"] @ W + p["b_inter"])
        W_out.append(W)  # W^t_{ℓ_P}

    hs = []
    if variant == "din1":
        h = torch.zeros(m * m, dtype=torch.float64)
        for W_l, Wt in zip(W_out, Wt_h, strict=True):
            gen = {g: torch.tanh(c["W_con"][i] @ W_l + c["b_con"][i]) for g, i in GATES.items()}
            gen_x = ({g: torch.tanh(c["W_con_x"][i] @ W_l + c["b_con_x"][i])
                      for g, i in GATES.items()} if din1_weights == "split" else gen)  # Eq. 15
            bias = {g: torch.tanh(c["B_con"][i] @ W_l) for g, i in GATES.items()}  # Eq. 16
            H = to_matrix(h, m)  # Eq. 9
            # W^t_g·[A, W̃_t] read as W^t_g A + W^t_g W̃_t ("shared") or with its own matrix.
            Z = sigmoid(gen["z"] @ H + gen_x["z"] @ Wt + bias["z"])  # Eq. 10
            R = sigmoid(gen["r"] @ H + gen_x["r"] @ Wt + bias["r"])  # Eq. 11
            H_tilde = torch.tanh(gen["h"] @ (R * H) + gen_x["h"] @ Wt + bias["h"])  # Eq. 12
            H = (1 - Z) * H + Z * H_tilde  # Eq. 13
            h = vectorize(H)  # Eq. 14
            hs.append(h)
    elif variant == "din2":
        d = m * m
        h = torch.zeros(d, dtype=torch.float64)
        for t, W_l in enumerate(W_out):
            V = vectorize(W_l)  # Eq. 18, V^t
            w = {g: c["W_con"][i] @ V + c["b_con"][i] for g, i in GATES.items()}  # Eq. 18
            b = {g: c["B_con"][i] @ V for g, i in GATES.items()}  # Eq. 19
            # The input written x_{t-1}: step t's own, VECTORIZE(W̃_t) or the word x_t.
            x = vectorize(Wt_h[t]) if din2_input == "hypothesis_matrix" else x_h[t]

            def times(g: str, hv: Tensor, x: Tensor = x, w: dict = w) -> Tensor:
                """W^t_g·[hv, x]: ⊙ on both parts ("diagonal") or scaling static rows."""
                if din2_weights == "diagonal":
                    return w[g] * hv + w[g] * x
                i = GATES[g]
                return w[g] * (c["U_h"][i] @ hv + c["U_x"][i] @ x)

            z = sigmoid(times("z", h) + b["z"])  # Eq. 17
            r = sigmoid(times("r", h) + b["r"])
            h_tilde = torch.tanh(times("h", r * h) + b["h"])
            h = (1 - z) * h + z * h_tilde
            hs.append(h)
    else:  # Table 2 row 18: an ordinary GRU over [input_t; V^t], no generated weights
        inputs = [torch.cat([x if static_input == "word" else vectorize(Wt), vectorize(W_l)])
                  for x, Wt, W_l in zip(x_h, Wt_h, W_out, strict=True)]
        hs = gru(weights(state, "control.gru."), inputs, reset)  # as the encoder

    h_bar = sum(hs) / len(hs)  # Eq. 20
    h_bar = torch.tanh(p["W_fc"] @ h_bar + p["b_fc"])  # Eq. 21, FC read as tanh(W h + b)
    return p["W_output"] @ h_bar + p["b_output"]  # Eq. 22 before the softmax


VOCAB, D_EMB, DIM = 30, 5, 9  # m = 3
LENGTHS = [(4, 3), (2, 5), (6, 1), (1, 2)]  # (premise, hypothesis) lengths: every mix


def compare(knobs: dict, encoder_reset: str | None = None) -> float:
    """max |logit − reference| over a padded batch of four pairs."""
    torch.manual_seed(2)
    model = DIN(frozen_vectors(VOCAB, D_EMB), num_classes=3, dim=DIM, **knobs).double().eval()
    state = {k: v.detach() for k, v in model.state_dict().items()}
    inputs = padded_pairs(LENGTHS, VOCAB, seed=4)
    with torch.no_grad():
        logits = model(**inputs)["logits"]
    worst = 0.0
    for b, (lp, lh) in enumerate(LENGTHS):
        expected = reference(state, inputs["premise"][b, :lp].tolist(),
                             inputs["hypothesis"][b, :lh].tolist(), encoder_reset=encoder_reset,
                             **knobs)
        worst = max(worst, float((logits[b] - expected).abs().max()))
    return worst


# The readings compared: every knob's non-default choice in one of the six settings.
SETTINGS = [
    {"variant": "din1"},
    {"variant": "din1", "din1_weights": "split", "interaction_init": "hypothesis"},
    {"variant": "din2"},
    {"variant": "din2", "din2_weights": "row_scale", "din2_input": "word"},
    {"variant": "static"},
    {"variant": "static", "static_input": "hypothesis_matrix"},
]


@pytest.mark.parametrize("knobs", SETTINGS)
def test_model_equals_the_equations(knobs):
    worst = compare(knobs)
    assert worst < 1e-12, f"max |Δ logit| {worst:.3g}"


@pytest.mark.parametrize("knobs", [
    {"variant": "din1"},
    {"variant": "din2"},
    {"variant": "static"},  # both GRUs: the encoder and row 18's
    {"variant": "static", "static_input": "hypothesis_matrix"},
])
def test_encoder_is_eq_5(knobs):
    """encoder_gru="paper": Eq. 3-6 as printed, the reset gate before the product."""
    worst = compare({**knobs, "encoder_gru": "paper"})
    assert worst < 1e-12, f"max |Δ logit| {worst:.3g}"


@pytest.mark.parametrize("variant", ["din1", "din2", "static"])
def test_default_departs_from_eq_5(variant):
    """The default nn.GRU is not Eq. 5: with Eq. 5 in the reference (the two candidate biases
    folded into b'_h), the logits differ (docs/models/din.md)."""
    worst = compare({"variant": variant}, encoder_reset="before")
    assert worst > 1e-3, f"max |Δ logit| {worst:.3g}"


def train_compare(knobs: dict, dtype: torch.dtype = torch.float64, dim: int = DIM,
                  lengths: list[tuple[int, int]] = LENGTHS) -> tuple[float, float]:
    """The training path against the reference (``float64.training_gap``) on one padded batch,
    the model in training mode with dropout 0 in ``dtype``."""
    torch.manual_seed(2)
    model = DIN(frozen_vectors(VOCAB, D_EMB), num_classes=3, dim=dim, dropout=0.0,
                **knobs).double()
    inputs = padded_pairs(lengths, VOCAB, seed=4)

    def expected(state: dict[str, Tensor]) -> Tensor:
        return torch.stack([reference(state, inputs["premise"][b, :lp].tolist(),
                                      inputs["hypothesis"][b, :lh].tolist(), **knobs)
                            for b, (lp, lh) in enumerate(lengths)])

    return training_gap(model, inputs, torch.arange(len(lengths)) % 3, expected, dtype)


@pytest.mark.parametrize("knobs", [*SETTINGS, {"variant": "din1", "encoder_gru": "paper"}])
def test_training_forward_and_gradients_equal_the_equations(knobs):
    """The hand-written backwards (float64): logits and every weight's gradient."""
    logit, grad = train_compare(knobs)
    assert logit < 1e-12, f"max |Δ logit| {logit:.3g}"
    assert grad < 1e-10, f"max relative |Δ grad| {grad:.3g}"


@pytest.mark.parametrize("variant", ["din1", "din2"])
def test_float32_training_path_equals_the_equations(variant):
    """float32 at m = 16, one thread: the path of the C kernels where this machine has them,
    torch's float32 operations elsewhere; against the float64 reference."""
    logit, grad = train_compare({"variant": variant}, torch.float32, dim=256,
                                lengths=[(3, 2), (1, 3), (2, 1)])
    assert logit < 1e-5, f"max |Δ logit| {logit:.3g}"
    assert grad < 1e-4, f"max relative |Δ grad| {grad:.3g}"
