"""Train and evaluate: compose the objects from config, fit, test, write results.

``src/train.py`` and ``src/eval.py`` are thin wrappers around ``train`` and ``evaluate``.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf
from torch import nn

from entailment_lab.callbacks import EpochSeed, ResultsRecorder
from entailment_lab.checkpoints import checkpoint_metadata
from entailment_lab.cli import CONFIG_DIR
from entailment_lab.config import configured_max_epochs, instantiate
from entailment_lab.data.datamodule import TextDataModule
from entailment_lab.data.text import Vocabulary
from entailment_lab.embeddings import random_embeddings
from entailment_lab.errors import ConfigError
from entailment_lab.loggers import build_loggers, finish_wandb, resolve_wandb_group, wandb_group
from entailment_lab.models.base import Network
from entailment_lab.module import ClassifierModule
from entailment_lab.results import (
    ResultsFile,
    RunInterruptedError,
    clean_number,
)
from entailment_lab.stops import (
    check_best_checkpoint,
    checkpoints_stay_in,
    interruption,
    link_resumed_run,
    sigterm_raises,
    stop_signal,
)

log = logging.getLogger(__name__)


# --- builders ----------------------------------------------------------------------------
def build_datamodule(data_cfg: DictConfig, vocab: Vocabulary | None = None) -> TextDataModule:
    """The DataModule, set up (read, tokenised, indexed); ``vocab`` fixes the ids (eval)."""
    datamodule = instantiate(data_cfg, "data")
    if vocab is not None:
        datamodule.vocab = vocab
    datamodule.prepare_data()
    datamodule.setup()
    return datamodule


def network_class(net_cfg: DictConfig) -> type[Network]:
    """The class named by ``model.net._target_``; it must follow the contract of ``Network``."""
    try:
        target = hydra.utils.get_class(net_cfg._target_)
    except Exception as err:  # Hydra wraps import errors in its own types
        raise ConfigError(f"model.net._target_: cannot import '{net_cfg._target_}' "
                          f"({err})") from err
    if not (isinstance(target, type) and issubclass(target, Network)):
        raise ConfigError(f"model.net._target_: {net_cfg._target_} is not a subclass of "
                          "entailment_lab.models.base.Network (README, 'Add a model')")
    return target


def build_net(net_cfg: DictConfig, embedding: nn.Embedding, num_classes: int,
              vocab: Vocabulary) -> Network:
    """The network from ``model.net``, given the context every model may need."""
    context: dict[str, Any] = {"embedding": embedding, "num_classes": num_classes}
    if network_class(net_cfg).needs_vocab:
        context["vocab"] = list(vocab.itos)
    return instantiate(net_cfg, "model.net", _convert_="all", **context)


def build_module(cfg: DictConfig, net: Network, embedding: nn.Embedding,
                 label_names: list[str], metadata: dict[str, Any]) -> ClassifierModule:
    """The LightningModule of a run config: its network, optimiser and schedule."""
    scheduler_cfg = cfg.scheduler.get("scheduler")
    return ClassifierModule(
        net=net,
        embedding=embedding,
        optimizer=instantiate(cfg.optimizer, "optimizer"),
        scheduler=instantiate(scheduler_cfg, "scheduler") if scheduler_cfg else None,
        scheduler_interval=cfg.scheduler.get("interval", "step"),
        label_names=label_names,
        metadata=metadata,
    )


def build_callbacks(cfg: DictConfig, has_logger: bool) -> list[L.Callback]:
    """The ``callbacks`` group's callbacks, less those the run switched off elsewhere: the
    progress bar under ``trainer.enable_progress_bar=false`` (Lightning refuses both at once)
    and the learning-rate monitor without a logger."""
    no_bar = (cfg.get("trainer") or {}).get("enable_progress_bar") is False
    callbacks = []
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is None or "_target_" not in node:
            continue
        callback = instantiate(node, f"callbacks.{name}")
        if isinstance(callback, LearningRateMonitor) and not has_logger:
            continue  # it refuses to run without a logger
        if isinstance(callback, ProgressBar) and no_bar:
            continue
        callbacks.append(callback)
    return callbacks


def _inputs(cfg: DictConfig) -> str | None:
    try:
        return network_class(cfg.model.net).inputs
    except ConfigError:  # reported by check_config, inside the results file's lifetime
        return None


def _budget_file_exists(choice: str | None) -> bool:
    return bool(choice) and (Path(CONFIG_DIR) / "budget" / f"{choice}.yaml").is_file()


def check_budget_override(overrides: list[str]) -> None:
    """An explicit ``budget=NAME`` must name a file of ``conf/budget/``: the group is optional
    (chosen by interpolation, conf/train.yaml), so Hydra skips a misspelt one without a word
    and the run would train the recipe's epochs instead."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") == "budget" and not _budget_file_exists(value):
            known = sorted(str(p.relative_to(Path(CONFIG_DIR) / "budget").with_suffix(""))
                           for p in (Path(CONFIG_DIR) / "budget").rglob("*.yaml"))
            raise ConfigError(f"budget={value}: no file conf/budget/{value}.yaml; the budgets "
                              f"are {', '.join(known)}. Leave budget out (the protocol picks "
                              "its own), or drop it with ~budget to train the recipe's epochs")


