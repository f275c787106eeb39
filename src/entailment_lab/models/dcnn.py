"""Dynamic Convolutional Neural Network (Kalchbrenner, Grefenstette & Blunsom, ACL 2014).

A sentence is a d x s matrix (one column per word). Each layer: a wide 1-D convolution of every
row with its own filters (Eq. 1, 5, 7), folding (Sec. 3.6), dynamic k-max pooling (Sec. 3.2-3.3,
Eq. 4), a bias per row and tanh (Sec. 3.4). ``DCNNClassifier`` classifies a sentence (SST, TREC);
``DCNNPairClassifier`` encodes P and H with one DCNN and matches ``[u; v; |u - v|; u * v]`` (the
SNLI baseline). Hyper-parameters (the authors' Matlab release), folding placement, masks in
padded batches, the per-layer L2 and the parameter counts: ``docs/models/dcnn.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as Fn
from torch import nn

from entailment_lab.errors import ConfigError
from entailment_lab.models.base import Network
from entailment_lab.models.common import (
    PairFeatureClassifier,
    check_num_classes,
    check_probability,
    masked_fill_value,
)

# Matlab-release L2 coefficients: (embedding, conv layer 1, ..., conv layer L, output layer).
MATLAB_L2 = (1e-4, 3e-5, 3e-6, 1e-4)


def dynamic_k(
    layer: int, num_layers: int, sentence_length: int | torch.Tensor, k_top: int
) -> int | torch.Tensor:
    """Eq. 4: ``k_l = max(k_top, ceil((L - l) / L * s))`` for layer ``l`` of ``L`` (1-based).

    Integer arithmetic (no float rounding). ``sentence_length`` may be an int or a tensor of
    per-sentence lengths. Example from the paper: L=3, s=18, k_top=3 -> k_1=12, k_2=6, k_3=3.
    """
    numerator = (num_layers - layer) * sentence_length
    if isinstance(numerator, torch.Tensor):
        return torch.div(numerator + num_layers - 1, num_layers, rounding_mode="floor").clamp_min(
            k_top
        )
    return max(k_top, -(-numerator // num_layers))


def wide_convolution_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    """Real output positions of a wide convolution of width ``width``: ``(batch, T + width - 1)``.

    Output j is real when its window s_{j-m+1:j} touches a real input, i.e. the s + m - 1
    positions of Sec. 2.2 for a sentence of s real tokens. Counted with a running sum (real
    inputs up to j minus those up to j - m), so any mask works, not only right padding.
    """
    upto = Fn.pad(mask.to(torch.int32).cumsum(dim=1), (0, width - 1), mode="replicate")
    before = Fn.pad(upto, (width, 0))[:, : upto.size(1)]  # real inputs up to j - m
    return upto > before  # (batch, T + m - 1)


SORT_BELOW = 20  # k_max_pooling: rows up to this long are sorted whole instead of topk


def k_max_pooling(
    x: torch.Tensor,
    k: int | torch.Tensor,
    mask: torch.Tensor | None = None,
    output_length: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """k-max pooling (Sec. 3.2): the k largest values along the last axis, in original order.

    x: ``(batch, ..., T)``; k: an int or per-sample ``(batch,)`` long tensor; mask:
    ``(batch, T)`` bool, True on real positions (padding never wins; k is clipped to the number
    of real positions). Returns ``(values, out_mask)``: values ``(batch, ..., K)`` with
    ``K = output_length or max(k)``, slots past a sample's k are zero, and out_mask
    ``(batch, K)`` marks the real slots.
    """
    batch, length = x.size(0), x.size(-1)
    if mask is None:
        mask = torch.ones(batch, length, dtype=torch.bool, device=x.device)
    k = torch.as_tensor(k, device=x.device).expand(batch)
    k = torch.minimum(k, mask.sum(dim=1))  # (batch,)
    K = int(output_length if output_length is not None else k.max())
    view = (batch,) + (1,) * (x.dim() - 2)  # broadcast (batch, ...) over the middle axes

    if length < K:  # fewer positions than slots: pad with masked positions
        x = Fn.pad(x, (0, K - length))
        mask = Fn.pad(mask, (0, K - length), value=False)
        length = K
    scores = x.masked_fill(~mask.view(*view, length), masked_fill_value(x.dtype))
    # The k largest in any order (their positions are sorted next). On CPU PyTorch selects row
    # by row, and for the short rows of most batches one full sort costs less than topk's
    # partial selection (benchmarks/bench_dcnn.py; the cut-off measured on SST phrases).
    if length <= SORT_BELOW:
        top = scores.sort(dim=-1, descending=True).indices[..., :K]  # (batch, ..., K)
    else:
        top = scores.topk(K, dim=-1).indices  # (batch, ..., K), largest first
    slot = torch.arange(K, device=x.device)
    out_mask = slot < k[:, None]  # (batch, K)
    # Slots past k get indices beyond the sequence, so sorting moves them to the end.
    top = torch.where(out_mask.view(*view, K), top, length + slot)
    order = top.sort(dim=-1).values.clamp_max(length - 1)  # original word order
    values = x.gather(-1, order) * out_mask.view(*view, K).to(x.dtype)
    return values, out_mask


class DCNNLayer(nn.Module):
    """Wide convolution (Eq. 7) -> optional folding -> (dynamic) k-max pooling -> bias, tanh."""

    def __init__(self, maps_in: int, maps_out: int, rows: int, width: int, folding: bool,
                 init: str = "fan_in") -> None:
        super().__init__()
        self.maps_in, self.maps_out, self.rows, self.width = maps_in, maps_out, rows, width
        self.folding = folding
        self.rows_out = rows // 2 if folding else rows
        # m^i_{j,k}: one filter of width m per (input map k, output map j, row) (Eq. 5, 7).
        self.weight = nn.Parameter(torch.empty(maps_in, maps_out, rows, width))
        self.bias = nn.Parameter(torch.zeros(maps_out, self.rows_out))  # one per row (Sec. 3.4)
        if init == "glorot":  # Lasagne's GlorotUniform of the port's (maps_out, maps_in, rows, m)
            bound = math.sqrt(6.0 / ((maps_in + maps_out) * rows * width))
        else:  # "fan_in", PyTorch's conv default: the fan-in of one output value
            bound = 1.0 / math.sqrt(maps_in * width)
        nn.init.uniform_(self.weight, -bound, bound)

    def convolve(self, x: torch.Tensor) -> torch.Tensor:
        """Wide row-wise convolution (Eq. 1, 5, 7), folded (Sec. 3.6) where the layer folds.

        ``(batch, maps_in, rows, T) -> (batch, maps_out, rows_out, T + m - 1)``. One batched
        matmul over rows: each output row r takes the windows s_{j-m+1:j} of every input map on
        its own row (and, when folding, on the row it is summed with: fold(conv) = conv with
        both rows' filters, so the fold costs nothing) times that row's filters.
        """
        batch, maps_in, rows, length = x.shape
        m, group = self.width, 2 if self.folding else 1  # input rows per output row
        out_length = length + m - 1
        x = x.view(batch, maps_in, self.rows_out, group, length)  # rows summed by a fold
        windows = Fn.pad(x, (m - 1, m - 1)).unfold(-1, m, 1)  # (b, maps_in, rows', group, T', m)
        # (rows_out, b * T', maps_in * group * m): one im2col matrix per output row
        columns = windows.permute(2, 0, 4, 1, 3, 5).reshape(self.rows_out, -1, maps_in * group * m)
        filters = self.weight.reshape(maps_in, self.maps_out, self.rows_out, group, m)
        filters = filters.permute(2, 0, 3, 4, 1).reshape(self.rows_out, -1, self.maps_out)
        c = torch.bmm(columns, filters)  # (rows_out, b * T', maps_out)
        return c.view(self.rows_out, batch, out_length, self.maps_out).permute(1, 3, 0, 2)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, k: torch.Tensor, output_length: int | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # x: (batch, maps_in, rows, T); mask: (batch, T); k: (batch,)
        x = x * mask[:, None, None, :].to(x.dtype)  # out-of-sentence values are zero (Sec. 2.2)
        c = self.convolve(x)  # (batch, maps_out, rows_out, T + m - 1)
        c_mask = wide_convolution_mask(mask, self.width)  # (batch, T + m - 1)
        pooled, pooled_mask = k_max_pooling(c, k, c_mask, output_length)  # (b, maps, rows', K)
        out = torch.tanh(pooled + self.bias[None, :, :, None])  # Sec. 3.4, Eq. 6
        return out * pooled_mask[:, None, None, :].to(out.dtype), pooled_mask


class DCNNEncoder(nn.Module):
    """The DCNN stack: word vectors ``(batch, len, d)`` -> sentence vector ``(batch, output_size)``.

    ``output_size = feature_maps[-1] * rows after all folds * k_top``.
    """

    def __init__(
        self,
        input_size: int,
        filter_widths: Sequence[int] = (7, 5),
        feature_maps: Sequence[int] = (6, 14),
        k_top: int = 4,
        folding: Sequence[bool] = (False, True),
        k_length: str = "sentence",
        init: str = "fan_in",
    ) -> None:
        super().__init__()
        widths, maps, folds = tuple(filter_widths), tuple(feature_maps), tuple(folding)
        divisor = 2 ** sum(bool(f) for f in folds)
        if input_size % divisor:
            raise ConfigError(
                f"word-vector size {input_size} must be divisible by {divisor} for folding "
                f"{[bool(f) for f in folds]} (each fold halves the rows): use e.g. 48-d (paper) "
                "or 300-d vectors, or switch folding off in some layers (model.net.folding)."
            )
        self.k_top, self.k_length = k_top, k_length
        self.layers = nn.ModuleList()
        maps_in, rows = 1, input_size
        for width, maps_out, folding_here in zip(widths, maps, folds, strict=True):
            layer = DCNNLayer(maps_in, maps_out, rows, width, bool(folding_here), init)
            self.layers.append(layer)
            maps_in, rows = maps_out, layer.rows_out
        self.output_size = maps_in * rows * k_top

    def forward(
        self, vectors: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Sentence vectors and, for analysis, each layer's per-sample k ``(batch, L)``."""
        # vectors: (batch, len, d) -> sentence matrix s = [w_1 ... w_s] (Eq. 2), one input map
        mask = mask.bool()
        x = vectors.transpose(1, 2).unsqueeze(1)  # (batch, 1, d, len)
        s = mask.sum(dim=1)  # true sentence lengths (batch,)
        num_layers = len(self.layers)
        ks = []
        for l, layer in enumerate(self.layers, start=1):
            top = l == num_layers
            # Eq. 4's s: the sentence's length, or (the port) this layer's convolution output's
            length = s if self.k_length == "sentence" else mask.sum(dim=1) + layer.width - 1
            k = dynamic_k(l, num_layers, length, self.k_top)  # Eq. 4, per sentence
            x, mask = layer(x, mask, k, self.k_top if top else None)  # (b, maps, rows, k_max)
            ks.append(mask.sum(dim=1))
        features = x.flatten(start_dim=1)  # (batch, maps * rows * k_top)
        return features, {"k": torch.stack(ks, dim=1)}


K_LENGTHS = ("sentence", "convolution")  # what Eq. 4's s counts (docs/models/dcnn.md)
INITS = ("fan_in", "glorot")  # conv / output weight initialisation (docs/models/dcnn.md)


def validate_dcnn_config(filter_widths: Sequence[int], feature_maps: Sequence[int], k_top: int,
                         folding: Sequence[bool], dropout: float, l2: Sequence[float],
                         k_length: str = "sentence", init: str = "fan_in") -> None:
    """The knobs both DCNN networks share: one width, map count and fold flag per layer, one
    L2 coefficient per layer group (embedding, each conv layer, output), and the two choices
    the paper leaves open (``k_length``, ``init``)."""
    for name, value, allowed in (("k_length", k_length, K_LENGTHS), ("init", init, INITS)):
        if value not in allowed:
            raise ConfigError(f"model.net.{name}={value!r}: choose one of {list(allowed)}.")
    widths, maps, folds, l2 = tuple(filter_widths), tuple(feature_maps), tuple(folding), tuple(l2)
    if not widths or not len(widths) == len(maps) == len(folds):
        raise ConfigError(
            "model.net.filter_widths, feature_maps and folding need one entry per layer, "
            f"got {list(widths)}, {list(maps)}, {list(folds)}."
        )
    if min(widths) < 1 or min(maps) < 1:
        raise ConfigError(
            f"filter widths and feature maps must be >= 1, got {list(widths)}, {list(maps)}."
        )
    if k_top < 1:
        raise ConfigError(f"model.net.k_top must be >= 1, got {k_top}.")
    check_probability("dropout", dropout)
    if len(l2) != len(widths) + 2 or min(l2) < 0:
        raise ConfigError(
            f"model.net.l2 needs {len(widths) + 2} non-negative coefficients (embedding, "
            f"{len(widths)} conv layers, output), got {list(l2)}."
        )


def _l2_groups(
    l2: Sequence[float],
    embedding: nn.Embedding,
    encoder: DCNNEncoder,
    output_weights: list[nn.Parameter],
) -> list[tuple[float, list[nn.Parameter]]]:
    """Per-layer L2 of the Matlab release, ``lambda / 2 * ||W||^2`` per group with ``l2`` =
    (embedding, each conv layer, output) coefficients; biases are not penalised."""
    groups = [(l2[0], [embedding.weight])]
    groups += [(c, [layer.weight]) for c, layer in zip(l2[1:-1], encoder.layers, strict=True)]
    groups.append((l2[-1], output_weights))
    return [(c, weights) for c, weights in groups if c > 0]


class DCNNClassifier(Network):
    """DCNN sentence classifier (SST, TREC): encoder -> dropout -> linear (softmax in the loss)."""

    inputs = "sentence"

    @classmethod
    def validate_config(cls, **config: Any) -> None:
        validate_dcnn_config(config["filter_widths"], config["feature_maps"], config["k_top"],
                             config["folding"], config["dropout"], config["l2"],
                             config.get("k_length", "sentence"), config.get("init", "fan_in"))

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        filter_widths: Sequence[int] = (7, 5),
        feature_maps: Sequence[int] = (6, 14),
        k_top: int = 4,
        folding: Sequence[bool] = (False, True),
        dropout: float = 0.5,
        l2: Sequence[float] = MATLAB_L2,
        k_length: str = "sentence",
        init: str = "fan_in",
    ) -> None:
        super().__init__()
        self.validate_config(filter_widths=filter_widths, feature_maps=feature_maps, k_top=k_top,
                             folding=folding, dropout=dropout, l2=l2, k_length=k_length,
                             init=init)
        check_num_classes(num_classes)
        self.embedding = embedding
        self.encoder = DCNNEncoder(
            embedding.embedding_dim, filter_widths, feature_maps, k_top, folding, k_length, init
        )
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(self.encoder.output_size, num_classes)
        if init == "glorot":  # Lasagne's DenseLayer: GlorotUniform weights, zero bias
            nn.init.xavier_uniform_(self.output.weight)
            nn.init.zeros_(self.output.bias)
        self.l2 = tuple(float(c) for c in l2)

    def l2_penalties(self) -> list[tuple[float, list[nn.Parameter]]]:
        """Per-layer L2 of the Matlab release: embedding, each conv layer, output (weights only),
        applied by the optimiser as per-group weight decay (``Network.l2_penalties``)."""
        return _l2_groups(self.l2, self.embedding, self.encoder, [self.output.weight])

    def forward(
        self, sentence: torch.Tensor, sentence_mask: torch.Tensor, return_details: bool = False
    ) -> dict[str, torch.Tensor]:
        # sentence: (batch, len) ids; sentence_mask: (batch, len) bool
        features, details = self.encoder(self.embedding(sentence), sentence_mask)
        logits = self.output(self.dropout(features))  # (batch, num_classes)
        out = {"logits": logits}
        if return_details:
            out["features"] = features  # (batch, output_size)
            out["k"] = details["k"]  # (batch, L) per-layer pooled lengths
        return out


