"""The training path against an equation reference (the ``tests/test_reference_*.py`` files).

A model's inference (eval mode, no gradients) and its training can run different code: fast
paths with hand-written backwards, kernels that run only with gradients on or off, dropout
placed where inference never looks. ``training_gap`` runs the model's training forward (the
caller builds it with dropout 0) and backward of the cross-entropy, and the reference's
logits with autograd through the reference's own arithmetic, from the same weights; the
gradients of the two share no code but autograd's elementary operations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def training_gap(model: nn.Module, inputs: Mapping[str, Tensor], labels: Tensor,
                 reference: Callable[[dict[str, Tensor]], Tensor],
                 dtype: torch.dtype | None = None) -> tuple[float, float]:
    """(max |Δ logit|, the largest over trainable weights of max |Δ grad| / max |grad|).

    ``model`` (float64) gives the weights; its training forward runs in ``dtype`` (default:
    float64). ``reference(state)`` returns the (batch, classes) logits from ``state``, the
    model's float64 ``state_dict`` whose trainable entries require gradients.
    """
    trainable = [k for k, w in model.named_parameters() if w.requires_grad]
    state = {k: v.detach().clone().requires_grad_(k in trainable)
             for k, v in model.state_dict().items()}
    model = model.to(dtype or torch.float64).train()
    model.zero_grad()
    logits = model(**inputs)["logits"]
    F.cross_entropy(logits, labels).backward()
    expected = reference(state)
    rows = torch.arange(len(labels))
    wanted = torch.autograd.grad(-expected.log_softmax(-1)[rows, labels].mean(),
                                 [state[k] for k in trainable])
    params = dict(model.named_parameters())
    grad = max(float((params[k].grad.double() - w).abs().max() / w.abs().max())
               for k, w in zip(trainable, wanted, strict=True))
    return float((logits.detach().double() - expected.detach()).abs().max()), grad
