"""DIN's native kernel and its operator (models/kernels/) against torch: the interaction's small
products (``small_products``), the registered ``entailment_lab::interaction`` operator (fake,
autograd and FLOP registrations), DIN's float32 training with and without the kernel, its
fallbacks (no compiler, a CPU without AVX-512, disabled, other threads and dtypes), its build
flags and its refusal of bad operands and indices."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from entailment_lab.models import kernels
from entailment_lab.models.din import DIN, Words
from entailment_lab.models.kernels import native, small_products


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def kernel_or_skip() -> None:
    native.library.cache_clear()
    if small_products._library() is None:
        pytest.skip("no C compiler or no AVX-512F/VL here: the kernel is not built (torch runs)")

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
    with native.disabled():
        reference, reference_grads = run()
    torch.testing.assert_close(logits, reference, rtol=0, atol=2e-6)
    for grad, expected in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=2e-6)


def test_the_kernel_is_left_out_where_it_does_not_apply(monkeypatch):
    """Other dtypes, sizes and thread counts use torch; so do a disabled kernel, a machine
    without a C compiler and a CPU without AVX-512VL (the status says which)."""
    matrices = torch.zeros(2, 20, 20)
    with kernels.disabled():
        assert not small_products.available(matrices)
    assert not small_products.available(matrices.double())
    assert not small_products.available(torch.zeros(2, 12, 12))
    assert not small_products.available(matrices.transpose(1, 2))
    torch.set_num_threads(2)
    assert not small_products.available(matrices)
    torch.set_num_threads(1)
    monkeypatch.setenv(native.DISABLE_VARIABLE, "0")
    native.library.cache_clear()
    assert not small_products.available(matrices)
    assert kernels.native_status()["small_products"] == "torch: ENTAILMENT_LAB_C_KERNELS=0"
    monkeypatch.delenv(native.DISABLE_VARIABLE)
    monkeypatch.setattr(native, "cpu_flags", lambda: {"avx2", "avx512f", "fma"})
    native.library.cache_clear()
    assert not small_products.available(matrices)
    assert kernels.native_status()["small_products"] == "torch: this CPU has no avx512vl"
    monkeypatch.setattr(native.shutil, "which", lambda name: None)
    native.library.cache_clear()
    assert not small_products.available(matrices)
    native.library.cache_clear()


def test_the_kernel_is_built_for_its_isa_not_the_machine(monkeypatch, tmp_path):
    """The compiler gets the ISA the source is written in, by name (no -march=native), and the
    build is recorded."""
    kernel_or_skip()
    commands = []
    run = native.subprocess.run
    monkeypatch.setattr(native.subprocess, "run", lambda args, **k: commands.append(args)
                        or run(args, **k))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty cache: it compiles
    native.library.cache_clear()
    assert small_products._library() is not None
    build = [c for c in commands if "-shared" in c]
    assert len(build) == 1 and set(native.ISA_FLAGS) <= set(build[0]), commands
    assert not any("native" in arg for arg in build[0])
    assert " ".join(native.ISA_FLAGS) in kernels.native_status()["small_products"]
    native.library.cache_clear()


def test_bad_operands_are_refused_with_a_message():
    """The kernel reads raw memory: a strided, float64, wrongly shaped or mis-indexed operand is
    an error that says what is wrong, never a silent wrong answer; an index outside the
    matrices it reads or writes is refused by the kernel before it touches memory."""
    kernel_or_skip()
    A, C = torch.randn(4, 20, 20), torch.zeros(4, 20, 20)
    B, idx = torch.randn(3, 20, 20), torch.tensor([0, 1, 2, 0])
    with pytest.raises(ValueError, match="A must be a contiguous float32 CPU tensor"):
        small_products.gathered_product_t_add_(C, A.transpose(1, 2), B, idx)
    with pytest.raises(ValueError, match="A must be a contiguous float32 CPU tensor"):
        small_products.fixed_product_(C, A.double(), B[0])
    with pytest.raises(ValueError, match=r"W must be \(20, 20\), got \(3, 20, 20\)"):
        small_products.fixed_product_(C, A, B)
    with pytest.raises(ValueError, match=r"out must be \(4, 20, 20\), got \(3, 20, 20\)"):
        small_products.gathered_product_t_add_(C[:3], A, B, idx)
    with pytest.raises(ValueError, match=r"one entry per row \(4\), got torch.int32 of shape"):
        small_products.scattered_t_product_add_(B.clone(), A, C, idx.int())
    with pytest.raises(ValueError, match=r"one entry per row \(4\), got torch.int64 of shape"):
        small_products.bias_product_gathered_(C, B[0], A, B[1], A, B, idx[:3])
    G = B.clone()
    for bad in (3, -1):
        with pytest.raises(IndexError, match=rf"idx\[2\] = {bad} is outside the 3 matrices"):
            small_products.scattered_t_product_add_(G, A, C, torch.tensor([0, 1, bad, 0]))
        with pytest.raises(IndexError, match=rf"idx\[2\] = {bad} is outside the 3 matrices"):
            small_products.bias_product_gathered_(C, B[0], A, B[1], A, B,
                                                  torch.tensor([0, 1, bad, 0]))
    torch.testing.assert_close(G, B, rtol=0, atol=0)  # nothing was written


# --- the registered operator: entailment_lab::interaction


def operator_inputs(m: int, dtype: torch.dtype, hypothesis_init: bool = False) -> tuple:
    """The operator's arguments for 3 pairs (premises of 4, 2 and 3 words; 6 hypothesis words),
    as ``Interaction`` passes them."""
    from entailment_lab.models.common import longest_first

    gen = torch.Generator().manual_seed(m)
    pm = torch.arange(4)[None, :] < torch.tensor([4, 2, 3])[:, None]
    hm = torch.arange(3)[None, :] < torch.tensor([3, 1, 2])[:, None]
    pair = Words.of(hm).pair
    order, running = longest_first(pm.sum(dim=1)[pair], pm.shape[1])

    def grad_leaf(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=dtype) / m).requires_grad_()

    return (grad_leaf(len(pair), m, m), grad_leaf(4, 3, m, m), grad_leaf(m, m), grad_leaf(m, m),
            pair, order, running, hypothesis_init, True)


@pytest.mark.parametrize(("m", "dtype"), [(3, torch.float64), (16, torch.float32)])
def test_the_interaction_operator_passes_opcheck(m, dtype):
    """Schema, fake (shape) implementation and autograd registration of the operator, with the
    torch products (float64) and with the C kernel (float32, where built)."""
    if dtype == torch.float32:
        kernel_or_skip()
    torch.library.opcheck(torch.ops.entailment_lab.interaction.default, operator_inputs(m, dtype),
                          test_utils=("test_schema", "test_autograd_registration",
                                      "test_faketensor"))


def test_the_interaction_operator_counts_its_flops_and_reports_what_ran():
    """FLOP counting sees the operator (two m×m products a row and step forward, four backward)
    whichever path computes it, and ``kernels.calls()`` says which did."""
    kernel_or_skip()
    args = operator_inputs(16, torch.float32)
    running, per_product = args[6], 2 * 16**3
    for off in (False, True):
        before = kernels.calls()
        with FlopCounterMode(display=False) as counter:
            if off:
                with kernels.disabled():
                    torch.ops.entailment_lab.interaction(*args)[0].sum().backward()
            else:
                torch.ops.entailment_lab.interaction(*args)[0].sum().backward()
        counts = counter.get_flop_counts()["Global"]
        assert counts[torch.ops.entailment_lab.interaction] == 2 * sum(running) * per_product
        assert counts[torch.ops.entailment_lab.interaction_backward] == \
            4 * sum(running) * per_product
        ran = {k: n for k, n in (kernels.calls() - before).items() if k[0] != "tanh"}
        path = "torch" if off else "C small_products"
        assert ran == {("interaction", path): 1, ("interaction_backward", path): 1}, ran


@pytest.mark.parametrize("init", [False, True])
def test_the_interaction_operator_equals_the_models_reference_loop(init):
    """``kernels.interaction`` against ``din._interaction_loop`` (autograd over torch's
    operations, what the model runs under autocast and for its analysis maps), float64:
    outputs and every input's gradient."""
    from entailment_lab.models.din import _interaction_loop

    X, W_p, W_inter, b_inter, pair, order, running, _, _ = operator_inputs(3, torch.float64)
    leaves = (X, W_p, W_inter, b_inter)
    ours = kernels.interaction(X, W_p, W_inter, b_inter, pair, order, running, init)
    theirs = _interaction_loop(X[order], W_p, W_inter, b_inter, pair[order], running, init)[0]
    theirs = theirs[torch.argsort(order)]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-14)
    weights = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad((ours * weights).sum(), leaves),
                    torch.autograd.grad((theirs * weights).sum(), leaves), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


def test_the_operator_refuses_inconsistent_operands():
    X, W_p, W_inter, b_inter, pair, order, running, init, keep = operator_inputs(3, torch.float64)
    with pytest.raises(ValueError, match=r"entailment_lab::interaction: W_p must be "
                                         r"\(len\(running\)=4, batch, 3, 3\)"):
        torch.ops.entailment_lab.interaction(X, W_p[:3], W_inter, b_inter, pair, order, running,
                                             init, keep)
    with pytest.raises(ValueError, match="running must be non-increasing"):
        torch.ops.entailment_lab.interaction(X, W_p, W_inter, b_inter, pair, order,
                                             running[::-1], init, keep)
