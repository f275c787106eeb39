"""Where a training epoch's time goes under Lightning: data, forward, backward, optimiser,
and the loop and callbacks around them (issue 50, "framework share").

The run is built as ``src/train.py`` builds it: the real Hydra config (``conf/``, composed with
``model=``, ``dim=`` and any further overrides), the pipeline's DataModule, network, module and
callbacks (checkpointing, progress bar, learning-rate monitor, epoch seeding), one epoch of
``Trainer.fit``. Validation is switched off (``limit_val_batches=0``, no sanity check), so the
epoch is the training loop alone. Three passes over the same training loader, in this order:

1. **data**: the training DataLoader iterated alone (collation, bucketing, nothing else);
2. **Trainer**: ``Trainer.fit`` for one epoch, timed by a ``Callback`` on Lightning's public
   hooks and an optimiser step hook (PyTorch's public ``register_step_post_hook``):
   - forward = ``on_train_batch_start`` -> ``on_before_backward``: ``training_step`` (the
     network, the loss, the metric updates, logging every ``log_every_n_steps``) and
     ``zero_grad``; the network alone is timed too, by forward hooks on it;
   - backward = ``on_before_backward`` -> ``on_after_backward``;
   - optimiser = ``on_before_optimizer_step`` -> the end of ``optimizer.step`` (gradient
     clipping where the recipe clips, then the update);
   - epoch = ``on_train_start`` -> ``on_train_end`` (the end-of-epoch checkpoint included);
   - loop and callbacks = epoch - data - forward - backward - optimiser;
3. **bare loop**: a plain PyTorch loop over the same loader (forward, cross-entropy plus the
   network's regulariser, backward, the recipe's clipping, optimiser and per-step scheduler),
   the issue's anchor "a bare loop vs ``Trainer``". ``--warmup`` untimed steps of it run
   before pass 1, so no pass pays the first steps' one-off costs.

The framework share is everything but forward, backward and the optimiser (data included),
as a share of the Trainer epoch; issue 50 asks for <= 5 %. Each part is printed in wall-clock
seconds and in CPU seconds of this process (``time.process_time``; the DataLoader runs in the
process, ``num_workers=0``). On a busy machine the wall clock also counts the time the process
waited for a core; with one thread the CPU time is close to what an idle core would take.

    python benchmarks/profile_step.py                              # generated demo pairs
    python benchmarks/profile_step.py --data ../shared/data/snli/validation.jsonl.gz \\
        --model din1 --dim 400 --threads 1
    python benchmarks/profile_step.py --model diin --batches 20 logger=wandb   # + overrides

``--net-commit COMMIT`` builds the network from its model file as it was at that commit
(``git show``, as ``bench_din.py --base`` does) and everything else as today, so two runs, one
with it and one without, compare the network's whole-epoch step under the same loop: e.g.
``--data ../shared/data/snli/validation.jsonl.gz --model din1 --dim 400 --no-bare
--net-commit bfd714b``. Run the two alternately and compare medians: the machine's pace drifts.
Knobs that the past class does not have are left out, and the script says which.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

from measure import cpu_name  # noqa: E402  (benchmarks/peers/measure.py, shared with the peers)

from entailment_lab.callbacks import EpochSeed  # noqa: E402
from entailment_lab.config import instantiate, register_resolvers  # noqa: E402
from entailment_lab.loggers import build_loggers  # noqa: E402
from entailment_lab.models.base import Network  # noqa: E402
from entailment_lab.pipeline import (  # noqa: E402
    build_callbacks,
    build_datamodule,
    build_module,
    build_net,
)
from entailment_lab.threads import keep_freed_memory  # noqa: E402

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PARTS = ("data", "forward", "backward", "optimiser", "loop and callbacks")


def compose_config(overrides: list[str], output_dir: Path) -> DictConfig:
    """The ``conf/train.yaml`` config with ``overrides``, as ``src/train.py`` composes it, with
    its job folder (outputs, data, caches) in ``output_dir``."""
    register_resolvers()
    GlobalHydra.instance().clear()
    initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf"))
    cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(output_dir)
        cfg.hydra.job.num = 0
        cfg.paths.output_dir = str(output_dir)
        cfg.paths.data_dir = str(output_dir / "data")
    HydraConfig().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def model_overrides(model: str, dim: int | None, threads: int) -> list[str]:
    """``model=``, ``dim=`` (where given) and ``threads=``: the model as a user trains it."""
    return [f"model={model}", *([f"dim={dim}"] if dim is not None else []),
            f"threads={threads}"]


def clock(device: torch.device) -> float:
    """Seconds now, after the device's queued work (GPU kernels run asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class StepTimer(L.Callback):
    """Wall-clock and CPU seconds of forward, backward and optimiser over an epoch, from
    Lightning's hooks."""

    PARTS = ("forward", "backward", "optimiser", "closure return", "network forward", "epoch")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.PARTS, 0.0)
        self.cpu_seconds = dict.fromkeys(self.PARTS, 0.0)
        self.steps = 0
        self._marks: dict[str, tuple[float, float]] = {}
        self._device = torch.device("cpu")
        self._hooks: list[Any] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._device = pl_module.device
        net = getattr(pl_module, "net", pl_module)
        self._hooks = [optimizer.register_step_post_hook(self._after_step)
                       for optimizer in trainer.optimizers]
        self._hooks += [net.register_forward_pre_hook(lambda *_: self._mark("net")),
                        net.register_forward_hook(lambda *_: self._add("network forward", "net"))]
        self._mark("epoch")

    def _mark(self, name: str) -> None:
        self._marks[name] = (clock(self._device), time.process_time())

    def _add(self, part: str, since: str) -> None:
        now = (clock(self._device), time.process_time())
        self.seconds[part] += now[0] - self._marks[since][0]
        self.cpu_seconds[part] += now[1] - self._marks[since][1]
        self._marks[part] = now

    def _after_step(self, *_: Any) -> None:
        self._add("optimiser", "before step")

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        self._mark("batch")

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           loss: torch.Tensor) -> None:
        self._add("forward", "batch")

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._add("backward", "forward")

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        self._add("closure return", "backward")
        self._mark("before step")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        self.steps += 1

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._add("epoch", "epoch")
        for hook in self._hooks:
            hook.remove()


