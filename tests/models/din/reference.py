"""A naive reference of DIN, written straight from the paper's equations (tests/benchmarks only).

Plain Python loops over the batch, the hypothesis positions t and the premise positions τ, one
m×m matrix (or d-vector) at a time, each sentence cut to its true length, so that no masking
logic is shared with ``entailment_lab.models.din``. It reads the parameters of a ``DIN``
instance, so its outputs and gradients must equal the fast implementation's.
Only the embedding, the encoder ``nn.GRU`` and the dropout module are reused as they are.
"""

from __future__ import annotations

import torch

from entailment_lab.models.din import DIN


def _minmax(values: torch.Tensor) -> torch.Tensor:
    """Min-max normalise a 1-d/2-d tensor of real values to [0, 1] (all-equal -> zeros)."""
    lo, hi = values.min(), values.max()
    if hi - lo > 0:
        return (values - lo) / (hi - lo)
    return torch.zeros_like(values)


def _transform(layer: torch.nn.Module, c: torch.Tensor) -> torch.Tensor:
    """Eq. 7 for one word: c (d_c,) -> tanh(W_trans · c + b_trans), an m×m matrix."""
    return torch.tanh(torch.einsum("ijk,k->ij", layer.W_trans, c) + layer.b_trans)


def reference_forward(
    model: DIN,
    premise: torch.Tensor,
    premise_mask: torch.Tensor,
    hypothesis: torch.Tensor,
    hypothesis_mask: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """As ``model(..., return_details=True)``: logits, interaction_norms, gate_change."""
    batch, len_p = premise.shape
    len_h = hypothesis.shape[1]
    logits, all_norms, all_change = [], [], []
    for b in range(batch):
        lp, lh = int(premise_mask[b].sum()), int(hypothesis_mask[b].sum())
        x_p = model.embedding(premise[b, :lp])  # (lp, d_emb)
        x_h = model.embedding(hypothesis[b, :lh])  # (lh, d_emb)
        h_p, _ = model.encoder(model.dropout(x_p)[None])  # Eq. 3-6
        h_p = model.dropout(h_p[0])
        Wp = [_transform(model.transform_p, h_p[tau]) for tau in range(lp)]  # Eq. 7
        Wh = [_transform(model.transform_h, x_h[t]) for t in range(lh)]

        W_out, alphas = _interaction(model, Wp, Wh)
        norms = torch.zeros(len_h, len_p, dtype=x_h.dtype)
        for t in range(lh):
            norms[t, :lp] = _minmax(alphas[t].detach())

        hs, gen = _control(model, W_out, Wh, x_h)
        change = torch.zeros(3, len_h, dtype=x_h.dtype)
        change[:, :lh] = _minmax(gen.detach())

        h_bar = model.dropout(torch.stack(hs)).mean(dim=0)  # Eq. 20
        h_bar = model.fc_activation(model.fc(h_bar))  # Eq. 21
        logits.append(model.output(h_bar))  # Eq. 22
        all_norms.append(norms)
        all_change.append(change)
    return {
        "logits": torch.stack(logits),
        "interaction_norms": torch.stack(all_norms),
        "gate_change": torch.stack(all_change),
    }


def reference_layers(
    model: DIN,
    W_p: torch.Tensor,
    premise_mask: torch.Tensor,
    W_h: torch.Tensor,
    x_h: torch.Tensor,
    hypothesis_mask: torch.Tensor,
) -> torch.Tensor:
    """Only the interaction and control layers, from the transformed matrices (benchmarks).

    W_p (batch, len_p, m, m), W_h (batch, len_h, m, m), x_h (batch, len_h, d_emb) ->
    h_t (batch, len_h, d), zero at padded positions.
    """
    out = W_h.new_zeros(*W_h.shape[:2], model.dim)
    for b in range(W_h.shape[0]):
        lp, lh = int(premise_mask[b].sum()), int(hypothesis_mask[b].sum())
        Wp, Wh = list(W_p[b, :lp]), list(W_h[b, :lh])
        W_out, _ = _interaction(model, Wp, Wh)
        hs, _ = _control(model, W_out, Wh, x_h[b, :lh])
        out[b, :lh] = torch.stack(hs)
    return out


def _interaction(
    model: DIN, Wp: list[torch.Tensor], Wh: list[torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Eq. 8 for one pair: W^t_{ℓ_P} for each t and α^t_τ = ‖W^t_τ‖ for each (t, τ)."""
    inter = model.interaction
    W_out, alphas = [], []
    for t in range(len(Wh)):
        W = Wh[t] if inter.init == "hypothesis" else torch.zeros_like(Wh[t])
        norms = []
        for tau in range(len(Wp)):
            W = torch.tanh(Wp[tau] @ Wh[t] + inter.W_inter @ W + inter.b_inter)
            norms.append(W.flatten().norm())
        W_out.append(W)
        alphas.append(torch.stack(norms))
    return W_out, alphas


def _control(
    model: DIN, W_out: list[torch.Tensor], Wh: list[torch.Tensor], x_h: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The control layer for one pair: h_t for each t and the raw gate changes (3, lh)."""
    c = model.control
    lh, m, d = len(W_out), model.m, model.dim
    hs, change = [], torch.zeros(3, lh, dtype=x_h.dtype)
    if model.variant == "din1":  # Eq. 9-16
        split = c.W_con_x is not None

        def gen(Wl: torch.Tensor, g: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            W_H = torch.tanh(c.W_con[g] @ Wl + c.b_con[g])  # Eq. 15
            W_X = torch.tanh(c.W_con_x[g] @ Wl + c.b_con_x[g]) if split else W_H
            return W_H, W_X, torch.tanh(c.B_con[g] @ Wl)  # Eq. 16

        def watched(W_H: torch.Tensor, W_X: torch.Tensor) -> torch.Tensor:
            """The generated weight whose change Fig. 3 shows (both parts if "split")."""
            return torch.cat([W_H, W_X], -1) if split else W_H

        H = torch.zeros(m, m, dtype=x_h.dtype)
        prev = [watched(*gen(torch.zeros(m, m, dtype=x_h.dtype), g)[:2]) for g in range(3)]
        for t in range(lh):
            (Wz, WXz, bz), (Wr, WXr, br), (Wn, WXn, bn) = (gen(W_out[t], g) for g in range(3))
            Z = torch.sigmoid(Wz @ H + WXz @ Wh[t] + bz)  # Eq. 10
            R = torch.sigmoid(Wr @ H + WXr @ Wh[t] + br)  # Eq. 11
            H_tilde = torch.tanh(Wn @ (R * H) + WXn @ Wh[t] + bn)  # Eq. 12
            H = (1 - Z) * H + Z * H_tilde  # Eq. 13
            hs.append(H.flatten())  # Eq. 14
            cur = [watched(Wz, WXz), watched(Wr, WXr), watched(Wn, WXn)]
            for g in range(3):
                change[g, t] = (cur[g] - prev[g]).norm()
            prev = cur
    elif model.variant == "din2":  # Eq. 17-19
        word = model.din2_input == "word"
        h = torch.zeros(d, dtype=x_h.dtype)

        def gen(V: torch.Tensor, g: int) -> tuple[torch.Tensor, torch.Tensor]:
            return c.W_con[g] @ V + c.b_con[g], c.B_con[g] @ V  # Eq. 18, 19

        def mix(w: torch.Tensor, g: int, hv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            if c.U_h is None:
                return w * hv + w * x  # "diagonal"
            return w * (c.U_h[g] @ hv + c.U_x[g] @ x)  # "row_scale"

        prev = [gen(torch.zeros(d, dtype=x_h.dtype), g)[0] for g in range(3)]
        for t in range(lh):
            V = W_out[t].flatten()  # Eq. 18
            x = x_h[t] if word else Wh[t].flatten()
            (wz, bz), (wr, br), (wn, bn) = (gen(V, g) for g in range(3))
            z = torch.sigmoid(mix(wz, 0, h, x) + bz)  # Eq. 17
            r = torch.sigmoid(mix(wr, 1, h, x) + br)
            h_tilde = torch.tanh(mix(wn, 2, r * h, x) + bn)
            h = (1 - z) * h + z * h_tilde
            hs.append(h)
            for g, w in enumerate((wz, wr, wn)):
                change[g, t] = (w - prev[g]).norm()
            prev = [wz, wr, wn]
    else:  # Table 2 row 18: an ordinary GRU (PyTorch's equations) over [x_t; V^t]
        gru = c.gru
        W_ir, W_iz, W_in = gru.weight_ih_l0.chunk(3)
        W_hr, W_hz, W_hn = gru.weight_hh_l0.chunk(3)
        b_ir, b_iz, b_in = gru.bias_ih_l0.chunk(3)
        b_hr, b_hz, b_hn = gru.bias_hh_l0.chunk(3)
        word = model.static_input == "word"
        h = torch.zeros(d, dtype=x_h.dtype)
        r0 = torch.sigmoid(b_ir + b_hr)
        prev = [torch.sigmoid(b_iz + b_hz), r0, torch.tanh(b_in + r0 * b_hn)]
        for t in range(lh):
            x = torch.cat([x_h[t] if word else Wh[t].flatten(), W_out[t].flatten()])
            r = torch.sigmoid(W_ir @ x + b_ir + W_hr @ h + b_hr)
            z = torch.sigmoid(W_iz @ x + b_iz + W_hz @ h + b_hz)
            n = torch.tanh(W_in @ x + b_in + r * (W_hn @ h + b_hn))
            h = (1 - z) * n + z * h
            hs.append(h)
            for g, a in enumerate((z, r, n)):
                change[g, t] = (a - prev[g]).norm()
            prev = [z, r, n]
    return hs, change
