"""Lightning's own cost a training step, with nothing of ours around it (issue 61, item 3).

``profile_step.py`` prints what everything around the network's forward, backward and
optimiser costs in our runs ("framework per step"). This script measures the floor under that
figure: the same training step run by a bare PyTorch loop and by ``Trainer.fit`` with every
optional part switched off (no logger, callbacks, progress bar, checkpointing or model summary;
nothing logged, no metric), so the difference is Lightning's loop alone: its hooks, the
optimiser closure of automatic optimisation (or the ``LightningOptimizer`` wrapper of manual
optimisation), the result collection and the progress counters.

Two networks bracket the cost's dependence on the model: one ``Linear`` (2 parameter tensors,
SGD) and a stack of 16 (32 tensors, Adagrad: the shape of Decomposable Attention's optimiser
step, whose per-tensor hooks Lightning wraps). Batches of 4 random vectors, one thread, CPU
time of this process per step (``time.process_time``); the three loops alternate, ``--rounds``
times.

    python benchmarks/lightning_floor.py                    # 3 rounds of 3,000 steps
    python benchmarks/lightning_floor.py --steps 1000 --rounds 1
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings
from collections.abc import Callable

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def network(layers: int) -> nn.Module:
    """``layers`` ``Linear`` maps of 10 features, the last one to 3 classes."""
    return nn.Sequential(*[nn.Linear(10, 10) for _ in range(layers - 1)], nn.Linear(10, 3))


def optimiser(name: str, params: object) -> torch.optim.Optimizer:
    return {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad}[name](params, lr=0.01)


class Step(L.LightningModule):
    """The bare loop's step as a LightningModule: no logging, no metric."""

    def __init__(self, layers: int, optimiser_name: str, manual: bool) -> None:
        super().__init__()
        self.net = network(layers)
        self.optimiser_name = optimiser_name
        self.automatic_optimization = not manual

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor],
                      batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if not self.automatic_optimization:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return optimiser(self.optimiser_name, self.parameters())


def loader(steps: int) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(steps * 4, 10, generator=generator)
    y = torch.randint(0, 3, (steps * 4,), generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=4)


def bare(steps: int, layers: int, optimiser_name: str) -> None:
    net = network(layers)
    opt = optimiser(optimiser_name, net.parameters())
    for x, y in loader(steps):
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def trainer(steps: int, layers: int, optimiser_name: str, manual: bool) -> None:
    fit = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    fit.fit(Step(layers, optimiser_name, manual), loader(steps))


def ms_per_step(run: Callable[[], None], steps: int) -> float:
    start = time.process_time()
    run()
    return (time.process_time() - start) / steps * 1e3


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps a loop (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    print(f"# Lightning {L.__version__}, torch {torch.__version__}, 1 thread, batch 4, "
          f"{args.steps} steps a loop, median of {args.rounds} alternated rounds (CPU ms a step)")
    print(f"{'network':<26} {'bare loop':>9} {'automatic':>9} {'manual':>9} "
          f"{'auto - bare':>11} {'manual - bare':>13}")
    out = {}
    for layers, name in ((1, "sgd"), (16, "adagrad")):
        loops: dict[str, Callable[[], None]] = {
            "bare": lambda layers=layers, name=name: bare(args.steps, layers, name),
            "automatic": lambda layers=layers, name=name: trainer(args.steps, layers, name, False),
            "manual": lambda layers=layers, name=name: trainer(args.steps, layers, name, True),
        }
        times: dict[str, list[float]] = {key: [] for key in loops}
        for _ in range(args.rounds):
            for key, run in loops.items():
                times[key].append(ms_per_step(run, args.steps))
        m = {key: statistics.median(values) for key, values in times.items()}
        label = f"{2 * layers} tensors, {name}"
        print(f"{label:<26} {m['bare']:9.3f} {m['automatic']:9.3f} {m['manual']:9.3f} "
              f"{m['automatic'] - m['bare']:11.3f} {m['manual'] - m['bare']:13.3f}")
        out[label] = m
    return out


if __name__ == "__main__":
    main()
