"""DIN vectorised the way one would first write it: every layer over the padded batch (tests).

The fair speed baseline of ``benchmarks/bench_din.py`` and a second check of
``entailment_lab.models.din``: the paper's equations written once for the whole padded batch,
with no packing, sorting or transposition. Every layer runs over every position, padding
included; the interaction (Eq. 8) keeps a pair's state wherever its premise is padding, so its
output is ``W^t_{ℓ_P}``; the control layer steps through the padded hypothesis and the mean
pooling (Eq. 20) leaves the padded steps out. It reads a ``DIN`` instance's parameters, for the
default reading of every knob, so its outputs and gradients must equal the model's.
"""

from __future__ import annotations

import torch

from entailment_lab.models.common import masked_mean
from entailment_lab.models.din import DIN


def padded_forward(
    model: DIN,
    premise: torch.Tensor,
    premise_mask: torch.Tensor,
    hypothesis: torch.Tensor,
    hypothesis_mask: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """As ``model(...)``: {"logits": (batch, num_classes)}."""
    control, m = model.control, model.m
    defaults = (
        (model.variant == "din1" and control.W_con_x is None)
        or (model.variant == "din2" and control.U_h is None and model.din2_input != "word")
        or (model.variant == "static" and model.static_input == "word")
    )
    if not defaults or model.interaction.init != "zeros":
        raise NotImplementedError("padded_forward covers the default reading of each variant")
    x_p = model.dropout(model.embedding(premise))  # (batch, len_p, d_emb)
    x_h = model.embedding(hypothesis)  # (batch, len_h, d_emb)
    h_p, _ = model.encoder(x_p)  # Eq. 3-6 over the padded premise (padding trails)
    W_p = model.transform_p(model.dropout(h_p))  # Eq. 7: (batch, len_p, m, m)
    W_h = model.transform_h(x_h)  # (batch, len_h, m, m)

    inter = model.interaction  # Eq. 8 for every (pair, t) at once, state kept over padding
    W = torch.zeros_like(W_h)
    for W_p_tau, real in zip(W_p.unbind(1), premise_mask.unbind(1), strict=True):
        new = torch.tanh(W_p_tau[:, None] @ W_h + inter.W_inter @ W + inter.b_inter)
        W = torch.where(real[:, None, None, None], new, W)  # W^t_{ℓ_P} once the premise ends

    outputs = []
    if model.variant == "din1":  # Eq. 9-16, every position's weights generated at once
        W_gen = torch.tanh(control.W_con @ W[:, :, None] + control.b_con)  # (batch, len_h, 3, m, m)
        pre = W_gen @ W_h[:, :, None] + torch.tanh(control.B_con @ W[:, :, None])
        H = W_h.new_zeros(W_h.shape[0], m, m)
        for (W_z, W_r, W_n), (p_z, p_r, p_n) in zip(
            (w.unbind(1) for w in W_gen.unbind(1)), (p.unbind(1) for p in pre.unbind(1)),
            strict=True,
        ):
            Z = torch.sigmoid(W_z @ H + p_z)
            R = torch.sigmoid(W_r @ H + p_r)
            H = (1 - Z) * H + Z * torch.tanh(W_n @ (R * H) + p_n)
            outputs.append(H.flatten(1))
    elif model.variant == "din2":  # Eq. 17-19, diagonal weights, x_t = VECTORIZE(W̃_t)
        V = W.flatten(2)  # (batch, len_h, d)
        w_gen = torch.einsum("gij,blj->blgi", control.W_con, V) + control.b_con  # (b, l, 3, d)
        pre = w_gen * W_h.flatten(2)[:, :, None] + torch.einsum("gij,blj->blgi", control.B_con, V)
        h = V.new_zeros(V.shape[0], V.shape[2])
        for (w_z, w_r, w_n), (p_z, p_r, p_n) in zip(
            (w.unbind(1) for w in w_gen.unbind(1)), (p.unbind(1) for p in pre.unbind(1)),
            strict=True,
        ):
            z = torch.sigmoid(w_z * h + p_z)
            r = torch.sigmoid(w_r * h + p_r)
            h = (1 - z) * h + z * torch.tanh(w_n * (r * h) + p_n)
            outputs.append(h)
    else:  # Table 2 row 18: an ordinary GRU over [x_t; VECTORIZE(W^t_{ℓ_P})]
        outputs = list(control.gru(torch.cat([x_h, W.flatten(2)], dim=-1))[0].unbind(1))
    h = model.dropout(torch.stack(outputs, dim=1))  # (batch, len_h, d)
    h_bar = model.fc_activation(model.fc(masked_mean(h, hypothesis_mask)))  # Eq. 20-21
    return {"logits": model.output(h_bar)}  # Eq. 22
