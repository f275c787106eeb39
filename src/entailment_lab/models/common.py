"""Building blocks shared by the model files: config checks, masked reductions, packing and
scattering of the real positions, a faster CPU dropout, parameter counts and the pair-feature
classifier. (The fast paths of DIN's training live in ``models/kernels/``.)

Conventions used by every model in this package (the contract: ``models/base.py``):
masks are ``torch.bool`` with ``True`` on real tokens, padding id is 0, and every sentence in a
batch has at least one real token (the DataModule guarantees it).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NoReturn

import torch
from torch import nn

from entailment_lab.errors import ConfigError

# --- Config checks for ``validate_config`` -------------------------------------------------------
# Each raises ``ConfigError("model.net.KNOB must be ..., got VALUE[; HINT]")``. ``knob`` is the
# name under ``model.net`` and may carry a gloss, e.g. ``"hidden_size (dim, the LSTM size)"``;
# ``hint`` is a fix to suggest, e.g. ``"e.g. dim=300"``.


def _reject(knob: str, requirement: str, value: object, hint: str = "") -> NoReturn:
    raise ConfigError(f"model.net.{knob} must be {requirement}, got {value!r}"
                      + (f"; {hint}" if hint else ""))


def check_positive_int(knob: str, value: object, hint: str = "") -> None:
    """``value`` is an ``int`` >= 1 (a size, a count of layers); ``True`` is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _reject(knob, "a positive integer", value, hint)


