"""DIN training and inference speed: today's model, DIN as of a past commit, a padded baseline.

Everything runs in one process on the same real, length-bucketed batches of the DataModule
(the training loader's order, every ``stride``-th batch of an epoch) and the same word vectors
training uses (GloVe 6B 50-d, frozen), with the same initial weights:

- ``now``: ``entailment_lab.models.din`` as checked out;
- ``BASE`` (default ``bfd714b``): ``src/entailment_lab/models/din.py`` at that commit, read with
  ``git show`` (skipped with a message where git or the commit is missing);
- ``padded``: ``tests/models/din/padded.py``, the equations vectorised over the padded batch with
  no packing, sorting or transposition: the fair baseline (``tests/models/din/reference.py``, one
  pair at a time, stays a correctness test only).

The implementations alternate in ``--rounds`` rounds, so a change of machine load hits all of
them alike; the first ``--warmup`` batches are not timed. Printed per variant and size:
training (forward, backward, Adam step; dropout on) and inference (eval mode, no grad) pairs/s;
GFLOP per step counted by ``torch.utils.flop_counter`` (matrix products: the model's real
work, not a guess) and the GFLOP/s achieved; that rate against a plain 1024³ fp32 matrix
product timed in the same rounds; the speed-ups; the largest differences between the
implementations' logits and gradients on one batch (eval mode, same weights); and, for
``now``, where a training step goes, layer by layer (each layer timed alone, forward and
backward, on its real inputs).

    python benchmarks/bench_din.py --data ../shared/data/snli/validation.jsonl.gz
    python benchmarks/bench_din.py --data ../shared/data/snli/validation.jsonl.gz \\
        --variants din1 --dims 400 --threads 1 2
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pairs import (  # noqa: E402
    KEYS,
    Batch,
    Impl,
    differences,
    load_batches,
    load_commit_class,
    padding,
    print_speedups,
    seconds,
    time_rounds,
)

from entailment_lab.embeddings import glove_6b_50d, random_embeddings  # noqa: E402
from entailment_lab.models.din import DIN, Words  # noqa: E402
from tests.models.din.padded import padded_forward  # noqa: E402

Shape = tuple[int, ...]


def _addmm_(self_shape: Shape, a_shape: Shape, b_shape: Shape, *_: object, **__: object) -> int:
    return 2 * a_shape[0] * a_shape[1] * b_shape[1]


def _baddbmm_(self_shape: Shape, a_shape: Shape, b_shape: Shape, *_: object, **__: object) -> int:
    return 2 * a_shape[0] * a_shape[1] * a_shape[2] * b_shape[2]


# flop_counter knows the out-of-place products only; the models also add products in place.
IN_PLACE_PRODUCTS = {torch.ops.aten.addmm_: _addmm_, torch.ops.aten.baddbmm_: _baddbmm_}


def gflop(fn: Callable[[Batch], None], batches: list[Batch]) -> float:
    """Matrix-product GFLOP per batch of ``fn``, counted by torch.utils.flop_counter (DIN's
    interaction operator brings its own formula, ``models/kernels/interaction.py``)."""
    with FlopCounterMode(display=False, custom_mapping=IN_PLACE_PRODUCTS) as counter:
        for batch in batches:
            fn(batch)
    return counter.get_total_flops() / 1e9 / len(batches)


MATMUL_N = 1024


def matmul_seconds(reps: int = 10) -> float:
    a, b = torch.randn(MATMUL_N, MATMUL_N), torch.randn(MATMUL_N, MATMUL_N)
    a @ b
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    return (time.perf_counter() - start) / reps


def layer_breakdown(model: DIN, batches: list[Batch], rounds: int) -> dict[str, float]:
    """ms per training step in each layer of ``model``, forward + backward, each layer alone.

    Each layer's inputs are computed once (detached, requiring grad where gradients flow) and
    its output is back-propagated with a fixed random gradient, as in the full step.
    """
    model.train()
    stages: dict[str, list[Callable[[], None]]] = {k: [] for k in (
        "embedding + encoder GRU (Eq. 3-6)", "transformation (Eq. 7)", "interaction (Eq. 8)",
        "control (Eq. 9-19)", "pooling, FC, softmax (Eq. 20-22)", "Adam step")}
    optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad])

    def stage(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> Callable[[], None]:
        with torch.no_grad():
            grad = torch.randn_like(fn(*inputs))
        return lambda: fn(*inputs).backward(grad)

    for b in batches:
        p, pm, h, hm = (b[k] for k in KEYS)
        words = Words.of(hm)  # the layers pass the real hypothesis words' rows between them
        with torch.no_grad():
            x_h = model.embedding(h)
            h_p = model.encode(model.embedding(p), pm)
            W_p, W_h = model.transform(h_p, x_h, words)
            W_out = model.interaction(W_p, pm, W_h, words.pair)[0]
            x = W_h if model.variant == "din1" else (
                words.gather(x_h) if (model.din2_input if model.variant == "din2"
                                      else model.static_input) == "word"
                else W_h.transpose(-1, -2).flatten(1))
            h_t = model.control(W_out, x, words)[0]
        h_p, W_p, W_h, W_out, h_t = (t.requires_grad_() for t in (h_p, W_p, W_h, W_out, h_t))
        stages["embedding + encoder GRU (Eq. 3-6)"].append(
            stage(lambda p=p, pm=pm: model.encode(model.dropout(model.embedding(p)), pm)))
        stages["transformation (Eq. 7)"].append(stage(
            lambda h_p=h_p, x_h=x_h, words=words: torch.cat(
                [W.flatten() for W in model.transform(h_p, x_h, words)])))
        stages["interaction (Eq. 8)"].append(stage(
            lambda W_p=W_p, pm=pm, W_h=W_h, words=words:
            model.interaction(W_p, pm, W_h, words.pair)[0]))
        stages["control (Eq. 9-19)"].append(
            stage(lambda W_out=W_out, x=x, words=words: model.control(W_out, x, words)[0]))
        stages["pooling, FC, softmax (Eq. 20-22)"].append(
            lambda h_t=h_t, words=words, y=b["label"]: F.cross_entropy(
                model.classify(h_t, words), y).backward())
        stages["Adam step"].append(optimiser.step)
    totals = dict.fromkeys(stages, 0.0)
    for _ in range(rounds):
        for name, calls in stages.items():
            start = time.perf_counter()
            for call in calls:
                call()
            totals[name] += time.perf_counter() - start
    return {k: 1000 * v / (rounds * len(batches)) for k, v in totals.items()}


def measure(args: argparse.Namespace, variant: str, dim: int, embedding: torch.nn.Embedding,
            batches: list[Batch], base: type[DIN] | None) -> None:
    warm, timed = batches[: args.warmup], batches[args.warmup:]
    torch.manual_seed(args.seed)
    model = DIN(embedding, num_classes=3, dim=dim, variant=variant)
    impls = [Impl("now", model)]
    if base is not None:
        old = base(embedding, num_classes=3, dim=dim, variant=variant)
        old.load_state_dict(model.state_dict())
        impls.append(Impl(args.base, old))
    twin = copy.deepcopy(model)
    impls.append(Impl("padded", twin, lambda *b, m=twin: padded_forward(m, *b)))
    diffs = differences(impls, timed[0])

    flops = {i.name: (gflop(i.train_step, timed[:2]), gflop(i.infer, timed[:2])) for i in impls}
    pairs = sum(len(b["label"]) for b in timed) * args.rounds
    matmul: list[float] = []
    train, infer = time_rounds(impls, warm, timed, args.rounds,
                               each_round=lambda: matmul.append(matmul_seconds()))
    matmul_rate = 2 * MATMUL_N**3 / 1e9 / (sum(matmul) / len(matmul))
    steps = args.rounds * len(timed)

    print(f"\n## {variant}, d = {dim} ({model.parameter_count():,} parameters), "
          f"{torch.get_num_threads()} thread(s); plain {MATMUL_N}³ fp32 matmul in the same "
          f"rounds: {matmul_rate:.1f} GFLOP/s")
    print(f"{'impl':8s} | {'train pairs/s':>13s} {'ms/step':>8s} {'GFLOP/step':>10s} "
          f"{'GFLOP/s':>8s} {'% matmul':>8s} | {'infer pairs/s':>13s} {'GFLOP/s':>8s} | "
          f"{'infer/train':>11s}")
    for impl in impls:
        t, i = train[impl.name], infer[impl.name]
        (f_train, f_infer), rate = flops[impl.name], flops[impl.name][0] * steps / t
        print(f"{impl.name:8s} | {pairs / t:13.1f} {1000 * t / steps:8.1f} {f_train:10.2f} "
              f"{rate:8.1f} {100 * rate / matmul_rate:7.1f}% | {pairs / i:13.1f} "
              f"{f_infer * steps / i:8.1f} | {t / i:10.2f}x")
    print_speedups(impls, train, infer, diffs)
    if args.breakdown:
        parts = layer_breakdown(copy.deepcopy(model), timed, args.rounds)
        total = sum(parts.values())
        print(f"now, each layer alone (forward + backward), ms per step: sum {total:.1f} vs "
              f"{1000 * train['now'] / steps:.1f} for the whole step")
        for name, ms in parts.items():
            print(f"  {name:36s} {ms:7.1f} ms {100 * ms / total:5.1f} %")
    if args.profile:
        with torch.profiler.profile() as profiler:
            seconds(impls[0].train_step, timed)
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True,
                        help="SNLI pairs, JSONL(.gz) in the hub's schema (premise, hypothesis, "
                             "label): the batches' lengths and words")
    parser.add_argument("--variants", nargs="+", default=["din1", "din2"],
                        choices=["din1", "din2", "static"])
    parser.add_argument("--dims", nargs="+", type=int, default=[256, 324, 400])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="timed batches per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="torch threads; several values measure each in turn")
    parser.add_argument("--base", default="bfd714b",
                        help="commit whose models/din.py is timed beside today's ('' skips it)")
    parser.add_argument("--embeddings", choices=["glove6b50d", "random"], default="glove6b50d")
    parser.add_argument("--no-breakdown", dest="breakdown", action="store_false",
                        help="skip the per-layer times")
    parser.add_argument("--profile", action="store_true",
                        help="also print the operators of a 'now' step by self CPU time")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    datamodule, batches = load_batches(args)
    make = glove_6b_50d if args.embeddings == "glove6b50d" else random_embeddings
    embedding = make(datamodule.vocab, seed=args.seed)  # frozen, as DIN trains
    base = load_commit_class(args.base, "din", "DIN") if args.base else None
    print(f"# {' '.join(sys.argv)}")
    print(f"# torch {torch.__version__}, {platform.processor() or platform.machine()}; data "
          f"{args.data}: {len(datamodule.splits['train']):,} pairs, batch {args.batch}, "
          f"{len(batches) - args.warmup} timed batches x {args.rounds} rounds "
          f"(+{args.warmup} warm-up); padding in them: {padding(batches[args.warmup:])}; "
          f"embeddings {args.embeddings} ({embedding.embedding_dim}-d, frozen)")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for variant in args.variants:
            for dim in args.dims:
                measure(args, variant, dim, embedding, batches, base)


if __name__ == "__main__":
    main()