def limited(loader: Any, batches: int | None) -> Any:
    for i, batch in enumerate(loader):
        if batches is not None and i >= batches:
            return
        yield batch


def data_seconds(datamodule: Any, batches: int | None) -> tuple[float, float, int]:
    """Wall-clock and CPU seconds to iterate the training loader alone, and its batches."""
    start, start_cpu, count = time.perf_counter(), time.process_time(), 0
    for _ in limited(datamodule.train_dataloader(), batches):
        count += 1
    return time.perf_counter() - start, time.process_time() - start_cpu, count


def bare_loop_seconds(cfg: DictConfig, module: Any, datamodule: Any, batches: int | None
                      ) -> tuple[float, float]:
    """Wall-clock and CPU seconds of a plain PyTorch training loop over the training loader:
    the module's own optimiser and per-step scheduler, the recipe's clipping, no Lightning."""
    configured = module.configure_optimizers()
    optimizer = configured["optimizer"] if isinstance(configured, dict) else configured
    scheduler = configured["lr_scheduler"] if isinstance(configured, dict) else None
    net = module.net
    device = next(net.parameters()).device
    clip = cfg.trainer.get("gradient_clip_val")
    params = [p for p in net.parameters() if p.requires_grad]
    net.train()
    start, start_cpu = clock(device), time.process_time()
    for step, batch in enumerate(limited(datamodule.train_dataloader(), batches)):
        batch = {k: v.to(device) for k, v in batch.items()}
        net.set_training_step(step)
        logits = module(batch)["logits"]
        loss = F.cross_entropy(logits, batch["label"])
        reg = net.regularization_loss()
        if reg is not None:
            loss = loss + reg
        optimizer.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, float(clip))
        optimizer.step()
        if scheduler is not None and scheduler["interval"] == "step":
            scheduler["scheduler"].step()
    return clock(device) - start, time.process_time() - start_cpu


ONE_EPOCH = ["test=false", "eval_train=false", "trainer.max_epochs=1",
             "trainer.limit_val_batches=0", "trainer.num_sanity_val_steps=0"]


def past_network(target: str, commit: str) -> type[Network]:
    """The network class ``target`` (``model.net._target_``, e.g.
    ``entailment_lab.models.din.DIN``) from its model file at ``commit``, under today's
    ``Network`` contract (its own methods first, the contract's defaults for what it lacks)."""
    from pairs import load_commit_class  # imports the DataModule (datasets): only here

    module, name = target.rsplit(".", 1)
    stem = module.rsplit(".", 1)[-1]
    past = load_commit_class(commit, stem, name)
    if past is None:
        raise SystemExit(f"--net-commit {commit}: src/entailment_lab/models/{stem}.py (for "
                         f"{target}) could not be read at that commit")
    return past if issubclass(past, Network) else type(name, (past, Network), {})


