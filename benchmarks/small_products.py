"""Time DIN's small matrix products: MKL's batched product (``torch.bmm``) against a register-
blocked AVX-512 kernel, on the same n independent m×m by m×m float32 products.

DIN's interaction and control layers are built of such products (m = √dim: 16, 18 or 20), a
few thousand a training step. This benchmark answers one question: is ``torch.bmm``'s rate
for them this CPU's limit? The kernel is written here in C (no PyTorch), compiled with the
system's C compiler (``cc -O3 -march=native``) into a throw-away program that times it and
checks it against a plain triple loop. Needs a C compiler and a CPU with AVX-512F; without
them it says so and exits with status 3. Nothing of it is used by the models.

    python benchmarks/small_products.py                 # m = 16, 18, 20; n = 960; 3 rounds
    python benchmarks/small_products.py --dims 20 --rounds 5
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import torch

# C = A·B for n row-major m×m float32 matrices. Each C row is one 16-float zmm register (columns
# 0-15) and one masked register for columns 16..m-1; a block of m/2 rows keeps its m
# accumulators in registers while k runs over A's columns, broadcasting A[i, k] against B's
# row k.
KERNEL = r"""
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifndef __AVX512F__
int main(void) { puts("no AVX-512F"); return 2; }
#else
#define H (M / 2)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
/* The tail columns 16..M-1 in the narrowest register that holds them (on AMD's Zen 4 a
   512-bit FMA costs two 256-bit ones, so a masked zmm for 4 columns would double the work). */
#if M - 16 <= 4
typedef __m128 tail_t; typedef __mmask8 tmask_t;
#define TZERO() _mm_setzero_ps()
#define TLOAD(m, p) _mm_maskz_loadu_ps(m, p)
#define TFMA(s, b, a) _mm_fmadd_ps(_mm512_castps512_ps128(s), b, a)
#define TSTORE(p, m, a) _mm_mask_storeu_ps(p, m, a)
#elif M - 16 <= 8
typedef __m256 tail_t; typedef __mmask8 tmask_t;
#define TZERO() _mm256_setzero_ps()
#define TLOAD(m, p) _mm256_maskz_loadu_ps(m, p)
#define TFMA(s, b, a) _mm256_fmadd_ps(_mm512_castps512_ps256(s), b, a)
#define TSTORE(p, m, a) _mm256_mask_storeu_ps(p, m, a)
#else
typedef __m512 tail_t; typedef __mmask16 tmask_t;
#define TZERO() _mm512_setzero_ps()
#define TLOAD(m, p) _mm512_maskz_loadu_ps(m, p)
#define TFMA(s, b, a) _mm512_fmadd_ps(s, b, a)
#define TSTORE(p, m, a) _mm512_mask_storeu_ps(p, m, a)
#endif
static void kernel(const float *A, const float *B, float *C) {
  const tmask_t tail = (tmask_t)((1u << (M - 16)) - 1u);
  for (int h = 0; h < 2; h++) {
    const float *a = A + h * H * M; float *c = C + h * H * M;
    __m512 lo[H]; tail_t hi[H];
    for (int i = 0; i < H; i++) { lo[i] = _mm512_setzero_ps(); hi[i] = TZERO(); }
    for (int k = 0; k < M; k++) {
      __m512 b0 = _mm512_loadu_ps(B + k * M);
      tail_t b1 = TLOAD(tail, B + k * M + 16);
      for (int i = 0; i < H; i++) {
        __m512 s = _mm512_set1_ps(a[i * M + k]);
        lo[i] = _mm512_fmadd_ps(s, b0, lo[i]);
        if (M > 16) hi[i] = TFMA(s, b1, hi[i]);
      }
    }
    for (int i = 0; i < H; i++) {
      _mm512_storeu_ps(c + i * M, lo[i]);
      if (M > 16) TSTORE(c + i * M + 16, tail, hi[i]);
    }
  }
}
static void plain(const float *A, const float *B, float *C) {
  for (int i = 0; i < M; i++) for (int j = 0; j < M; j++) {
    float s = 0; for (int k = 0; k < M; k++) s += A[i * M + k] * B[k * M + j]; C[i * M + j] = s; }
}
int main(int argc, char **argv) {
  int n = atoi(argv[1]), reps = atoi(argv[2]), mm = M * M;
  float *A = aligned_alloc(64, n * mm * 4), *B = aligned_alloc(64, n * mm * 4);
  float *C = aligned_alloc(64, n * mm * 4), *D = aligned_alloc(64, n * mm * 4);
  srand(1);
  for (int i = 0; i < n * mm; i++) { A[i] = rand() / (float)RAND_MAX - .5f;
                                     B[i] = rand() / (float)RAND_MAX - .5f; }
  for (int p = 0; p < n; p++) kernel(A + p * mm, B + p * mm, C + p * mm);  /* warm-up */
  double t = now();
  for (int r = 0; r < reps; r++)
    for (int p = 0; p < n; p++) kernel(A + p * mm, B + p * mm, C + p * mm);
  double s = (now() - t) / reps / n;
  for (int p = 0; p < n; p++) plain(A + p * mm, B + p * mm, D + p * mm);
  double diff = 0;
  for (int i = 0; i < n * mm; i++) {
    double d = C[i] - D[i]; if (d < 0) d = -d; if (d > diff) diff = d; }
  printf("seconds_per_product %.6e max_abs_diff %.3e\n", s, diff);
  return 0;
}
#endif
"""


def compile_kernel(m: int, work: Path) -> Path:
    """The timing program for m×m products; exits with status 3 and a message where it cannot
    be built or the CPU lacks AVX-512F."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        _stop("no C compiler (cc or gcc) on PATH")
    source, program = work / f"products_{m}.c", work / f"products_{m}"
    source.write_text(KERNEL, encoding="utf-8")
    built = subprocess.run([compiler, "-O3", "-march=native", f"-DM={m}", "-o", str(program),
                            str(source)], capture_output=True, text=True)
    if built.returncode != 0:
        _stop(f"{compiler} failed: {built.stderr.strip().splitlines()[-1:]}")
    return program