def _run_summary(cfg: DictConfig) -> dict[str, Any]:
    choices = {}
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        choices = {k: v for k, v in hc.runtime.choices.items() if not k.startswith("hydra")}
        # `budget` is an optional choice made by interpolation (${experiment}/${recipe}, in
        # conf/train.yaml): name it only where such a file exists and was merged
        if not _budget_file_exists(choices.get("budget")):
            choices.pop("budget", None)
        overrides = list(hc.overrides.task)
    except ValueError:  # no Hydra run (a test, a notebook)
        overrides = []
    return {
        "task": cfg.task_name,
        "model": cfg.model.name if "model" in cfg else None,
        # what the model reads, "pair" or "sentence": the report's table layout
        "inputs": _inputs(cfg) if "model" in cfg else None,
        "dim": cfg.get("dim"),
        "seed": cfg.get("seed"),
        "data": cfg.data.get("name") if "data" in cfg else None,
        "tags": list(cfg.get("tags") or []),
        "choices": choices,
        "overrides": overrides,
        # the epochs this run was given and the budget its config sets without a command-line
        # trainer.max_epochs: the report marks a run given fewer as a reduced budget
        "budget": {"max_epochs": cfg.trainer.get("max_epochs") if "trainer" in cfg else None,
                   "configured_max_epochs": configured_max_epochs(cfg, overrides)
                   if "trainer" in cfg else None},
    }


# --- tasks -------------------------------------------------------------------------------
def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit ``cfg.model`` on ``cfg.data``, test the best checkpoint, write ``results.json``.

    Returns the metrics (also written to the results file); ``cfg.optimized_metric`` among them.
    """
    return _with_results(_train, cfg, _run_summary(cfg))


def _with_results(task: Callable[[DictConfig, ResultsFile], dict[str, Any]], cfg: DictConfig,
                  summary: dict[str, Any]) -> dict[str, Any]:
    """Run ``task`` with a results file that says running, then completed, interrupted (with
    how to resume, also logged) or failed; always close the W&B run, so the next job of a
    multirun gets its own."""
    results = ResultsFile(cfg.paths.output_dir, summary)
    results.save()
    restore = sigterm_raises()
    try:
        metrics = task(cfg, results)
    except (RunInterruptedError, SIGTERMException, KeyboardInterrupt) as err:
        if not isinstance(err, RunInterruptedError):  # outside Lightning's loops
            stop, code = ("SIGTERM", 143) if isinstance(err, SIGTERMException) else ("SIGINT", 130)
            err = RunInterruptedError(f"interrupted by {stop} ({cfg.task_name} not started yet)"
                                      ": start it again", None, code)
        log.error("%s", err)
        results.finish("interrupted", err)
        raise err from None
    except BaseException as err:
        results.finish("failed", err)
        raise
    finally:
        restore()
        finish_wandb()
    results.finish("completed")
    return metrics


def check_config(cfg: DictConfig) -> None:
    """Fail before any data is read: required (``???``) values, the trainer's precision
    (``check_precision``), an explicit ``budget=`` (``check_budget_override``), then the
    model's own checks of its ``model.net`` values (``Network.check_config``; e.g. ``dim`` for
    DIN)."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(
            f"required config value(s) not set: {', '.join(missing)}; give them on the command "
            f"line, e.g. {missing[0]}=..."
        )
    if "trainer" in cfg:
        check_precision(cfg.trainer)
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        check_budget_override(list(HydraConfig.get().overrides.task))
    if "model" in cfg:  # the model's own cheap checks, e.g. DIN's perfect-square dim
        network_class(cfg.model.net).check_config(OmegaConf.to_container(cfg.model.net,
                                                                         resolve=True))


