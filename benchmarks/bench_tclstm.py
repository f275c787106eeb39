"""TC-LSTMs (Table 2 row 4) training and inference speed: today's model beside a past commit's.

Both run in one process on the same real, length-bucketed batches of the DataModule (the
training loader's order, every ``stride``-th batch of an epoch), with the same initial weights
and the row's recipe optimiser (AdaGrad, lr 0.005); they alternate in ``--rounds`` rounds, so a
change of machine load hits both alike, and the first ``--warmup`` batches are not timed. The
word vectors are random, 50-d as the protocols' GloVe 6B 50-d, and trained, as the recipe
trains them (their values do not change the arithmetic); each model has its own copy. Prints ms
per training step (forward, backward, optimiser; no Lightning), ms per inference batch (eval
mode, no grad), the speed-ups and the largest differences between the two models' logits and
gradients on one batch (eval mode).

    python benchmarks/bench_tclstm.py --data ../shared/data/sick/train.jsonl.gz
    python benchmarks/bench_tclstm.py --data ../shared/data/snli/validation.jsonl.gz --base ''
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pairs import (
    Impl,
    differences,
    load_batches,
    load_commit_class,
    padding,
    print_speedups,
    time_rounds,
)

from entailment_lab.embeddings import random_embeddings
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.tclstm import TightlyCoupledLSTM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True,
                        help="sentence pairs, JSONL(.gz) in the hub's schema (premise, "
                             "hypothesis, label): the batches' lengths and words")
    parser.add_argument("--batch", type=int, default=32, help="the recipe's batch size")
    parser.add_argument("--steps", type=int, default=10, help="timed batches per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dim", type=int, default=50, help="d, the grid state size (row 4: 50)")
    parser.add_argument("--base", default="9afc387",
                        help="commit whose models/tclstm.py is timed beside today's "
                             "('' skips it; 9afc387: before the wavefront's reordering was "
                             "one index_select per block)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per run, as the protocols' runs

    datamodule, batches = load_batches(args)
    warm, timed = batches[: args.warmup], batches[args.warmup:]
    embedding = random_embeddings(datamodule.vocab, dim=50, seed=args.seed)
    torch.manual_seed(args.seed)
    model = TightlyCoupledLSTM(embedding, num_classes=3, dim=args.dim)
    adagrad = partial(torch.optim.Adagrad, lr=0.005)
    impls = [Impl("now", model, optimiser=adagrad)]
    base = load_commit_class(args.base, "tclstm", "TightlyCoupledLSTM") if args.base else None
    if base is not None:
        old = base(copy.deepcopy(embedding), num_classes=3, dim=args.dim)
        old.load_state_dict(model.state_dict())
        impls.append(Impl(args.base, old, optimiser=adagrad))
    diffs = differences(impls, timed[0])

    print(f"# {' '.join(sys.argv)}")
    print(f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, 1 thread; "
          f"data {args.data}: {len(datamodule.splits['train']):,} pairs, batch {args.batch}, "
          f"{len(timed)} timed batches x {args.rounds} rounds (+{len(warm)} warm-up); padding "
          f"in them: {padding(timed)}; {count_trainable_parameters(model, exclude=embedding):,} "
          f"parameters (word vectors not counted)")
    train, infer = time_rounds(impls, warm, timed, args.rounds)
    steps = args.rounds * len(timed)
    print(f"{'impl':8s} | {'train ms/step':>13s} {'pairs/s':>8s} | {'infer ms/batch':>14s} "
          f"{'pairs/s':>8s}")
    pairs = sum(len(b["label"]) for b in timed) * args.rounds
    for impl in impls:
        t, i = train[impl.name], infer[impl.name]
        print(f"{impl.name:8s} | {1000 * t / steps:13.1f} {pairs / t:8.1f} | "
              f"{1000 * i / steps:14.1f} {pairs / i:8.1f}")
    print_speedups(impls, train, infer, diffs)

if __name__ == "__main__":
    main()
