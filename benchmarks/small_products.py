"""Time DIN's small matrix products: the interaction layer's forward step through torch (MKL's
batched product) against the package's C kernel (``models/kernels/small_products.c``), same
operands.

DIN's interaction is built of m×m products (m = √dim: 16, 18 or 20), a few thousand a training
step. A forward step of it computes, for each of n rows (hypothesis words), ``b + S W + A
B[idx]``: two products, the second with its pair's premise matrix (``idx``, the row's pair; a
pair's rows are adjacent, as in the model). Torch runs it as the model does without the kernel
(``matmul``, ``add_``, ``index_select`` and ``baddbmm_``); the kernel does it in one pass
(``small_products.bias_product_gathered_``). The figures are per m×m product (two a row). This
answers: is ``torch.bmm``'s rate for these products this CPU's limit? Needs the kernel built
(a C compiler and a CPU with AVX-512F/VL); without it the script says why and exits with status 3.

    python benchmarks/small_products.py                 # m = 16, 18, 20; n = 960; 3 rounds
    python benchmarks/small_products.py --dims 20 --rounds 5
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from entailment_lab.models import kernels
from entailment_lab.models.kernels import small_products
from entailment_lab.threads import keep_freed_memory

ROWS_PER_PAIR = 7.5  # DIN-1 on SNLI: about 960 hypothesis words over a batch of 128 pairs


def operands(m: int, n: int) -> dict[str, torch.Tensor]:
    """Random operands of one forward step: n rows, their pairs' premise matrices and ``idx``."""
    pairs = max(1, round(n / ROWS_PER_PAIR))
    gen = torch.Generator().manual_seed(m)
    rand = lambda *shape: torch.rand(*shape, generator=gen) - 0.5  # noqa: E731
    return {"bias": rand(m, m), "S": rand(n, m, m), "W": rand(m, m), "A": rand(n, m, m),
            "B": rand(pairs, m, m),
            "idx": torch.arange(n) * pairs // n}  # non-decreasing: a pair's rows adjacent


def torch_step(o: dict[str, torch.Tensor]) -> torch.Tensor:
    """The interaction's forward step without the kernel (``kernels/interaction.py``)."""
    return torch.matmul(o["S"], o["W"]).add_(o["bias"]).baddbmm_(
        o["A"], o["B"].index_select(0, o["idx"]))


def kernel_step(o: dict[str, torch.Tensor]) -> torch.Tensor:
    return small_products.bias_product_gathered_(torch.empty_like(o["S"]), o["bias"], o["S"],
                                                 o["W"], o["A"], o["B"], o["idx"])


def seconds_per_product(step: Callable[[dict[str, torch.Tensor]], torch.Tensor],
                        o: dict[str, torch.Tensor], reps: int) -> float:
    step(o)
    start = time.perf_counter()
    for _ in range(reps):
        step(o)
    return (time.perf_counter() - start) / reps / (2 * len(o["S"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=list(small_products.SIZES),
                        help=f"matrix sizes m, of {small_products.SIZES}")
    parser.add_argument("--n", type=int, default=960, help="rows a step (DIN-1: ~960)")
    parser.add_argument("--reps", type=int, default=200, help="steps timed per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (median)")
    args = parser.parse_args()
    bad = [m for m in args.dims if m not in small_products.SIZES]
    if bad:
        parser.error(f"--dims {bad}: each m must be one of {small_products.SIZES}, the sizes "
                     "the kernel is built for")
    torch.set_num_threads(1)
    keep_freed_memory()  # training's memory policy: torch's step allocates its outputs anew
    built = small_products.available(torch.zeros(1, args.dims[0], args.dims[0]))
    build = kernels.native_status().get("small_products", "torch: not looked up")
    if not built:
        print(f"small_products: not measured (the C kernel is not built here: "
              f"{build.removeprefix('torch: ')}; it needs a C compiler and a CPU with "
              "AVX-512F/VL)")
        sys.exit(3)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, one "
          f"thread; n = {args.n} rows a step (two products each), {args.reps} steps x "
          f"{args.rounds} rounds; the kernel: {build}")
    print("m    torch us/product  GFLOP/s | C kernel us/product  GFLOP/s | speed-up | "
          "max |kernel - torch|")
    for m in args.dims:
        o = operands(m, args.n)
        ours, theirs = [], []
        for _ in range(args.rounds):
            theirs.append(seconds_per_product(torch_step, o, args.reps))
            ours.append(seconds_per_product(kernel_step, o, args.reps))
        diff = float((kernel_step(o) - torch_step(o)).abs().max())
        k, t = statistics.median(ours), statistics.median(theirs)
        flop = 2 * m**3
        print(f"{m:<4d} {t * 1e6:16.3f} {flop / t / 1e9:8.1f} | {k * 1e6:19.3f} "
              f"{flop / k / 1e9:8.1f} | {t / k:7.2f}x | {diff:.1e}")


if __name__ == "__main__":
    main()