def check_precision(trainer_cfg: Mapping[str, Any]) -> None:
    """Refuse ``precision=16-mixed`` (or ``16``) on a CPU: Lightning only warns there and trains
    in ``bf16-mixed`` instead (float16 autocast is for GPUs), so the run would record one
    precision and train in another. The accelerator is resolved as Lightning's ``auto`` does
    (a GPU if one is there)."""
    if str(trainer_cfg.get("precision")) not in ("16", "16-mixed"):
        return
    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not CUDAAccelerator.is_available()
                                      and not MPSAccelerator.is_available())
    if on_cpu:
        raise ConfigError(
            f"trainer.precision={trainer_cfg.get('precision')} (float16 mixed precision) needs a "
            "GPU; on CPU Lightning would only warn and train in bf16-mixed instead. Use "
            "trainer.precision=bf16-mixed on CPU, or trainer=gpu on a GPU machine")


def _train(cfg: DictConfig, results: ResultsFile) -> dict[str, Any]:
    check_config(cfg)
    L.seed_everything(cfg.seed, workers=True)
    vocab, resume_id, origin = None, None, None
    if cfg.get("ckpt_path"):
        _, meta = checkpoint_metadata(cfg.ckpt_path)
        vocab, resume_id = Vocabulary(meta["vocab"]), meta.get("wandb_run_id")
        origin = link_resumed_run(cfg, results)
        resolve_wandb_group(cfg, wandb_group(meta["config"]))  # the same run, the same group
    resolve_wandb_group(cfg)  # before the config is recorded
    datamodule = build_datamodule(cfg.data, vocab)
    embedding = instantiate(cfg.embeddings, "embeddings")(vocab=datamodule.vocab)
    net = build_net(cfg.model.net, embedding, datamodule.num_classes, datamodule.vocab)
    config = OmegaConf.to_container(cfg, resolve=True)
    module = build_module(cfg, net, embedding, datamodule.label_names, metadata={
        "vocab": datamodule.vocab.itos, "embedding_dim": embedding.embedding_dim,
        "config": config})
    results.update(data_stats=datamodule.stats, embedding_stats=getattr(embedding, "stats", {}))

    loggers = build_loggers(cfg, resume_id)
    recorder = ResultsRecorder(results, config)
    callbacks = [*build_callbacks(cfg, has_logger=bool(loggers)), recorder, EpochSeed(cfg.seed)]
    if origin is not None:
        checkpoints_stay_in(origin, Path(cfg.paths.output_dir), callbacks)
    trainer: L.Trainer = instantiate(cfg.trainer, "trainer", callbacks=callbacks,
                                      logger=loggers or False)
    try:
        _fit_and_test(cfg, trainer, module, datamodule, recorder)
    except BaseException as err:
        stop = stop_signal(trainer, err)
        if stop is None:
            raise
        raise interruption(trainer, stop, results.data.get("overrides", []),
                            cfg.paths.output_dir) from err
    return recorder.metrics


