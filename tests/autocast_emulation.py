"""CUDA autocast's cast policy on CPU tensors, for the mixed-precision tests (no GPU in CI).

``torch.autocast("cpu")`` casts other ops than ``torch.autocast("cuda")``: on CPU, softmax, sum,
exp, layer norm and the LSTM (packed) keep the input's dtype, while on CUDA they run in float32,
or in float16 / bfloat16 for cuDNN's LSTM and GRU. A model that works under one may hit a dtype
mismatch under the other. ``CudaAutocast`` casts the inputs of the ops that CUDA autocast's
lists name (``aten/src/ATen/autocast_mode.cpp``: lower precision, fp32, fp32 output, promote),
leaves every other op as it is and turns CUDA's autocast flag on, so a forward + backward on CPU
meets the dtypes that ``trainer=gpu trainer.precision=bf16-mixed`` (or ``16-mixed``) would. Ops
are matched by the name of the torch function called (``linear``, ``softmax``, ...); in-place
ops are not cast, as autocast does not cast them. It emulates the dtypes only, not the kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map

#: Run in the autocast dtype (matmuls, convolutions, recurrent cells; cuDNN RNNs).
LOWER_PRECISION = frozenset({
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "prelu", "addmm", "addmv", "addr", "matmul", "__matmul__",
    "__rmatmul__", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm",
    "chain_matmul", "multi_dot", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "scaled_dot_product_attention", "lstm", "gru", "rnn_tanh", "rnn_relu",
})
#: Run in float32.
FLOAT32 = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus",
    "layer_norm", "group_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
    "nll_loss", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
    "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
    "pdist", "cdist", "renorm", "logsumexp", "cross_entropy",
})
#: Output in float32 (``dtype=torch.float32``) unless the call sets a dtype.
FLOAT32_OUTPUT = frozenset({
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "vector_norm", "linalg_vector_norm",
    "matrix_norm", "linalg_matrix_norm", "sum", "norm",
})
#: Run in the widest floating dtype among the inputs.
PROMOTE = frozenset({
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put",
    "tensordot", "scatter_add",
})


def _castable(x: object) -> bool:
    # autocast's "eligible" tensors: floating point, not float64
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64


def _cast_to(dtype: torch.dtype) -> Callable[[object], object]:
    return lambda x: x.to(dtype) if _castable(x) else x  # type: ignore[union-attr]


class CudaAutocast(TorchFunctionMode):
    """``with CudaAutocast(torch.bfloat16):`` casts as ``torch.autocast("cuda", torch.bfloat16)``
    would (see the module docstring); ``counts`` says how many calls were cast per policy."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.counts = {"lower": 0, "float32": 0, "float32_output": 0, "promote": 0}

    def __enter__(self) -> CudaAutocast:
        # Autocast on for CUDA, as torch.autocast("cuda") sets it: code that asks whether
        # autocast is on (nn.LSTM / nn.GRU then accept an input dtype other than their weights')
        # sees a GPU run's answer. It casts nothing here: no tensor is on a CUDA device.
        self._saved = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", self.dtype)
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        torch.set_autocast_enabled("cuda", self._saved[0])
        torch.set_autocast_dtype("cuda", self._saved[1])

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__"):  # in-place: never cast
            return func(*args, **kwargs)
        if name in LOWER_PRECISION:
            self.counts["lower"] += 1
            args, kwargs = tree_map(_cast_to(self.dtype), (args, kwargs))
        elif name in FLOAT32:
            self.counts["float32"] += 1
            args, kwargs = tree_map(_cast_to(torch.float32), (args, kwargs))
        elif name in FLOAT32_OUTPUT:
            if args and _castable(args[0]) and kwargs.get("dtype") is None:
                self.counts["float32_output"] += 1
                kwargs["dtype"] = torch.float32
        elif name in PROMOTE:
            floats = [x for x in tree_leaves((args, kwargs)) if _castable(x)]
            if floats:
                self.counts["promote"] += 1
                widest = (torch.float32 if any(x.dtype == torch.float32 for x in floats)
                          else self.dtype)
                args, kwargs = tree_map(_cast_to(widest), (args, kwargs))
        return func(*args, **kwargs)
