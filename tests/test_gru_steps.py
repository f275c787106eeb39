"""models/gru_steps.py: the encoder GRU's gate arithmetic in C against torch's operations
(``common.gru_outputs`` with and without the kernel, and ``nn.GRU``), its fallbacks, and its
refusal of bad operands."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from entailment_lab.models import c_kernels, gru_steps
from entailment_lab.models.common import gru_outputs


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def kernel_or_skip() -> None:
    c_kernels.library.cache_clear()
    if gru_steps._library() is None:
        pytest.skip("no C compiler or no AVX-512F here: the kernel is not built (torch runs)")


@pytest.mark.parametrize("hidden", [7, 16, 40])  # a partial 16-lane block, a whole one, both
def test_kernel_trains_as_torch_does(monkeypatch, hidden):
    """Outputs and the gradients of the input and every parameter, with the kernel and with
    torch's operations (and ``nn.GRU``'s outputs), to float32 rounding; the kernel ran."""
    kernel_or_skip()
    torch.manual_seed(hidden)
    gru = nn.GRU(5, hidden, batch_first=True)
    x = torch.randn(3, 6, 5, requires_grad=True)
    weights = torch.randn(3, 6, hidden)
    used = []
    for name in ("forward_step_", "backward_step_"):
        function = getattr(gru_steps, name)
        monkeypatch.setattr(gru_steps, name, lambda *a, name=name, function=function:
                            used.append(name) or function(*a))

    def run() -> list[torch.Tensor]:
        x.grad = None
        gru.zero_grad()
        out = gru_outputs(gru, x)
        (out * weights).sum().backward()
        return [out.detach(), x.grad, *(p.grad for p in gru.parameters())]

    ours = run()
    assert set(used) == {"forward_step_", "backward_step_"}
    used.clear()
    with c_kernels.disabled():
        theirs = run()
    assert not used
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-6)
    torch.testing.assert_close(ours[0], gru(x)[0].detach(), rtol=1e-5, atol=2e-6)


def test_kernel_is_left_out_where_it_does_not_apply():
    """Two torch threads, float64, a strided operand or ``disabled()``: torch computes."""
    kernel_or_skip()
    x = torch.zeros(4, 12)
    assert gru_steps.available(x)
    assert not gru_steps.available(x.double())
    assert not gru_steps.available(x.T)
    with c_kernels.disabled():
        assert not gru_steps.available(x)
    torch.set_num_threads(2)
    assert not gru_steps.available(x)


def test_bad_operands_are_refused_with_a_message():
    """The kernel reads raw memory: a strided, float64 or wrongly shaped operand is an error
    that names it, never a silent wrong answer."""
    kernel_or_skip()
    rows, d = 4, 5
    gh, gi = torch.randn(rows, 3 * d), torch.randn(rows, 3 * d)
    rz, n, gh_n, h_next = (torch.empty(rows, k * d) for k in (2, 1, 1, 1))
    with pytest.raises(ValueError, match="contiguous float32 CPU tensor"):
        gru_steps.forward_step_(gh, gi.double(), None, rz, n, gh_n, h_next)
    with pytest.raises(ValueError, match=r"gi must be \(4, 15\), got \(4, 10\)"):
        gru_steps.forward_step_(gh, gi[:, : 2 * d].contiguous(), None, rz, n, gh_n, h_next)
    g = torch.randn(rows, d)
    with pytest.raises(ValueError, match=r"d_gh must be \(4, 15\), got \(3, 15\)"):
        gru_steps.backward_step_(g, rz, n, gh_n, None, gh[:3], n.clone(), None)