def build_past_net(net_class: type[Network], net_cfg: DictConfig, embedding: torch.nn.Embedding,
                   num_classes: int) -> Network:
    """``net_class`` built from the ``model.net`` knobs it has; prints the ones it lacks."""
    knobs = {k: v for k, v in OmegaConf.to_container(net_cfg, resolve=True).items()
             if k != "_target_"}
    accepted = inspect.signature(net_class.__init__).parameters
    if missing := sorted(set(knobs) - set(accepted)):
        print(f"# the past {net_class.__name__} has no knob {', '.join(missing)}: left out")
    return net_class(embedding=embedding, num_classes=num_classes,
                     **{k: v for k, v in knobs.items() if k in accepted})


def build_run(overrides: list[str], threads: int, work: Path,
              extra_callbacks: Sequence[L.Callback] = (),
              net_commit: str | None = None,
              ) -> tuple[DictConfig, Any, Any, L.Trainer, StepTimer]:
    """The config, DataModule, module and ``Trainer`` of one training epoch as ``src/train.py``
    builds them (no validation, no test), with a ``StepTimer`` (and ``extra_callbacks``) among
    the callbacks; the network's class as at ``net_commit`` where given (``past_network``)."""
    cfg = compose_config([*ONE_EPOCH, *overrides], work)
    net_class = past_network(cfg.model.net._target_, net_commit) if net_commit else None
    torch.set_num_threads(threads)
    keep_freed_memory()  # the CPU policy of src/train.py's run_task
    L.seed_everything(cfg.seed, workers=True)

    datamodule = build_datamodule(cfg.data)
    embedding = instantiate(cfg.embeddings, "embeddings")(vocab=datamodule.vocab)
    if net_class is None:
        net = build_net(cfg.model.net, embedding, datamodule.num_classes, datamodule.vocab)
    else:
        net = build_past_net(net_class, cfg.model.net, embedding, datamodule.num_classes)
    module = build_module(cfg, net, embedding, datamodule.label_names, metadata={
        "vocab": datamodule.vocab.itos, "embedding_dim": embedding.embedding_dim,
        "config": OmegaConf.to_container(cfg, resolve=True)})
    loggers = build_loggers(cfg)
    timer = StepTimer()
    callbacks = [*build_callbacks(cfg, has_logger=bool(loggers)), EpochSeed(cfg.seed), timer,
                 *extra_callbacks]
    trainer: L.Trainer = instantiate(cfg.trainer, "trainer", callbacks=callbacks,
                                      logger=loggers or False)
    return cfg, datamodule, module, trainer, timer


