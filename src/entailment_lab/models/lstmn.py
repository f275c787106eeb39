"""LSTMN with deep attention fusion (Cheng, Dong & Lapata, EMNLP 2016): Table 2 rows 6 and 7.

"Long Short-Term Memory-Networks for Machine Reading" (arXiv 1601.06733). An LSTMN is an LSTM
whose single memory cell is replaced by two growing tapes, one hidden vector h_i and one memory
vector c_i per token read so far; at every step it attends over the tapes (intra-attention,
Eq. 4-5) and runs the LSTM update from the attention-weighted summaries h̃_t, c̃_t (Eq. 6-9)
instead of from (h_{t-1}, c_{t-1}). For a pair (§4, §5.3) one LSTMN reads the premise; a second
one reads the hypothesis and, with deep attention fusion, also attends over the premise's tapes
(inter-attention, Eq. 11-13) and gates the attended premise memory α̃_t into its own cell
(Eq. 14-16). Each hidden tape is averaged and the two averages are classified by a 2-layer ReLU
network. Equation numbers are the paper's. Weight sharing, the first slot of the tapes, biases,
dropout placement and the parameter counts (1,714,203 / 3,381,303 for the paper's 1.7M / 3.4M):
``docs/models/lstmn.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from entailment_lab.models.base import HeatMap, Network
from entailment_lab.models.common import (
    check_flags,
    check_num_classes,
    check_positive_int,
    check_probability,
    last_true_index,
    masked_mean,
    masked_softmax,
)

Tape = tuple[torch.Tensor, torch.Tensor]  # (hidden, memory) slots: (batch, slots, h) each


class LSTMNReader(nn.Module):
    """The LSTMN of §3.2: intra-attention (Eq. 4-6) and the LSTM update (Eq. 7-9).

    ``a_i^t = vᵀ tanh(W_h h_i + W_x x_t + W_h̃ h̃_{t-1})`` (Eq. 4), ``s^t = softmax(a^t)`` over the
    slots of the tapes (Eq. 5), ``[h̃_t; c̃_t] = Σ_i s_i^t [h_i; c_i]`` (Eq. 6);
    ``[i; f; o; ĉ] = [σ; σ; σ; tanh](W·[h̃_t, x_t])`` (Eq. 7), ``c_t = f ⊙ c̃_t + i ⊙ ĉ_t`` (Eq. 8),
    ``h_t = o ⊙ tanh(c_t)`` (Eq. 9). One bias inside the attention's tanh and one on the gates.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        h = hidden_size
        self.hidden_size = h
        self.attend_x = nn.Linear(input_size, h)  # W_x x_t (+ the attention's bias)
        self.attend_h = nn.Linear(h, h, bias=False)  # W_h h_i, once per slot when written
        self.attend_summary = nn.Linear(h, h, bias=False)  # W_h̃ h̃_{t-1}
        self.score = nn.Linear(h, 1, bias=False)  # v
        self.gates_x = nn.Linear(input_size, 4 * h)  # W·[., x_t] + b, for i, f, o, ĉ
        self.gates_h = nn.Linear(h, 4 * h, bias=False)  # W·[h̃_t, .]