def _fit_and_test(cfg: DictConfig, trainer: L.Trainer, module: ClassifierModule,
                  datamodule: TextDataModule, recorder: ResultsRecorder) -> None:
    """Fit, then (``eval_train``) the best checkpoint on the training split, then test."""
    with warnings.catch_warnings():
        # Said once below instead (a run stopped before its first validation).
        warnings.filterwarnings("ignore", r".*could not find the monitored key")
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))

    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    check_best_checkpoint(trainer, module.best_val_acc)
    validated = any("val/acc" in row for row in recorder.history)
    if not validated and not trainer.fast_dev_run:
        log.warning("training stopped before its first validation (step %d): no best "
                    "checkpoint%s", trainer.global_step,
                    "; testing the last weights" if cfg.get("test") else "")
    if cfg.get("eval_train") and best:
        # Training accuracy of the best checkpoint in eval mode (no dropout): what a model
        # fits, unlike the dropout-on running mean train/acc_at_best.
        module.eval_split = "train"
        trainer.test(module, dataloaders=datamodule.dataloader("train"), ckpt_path=best,
                     verbose=False)
        module.eval_split = "test"
    if cfg.get("test"):  # the best checkpoint (fast_dev_run saves none: the last weights)
        ckpt_path = None if trainer.fast_dev_run else best or None
        trainer.test(module, datamodule=datamodule, ckpt_path=ckpt_path)


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate ``cfg.ckpt_path`` on ``cfg.split``; write ``results.json`` in the job folder."""
    return _with_results(_evaluate, cfg, {"task": "eval", "ckpt_path": cfg.ckpt_path,
                                          "split": cfg.split})


def load_trained(ckpt_path: str | os.PathLike, data_overrides: Mapping[str, Any] | None = None
                 ) -> tuple[ClassifierModule, TextDataModule | None, DictConfig]:
    """Rebuild a trained module (and, if ``data_overrides`` is given, its data) from a file.

    ``data_overrides`` is merged over the run's ``data`` config; ``None`` values keep the
    run's own (an ``eval.py`` knob left unset).
    """
    checkpoint, meta = checkpoint_metadata(ckpt_path)
    run_cfg = OmegaConf.create(meta["config"])
    vocab = Vocabulary(meta["vocab"])
    # Shape-only embedding: the trained weights come from the state dict below.
    embedding = random_embeddings(vocab, dim=meta["embedding_dim"], freeze=True)
    net = build_net(run_cfg.model.net, embedding, len(meta["label_names"]), vocab)
    module = build_module(run_cfg, net, embedding, meta["label_names"], meta)
    module.load_state_dict(checkpoint["state_dict"])
    module.eval()
    datamodule = None
    if data_overrides is not None:
        data_cfg = OmegaConf.merge(run_cfg.data, _drop_none(data_overrides))
        datamodule = build_datamodule(data_cfg, vocab)
    return module, datamodule, run_cfg


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the keys whose value is None, at every depth."""
    return {k: _drop_none(v) if isinstance(v, Mapping) else v
            for k, v in values.items() if v is not None}


def _evaluate(cfg: DictConfig, results: ResultsFile) -> dict[str, Any]:
    check_config(cfg)
    L.seed_everything(cfg.seed, workers=True)
    overrides = OmegaConf.to_container(cfg.data, resolve=True) if cfg.get("data") else {}
    module, datamodule, run_cfg = load_trained(cfg.ckpt_path, overrides)
    results.update(model=run_cfg.model.name, dim=run_cfg.get("dim"),
                   data=run_cfg.data.get("name"), params=module.parameter_summary())
    loggers = build_loggers(cfg)
    trainer: L.Trainer = instantiate(cfg.trainer, "trainer", logger=loggers or False,
                                      callbacks=[])
    trainer.test(module, dataloaders=datamodule.dataloader(cfg.split))
    metrics = {f"{cfg.split}/{k.removeprefix('test/')}": clean_number(v)
               for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
    results.update(metrics=metrics, confusion_matrix=module.test_confusion.compute().tolist(),
                   labels=module.label_names)
    log.info("%s", metrics)
    return metrics
