"""Throughput and peak memory of DIN (models/din.py) vs its naive reference (tests/).

For each variant and d: training pairs/s (forward + backward + Adam step, train mode) and
inference pairs/s (eval mode, no_grad) on batches with SNLI-like lengths, for the fast model,
optionally the fast model under ``torch.compile``, and the naive per-pair loop reference.

    python benchmarks/bench_din.py --batch 128 --dims 256 324 400 --variants din1 din2 --steps 5
    python benchmarks/bench_din.py --data ../shared/data/snli/validation.jsonl.gz   # real lengths
    python benchmarks/bench_din.py --dims 400 --variants din1 --compile               # + compiled

Lengths: with --data, (premise, hypothesis) token counts (whitespace split of the PTB-tokenised
text) of pairs drawn from that JSONL(.gz) file; otherwise Gamma-distributed lengths with SNLI
dev's mean and s.d. (premise 15.2 ± 6.7 tokens, hypothesis 8.4 ± 3.3). Batches are random
draws, not length-bucketed (the DataModule buckets, so real padding is lower).

Memory: every (variant, d, implementation) runs in a fresh subprocess; "peak RSS" is its
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (the whole process, Python + torch included:
about 0.3-0.4 GiB of it is the baseline measured before the first step, printed as "base").
Inference runs before training, so the inference column is the peak up to then.

The reference loops over every pair, so its cost is linear in the pairs and independent of the
batch: it is timed on the first --ref-batch pairs of each batch for --ref-steps steps.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREMISE_MEAN_SD, HYPOTHESIS_MEAN_SD = (15.2, 6.7), (8.4, 3.3)  # SNLI dev, PTB tokens


def sample_lengths(n: int, data: str | None, seed: int) -> list[tuple[int, int]]:
    """n (premise, hypothesis) lengths: real pairs from ``data`` or SNLI-like Gamma draws."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    if data:
        opener = gzip.open if data.endswith(".gz") else open
        with opener(data, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        pool = [(len(r["premise"].split()), len(r["hypothesis"].split())) for r in rows]
        idx = torch.randint(len(pool), (n,), generator=gen).tolist()
        return [(max(pool[i][0], 1), max(pool[i][1], 1)) for i in idx]

    def gamma(mean: float, sd: float) -> list[int]:
        shape, scale = (mean / sd) ** 2, sd**2 / mean
        torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
        draws = torch.distributions.Gamma(shape, 1.0 / scale).sample((n,))
        return draws.round().clamp(1, 80).long().tolist()

    return list(zip(gamma(*PREMISE_MEAN_SD), gamma(*HYPOTHESIS_MEAN_SD), strict=True))


def make_batches(args: argparse.Namespace, vocab: int) -> list[tuple]:
    """``--steps + 1`` batches (one warm-up) of right-padded ids, masks and labels."""
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    lengths = sample_lengths(args.batch * (args.steps + 1), args.data, args.seed)
    batches = []
    for i in range(args.steps + 1):
        chunk = lengths[i * args.batch : (i + 1) * args.batch]
        sides = []
        for k in (0, 1):
            lens = torch.tensor([pair[k] for pair in chunk])
            mask = torch.arange(int(lens.max()))[None, :] < lens[:, None]
            sides += [torch.randint(1, vocab, mask.shape, generator=gen) * mask, mask]
        labels = torch.randint(0, 3, (len(chunk),), generator=gen)
        batches.append((*sides, labels))
    return batches


def rss_mib() -> float:
    """Current resident set size (Linux /proc), MiB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def timed(fn: Callable[[tuple], object], batches: list[tuple]) -> tuple[float, float]:
    """Run ``fn`` on the warm-up batch, then on the rest: (warm-up s, pairs/s of the rest)."""
    start = time.perf_counter()
    fn(batches[0])
    warmup = time.perf_counter() - start
    start = time.perf_counter()
    for b in batches[1:]:
        fn(b)
    return warmup, sum(len(b[-1]) for b in batches[1:]) / (time.perf_counter() - start)


def worker(args: argparse.Namespace) -> dict:
    """Time one (variant, dim, impl) in this process; returns the measurements."""
    import torch
    from torch import nn

    from entailment_lab.models.common import run_packed, scatter_rows
    from entailment_lab.models.din import DIN

    sys.path.insert(0, str(ROOT / "tests"))
    from din_reference import reference_forward, reference_layers

    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    vocab = 5000
    embedding = nn.Embedding(vocab, 300, padding_idx=0)
    embedding.weight.requires_grad_(False)
    model = DIN(embedding, num_classes=3, dim=args.dim, variant=args.variant)
    batches = make_batches(args, vocab)
    if args.fixed_shape:  # every timed step reuses the warm-up batch: no recompilation
        batches = [batches[0]] * len(batches)
    if args.impl == "reference":
        steps = min(args.ref_steps, args.steps)
        batches = [tuple(t[: args.ref_batch] for t in b) for b in batches[: steps + 1]]
        forward = partial(reference_forward, model)
        layers = partial(reference_layers, model)
    elif args.impl == "compiled":
        forward, layers = torch.compile(model, dynamic=True), None
    else:
        forward, layers = model, model.interact_and_control

    optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    result = {"base_mib": rss_mib(), "threads": torch.get_num_threads()}

    # Whole model. Inference first, so its peak RSS is not the training one.
    model.eval()
    with torch.no_grad():
        _, result["infer_pairs_s"] = timed(lambda b: forward(*b[:4]), batches)
    result["infer_peak_mib"] = peak_rss_mib()

    def train_step(b: tuple) -> None:
        loss = nn.functional.cross_entropy(forward(*b[:4])["logits"], b[4])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()

    model.train()
    result["warmup_s"], result["train_pairs_s"] = timed(train_step, batches)
    result["train_peak_mib"] = peak_rss_mib()

    # Interaction + control layers only (what the reference re-implements with loops), on
    # fixed transformed matrices; "train" = forward + backward to the inputs and parameters.
    if layers is not None:
        model.eval()
        inputs = []
        with torch.no_grad():
            for p, pm, h, hm, label in batches:
                x_h = model.embedding(h)
                h_p = run_packed(model.encoder, model.embedding(p), pm)
                W_p = scatter_rows(model.transform_p(h_p[pm]), pm).requires_grad_()
                W_h = scatter_rows(model.transform_h(x_h[hm]), hm).requires_grad_()
                inputs.append((W_p, pm, W_h, x_h, hm, label))

        def layers_out(b: tuple) -> torch.Tensor:
            out = layers(*b[:5])
            return out[0] if isinstance(out, tuple) else out

        with torch.no_grad():
            _, result["layers_infer_pairs_s"] = timed(layers_out, inputs)
        _, result["layers_train_pairs_s"] = timed(lambda b: layers_out(b).sum().backward(), inputs)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--dims", type=int, nargs="+", default=[256, 324, 400])
    parser.add_argument("--variants", nargs="+", default=["din1", "din2"])
    parser.add_argument("--steps", type=int, default=5, help="timed batches (after 1 warm-up)")
    parser.add_argument("--ref-steps", type=int, default=2, help="timed batches, reference")
    parser.add_argument("--ref-batch", type=int, default=32, help="pairs per reference batch")
    parser.add_argument("--no-reference", action="store_true", help="skip the naive reference")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time torch.compile(model, dynamic=True) (slow to compile)",
    )
    parser.add_argument(
        "--fixed-shape",
        action="store_true",
        help="time every step on the warm-up batch (implied by --compile: compile's best case)",
    )
    parser.add_argument("--data", help="JSONL(.gz) SNLI pairs to take real lengths from")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    # internal: one measurement in a subprocess
    parser.add_argument(
        "--worker", nargs=3, metavar=("VARIANT", "DIM", "IMPL"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()

    if args.worker:
        args.variant, dim, args.impl = args.worker
        args.dim = int(dim)
        print(json.dumps(worker(args)))
        return

    args.fixed_shape = args.fixed_shape or args.compile
    impls = ["fast"] + (["compiled"] if args.compile else [])
    impls += [] if args.no_reference else ["reference"]
    print(f"# {' '.join(sys.argv)}")
    print(
        f"# batch {args.batch}, {args.steps} timed steps (reference: {args.ref_steps} step(s) "
        f"of {args.ref_batch} pairs), lengths from {args.data or 'SNLI-like Gamma draws'}"
        + (", every step on the warm-up batch" if args.fixed_shape else "")
    )
    header = (
        f"{'variant':7} {'d':>4} {'impl':9} | {'train':>7} {'infer':>7} | {'train':>7} "
        f"{'infer':>7} | {'peak RSS MiB':>12} {'base':>5} | {'warm-up':>7}"
    )
    print(f"{'':22} | {'whole model':^15} | {'layers (8-19)':^15} | {'train/infer':^19} | train s")
    print(header)
    print("-" * len(header))
    threads = None
    for variant in args.variants:
        for dim in args.dims:
            rows = {}
            for impl in impls:
                cmd = [sys.executable, __file__, "--worker", variant, str(dim), impl]
                for flag in ("batch", "steps", "ref_steps", "ref_batch", "threads", "seed"):
                    cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
                cmd += ["--fixed-shape"] if args.fixed_shape else []
                cmd += ["--data", args.data] if args.data else []
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                r = rows[impl] = json.loads(out.strip().splitlines()[-1])
                threads = r["threads"]
                layers = [r.get(f"layers_{k}_pairs_s") for k in ("train", "infer")]
                layers_txt = " ".join(f"{x:>7.1f}" if x else f"{'-':>7}" for x in layers)
                peak = f"{r['train_peak_mib']:.0f}/{r['infer_peak_mib']:.0f}"
                print(
                    f"{variant:7} {dim:>4} {impl:9} | {r['train_pairs_s']:>7.1f} "
                    f"{r['infer_pairs_s']:>7.1f} | {layers_txt} | {peak:>12} "
                    f"{r['base_mib']:>5.0f} | {r['warmup_s']:>7.1f}",
                    flush=True,
                )
            if "reference" in rows:
                ref = rows["reference"]
                for impl in impls[:-1]:
                    r = rows[impl]
                    ratios = [
                        r[k] / ref[k] if k in r else None
                        for k in (
                            "train_pairs_s",
                            "infer_pairs_s",
                            "layers_train_pairs_s",
                            "layers_infer_pairs_s",
                        )
                    ]
                    txt = " ".join(f"{x:>6.1f}x" if x else f"{'-':>7}" for x in ratios)
                    print(
                        f"{'':7} {'':>4} {impl + '/ref':9} | {txt[:15]} | {txt[16:]} |", flush=True
                    )
    print(f"# torch threads: {threads}; pairs/s; layers = interaction + control (Eq. 8-19)")


if __name__ == "__main__":
    main()