class DCNNPairClassifier(Network):
    """DCNN for pairs: one shared DCNN encodes P and H; ``[u; v; |u-v|; u*v]`` -> MLP."""

    @classmethod
    def validate_config(cls, **config: Any) -> None:
        validate_dcnn_config(config["filter_widths"], config["feature_maps"], config["k_top"],
                             config["folding"], config["dropout"], config["l2"],
                             config.get("k_length", "sentence"), config.get("init", "fan_in"))
        if config["mlp_hidden_size"] < 1 or config["mlp_layers"] < 0:
            raise ConfigError(
                "model.net.mlp_hidden_size must be >= 1 and mlp_layers >= 0, "
                f"got {config['mlp_hidden_size']}, {config['mlp_layers']}."
            )

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        filter_widths: Sequence[int] = (7, 5),
        feature_maps: Sequence[int] = (6, 14),
        k_top: int = 4,
        folding: Sequence[bool] = (False, True),
        dropout: float = 0.5,
        mlp_hidden_size: int = 200,
        mlp_layers: int = 1,
        l2: Sequence[float] = MATLAB_L2,
        k_length: str = "sentence",
        init: str = "fan_in",
    ) -> None:
        super().__init__()
        self.validate_config(filter_widths=filter_widths, feature_maps=feature_maps, k_top=k_top,
                             folding=folding, dropout=dropout, l2=l2, k_length=k_length,
                             init=init, mlp_hidden_size=mlp_hidden_size, mlp_layers=mlp_layers)
        check_num_classes(num_classes)
        self.embedding = embedding
        self.encoder = DCNNEncoder(
            embedding.embedding_dim, filter_widths, feature_maps, k_top, folding, k_length, init
        )
        self.classifier = PairFeatureClassifier(
            self.encoder.output_size, mlp_hidden_size, num_classes, mlp_layers, dropout
        )
        self.l2 = tuple(float(c) for c in l2)

    def l2_penalties(self) -> list[tuple[float, list[nn.Parameter]]]:
        """Per-layer L2: embedding, each conv layer, and every weight matrix of the MLP."""
        mlp = [m.weight for m in self.classifier.modules() if isinstance(m, nn.Linear)]
        return _l2_groups(self.l2, self.embedding, self.encoder, mlp)

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        # premise: (batch, len_p), hypothesis: (batch, len_h)
        u, details_p = self.encoder(self.embedding(premise), premise_mask)  # (batch, size)
        v, details_h = self.encoder(self.embedding(hypothesis), hypothesis_mask)  # (batch, size)
        out = {"logits": self.classifier(u, v)}  # (batch, num_classes)
        if return_details:
            out["premise_features"], out["hypothesis_features"] = u, v
            out["premise_k"], out["hypothesis_k"] = details_p["k"], details_h["k"]
        return out