def _stop(why: str) -> NoReturn:
    print(f"small_products: not measured ({why}; it needs a C compiler and an AVX-512F CPU)")
    sys.exit(3)


def time_kernel(program: Path, n: int, reps: int) -> tuple[float, float]:
    """Seconds per product of the AVX-512 kernel and its max |difference| from the plain loop."""
    run = subprocess.run([str(program), str(n), str(reps)], capture_output=True, text=True)
    if run.returncode == 2:
        _stop("this CPU or compiler has no AVX-512F")
    found = re.search(r"seconds_per_product (\S+) max_abs_diff (\S+)", run.stdout)
    if run.returncode != 0 or found is None:
        _stop(f"the kernel program failed: {run.stdout.strip()} {run.stderr.strip()}")
    return float(found.group(1)), float(found.group(2))


def time_bmm(m: int, n: int, reps: int) -> float:
    """Seconds per product of ``torch.bmm`` on n random m×m pairs, written into one buffer."""
    A, B = torch.rand(n, m, m) - 0.5, torch.rand(n, m, m) - 0.5
    C = torch.empty(n, m, m)
    torch.bmm(A, B, out=C)
    start = time.perf_counter()
    for _ in range(reps):
        torch.bmm(A, B, out=C)
    return (time.perf_counter() - start) / reps / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[16, 18, 20],
                        help="matrix sizes m (even, 16 to 32)")
    parser.add_argument("--n", type=int, default=960, help="products per batch (DIN-1: ~960)")
    parser.add_argument("--reps", type=int, default=200, help="batches timed per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (median)")
    args = parser.parse_args()
    bad = [m for m in args.dims if not 16 <= m <= 32 or m % 2]
    if bad:
        parser.error(f"--dims {bad}: each m must be even and in 16..32 (one masked register "
                     "for columns 16..m-1, two blocks of m/2 rows)")
    torch.set_num_threads(1)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, one "
          f"thread; n = {args.n} products per batch, {args.reps} batches x {args.rounds} rounds")
    print("m    torch.bmm us/product  GFLOP/s | AVX-512 kernel us/product  GFLOP/s | speed-up | "
          "max |kernel - plain loop|")
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.dims:
            program = compile_kernel(m, Path(tmp))
            ours, theirs, diff = [], [], 0.0
            for _ in range(args.rounds):
                seconds, d = time_kernel(program, args.n, args.reps)
                ours.append(seconds)
                diff = max(diff, d)
                theirs.append(time_bmm(m, args.n, args.reps))
            o, t = statistics.median(ours), statistics.median(theirs)
            flop = 2 * m**3
            print(f"{m:<4d} {t * 1e6:20.3f} {flop / t / 1e9:8.1f} | {o * 1e6:25.3f} "
                  f"{flop / o / 1e9:8.1f} | {t / o:7.2f}x | {diff:.1e}")


if __name__ == "__main__":
    main()
