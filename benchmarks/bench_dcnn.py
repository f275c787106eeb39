"""DCNN training speed: the first formulation against today's, side by side in one process.

"before" is DCNN as first written (tests/models/dcnn/reference.py: one grouped ``conv1d`` with a
group per row, folding after it, the wide-convolution mask by convolving the input mask; the
per-layer L2 added to the loss; PyTorch's default Adagrad). "after" is models/dcnn.py (one
batched matmul per layer with the fold inside it, the mask by a running sum; the L2 as
per-group weight decay, ``ClassifierModule.parameter_groups``; fused Adagrad). Both train the
same initial weights on the same real, length-bucketed batches of the DataModule, alternating
in rounds so load changes hit both alike; the first batches warm up and are not timed.

    python benchmarks/bench_dcnn.py --data ../shared/data/sst5_phrases/train.jsonl.gz
    python benchmarks/bench_dcnn.py --data ../shared/data/sst5_phrases/train.jsonl.gz --batch 4

Prints ms per training step (forward + backward + optimiser, no Lightning), the epoch time it
implies for the whole file, inference sentences/s, the largest differences between the two
models' outputs, and where an "after" step goes. The full Lightning epoch (data loading,
logging and callbacks included) is measured by training with ``trainer.max_epochs=1``; the
figures of both are in docs/models/dcnn.md.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from entailment_lab.data.datamodule import TextDataModule  # noqa: E402
from entailment_lab.embeddings import random_embeddings  # noqa: E402
from entailment_lab.models import dcnn  # noqa: E402
from entailment_lab.models.dcnn import DCNNClassifier  # noqa: E402
from entailment_lab.module import ClassifierModule  # noqa: E402
from tests.models.dcnn.reference import reference_layer  # noqa: E402

Batch = dict[str, torch.Tensor]


def load_batches(args: argparse.Namespace) -> tuple[TextDataModule, list[Batch]]:
    """Every ``stride``-th batch of one epoch of the DataModule's bucketed training order."""
    datamodule = TextDataModule(
        fields={"sentence": ["text", "sentence"]}, label_names=[str(i) for i in range(5)],
        files={"train": args.data}, vocab_splits=["train"], batch_size=args.batch,
        seed=args.seed)
    datamodule.setup()
    loader = datamodule.train_dataloader()
    stride = max(1, len(loader) // (args.warmup + args.steps))
    batches = [b for i, b in enumerate(loader) if i % stride == 0]
    return datamodule, batches[: args.warmup + args.steps]


class Variant:
    """One model + optimiser + step function; ``old`` runs the first formulation."""

    def __init__(self, model: DCNNClassifier, old: bool) -> None:
        self.model, self.old = model, old
        adagrad = partial(torch.optim.Adagrad, lr=0.1, initial_accumulator_value=0.0)
        if old:
            self.optimiser = adagrad([p for p in model.parameters() if p.requires_grad])
        else:
            module = ClassifierModule(net=model, embedding=model.embedding,
                                      optimizer=partial(adagrad, fused=True),
                                      label_names=[str(i) for i in range(5)])
            self.optimiser = module.configure_optimizers()

    def formulation(self) -> None:
        dcnn.DCNNLayer.forward = _REFERENCE if self.old else _FAST  # type: ignore[method-assign]

    def loss(self, batch: Batch) -> torch.Tensor:
        logits = self.model(batch["sentence"], batch["sentence_mask"])["logits"]
        loss = F.cross_entropy(logits, batch["label"])
        if self.old:  # the L2 term in the loss, as first written
            loss = loss + sum(0.5 * c * sum(w.pow(2).sum() for w in ws)
                              for c, ws in self.model.l2_penalties())
        return loss

    def step(self, batch: Batch) -> None:
        self.optimiser.zero_grad()
        self.loss(batch).backward()
        self.optimiser.step()


_FAST = dcnn.DCNNLayer.forward


def _REFERENCE(self: dcnn.DCNNLayer, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return reference_layer(self, *args)


def seconds(fn: Callable[[Batch], None], batches: list[Batch]) -> float:
    start = time.perf_counter()
    for batch in batches:
        fn(batch)
    return time.perf_counter() - start


def breakdown(variant: Variant, batches: list[Batch]) -> dict[str, float]:
    """ms per step in forward, backward and the optimiser step."""
    parts = {"forward": 0.0, "backward": 0.0, "optimiser": 0.0}
    for batch in batches:
        t0 = time.perf_counter()
        variant.optimiser.zero_grad()
        loss = variant.loss(batch)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        variant.optimiser.step()
        t3 = time.perf_counter()
        parts["forward"] += t1 - t0
        parts["backward"] += t2 - t1
        parts["optimiser"] += t3 - t2
    return {k: 1000 * v / len(batches) for k, v in parts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True,
                        help="training file, JSONL(.gz) with sentence/text and label columns")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200, help="timed batches per round")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep-denormals", action="store_true",
                        help="compute denormal floats (training flushes them: flush_denormal)")
    parser.add_argument("--profile", action="store_true",
                        help="also print the operators of an 'after' step by self CPU time")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(not args.keep_denormals)  # as training does (train.yaml)
    torch.manual_seed(args.seed)

    datamodule, batches = load_batches(args)
    warm, timed = batches[: args.warmup], batches[args.warmup:]
    embedding = random_embeddings(datamodule.vocab, dim=48, seed=args.seed)
    # the sst5 experiment's network (conf/model/dcnn_sentence.yaml)
    model = DCNNClassifier(embedding, num_classes=5, folding=(True, True),
                           k_length="convolution", init="glorot")
    old, new = Variant(copy.deepcopy(model), old=True), Variant(model, old=False)

    with torch.no_grad():  # same weights: the two formulations agree
        old.formulation()
        ref = [old.model.eval()(b["sentence"], b["sentence_mask"])["logits"] for b in warm]
        new.formulation()
        out = [new.model.eval()(b["sentence"], b["sentence_mask"])["logits"] for b in warm]
    difference = max(float((a - b).abs().max()) for a, b in zip(ref, out, strict=True))

    train = {"before": 0.0, "after": 0.0}
    infer = {"before": 0.0, "after": 0.0}
    for variant in (old, new):  # warm-up
        variant.formulation()
        variant.model.train()
        seconds(variant.step, warm)
    for _ in range(args.rounds):
        for name, variant in (("before", old), ("after", new)):
            variant.formulation()
            variant.model.train()
            train[name] += seconds(variant.step, timed)
            variant.model.eval()
            with torch.no_grad():
                infer[name] += seconds(
                    lambda b, m=variant.model: m(b["sentence"], b["sentence_mask"]), timed)
    new.formulation()
    new.model.train()
    parts = breakdown(new, timed)

    steps = args.rounds * len(timed)
    rows = sum(len(b["label"]) for b in timed) * args.rounds
    epoch_steps = len(datamodule.train_dataloader())
    print(f"data: {args.data}, {len(datamodule.splits['train']):,} rows, batch {args.batch} "
          f"({epoch_steps:,} steps an epoch), vocabulary {len(datamodule.vocab):,} x 48, "
          f"{torch.get_num_threads()} thread(s), denormals "
          f"{'kept' if args.keep_denormals else 'flushed'}; {steps} timed steps each "
          f"({args.rounds} interleaved rounds)")
    print(f"largest |logit difference| before vs after, same weights: {difference:.2e}")
    print(f"{'':8s} {'ms/step':>8s} {'epoch s':>8s} {'train rows/s':>13s} "
          f"{'infer rows/s':>13s}")
    for name in ("before", "after"):
        ms = 1000 * train[name] / steps
        print(f"{name:8s} {ms:8.2f} {ms * epoch_steps / 1000:8.1f} {rows / train[name]:13,.0f} "
              f"{rows / infer[name]:13,.0f}")
    print(f"speed-up: training {train['before'] / train['after']:.2f}x, "
          f"inference {infer['before'] / infer['after']:.2f}x")
    print("after, ms per step: " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
    if args.profile:
        with torch.profiler.profile() as profiler:
            seconds(new.step, timed)
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
