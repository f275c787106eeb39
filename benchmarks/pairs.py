"""What the sentence-pair benchmarks share: real bucketed batches, a past commit's model class,
one implementation's training and inference step, timing and the outputs' differences."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from entailment_lab.data.datamodule import TextDataModule  # noqa: E402

Batch = dict[str, torch.Tensor]
KEYS = ("premise", "premise_mask", "hypothesis", "hypothesis_mask")


def load_batches(args: argparse.Namespace) -> tuple[TextDataModule, list[Batch]]:
    """Every ``stride``-th batch of one epoch of the DataModule's bucketed training order.

    ``args``: ``data`` (pairs in the hub's schema), ``batch``, ``seed``, ``warmup``, ``steps``.
    """
    datamodule = TextDataModule(
        fields={"premise": ["premise", "sentence1", "sentence_A"],
                "hypothesis": ["hypothesis", "sentence2", "sentence_B"]},
        label_field=["label", "gold_label", "entailment_judgment"],
        label_names=["entailment", "neutral", "contradiction"],
        files={"train": args.data}, vocab_splits=["train"], batch_size=args.batch, seed=args.seed)
    datamodule.setup()
    loader = datamodule.train_dataloader()
    stride = max(1, len(loader) // (args.warmup + args.steps))
    batches = [b for i, b in enumerate(loader) if i % stride == 0]
    return datamodule, batches[: args.warmup + args.steps]


@functools.cache
def load_commit_class(commit: str, module: str, name: str) -> type | None:
    """Class ``name`` of ``src/entailment_lab/models/<module>.py`` at ``commit`` (git show), or
    None with a message where git or the commit is missing. Past versions of our own code come
    from the history, never from frozen copies."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{commit}:src/entailment_lab/models/{module}.py"],
            check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        print(f"# {commit}: not measured (git show failed: {getattr(err, 'stderr', err)!s})")
        return None
    path = Path(tempfile.mkdtemp()) / f"{module}_{commit}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"{module}_{commit}", path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return getattr(loaded, name)


class Impl:
    """One implementation: a model (its own copy of the weights), its forward and its optimiser
    (Adam unless ``optimiser`` builds another from the parameters)."""

    def __init__(self, name: str, model: torch.nn.Module,
                 forward: Callable[..., dict[str, torch.Tensor]] | None = None,
                 optimiser: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]
                 = torch.optim.Adam) -> None:
        self.name, self.model = name, model
        self.forward = forward or model
        self.optimiser = optimiser([p for p in model.parameters() if p.requires_grad])

    def logits(self, batch: Batch) -> torch.Tensor:
        return self.forward(*(batch[k] for k in KEYS))["logits"]

    def train_step(self, batch: Batch) -> None:
        self.optimiser.zero_grad()
        F.cross_entropy(self.logits(batch), batch["label"]).backward()
        self.optimiser.step()

    def infer(self, batch: Batch) -> None:
        with torch.no_grad():
            self.logits(batch)


def seconds(fn: Callable[[Batch], None], batches: list[Batch]) -> float:
    start = time.perf_counter()
    for batch in batches:
        fn(batch)
    return time.perf_counter() - start


def differences(impls: list[Impl], batch: Batch) -> dict[str, tuple[float, float]]:
    """Largest |logit| and |gradient| difference of each implementation from the first."""
    results = []
    for impl in impls:
        impl.model.eval()
        impl.model.zero_grad()
        logits = impl.logits(batch)
        F.cross_entropy(logits, batch["label"]).backward()
        grads = {n: p.grad for n, p in impl.model.named_parameters() if p.grad is not None}
        results.append((logits.detach(), grads))
        impl.model.train()
    first_logits, first_grads = results[0]
    out = {}
    for impl, (logits, grads) in zip(impls[1:], results[1:], strict=True):
        d_logit = float((logits - first_logits).abs().max())
        d_grad = max(float((grads[n] - g).abs().max()) for n, g in first_grads.items())
        out[impl.name] = (d_logit, d_grad)
    return out


def padding(batches: list[Batch]) -> str:
    """Share of padded positions in the premises and in the hypotheses of ``batches``."""
    fractions = []
    for key in ("premise_mask", "hypothesis_mask"):
        real = sum(int(b[key].sum()) for b in batches)
        total = sum(b[key].numel() for b in batches)
        fractions.append(f"{key.split('_')[0]} {100 * (1 - real / total):.1f} %")
    return ", ".join(fractions)


def time_rounds(impls: list[Impl], warm: list[Batch], timed: list[Batch], rounds: int,
                each_round: Callable[[], None] | None = None
                ) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds of training steps and of inference per implementation, summed over ``rounds``.

    The implementations alternate within each round (a change of machine load hits all alike);
    ``warm`` batches are trained on once first and not timed; ``each_round`` runs at the start
    of every round (e.g. a reference timing).
    """
    train = dict.fromkeys((i.name for i in impls), 0.0)
    infer = dict.fromkeys((i.name for i in impls), 0.0)
    for impl in impls:
        seconds(impl.train_step, warm)
    for _ in range(rounds):
        if each_round is not None:
            each_round()
        for impl in impls:
            impl.model.train()
            train[impl.name] += seconds(impl.train_step, timed)
            impl.model.eval()
            infer[impl.name] += seconds(impl.infer, timed)
            impl.model.train()
    return train, infer


def print_speedups(impls: list[Impl], train: Mapping[str, float], infer: Mapping[str, float],
                   diffs: Mapping[str, tuple[float, float]]) -> None:
    """One line per implementation after the first ("now"): its speed-up and differences."""
    for impl in impls[1:]:
        d_logit, d_grad = diffs[impl.name]
        print(f"now vs {impl.name}: training {train[impl.name] / train['now']:.2f}x, inference "
              f"{infer[impl.name] / infer['now']:.2f}x faster; max |Δ logit| {d_logit:.1e}, "
              f"max |Δ grad| {d_grad:.1e} (eval mode, same weights)")
