"""Fast paths of the models' CPU training, kept apart from the equations (as Hugging Face keeps
``kernels/`` apart from ``modeling_*.py``). Today DIN is their only user.

A model file computes with its reference (plain torch, autograd) and calls a fast path here
where ``applies()`` says one may run; each fast path computes the reference's function to float
rounding, and its tests compare the two (``tests/models/din/test_model.py``,
``tests/models/din/test_kernels.py``).

- ``tanh``, ``tanh_``: ``torch.tanh`` through the sigmoid on CPU (``elementwise.py``);
- ``gru_outputs``: ``nn.GRU``'s training pass with a hand-written backward (``gru.py``);
- ``control_loop``: DIN-1's control recurrence with a hand-written backward (``control.py``);
- ``interaction``: DIN's interaction loop as the registered operator
  ``torch.ops.entailment_lab.interaction``, with its products in a C kernel on CPUs with
  AVX-512 (``interaction.py``, ``small_products.py``/``.c``, built by ``native.py``);
- ``disabled()``: every native kernel off (torch computes); ``ENTAILMENT_LAB_C_KERNELS=0``
  does the same for a whole run;
- ``calls()`` and ``native_status()``: which fast paths ran and how the native ones were built,
  for the numeric path of ``results.json``.

Why these and not others: each was kept only for what it gains on the whole training step,
measured alternated (docs/models/din.md, "Implementation and speed"; the history in
docs/notes/din-speed-2026-11.md).
"""

from __future__ import annotations

from entailment_lab.models.kernels import interaction as _interaction
from entailment_lab.models.kernels import native, small_products
from entailment_lab.models.kernels.control import control_loop
from entailment_lab.models.kernels.elementwise import tanh, tanh_
from entailment_lab.models.kernels.gru import autocast_enabled, gru_outputs
from entailment_lab.models.kernels.native import disabled
from entailment_lab.models.kernels.record import calls

__all__ = ["applies", "calls", "control_loop", "disabled", "gru_outputs", "interaction",
           "native_status", "tanh", "tanh_"]

interaction = _interaction.run


def native_status() -> dict[str, str]:
    """How each native kernel is built on this machine (compiler and flags), or why torch
    computes instead; built or looked up now if this process has not yet."""
    small_products._library()
    return native.status()


def applies() -> bool:
    """Whether the hand-written paths may run: not under mixed precision (autocast would retype
    their products, which the hand-written backwards do not mirror)."""
    return not autocast_enabled()
