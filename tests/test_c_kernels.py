"""DIN's C kernels (models/c_kernels.py) against torch: the interaction's small products
(``small_products``) and the encoder GRU's gate arithmetic (``gru_steps``), DIN's float32
training with and without them, their fallbacks (no compiler, disabled, other threads and
dtypes) and their refusal of bad operands."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from entailment_lab.models import c_kernels, gru_steps, small_products
from entailment_lab.models.common import gru_outputs
from entailment_lab.models.din import DIN


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def kernel_or_skip(library: Callable[[], object] = small_products._library) -> None:
    c_kernels.library.cache_clear()
    if library() is None:
        pytest.skip("no C compiler or no AVX-512F here: the kernel is not built (torch runs)")

# --- small_products: the interaction's m×m products


@pytest.mark.parametrize("m", small_products.SIZES)
def test_kernel_products_equal_torch(m):
    kernel_or_skip()
    gen = torch.Generator().manual_seed(m)
    n, k = 37, 6
    A, D, C = (torch.randn(n, m, m, generator=gen) for _ in range(3))
    B, G = torch.randn(k, m, m, generator=gen), torch.randn(k, m, m, generator=gen)
    idx = torch.randint(0, k, (n,), generator=gen)  # repeated rows: the scatter must add them
    assert small_products.available(C, A, B)
    tol = {"rtol": 1e-5, "atol": 1e-4}
    torch.testing.assert_close(small_products.gathered_product_t_add_(C.clone(), A, B, idx),
                               C + torch.bmm(A, B[idx].transpose(1, 2)), **tol)
    torch.testing.assert_close(small_products.scattered_t_product_add_(G.clone(), A, D, idx),
                               G.index_add(0, idx, torch.bmm(A.transpose(1, 2), D)), **tol)
    W, bias = B[0], G[0]
    torch.testing.assert_close(small_products.fixed_product_(torch.empty_like(C), A, W), A @ W,
                               **tol)
    torch.testing.assert_close(
        small_products.bias_product_gathered_(torch.empty_like(C), bias, D, W, A, B, idx),
        bias + D @ W + torch.bmm(A, B[idx]), **tol)


@pytest.mark.parametrize("dim", [256, 324, 400])
def test_din_trains_the_same_with_and_without_the_kernel(monkeypatch, dim):
    """DIN-1 in float32 (the kernel in the interaction's loop, forward and backward) against
    the same model on torch.bmm: logits and every gradient, to float32 rounding."""
    kernel_or_skip()
    torch.manual_seed(2)
    embedding = nn.Embedding(30, 8, padding_idx=0)
    embedding.weight.requires_grad_(False)
    model = DIN(embedding, num_classes=3, dim=dim, dropout=0.0)
    lengths_p, lengths_h = torch.tensor([7, 3, 5, 7]), torch.tensor([4, 6, 1, 3])
    pm = torch.arange(7)[None] < lengths_p[:, None]
    hm = torch.arange(6)[None] < lengths_h[:, None]
    batch = (torch.randint(1, 30, pm.shape) * pm, pm, torch.randint(1, 30, hm.shape) * hm, hm)

    def run() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        logits = model(*batch)["logits"]
        logits.square().sum().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    used = []
    for name in ("bias_product_gathered_", "gathered_product_t_add_", "scattered_t_product_add_",
                 "fixed_product_"):
        function = getattr(small_products, name)
        monkeypatch.setattr(small_products, name,
                            lambda *a, name=name, function=function, **k: used.append(name)
                            or function(*a, **k))
    logits, grads = run()
    assert set(used) == {"bias_product_gathered_", "gathered_product_t_add_",
                         "scattered_t_product_add_", "fixed_product_"}, set(used)
    with c_kernels.disabled():
        reference, reference_grads = run()
    torch.testing.assert_close(logits, reference, rtol=0, atol=2e-6)
    for grad, expected in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=2e-6)


def test_the_kernel_is_left_out_where_it_does_not_apply(monkeypatch):
    """Other dtypes, sizes and thread counts use torch; so do a disabled kernel and a machine
    without a C compiler (one log line says which)."""
    matrices = torch.zeros(2, 20, 20)
    with c_kernels.disabled():
        assert not small_products.available(matrices)
    assert not small_products.available(matrices.double())
    assert not small_products.available(torch.zeros(2, 12, 12))
    assert not small_products.available(matrices.transpose(1, 2))
    torch.set_num_threads(2)
    assert not small_products.available(matrices)
    torch.set_num_threads(1)
    monkeypatch.setenv(c_kernels.DISABLE_VARIABLE, "0")
    c_kernels.library.cache_clear()
    assert not small_products.available(matrices)
    monkeypatch.delenv(c_kernels.DISABLE_VARIABLE)
    monkeypatch.setattr(c_kernels.shutil, "which", lambda name: None)
    c_kernels.library.cache_clear()
    assert not small_products.available(matrices)
    c_kernels.library.cache_clear()


def test_bad_operands_are_refused_with_a_message():
    """The kernel reads raw memory: a strided, float64 or mis-indexed operand is an error that
    says what is wrong, never a silent wrong answer."""
    kernel_or_skip()
    A, C = torch.randn(4, 20, 20), torch.zeros(4, 20, 20)
    B, idx = torch.randn(3, 20, 20), torch.tensor([0, 1, 2, 0])
    with pytest.raises(ValueError, match="contiguous float32 CPU tensor"):
        small_products.gathered_product_t_add_(C, A.transpose(1, 2), B, idx)
    with pytest.raises(ValueError, match="contiguous float32 CPU tensor"):
        small_products.fixed_product_(C, A.double(), B[0])
    with pytest.raises(ValueError, match=r"one entry per row \(4\), got torch.int32 of length 4"):
        small_products.scattered_t_product_add_(B.clone(), A, C, idx.int())
    with pytest.raises(ValueError, match=r"one entry per row \(4\), got torch.int64 of length 3"):
        small_products.bias_product_gathered_(C, B[0], A, B[1], A, B, idx[:3])

# --- gru_steps: the encoder GRU's gate arithmetic


@pytest.mark.parametrize("hidden", [7, 16, 40])  # a partial 16-lane block, a whole one, both
def test_gru_kernel_trains_as_torch_does(monkeypatch, hidden):
    """Outputs and the gradients of the input and every parameter, with the kernel and with
    torch's operations (and ``nn.GRU``'s outputs), to float32 rounding; the kernel ran."""
    kernel_or_skip(gru_steps._library)
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


def test_gru_kernel_is_left_out_where_it_does_not_apply():
    """Two torch threads, float64, a strided operand or ``disabled()``: torch computes."""
    kernel_or_skip(gru_steps._library)
    x = torch.zeros(4, 12)
    assert gru_steps.available(x)
    assert not gru_steps.available(x.double())
    assert not gru_steps.available(x.T)
    with c_kernels.disabled():
        assert not gru_steps.available(x)
    torch.set_num_threads(2)
    assert not gru_steps.available(x)


def test_gru_kernel_refuses_bad_operands_with_a_message():
    """The kernel reads raw memory: a strided, float64 or wrongly shaped operand is an error
    that names it, never a silent wrong answer."""
    kernel_or_skip(gru_steps._library)
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
