"""DIIN training-step speed: today's model against the network at commit 6555cd6.

Both run in one process on the same real, length-bucketed batches of the DataModule (the
training loader's order, every ``stride``-th batch of an epoch), padded to ``--seq-length``
tokens as in training, with the same initial weights:

- ``now``: ``entailment_lab.models.diin`` as checked out;
- ``6555cd6``: ``src/entailment_lab/models/diin.py`` at that commit, read with ``git show``
  (the plain computation over the whole 48×48 interaction image).

A training step is the recipe's: forward, cross-entropy + the encoder-difference penalty,
backward, gradient clipping to norm 1, Adadelta (lr 0.5, rho 0.95, eps 1e-8). The two
implementations alternate in ``--rounds`` rounds, so a change of machine load hits both alike;
each round times ``--steps`` batches per implementation after ``--warmup`` untimed ones. Printed:
median ms per step of each implementation over the rounds, the speed-up of each round (its
median, min and max), the largest logit and gradient differences on one batch (eval mode,
same weights), and with ``--profile`` the operators of one ``now`` and one ``6555cd6`` step.

    python benchmarks/bench_diin.py                      # generated demo pairs
    python benchmarks/bench_diin.py --data ../shared/data/snli/validation.jsonl.gz
    taskset -c 0 python benchmarks/bench_diin.py --data ../shared/data/snli/validation.jsonl.gz
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pairs import KEYS, Batch, load_batches, load_commit_class, padding  # noqa: E402

from entailment_lab.data.demo import demo_pairs, write_jsonl  # noqa: E402
from entailment_lab.embeddings import random_embeddings  # noqa: E402
from entailment_lab.models.diin import DIIN  # noqa: E402

BASE = "6555cd6"


class Trainer:
    """One implementation: its model (own weights), its Adadelta, its training step."""

    def __init__(self, name: str, model: torch.nn.Module) -> None:
        self.name, self.model = name, model
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.optimiser = torch.optim.Adadelta(self.parameters, lr=0.5, rho=0.95, eps=1e-8)

    def logits(self, batch: Batch) -> torch.Tensor:
        return self.model(*(batch[k] for k in KEYS))["logits"]

    def step(self, batch: Batch) -> None:
        self.model.train()
        self.optimiser.zero_grad()
        loss = F.cross_entropy(self.logits(batch), batch["label"])
        (loss + self.model.regularization_loss()).backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, 1.0)
        self.optimiser.step()


def differences(now: Trainer, base: Trainer, batch: Batch) -> tuple[float, float]:
    """Largest |Δ logit| and |Δ gradient| between the two on ``batch`` (eval mode)."""
    results = []
    for trainer in (now, base):
        trainer.model.eval()
        trainer.model.zero_grad()
        logits = trainer.logits(batch)
        F.cross_entropy(logits, batch["label"]).backward()
        results.append((logits.detach(), {n: p.grad for n, p in
                                          trainer.model.named_parameters() if p.grad is not None}))
    (l_now, g_now), (l_base, g_base) = results
    d_grad = max(float((g_now[n] - g).abs().max()) for n, g in g_base.items())
    return float((l_now - l_base).abs().max()), d_grad


def extents(batches: list[Batch], length: int) -> str:
    """Longest premise and hypothesis of each batch (the box of the interaction image)."""
    return " ".join(f"{min(length, int(b['premise_mask'].sum(1).max()))}×"
                    f"{min(length, int(b['hypothesis_mask'].sum(1).max()))}" for b in batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="SNLI pairs, JSONL(.gz) in the hub's schema (premise, "
                        "hypothesis, label); default: generated demo pairs")
    parser.add_argument("--batch", type=int, default=70)
    parser.add_argument("--seq-length", type=int, default=48,
                        help="data.max_length = the model's sequence_length")
    parser.add_argument("--steps", type=int, default=3, help="timed batches per round")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--embeddings", choices=["random"], default="random",
                        help="300-d random word vectors (trained, as in the recipe)")
    parser.add_argument("--profile", action="store_true",
                        help="also print the operators of a step of each by self CPU time")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    if args.data is None:
        args.data = str(write_jsonl(demo_pairs(2000, seed=args.seed),
                                    Path(tempfile.mkdtemp()) / "demo.jsonl"))
    datamodule, batches = load_batches(args)
    vocab = list(datamodule.vocab.itos)
    length = args.seq_length
    for b in batches:  # the DataModule's truncation to data.max_length
        for key in KEYS:
            b[key] = b[key][:, :length]
    warm, timed = batches[: args.warmup], batches[args.warmup:]

    torch.manual_seed(args.seed)
    now = DIIN(random_embeddings(datamodule.vocab, seed=args.seed), 3, vocab,
               sequence_length=length)
    base_class = load_commit_class(BASE, "diin", "DIIN")
    if base_class is None:
        sys.exit(f"bench_diin: needs the repository's history (git show {BASE}), see above")
    base_model = base_class(random_embeddings(datamodule.vocab, seed=args.seed), 3, vocab,
                                  sequence_length=length)
    base_model.load_state_dict(now.state_dict())
    trainers = [Trainer("now", now), Trainer(BASE, base_model)]
    d_logit, d_grad = differences(*trainers, timed[0])

    print(f"# {' '.join(sys.argv)}")
    print(f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} thread(s); data {args.data}: batch {args.batch}, "
          f"sequence length {length}, {len(timed)} timed batches x {args.rounds} rounds "
          f"(+{len(warm)} warm-up), padding in them: {padding(timed)}; longest premise × "
          f"hypothesis per timed batch: {extents(timed, length)}")
    for trainer in trainers:
        for batch in warm:
            trainer.step(batch)
    ms: dict[str, list[float]] = {t.name: [] for t in trainers}
    for round_ in range(args.rounds):
        order = trainers if round_ % 2 == 0 else trainers[::-1]  # A/B, then B/A
        for trainer in order:
            start = time.perf_counter()
            for batch in timed:
                trainer.step(batch)
            ms[trainer.name].append(1000 * (time.perf_counter() - start) / len(timed))
    ratios = [b / n for b, n in zip(ms[BASE], ms["now"], strict=True)]
    for name, values in ms.items():
        print(f"{name:8s} ms/step: median {statistics.median(values):8.1f}  rounds "
              + " ".join(f"{v:.0f}" for v in values))
    print(f"now vs {BASE}: training step {statistics.median(ratios):.2f}x faster (median of "
          f"{len(ratios)} rounds; min {min(ratios):.2f}x, max {max(ratios):.2f}x); max |Δ logit| "
          f"{d_logit:.1e}, max |Δ grad| {d_grad:.1e} (float32, eval mode, same weights)")
    if args.profile:
        for trainer in trainers:
            with torch.profiler.profile() as profiler:
                trainer.step(timed[0])
            print(f"\n## {trainer.name}: one training step, operators by self CPU time")
            print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
