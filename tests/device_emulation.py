"""A CUDA device emulated on CPU tensors, for the device tests (no GPU in CI).

Under ``EmulatedCuda`` (a ``TorchFunctionMode``) every tensor that existed before it was
entered (parameters, inputs, gradients the autograd engine makes) and everything computed from
one counts as on ``cuda:0``: ``.device``, ``.is_cuda`` and ``.get_device()`` say so, so every
path that branches on the device (the C kernels, the sigmoid tanh, the CPU dropout, the
hand-written GRU pass) takes the branch a GPU run takes, and ``device=x.device`` names the
emulated GPU. A tensor made on the host inside the block (a factory call without ``device=`` or
with ``device="cpu"``, ``.cpu()``, ``.to("cpu")``, ``torch.from_numpy``) is on the CPU, and so
is whatever is computed from host tensors alone.

Two checks follow CUDA's rules:

- **device mismatch**: an operation that mixes the two where CUDA refuses (an operand on the
  host with at least one dimension; CUDA takes zero-dimensional host tensors as scalars) raises
  ``DeviceMismatchError`` naming the library line that called it. The arguments CUDA takes on
  the host by API are allowed: integer or boolean index tensors, a packed sequence's lengths
  and batch sizes, and ``copy_``'s source.
- **host synchronisations**: each call that makes the host wait for a GPU's queue is counted in
  ``syncs`` by kind: reading a value (``.item()``, ``.tolist()``, ``bool()``, ``int()``,
  ``float()``, ``.numpy()``), a copy to the host (``.cpu()``, ``.to("cpu")``), a comparison
  answered on the host (``torch.equal``, ``allclose``), and the operations whose output size
  depends on the data (``nonzero``, boolean-mask indexing, ``masked_select``, ``unique``,
  ``bincount``, ``repeat_interleave`` without ``output_size``), which CUDA answers by copying a
  count back.

What it does not emulate: kernels, streams, memory, ``torch.cuda.*`` calls, and CUDA's own
dispatch (a CUDA-only operator behaves as on CPU). Operations are seen at the level of torch's
Python API: a Python function that is itself overridable (``F.cross_entropy``) is one call.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

EMULATED = torch.device("cuda", 0)
_HOST = "_emulated_on_host"  # the attribute that marks a host tensor inside the block
_LIBRARY = str(Path(__file__).resolve().parents[1] / "src" / "entailment_lab")

#: Reading a device tensor's value on the host.
VALUE_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__",
                         "__complex__", "numpy", "__array__", "__format__", "__repr__",
                         "equal", "allclose", "is_nonzero"})
#: Output size depends on the data: CUDA copies a count back to the host first.
DATA_DEPENDENT = frozenset({"nonzero", "argwhere", "masked_select", "unique",
                            "unique_consecutive", "bincount", "histc", "nonzero_static"})
#: Indexing: host integer / boolean index tensors are allowed; a device boolean mask syncs.
INDEXING = frozenset({"__getitem__", "__setitem__", "index_put", "index_put_",
                      "_index_put_impl_", "index"})
#: Functions that take integer tensors on the host by API (lengths, batch sizes).
HOST_INTEGERS_BY_API = frozenset({"_pack_padded_sequence", "_pad_packed_sequence", "lstm", "gru",
                                  "rnn_tanh", "rnn_relu"})
#: Functions whose second output lives on the host on CUDA too (lengths, batch sizes).
SECOND_OUTPUT_ON_HOST = frozenset({"_pack_padded_sequence", "_pad_packed_sequence"})


class DeviceMismatchError(RuntimeError):
    """An operation CUDA would refuse: operands on the GPU and on the host."""


def on_host(t: torch.Tensor) -> bool:
    """Whether ``t`` was made on the host inside an ``EmulatedCuda`` block."""
    return bool(getattr(t, _HOST, False))


def _mark(value: Any, host: bool) -> Any:
    for leaf in tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            if host:
                setattr(leaf, _HOST, True)
            elif on_host(leaf):
                delattr(leaf, _HOST)
    return value


def _is_index(t: torch.Tensor) -> bool:
    return t.dtype in (torch.bool, torch.uint8) or not (t.is_floating_point() or t.is_complex())


def _sync_kind(name: str, args: tuple, kwargs: dict) -> str | None:
    """What makes the host wait in a call on the GPU (None: nothing)."""
    if name in VALUE_READS or name in DATA_DEPENDENT:
        return name
    if name == "where" and len(args) + len(kwargs) == 1:  # torch.where(condition): nonzero
        return name
    if (name == "repeat_interleave" and kwargs.get("output_size") is None
            and any(isinstance(a, torch.Tensor) for a in args[1:2])):
        return name  # the output's length is the repeats' sum
    masks = [t for t in tree_leaves(args[1:2]) if isinstance(t, torch.Tensor)
             and t.dtype in (torch.bool, torch.uint8) and not on_host(t)]
    if name in INDEXING and masks:
        return f"{name} with a boolean mask"
    return None


def _device_of(value: Any) -> torch.device | None:
    """The device a ``device=`` argument names (None: unset)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return torch.device("cpu") if on_host(value) else EMULATED
    if isinstance(value, int):
        return torch.device("cuda", value)
    return torch.device(value)


