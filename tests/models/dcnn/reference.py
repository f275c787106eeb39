"""DCNN's first formulation (grouped ``conv1d`` per row, folding after the convolution, the
wide-convolution mask by convolving the input mask, k-max pooling by ``topk``), kept as the
reference the fast layer of ``models/dcnn.py`` must reproduce (tests/models/dcnn/test_model.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as Fn

from entailment_lab.models.common import masked_fill_value
from entailment_lab.models.dcnn import DCNNLayer


def fold(x: torch.Tensor) -> torch.Tensor:
    """Folding (Sec. 3.6): sum every two adjacent rows; ``(..., rows, T) -> (..., rows/2, T)``."""
    rows = x.size(-2)
    if rows % 2:
        raise ValueError(f"folding needs an even number of rows, got {rows}")
    return x.unflatten(-2, (rows // 2, 2)).sum(dim=-2)


def reference_wide_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    """Output j is real when the width-m window ending at j touches a real input."""
    ones = mask.new_ones(1, 1, width, dtype=torch.float32)
    touched = Fn.conv1d(mask.float().unsqueeze(1), ones, padding=width - 1)  # (batch, 1, T')
    return touched.squeeze(1) > 0


def reference_k_max_pooling(
    x: torch.Tensor, k: int | torch.Tensor, mask: torch.Tensor | None = None,
    output_length: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``k_max_pooling`` as first written: ``topk`` of every row, positions sorted."""
    batch, length = x.size(0), x.size(-1)
    if mask is None:
        mask = torch.ones(batch, length, dtype=torch.bool, device=x.device)
    k = torch.minimum(torch.as_tensor(k, device=x.device).expand(batch), mask.sum(dim=1))
    K = int(output_length if output_length is not None else k.max())
    view = (batch,) + (1,) * (x.dim() - 2)
    if length < K:
        x = Fn.pad(x, (0, K - length))
        mask = Fn.pad(mask, (0, K - length), value=False)
        length = K
    scores = x.masked_fill(~mask.view(*view, length), masked_fill_value(x.dtype))
    top = scores.topk(K, dim=-1).indices
    slot = torch.arange(K, device=x.device)
    out_mask = slot < k[:, None]
    top = torch.where(out_mask.view(*view, K), top, length + slot)
    order = top.sort(dim=-1).values.clamp_max(length - 1)
    return x.gather(-1, order) * out_mask.view(*view, K).to(x.dtype), out_mask


def reference_layer(layer: DCNNLayer, x: torch.Tensor, mask: torch.Tensor, k: torch.Tensor,
                    output_length: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``DCNNLayer.forward`` as first written: one grouped conv1d (a group per row), fold."""
    batch, _, rows, length = x.shape
    x = x * mask[:, None, None, :].to(x.dtype)
    grouped = x.permute(0, 2, 1, 3).reshape(batch, rows * layer.maps_in, length)
    weight = layer.weight.permute(2, 1, 0, 3).reshape(rows * layer.maps_out, layer.maps_in, -1)
    c = Fn.conv1d(grouped, weight, padding=layer.width - 1, groups=rows)  # Eq. 1, wide
    c = c.reshape(batch, rows, layer.maps_out, -1).permute(0, 2, 1, 3)  # (b, maps, rows, T')
    if layer.folding:
        c = fold(c)
    pooled, pooled_mask = reference_k_max_pooling(c, k, reference_wide_mask(mask, layer.width),
                                                  output_length)
    out = torch.tanh(pooled + layer.bias[None, :, :, None])
    return out * pooled_mask[:, None, None, :].to(out.dtype), pooled_mask