class InterAttentionFusion(nn.Module):
    """Deep attention fusion (§4): inter-attention over the source tapes and the gate r_t.

    ``b_j^t = uᵀ tanh(W_γ γ_j + W_x x_t + W_γ̃ γ̃_{t-1})`` (Eq. 11), ``p^t = softmax(b^t)`` over the
    source slots (Eq. 12), ``[γ̃_t; α̃_t] = Σ_j p_j^t [γ_j; α_j]`` (Eq. 13),
    ``r_t = σ(W_r·[γ̃_t, x_t])`` (Eq. 14); the target cell adds ``r_t ⊙ α̃_t`` (Eq. 15).
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        h = hidden_size
        self.attend_x = nn.Linear(input_size, h)  # W_x x_t (+ the attention's bias)
        self.attend_source = nn.Linear(h, h, bias=False)  # W_γ γ_j, once per source slot
        self.attend_summary = nn.Linear(h, h, bias=False)  # W_γ̃ γ̃_{t-1}
        self.score = nn.Linear(h, 1, bias=False)  # u
        self.gate_x = nn.Linear(input_size, h)  # W_r·[., x_t] + b_r
        self.gate_source = nn.Linear(h, h, bias=False)  # W_r·[γ̃_t, .]


def attend(keys: torch.Tensor, query: torch.Tensor, score: nn.Linear, slot_mask: torch.Tensor,
           hidden: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Additive attention of one step over tape slots (Eq. 4-6 and 11-13).

    keys (B, S, h) = W·slot, query (B, h) = W_x x_t + W~ summary_{t-1}, slot_mask (B, S) bool;
    -> weights (B, S), zero on masked slots, and the summaries of ``hidden`` and ``memory``
    (B, S, h) -> (B, h) each.
    """
    scores = score(torch.tanh(keys + query.unsqueeze(1))).squeeze(-1)  # (B, S)
    weights = masked_softmax(scores, slot_mask, dim=1)  # (B, S)
    w = weights.unsqueeze(1)  # (B, 1, S)
    return weights, (w @ hidden).squeeze(1), (w @ memory).squeeze(1)