def fit_quietly(trainer: L.Trainer, module: Any, datamodule: Any) -> float:
    """``trainer.fit`` without the warnings that a run without validation draws; wall seconds."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*(could not find the monitored key|"
                                r"limit_val_batches|val_dataloader).*")
        start = time.perf_counter()
        trainer.fit(module, datamodule=datamodule)
        return time.perf_counter() - start


def profile(args: argparse.Namespace) -> dict[str, float]:
    """Build the run, time the three passes, print the split; returns seconds per part."""
    work = Path(tempfile.mkdtemp(prefix="profile_step_"))
    data = (["data=snli", f"data.files.train={Path(args.data).resolve()}",
             "data.vocab_splits=[train]"] if args.data else ["data=demo"])
    limit = [f"trainer.limit_train_batches={args.batches}"] if args.batches else []
    overrides = [*model_overrides(args.model, args.dim, args.threads), *data,
                 f"logger={args.logger}", f"trainer.accelerator={args.accelerator}", *limit,
                 *args.overrides]
    cfg, datamodule, module, trainer, timer = build_run(overrides, args.threads, work,
                                                        net_commit=args.net_commit)

    # a few untimed steps first, so no pass pays the first steps' one-off costs (allocator)
    bare_loop_seconds(cfg, module, datamodule, args.warmup)
    data_s, data_cpu, n_batches = data_seconds(datamodule, args.batches)
    fit_s = fit_quietly(trainer, module, datamodule)
    bare_s = bare_loop_seconds(cfg, module, datamodule, args.batches) if args.bare else None

    def split(s: dict[str, float], data: float) -> dict[str, float]:
        parts = {"data": data, "forward": s["forward"], "backward": s["backward"],
                 "optimiser": s["optimiser"]}
        parts["loop and callbacks"] = s["epoch"] - sum(parts.values())
        return parts

    s, c = timer.seconds, timer.cpu_seconds
    parts, cpu = split(s, data_s), split(c, data_cpu)
    epoch, epoch_cpu = s["epoch"], c["epoch"]
    framework = epoch - s["forward"] - s["backward"] - s["optimiser"]
    framework_cpu = epoch_cpu - c["forward"] - c["backward"] - c["optimiser"]

    pairs = sum(len(b["label"]) for b in limited(datamodule.train_dataloader(), args.batches))
    past = f" (network of {args.net_commit})" if args.net_commit else ""
    print(f"# {cfg.model.name}{past}, dim {cfg.get('dim')}, {module.num_trainable:,} trainable "
          f"parameters; data {args.data or 'demo corpus (generated)'}: {timer.steps} steps "
          f"({n_batches} batches, {pairs:,} pairs, batch size {cfg.data.batch_size}); "
          f"{torch.get_num_threads()} thread(s), {cpu_name()}, "
          f"device {module.device}, torch {torch.__version__}, lightning {L.__version__}")
    print(f"{'part':20s} {'seconds':>9s} {'% epoch':>8s} {'ms/step':>8s} | {'CPU s':>8s} "
          f"{'% CPU':>7s}")
    steps = max(timer.steps, 1)
    for name in [*PARTS, "Trainer epoch"]:
        wall, own = (epoch, epoch_cpu) if name == "Trainer epoch" else (parts[name], cpu[name])
        print(f"{name:20s} {wall:9.2f} {100 * wall / epoch:7.1f}% {1000 * wall / steps:8.1f} | "
              f"{own:8.2f} {100 * own / epoch_cpu:6.1f}%")  # CPU share of the CPU epoch
    print(f"framework share (all but forward, backward, optimiser): {framework:.2f} s = "
          f"{100 * framework / epoch:.1f} % of the epoch; CPU time: {framework_cpu:.2f} s = "
          f"{100 * framework_cpu / epoch_cpu:.1f} % (issue 50 target <= 5 %)")
    print(f"  of forward, the network alone: {s['network forward']:.2f} s; of the loop, "
          f"closure return {s['closure return']:.3f} s; Trainer.fit wall time {fit_s:.2f} s "
          f"(setup and teardown {fit_s - epoch:.2f} s, not in the epoch)")
    # Per step, in CPU time: everything but the network's forward, the backward, the optimiser
    # and the data (training_step's loss, metric updates and logging, zero_grad, the loop,
    # the callbacks, the progress bar). With one thread CPU time is close to an idle core's.
    around = 1000 * (c["forward"] - c["network forward"]) / steps
    loop = 1000 * (epoch_cpu - c["forward"] - c["backward"] - c["optimiser"] - data_cpu) / steps
    per_step = around + loop
    print(f"framework per step (CPU time): {per_step:.2f} ms = {around:.2f} ms in training_step "
          f"around the network (loss, metric updates, logging, zero_grad) + {loop:.2f} ms loop, "
          f"callbacks and progress bar (issue 61 target <= 0.3 ms); network step "
          f"{1000 * (c['network forward'] + c['backward'] + c['optimiser']) / steps:.2f} ms")
    result = {**parts, "epoch": epoch, "framework": framework, "framework_cpu": framework_cpu,
              "framework_per_step_ms": per_step}
    if bare_s is not None:
        print(f"bare PyTorch loop over the same loader: {bare_s[0]:.2f} s (CPU {bare_s[1]:.2f} "
              f"s); Trainer epoch / bare loop = {epoch / bare_s[0]:.2f}x (CPU time "
              f"{epoch_cpu / bare_s[1]:.2f}x); Trainer - bare loop = "
              f"{1000 * (epoch_cpu - bare_s[1]) / steps:.2f} ms a step (CPU time)")
        result["bare_minus_trainer_ms"] = 1000 * (epoch_cpu - bare_s[1]) / steps
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="training pairs in the hub's schema (.jsonl[.gz], "
                        ".parquet); default: the generated demo corpus")
    parser.add_argument("--model", default="din1", help="a conf/model/ option (default din1)")
    parser.add_argument("--dim", type=int, default=None, help="encoding size (default: the "
                        "model's own)")
    parser.add_argument("--batches", type=int, default=None,
                        help="training batches (trainer.limit_train_batches); default: an epoch")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed bare-loop steps before the timed passes (default 2)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--logger", default="csv", help="a conf/logger/ option (default csv)")
    parser.add_argument("--accelerator", default="cpu", help="cpu (default), gpu or auto")
    parser.add_argument("--no-bare", dest="bare", action="store_false",
                        help="skip the bare PyTorch loop")
    parser.add_argument("--net-commit", default=None,
                        help="build the network from its model file at this commit (git "
                             "show), the rest as today: the same loop around a past network")
    parser.add_argument("overrides", nargs="*", help="further Hydra overrides, e.g. seed=2")
    return parser.parse_args(argv)


def main() -> None:
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    profile(parse_args())


if __name__ == "__main__":
    main()