def check_nonnegative_int(knob: str, value: object, hint: str = "") -> None:
    """``value`` is an ``int`` >= 0 (a count that may be zero); ``False`` is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _reject(knob, "an integer >= 0", value, hint)


def check_probability(knob: str, value: object) -> None:
    """``value`` is a number in [0, 1): a dropout rate."""
    if not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        _reject(knob, "in [0, 1)", value)


def check_flags(**knobs: object) -> None:
    """Every value is a ``bool`` (a YAML true / false), checked in the order given."""
    for knob, value in knobs.items():
        if not isinstance(value, bool):
            _reject(knob, "true or false", value)


def check_choice(knob: str, value: object, choices: Collection[object]) -> None:
    """``value`` is one of ``choices``."""
    if value not in choices:
        _reject(knob, f"one of {tuple(choices)}", value)


def check_num_classes(num_classes: int) -> None:
    """A classifier needs two classes at least (``num_classes`` comes from the data)."""
    if num_classes < 2:
        raise ConfigError(f"num_classes must be >= 2, got {num_classes}.")


def masked_fill_value(dtype: torch.dtype) -> float:
    """The most negative finite value of ``dtype`` (safer than -inf: no NaN on all-masked rows)."""
    return torch.finfo(dtype).min


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 if it is float16 or bfloat16 (autocast's matmul outputs); float32 and
    float64 tensors are returned as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` that gives exactly zero weight where ``mask`` is False.

    ``mask`` must broadcast to ``scores``. Computed in float32 at least: under mixed precision
    the scores come from matmuls in bfloat16 / float16, too coarse for exponentials and their
    sum. The weights stay float32, as CUDA autocast's own softmax returns them.
    """
    scores = _at_least_float32(scores)
    scores = scores.masked_fill(~mask, masked_fill_value(scores.dtype))
    return torch.softmax(scores, dim=dim) * mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` (batch, length, features) over real positions of ``mask`` (batch, length).

    Summed in float32 at least (a float32 result for bfloat16 / float16 ``x``), as CUDA
    autocast runs every ``sum``: a half-precision total over a long sentence loses digits.
    """
    x = _at_least_float32(x)
    weights = mask.unsqueeze(-1).to(x.dtype)  # (batch, length, 1)
    return (x * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)


def last_true_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last real position: (batch,) for a (batch, length) mask."""
    return mask.long().sum(dim=1).clamp_min(1) - 1


def scatter_rows(
    rows: torch.Tensor, mask: torch.Tensor, index: tuple[torch.Tensor, ...] | None = None
) -> torch.Tensor:
    """The inverse of ``x[mask]``: rows (N, ...) -> (*mask.shape, ...), zeros where mask is False.

    Position-wise layers run on the N real positions only (``x[mask]``) and scatter back, so
    padding costs no compute. ``index`` (e.g. ``mask.nonzero(as_tuple=True)``, reordered) gives
    the rows' positions when they are not in the order of ``x[mask]``.
    """
    return rows.new_zeros(*mask.shape, *rows.shape[1:]).index_put(index or (mask,), rows)


def longest_first(lengths: torch.Tensor, steps: int) -> tuple[torch.Tensor, list[int]]:
    """Order of rows by ``lengths``, longest first, and how many rows still run at each step.

    With the rows in this order, those still inside their sequence at step s are the first
    ``running[s]`` (the idea of ``pack_padded_sequence``): a recurrence updates only that
    prefix, so padding is never computed.
    """
    order = torch.argsort(lengths, descending=True, stable=True)
    steps_range = torch.arange(steps, device=lengths.device)
    running = (lengths[None, :] > steps_range[:, None]).sum(dim=1)  # (steps,), non-increasing
    return order, running.tolist()


def pack(x: torch.Tensor, mask: torch.Tensor) -> nn.utils.rnn.PackedSequence:
    """Right-padded ``x`` (batch, len, features) as a packed sequence of its real positions."""
    return nn.utils.rnn.pack_padded_sequence(
        x, mask.sum(dim=1).cpu(), batch_first=True, enforce_sorted=False
    )


def run_rnn(
    rnn: nn.RNNBase,
    packed: nn.utils.rnn.PackedSequence,
    hx: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
) -> tuple[nn.utils.rnn.PackedSequence, torch.Tensor | tuple[torch.Tensor, ...]]:
    """``rnn(packed, hx)``, in float32 when CPU autocast is on (``trainer.precision=bf16-mixed``).

    CPU autocast casts ``nn.LSTM``'s inputs to bfloat16 and, when every row of a batch has the
    same length (the packed batch is then a plain one), hands them to oneDNN, whose bfloat16 LSTM
    needs a CPU with AVX512-BF16: on others (AVX2-only machines) torch 2.13 raises "could not
    create a primitive descriptor for the LSTM forward propagation primitive". Running the CPU
    recurrence in float32 works on every CPU and gives the same numbers on all of them; on a GPU,
    autocast keeps cuDNN's half-precision recurrences.
    """
    if packed.data.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return rnn(packed, hx)
    packed = packed._replace(data=_at_least_float32(packed.data))  # PackedSequence: a namedtuple
    if isinstance(hx, tuple):
        hx = tuple(_at_least_float32(h) for h in hx)
    elif hx is not None:
        hx = _at_least_float32(hx)
    with torch.autocast("cpu", enabled=False):
        return rnn(packed, hx)


def run_packed(rnn: nn.RNNBase, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Run a batch-first ``rnn`` over right-padded ``x`` (batch, len, in) as a packed sequence.

    Padded steps are skipped (outputs 0 there); real steps are as in the unpacked run.
    """
    out, _ = nn.utils.rnn.pad_packed_sequence(
        run_rnn(rnn, pack(x, mask))[0], batch_first=True, total_length=x.shape[1]
    )
    return out


class Dropout(nn.Dropout):
    """``nn.Dropout`` with a faster CPU path: the same distribution, another random stream.

    On CPU, PyTorch draws dropout's mask with ``bernoulli_``, about 3× slower than drawing
    uniforms (measured: 16 ms vs 5 ms for 1.2M elements, one thread; DIN drops three such
    tensors a step). Here the kept entries are those whose uniform draw is >= p, scaled by
    1/(1 - p), as ``nn.Dropout``. Other devices use ``nn.Dropout`` itself.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu":
            return super().forward(x)
        keep = (torch.empty_like(x).uniform_() >= self.p).to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x * keep


def count_trainable_parameters(module: nn.Module, exclude: nn.Module | None = None) -> int:
    """Trainable parameters of ``module`` except those of ``exclude`` (the word embeddings).

    This is the "Para" column of the papers' tables: word vectors are never counted, whether
    frozen or fine-tuned.
    """
    skip = {id(p) for p in exclude.parameters()} if exclude is not None else set()
    return sum(p.numel() for p in module.parameters() if p.requires_grad and id(p) not in skip)


class PairFeatureClassifier(nn.Module):
    """Classify a pair from two sentence vectors with ``[u; v; |u - v|; u * v]`` and an MLP.

    The matching heuristic of Mou et al. (2016) / Conneau et al. (2017), used by the sentence-
    encoder baselines (LSTM, DCNN on pairs).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_classes: int,
        num_layers: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = 4 * input_size
        for _ in range(num_layers):
            layers += [nn.Dropout(dropout), nn.Linear(size, hidden_size), nn.Tanh()]
            size = hidden_size
        layers += [nn.Dropout(dropout), nn.Linear(size, num_classes)]
        self.mlp = nn.Sequential(*layers)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # u, v: (batch, input_size) -> logits (batch, num_classes)
        return self.mlp(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))
