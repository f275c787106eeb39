"""HyperLSTM sentence encoders (Ha, Dai & Le, "HyperNetworks", ICLR 2017): Table 2 row 11.

A HyperLSTM is an LSTM whose weights change at every step: a small "hyper" LSTM reads the word
and the main LSTM's previous state, and its output is projected to embeddings ``z`` that
generate per-step scaling vectors ``d(z)`` of the rows of the main LSTM's weight matrices and a
per-step bias (the memory-efficient weight-scaling form of §3.2, Eq. 7-8; the layer-normalised
HyperLSTM of Appendix A.2.2, Eq. 10-13). The DIN paper applied it to sentence pairs "as
training four LSTMs at once": here one HyperLSTM (main + hyper LSTM) per sentence, each sentence
the main LSTM's state at its true last word, the pair classified from
``[u; v; |u - v|; u * v]`` by an MLP exactly as the LSTM baseline (row 1). Notation is the
paper's (``x̂_t``, ``ĥ_t``, ``z_h``, ``z_x``, ``z_b``, ``d_h``, ``d_x``, ``W_hz``, ``W_xz``,
``W_bz``, ``b_0``); sizes: N = hidden_size (main), Ñ = hyper_size, N_z = embedding_size.
Choices, knobs, initialisation and the parameter arithmetic (2,969,091 with 300-d word vectors
against the paper's 3.4M): docs/models/hyperlstm.md.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from entailment_lab.errors import ConfigError
from entailment_lab.models.base import Network
from entailment_lab.models.common import (
    PairFeatureClassifier,
    check_choice,
    check_flags,
    check_nonnegative_int,
    check_positive_int,
    check_probability,
    longest_first,
)

Z_SOURCES = ("current", "previous")  # which hyper output generates z at step t: ĥ_t or ĥ_{t-1}
LN_EPS = 1e-3  # layer-norm epsilon of the authors' TensorFlow cell (hardmaru/supercell)


def _orthogonal_gate_blocks_(weight: torch.Tensor, gates: int = 4) -> None:
    """Orthogonal init of each gate's block of a (in, gates·out) recurrent matrix (supercell's
    ``lstm_ortho_initializer``)."""
    with torch.no_grad():
        for block in weight.chunk(gates, dim=1):
            nn.init.orthogonal_(block)


class GateLayerNorm(nn.Module):
    """Layer norm of each gate's pre-activation separately, with its own gain and bias:
    (..., 4, size) -> (..., 4, size) (``LN`` of Eq. 10 and 12 applied to i, g, f, o)."""

    def __init__(self, size: int, gates: int = 4) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(gates, size))
        self.bias = nn.Parameter(torch.zeros(gates, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], eps=LN_EPS) * self.gain + self.bias


class HyperLSTM(nn.Module):
    """One HyperLSTM over a batch of sentences: (batch, len, D) vectors -> (batch, N) final h.

    Gates are ordered i, g, f, o everywhere (dim "4" of the shapes below).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        hyper_size: int,
        embedding_size: int,
        layer_norm: bool = True,
        z_from: str = "current",
        scale_init: float = 0.1,
        forget_bias: float = 1.0,
        recurrent_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        D, N, Nh, Nz = input_size, hidden_size, hyper_size, embedding_size
        self.N, self.Nh, self.Nz = N, Nh, Nz
        self.z_from = z_from
        self.forget_bias = forget_bias
        self.recurrent_dropout = nn.Dropout(recurrent_dropout)

        # Hyper LSTM (Eq. 10): input x̂_t = [h_{t-1}; x_t], state (ĥ, ĉ) of size Ñ; the bias b̂
        # sits inside the gates' LN there, as in the authors' cell (its hyper LSTMCell's bias).
        self.hyper_W_x = nn.Parameter(torch.empty(D, 4 * Nh))  # the x_t columns of W_x̂
        self.hyper_W_hx = nn.Parameter(torch.empty(N, 4 * Nh))  # the h_{t-1} columns of W_x̂
        self.hyper_W_h = nn.Parameter(torch.empty(Nh, 4 * Nh))  # W_ĥ
        self.hyper_b = nn.Parameter(torch.zeros(4 * Nh))  # b̂
        self.hyper_ln = GateLayerNorm(Nh) if layer_norm else None
        self.hyper_ln_c = nn.LayerNorm(Nh, eps=LN_EPS) if layer_norm else None

        # Embeddings (Eq. 11): z_h = W_ĥh ĥ + b_ĥh, z_x = W_ĥx ĥ + b_ĥx, z_b = W_ĥb ĥ, each N_z,
        # one z_h, z_x, z_b for each of the gates i, g, f, o.
        self.z_hx = nn.Linear(Nh, 2 * 4 * Nz)  # [z_h; z_x] for the four gates
        self.z_b = nn.Linear(Nh, 4 * Nz, bias=False)
        # Weight scaling (Eq. 12, the memory-efficient form of Eq. 8): d_h(z_h) = W_hz z_h,
        # d_x(z_x) = W_xz z_x, b(z_b) = W_bz z_b + b_0, one (N_z -> N) map per gate.
        self.W_hz = nn.Parameter(torch.empty(4, Nz, N))
        self.W_xz = nn.Parameter(torch.empty(4, Nz, N))
        self.W_bz = nn.Parameter(torch.zeros(4, Nz, N))
        self.b_0 = nn.Parameter(torch.zeros(4, N))

        # Main LSTM weights, whose rows d(z) scales at every step.
        self.W_x = nn.Parameter(torch.empty(D, 4 * N))
        self.W_h = nn.Parameter(torch.empty(N, 4 * N))
        self.ln = GateLayerNorm(N) if layer_norm else None
        self.ln_c = nn.LayerNorm(N, eps=LN_EPS) if layer_norm else None

        # Initialisation of the authors' cell (hardmaru/supercell): input matrices Glorot
        # uniform (A.2.3 says orthogonal for these too), recurrent matrices orthogonal per gate;
        # z_h, z_x start at exactly 1 (weights 0, biases 1) and every d at scale_init (the
        # recurrent-batch-norm gain 0.1 of Cooijmans et al.); z_b ~ N(0, 0.01²) and W_bz = 0, so
        # b(z_b) starts at b_0 = 0 (A.2.3). W_x̂ is one (D + N, 4Ñ) matrix in the authors' cell,
        # so its Glorot bound counts both input parts.
        with torch.no_grad():
            hyper_bound = math.sqrt(6.0 / (D + N + 4 * Nh))
            nn.init.uniform_(self.hyper_W_x, -hyper_bound, hyper_bound)
            nn.init.uniform_(self.hyper_W_hx, -hyper_bound, hyper_bound)
            nn.init.xavier_uniform_(self.W_x)
            _orthogonal_gate_blocks_(self.hyper_W_h)
            _orthogonal_gate_blocks_(self.W_h)
            nn.init.zeros_(self.z_hx.weight)
            nn.init.ones_(self.z_hx.bias)
            nn.init.normal_(self.z_b.weight, 0.0, 0.01)
            self.W_hz.fill_(scale_init / Nz)
            self.W_xz.fill_(scale_init / Nz)

    def _lstm_update(self, pre: torch.Tensor, c: torch.Tensor, ln: GateLayerNorm | None,
                     ln_c: nn.LayerNorm | None, dropout: nn.Module | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gates (n, 4, size) -> new (h, c) (n, size): Eq. 10 / 13, ``c_t = σ(f)⊙c_{t-1} +
        σ(i)⊙φ(g)``, ``h_t = σ(o)⊙φ(LN(c_t))``, with the forget bias (the authors' cell; not in
        the paper's equations) added to f."""
        if ln is not None:
            pre = ln(pre)  # i, g, f, o = LN(...)
        i, g, f, o = pre.unbind(1)
        g = torch.tanh(g)
        if dropout is not None:
            g = dropout(g)  # Eq. 13: recurrent dropout without memory loss (on φ(g) only)
        c = torch.sigmoid(f + self.forget_bias) * c + torch.sigmoid(i) * g
        h = torch.sigmoid(o) * torch.tanh(ln_c(c) if ln_c is not None else c)
        return h, c

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (batch, len, D), mask (batch, len) -> h at each sentence's last real word (batch, N).

        Rows are sorted longest first so that the rows still inside their sentence at step t are
        a prefix (``longest_first``): a row leaves the loop after its last real word, so padding
        is never read and its final state does not depend on the batch.
        """
        batch, length, _ = x.shape
        N, Nh, Nz = self.N, self.Nh, self.Nz
        order, running = longest_first(mask.sum(dim=1), length)
        x = x[order]
        # The x_t parts of the main and hyper pre-activations, for every step at once.
        main_x = (x @ self.W_x).view(batch, length, 4, N)  # W_x x_t: (batch, len, 4, N)
        hyper_x = (x @ self.hyper_W_x + self.hyper_b).view(batch, length, 4, Nh)

        h, c = x.new_zeros(batch, N), x.new_zeros(batch, N)  # main state
        h_hat, c_hat = x.new_zeros(batch, Nh), x.new_zeros(batch, Nh)  # hyper state
        finished = []  # final h of the rows whose sentence has ended, shortest last
        for main_x_t, hyper_x_t, n in zip(main_x.unbind(1), hyper_x.unbind(1), running,
                                          strict=True):
            if n < len(h):  # rows n.. ended at the previous step: h is their final state
                finished.append(h[n:])
                h, c, h_hat, c_hat = h[:n], c[:n], h_hat[:n], c_hat[:n]
            # Hyper LSTM (Eq. 10) on x̂_t = [h_{t-1}; x_t]: (n, 4, Ñ) gates.
            hyper_pre = (hyper_x_t[:n] + (h @ self.hyper_W_hx + h_hat @ self.hyper_W_h)
                         .view(n, 4, Nh))
            h_hat_prev = h_hat
            h_hat, c_hat = self._lstm_update(hyper_pre, c_hat, self.hyper_ln, self.hyper_ln_c)
            # ĥ_t (§3.2's text, the authors' cell) or ĥ_{t-1} (as Eq. 6 and 11 print it).
            source = h_hat if self.z_from == "current" else h_hat_prev
            # Embeddings (Eq. 11): z_h, z_x (n, 4, N_z) each; z_b (n, 4, N_z).
            z_h, z_x = self.z_hx(source).view(n, 2, 4, Nz).unbind(1)
            z_b = self.z_b(source).view(n, 4, Nz)
            # Scaling vectors and bias (Eq. 12): d_h = W_hz z_h, d_x = W_xz z_x, b = W_bz z_b + b_0.
            d_h = torch.einsum("ngz,gzk->ngk", z_h, self.W_hz)  # (n, 4, N)
            d_x = torch.einsum("ngz,gzk->ngk", z_x, self.W_xz)  # (n, 4, N)
            b = torch.einsum("ngz,gzk->ngk", z_b, self.W_bz) + self.b_0  # (n, 4, N)
            # Gates (Eq. 12): d_h ⊙ W_h h_{t-1} + d_x ⊙ W_x x_t + b(z_b), each (n, 4, N).
            pre = d_h * (h @ self.W_h).view(n, 4, N) + d_x * main_x_t[:n] + b
            h, c = self._lstm_update(pre, c, self.ln, self.ln_c, self.recurrent_dropout)
        final = torch.cat([h, *reversed(finished)])  # (batch, N), in sorted order
        return final[torch.argsort(order)]  # back to batch order


class HyperLSTMEncoderClassifier(Network):
    """Table 2 row 11: a HyperLSTM per sentence (or one shared) + matching features + MLP."""

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        hidden_size: int,
        hyper_size: int = 256,
        embedding_size: int = 64,
        layer_norm: bool = True,
        share_encoder: bool = False,
        z_from: str = "current",
        scale_init: float = 0.1,
        forget_bias: float = 1.0,
        recurrent_dropout: float = 0.0,
        mlp_size: int = 1024,
        mlp_layers: int = 1,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.validate_config(hidden_size=hidden_size, hyper_size=hyper_size,
                             embedding_size=embedding_size, layer_norm=layer_norm,
                             share_encoder=share_encoder, z_from=z_from, scale_init=scale_init,
                             forget_bias=forget_bias, recurrent_dropout=recurrent_dropout,
                             mlp_size=mlp_size, mlp_layers=mlp_layers, dropout=dropout)
        self.embedding = embedding
        self.dropout = nn.Dropout(dropout)

        def encoder() -> HyperLSTM:
            return HyperLSTM(embedding.embedding_dim, hidden_size, hyper_size, embedding_size,
                             layer_norm=layer_norm, z_from=z_from, scale_init=scale_init,
                             forget_bias=forget_bias, recurrent_dropout=recurrent_dropout)

        self.premise_encoder = encoder()
        self.hypothesis_encoder = self.premise_encoder if share_encoder else encoder()
        self.classifier = PairFeatureClassifier(hidden_size, mlp_size, num_classes,
                                                num_layers=mlp_layers, dropout=dropout)

    @classmethod
    def validate_config(cls, *, hidden_size: int, hyper_size: int, embedding_size: int,
                        layer_norm: bool, share_encoder: bool, z_from: str, scale_init: float,
                        forget_bias: float, recurrent_dropout: float, mlp_size: int,
                        mlp_layers: int, dropout: float, **_: Any) -> None:
        check_positive_int("hidden_size (dim, the main LSTM's size)", hidden_size,
                           "e.g. dim=128")
        for name, value in (("hyper_size", hyper_size), ("embedding_size", embedding_size),
                            ("mlp_size", mlp_size)):
            check_positive_int(name, value)
        check_nonnegative_int("mlp_layers", mlp_layers)
        check_flags(layer_norm=layer_norm, share_encoder=share_encoder)
        check_choice("z_from", z_from, Z_SOURCES)
        if not (isinstance(scale_init, int | float) and math.isfinite(scale_init)
                and scale_init > 0):
            raise ConfigError(f"model.net.scale_init must be a finite number > 0, got "
                              f"{scale_init!r}")
        if not (isinstance(forget_bias, int | float) and math.isfinite(forget_bias)):
            raise ConfigError(f"model.net.forget_bias must be a finite number, got "
                              f"{forget_bias!r}")
        check_probability("dropout", dropout)
        check_probability("recurrent_dropout", recurrent_dropout)

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        # Word vectors with dropout on the encoders' input: (batch, len, D).
        x_p = self.dropout(self.embedding(premise))
        x_h = self.dropout(self.embedding(hypothesis))
        u = self.premise_encoder(x_p, premise_mask)  # (batch, N)
        v = self.hypothesis_encoder(x_h, hypothesis_mask)  # (batch, N)
        out = {"logits": self.classifier(u, v)}  # dropout on the MLP inputs: (batch, classes)
        if return_details:
            out.update(premise_vector=u, hypothesis_vector=v)
        return out