class LSTMNDeepFusion(Network):
    """Two LSTMNs, the hypothesis one with deep attention fusion, and the pair classifier.

    ``hidden_size`` is the row's "D" (300: row 6, 1,714,203 parameters with 300-d word vectors
    and 3 classes; 450: row 7, 3,381,303). ``shared_reader`` (default) reads both sentences with
    one set of intra-attention/LSTM weights, the hypothesis LSTMN adding the fusion weights;
    ``False`` gives the premise its own LSTMN (the authors' released code): +6h² + 5hd + 6h.
    ``initial_slot`` starts every tape with one slot (h_0, c_0): zeros for the premise, the
    premise LSTMN's final (h, c) for the hypothesis (the released code); ``False`` starts the
    tapes empty (Eq. 6 sums from i = 1; the first word then sees h̃_1 = c̃_1 = 0).
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        hidden_size: int = 300,
        dropout: float = 0.2,
        shared_reader: bool = True,
        initial_slot: bool = True,
    ) -> None:
        super().__init__()
        self.validate_config(hidden_size=hidden_size, dropout=dropout,
                             shared_reader=shared_reader, initial_slot=initial_slot)
        check_num_classes(num_classes)
        self.embedding = embedding
        self.hidden_size = h = hidden_size
        self.initial_slot = initial_slot
        d = embedding.embedding_dim

        self.reader = LSTMNReader(d, h)  # the hypothesis LSTMN's (and, shared, the premise's)
        self.premise_reader = None if shared_reader else LSTMNReader(d, h)
        self.fusion = InterAttentionFusion(d, h)
        # §5.3: the two averaged hidden tapes, concatenated, into "a 2-layer neural network
        # classifier with ReLU"; as the released code: 2h -> h -> h (ReLU each), dropout, -> C.
        self.classifier = nn.Sequential(
            nn.Linear(2 * h, h), nn.ReLU(),
            nn.Linear(h, h), nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(h, num_classes),
        )

    @classmethod
    def validate_config(cls, *, hidden_size: int, dropout: float, shared_reader: bool,
                        initial_slot: bool, **_: Any) -> None:
        check_positive_int("hidden_size (dim, the LSTMN's h)", hidden_size, "e.g. dim=300")
        check_probability("dropout", dropout)
        check_flags(shared_reader=shared_reader, initial_slot=initial_slot)

    def read(
        self,
        reader: LSTMNReader,
        x: torch.Tensor,
        mask: torch.Tensor,
        initial: Tape | None,
        source: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Run one LSTMN over word vectors x (B, L, d) with mask (B, L).

        ``initial``: the first slot (h_0, c_0), (B, h) each, or None (tapes start empty).
        ``source``: (γ, α, source_mask), (B, m, h), (B, m, h), (B, m): the premise tapes to fuse
        (Eq. 11-16), or None (a plain LSTMN, Eq. 4-9). Returns the hidden and memory tapes of
        the L token steps (B, L, h) each and, with details, the attention maps: intra (B, L,
        n0 + L) over the slots (n0 = 1 with an initial slot), inter (B, L, m).

        Slot i is written at step i and read only by later steps (Eq. 4-6 run over i < t), and a
        slot is read only where its token is real (slot mask), so a right-padded row's padded
        steps, which come after all its real steps, are never read by them: the real steps'
        results do not depend on the padding or on the batch's length.
        """
        B, L, _ = x.shape
        h = self.hidden_size
        zeros = x.new_zeros(B, h)
        # Input projections of every step at once: (B, L, h) and (B, L, 4h).
        intra_x = reader.attend_x(x)
        gates_x = reader.gates_x(x)
        hidden: list[torch.Tensor] = []  # the hidden tape h_i, (B, h) per slot
        memory: list[torch.Tensor] = []  # the memory tape c_i
        keys: list[torch.Tensor] = []  # W_h h_i
        slot_mask: list[torch.Tensor] = []  # (B,) bool per slot
        if initial is not None:
            hidden.append(initial[0])
            memory.append(initial[1])
            keys.append(reader.attend_h(initial[0]))
            slot_mask.append(mask.new_ones(B))
        n0 = len(hidden)

        if source is not None:
            fusion = self.fusion
            gamma, alpha, source_mask = source  # (B, m, h), (B, m, h), (B, m)
            source_keys = fusion.attend_source(gamma)  # W_γ γ_j: (B, m, h), once
            inter_x = fusion.attend_x(x)  # (B, L, h)
            gate_r_x = fusion.gate_x(x)  # (B, L, h)
            gamma_summary = zeros  # γ̃_{t-1}; γ̃_0 = 0
        summary_h = zeros  # h̃_{t-1}; h̃_0 = 0
        intra_maps: list[torch.Tensor] = []
        inter_maps: list[torch.Tensor] = []

        for t in range(L):
            if hidden:
                # Eq. 4-6 over the slots written so far: (B, S) weights, (B, h) summaries.
                query = intra_x[:, t] + reader.attend_summary(summary_h)
                s, summary_h, summary_c = attend(
                    torch.stack(keys, 1), query, reader.score, torch.stack(slot_mask, 1),
                    torch.stack(hidden, 1), torch.stack(memory, 1))
            else:  # no slot yet (first step, no initial slot): the empty sum of Eq. 6
                s, summary_h, summary_c = x.new_zeros(B, 0), zeros, zeros
            # Eq. 7: gates from [h̃_t, x_t]; (B, 4h) -> four (B, h).
            i, f, o, c_hat = (gates_x[:, t] + reader.gates_h(summary_h)).chunk(4, dim=-1)
            c = torch.sigmoid(f) * summary_c + torch.sigmoid(i) * torch.tanh(c_hat)  # Eq. 8
            if source is not None:
                # Eq. 11-13: inter-attention over the source tapes; Eq. 14-15: r_t ⊙ α̃_t.
                query = inter_x[:, t] + fusion.attend_summary(gamma_summary)
                p, gamma_summary, alpha_summary = attend(source_keys, query, fusion.score,
                                                         source_mask, gamma, alpha)
                r = torch.sigmoid(gate_r_x[:, t] + fusion.gate_source(gamma_summary))
                c = c + r * alpha_summary
                if return_details:
                    inter_maps.append(p)
            h_t = torch.sigmoid(o) * torch.tanh(c)  # Eq. 9 / 16
            hidden.append(h_t)
            memory.append(c)
            keys.append(reader.attend_h(h_t))
            slot_mask.append(mask[:, t])
            if return_details:  # pad to all n0 + L slots (later slots: zero weight)
                intra_maps.append(nn.functional.pad(s, (0, n0 + L - s.shape[1])))

        out = {"hidden": torch.stack(hidden[n0:], 1), "memory": torch.stack(memory[n0:], 1)}
        if return_details:
            out["intra"] = torch.stack(intra_maps, 1)  # (B, L, n0 + L)
            if source is not None:
                out["inter"] = torch.stack(inter_maps, 1)  # (B, L, m)
        return out

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Logits ``(batch, num_classes)``; with details, the intra- and inter-attention maps."""
        premise_mask, hypothesis_mask = premise_mask.bool(), hypothesis_mask.bool()
        x_p = self.embedding(premise)  # (B, Lp, d)
        x_h = self.embedding(hypothesis)  # (B, Lh, d)
        B = x_p.shape[0]

        # The premise LSTMN (Eq. 4-9); with an initial slot its tape starts with (0, 0).
        zeros = x_p.new_zeros(B, self.hidden_size)
        reader_p = self.reader if self.premise_reader is None else self.premise_reader
        p = self.read(reader_p, x_p, premise_mask, (zeros, zeros) if self.initial_slot else None,
                      return_details=return_details)
        gamma, alpha = p["hidden"], p["memory"]  # Y, A: (B, Lp, h)
        source_mask = premise_mask  # (B, Lp)
        initial = None
        if self.initial_slot:
            # The premise's slot 0 takes part in the inter-attention too (a null alignment, as in
            # the released code); the hypothesis tape starts with the premise's final state.
            gamma = torch.cat([zeros.unsqueeze(1), gamma], 1)  # (B, 1 + Lp, h)
            alpha = torch.cat([zeros.unsqueeze(1), alpha], 1)
            source_mask = torch.cat([premise_mask.new_ones(B, 1), premise_mask], 1)
            last = last_true_index(premise_mask)  # (B,)
            rows = torch.arange(B, device=last.device)
            initial = (p["hidden"][rows, last], p["memory"][rows, last])  # (B, h) each

        # The hypothesis LSTMN with deep attention fusion (Eq. 4-9 with 11-16).
        q = self.read(self.reader, x_h, hypothesis_mask, initial,
                      source=(gamma, alpha, source_mask), return_details=return_details)

        # §5.3: average each hidden tape over its real tokens, concatenate, classify.
        u = masked_mean(p["hidden"], premise_mask)  # (B, h)
        v = masked_mean(q["hidden"], hypothesis_mask)  # (B, h)
        out = {"logits": self.classifier(torch.cat([u, v], dim=-1))}  # (B, C)
        if return_details:
            slot = premise_mask.new_ones(B, int(self.initial_slot))  # (B, n0)
            out.update(
                intra_attention_premise=p["intra"],  # (B, Lp, n0 + Lp), rows: steps t
                intra_attention_hypothesis=q["intra"],  # (B, Lh, n0 + Lh)
                inter_attention=q["inter"],  # (B, Lh, n0 + Lp): hypothesis step -> premise slot
                premise_slot_mask=torch.cat([slot, premise_mask], 1),  # (B, n0 + Lp)
                hypothesis_slot_mask=torch.cat([slot, hypothesis_mask], 1),  # (B, n0 + Lh)
                premise_mask=premise_mask, hypothesis_mask=hypothesis_mask,
                premise_vector=u, hypothesis_vector=v,
            )
        return out

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """Inter-attention (hypothesis word -> premise slot, Eq. 12) and both intra-attentions
        (word t -> earlier slots, Eq. 5); the initial slot, if any, is drawn as "<start>"."""
        lp, lh, n0 = len(premise), len(hypothesis), int(self.initial_slot)
        start = ["<start>"] * n0
        p_slots, h_slots = [*start, *premise], [*start, *hypothesis]

        def grab(key: str, rows: int, cols: int) -> torch.Tensor:
            return details[key][index, :rows, :cols].detach().float().cpu()

        return {
            "inter_attention": HeatMap(
                grab("inter_attention", lh, n0 + lp), list(hypothesis), p_slots,
                "Inter-attention p_j^t (Eq. 12)", "premise slot j", "hypothesis word t",
                "attention weight"),
            "intra_attention_premise": HeatMap(
                grab("intra_attention_premise", lp, n0 + lp), list(premise), p_slots,
                "Premise intra-attention s_i^t (Eq. 5)", "earlier slot i", "premise word t",
                "attention weight"),
            "intra_attention_hypothesis": HeatMap(
                grab("intra_attention_hypothesis", lh, n0 + lh), list(hypothesis), h_slots,
                "Hypothesis intra-attention s_i^t (Eq. 5)", "earlier slot i",
                "hypothesis word t", "attention weight"),
        }