def _to_target(args: tuple, kwargs: dict) -> torch.device | None:
    """The device ``Tensor.to(...)`` moves to (None: stays where it is)."""
    if "device" in kwargs:
        return _device_of(kwargs["device"])
    for arg in args[1:]:
        if isinstance(arg, torch.Tensor | torch.device | str | int) and not isinstance(arg, bool):
            return _device_of(arg)
    return None


def library_line() -> str:
    """``file:line`` of the innermost frame in ``src/entailment_lab`` (else the innermost
    outside this file): where a mismatching call came from."""
    frames = [f for f in traceback.extract_stack() if f.filename != __file__]
    ours = [f for f in frames if f.filename.startswith(_LIBRARY)]
    frame = (ours or frames)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"


class EmulatedCuda(TorchFunctionMode):
    """``with EmulatedCuda() as gpu:`` runs the block as if its tensors were on ``cuda:0``
    (module docstring); ``gpu.syncs`` counts host synchronisations by ``kind: library line``.
    ``strict=False`` records mismatches in ``gpu.mismatches`` instead of raising."""

    def __init__(self, strict: bool = True) -> None:
        super().__init__()
        self.strict = strict
        self.syncs: Counter[str] = Counter()
        self.mismatches: list[str] = []

    def _sync(self, kind: str) -> None:
        self.syncs[f"{kind}: {library_line()}"] += 1

    def _mismatch(self, name: str, shapes: list[tuple[int, ...]]) -> None:
        message = (f"{name} mixes tensors on cuda:0 with host tensors of shapes {shapes} at "
                   f"{library_line()}: make them with device=... (or *_like / new_*)")
        if self.strict:
            raise DeviceMismatchError(message)
        self.mismatches.append(message)

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        descriptor = getattr(func, "__self__", None)
        if name == "__get__" and descriptor is not None:  # a property of a tensor
            return self._property(func, descriptor, args)
        if name == "get_device":
            return -1 if on_host(args[0]) else EMULATED.index
        if name == "backward":  # Tensor.backward, torch.autograd.backward
            return self._backward(args, kwargs)
        if name in ("to", "cuda", "cpu"):
            return self._move(func, name, args, kwargs)

        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_gpu = [t for t in tensors if not on_host(t)]
        if "device" in kwargs:  # a factory call or *_like / new_* with an explicit device
            target = _device_of(kwargs["device"])
            host_output = target is None or target.type == "cpu"
            if not host_output:
                kwargs["device"] = "cpu"
        else:
            host_output = not on_gpu  # made on the host, or from host tensors alone
        if on_gpu:
            self._check_operands(name, tensors)
            kind = _sync_kind(name, args, kwargs)
            if kind:
                self._sync(kind)
        out = func(*args, **kwargs)
        if name in SECOND_OUTPUT_ON_HOST and on_gpu:
            return (_mark(out[0], False), _mark(out[1], True), *out[2:])
        return _mark(out, host_output)

    def _backward(self, args: tuple, kwargs: dict) -> None:
        """The backward pass of ``loss.backward()`` run inside the block, so that the
        hand-written backwards see the emulated device and their host reads are counted.
        ``torch.autograd.backward`` is itself overridable (a handler runs with the mode off),
        so the engine is called directly: torch's private ``_engine_run_backward``, as
        ``torch.autograd.backward`` calls it."""
        (loss, gradient, retain_graph, create_graph, *_) = (*args, None, None, False, None)
        gradient = kwargs.get("gradient", kwargs.get("grad_tensors", gradient))
        retain_graph = kwargs.get("retain_graph", retain_graph)
        create_graph = kwargs.get("create_graph", create_graph)
        losses = (loss,) if isinstance(loss, torch.Tensor) else tuple(loss)
        if gradient is None:
            gradients = tuple(torch.ones_like(t) for t in losses)
        else:
            gradients = (gradient,) if isinstance(gradient, torch.Tensor) else tuple(gradient)
        with self:
            torch.autograd.graph._engine_run_backward(
                losses, gradients, create_graph if retain_graph is None else retain_graph,
                create_graph, (), allow_unreachable=True, accumulate_grad=True)

    def _check_operands(self, name: str, tensors: list[torch.Tensor]) -> None:
        if name == "copy_":
            return
        allowed = _is_index if name in INDEXING | HOST_INTEGERS_BY_API else (lambda t: False)
        host = [t for t in tensors if on_host(t) and t.dim() > 0 and not allowed(t)]
        if host:
            self._mismatch(name, [tuple(t.shape) for t in host])

    def _property(self, func: Callable[..., Any], descriptor: Any, args: tuple) -> Any:
        (t,) = args
        prop = getattr(descriptor, "__name__", "")
        if prop == "device":
            return func(*args) if on_host(t) else EMULATED
        if prop == "is_cuda":
            return not on_host(t)
        if prop == "is_cpu":
            return on_host(t)
        return func(*args)

    def _move(self, func: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> Any:
        """``.to``, ``.cuda``, ``.cpu``: run on the CPU with the device replaced, and mark the
        result as on the device it would be on."""
        source = args[0]
        if name == "cpu":
            target: torch.device | None = torch.device("cpu")
        elif name == "cuda":
            target = EMULATED
        else:
            target = _to_target(args, kwargs)
        if target is None:  # a dtype change: stays on its device
            return _mark(func(*args, **kwargs), on_host(source))
        to_host = target.type == "cpu"
        if to_host and not on_host(source):
            self._sync("cpu" if name == "cpu" else "to(cpu)")
        if name == "to":
            kwargs.pop("device", None)
            args = (source, *(_on_cpu(a) for a in args[1:]))
            out = func(*args, **kwargs)
        else:
            out = source.to("cpu", non_blocking=bool(kwargs.get("non_blocking")))
        if out is source and on_host(source) != to_host:
            out = out.clone()  # a move makes a new tensor; the CPU call returned the same one
        return _mark(out, to_host)


def _on_cpu(arg: Any) -> Any:
    """A positional argument of ``Tensor.to`` with its device made the CPU."""
    if isinstance(arg, torch.Tensor):  # .to(other): other's dtype, on the CPU
        return torch.empty(0, dtype=arg.dtype)
    if isinstance(arg, torch.device | str | int) and not isinstance(arg, bool):
        return torch.device("cpu")
    return arg
