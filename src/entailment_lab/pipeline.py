"""Train and evaluate: compose the objects from config, fit, test, write results.

``src/train.py`` and ``src/eval.py`` are thin wrappers around ``train`` and ``evaluate``. The
building blocks in ``__all__`` are public: a benchmark or a notebook builds a run from them
as ``train`` does (``benchmarks/profile_step.py``, ``benchmarks/cost_growth.py``).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf
from torch import nn

from entailment_lab import predictions
from entailment_lab.callbacks import EpochSeed, ResultsRecorder, log_eval_summary
from entailment_lab.checkpoints import checkpoint_metadata
from entailment_lab.config import (
    budget_options,
    budget_record,
    check_config,
    instantiate,
    network_class,
    run_tags,
)
from entailment_lab.data.text import Vocabulary
from entailment_lab.data.transform import CHECKPOINT_ENTRY, InputTransform
from entailment_lab.embeddings import random_embeddings
from entailment_lab.errors import ConfigError, DataError
from entailment_lab.loggers import (
    build_loggers,
    finish_wandb,
    name_wandb_run,
    resolve_wandb_group,
)
from entailment_lab.models import kernels
from entailment_lab.models.base import Network
from entailment_lab.module import ClassifierModule
from entailment_lab.numeric_path import numeric_path
from entailment_lab.results import ResultsFile, clean_number
from entailment_lab.resume import (
    ResumeCommand,
    check_best_checkpoint,
    checkpoints_stay_in,
    resume,
)
from entailment_lab.signals import RunInterruptedError, interruption, sigterm_raises, stop_signal

__all__ = ["build_callbacks", "build_datamodule", "build_module", "build_net", "evaluate",
           "load_trained", "train"]
if TYPE_CHECKING:  # built from config (``data._target_``); its module imports ``datasets``,
    # which a process that builds networks only (benchmarks/gpu_check.py) need not have
    from entailment_lab.data.datamodule import TextDataModule

log = logging.getLogger(__name__)


# --- builders ----------------------------------------------------------------------------
def build_datamodule(data_cfg: DictConfig, vocab: Vocabulary | None = None,
                     test: bool = False, transform: InputTransform | None = None
                     ) -> TextDataModule:
    """The DataModule, set up (read, tokenised, indexed); ``vocab`` fixes the ids (a resumed
    run), ``transform`` the whole input transform, vocabulary included (a checkpoint's, eval).

    ``test``: the run tests after training, so each of ``data.test_splits`` must have its
    data; a local file left out fails here, before training, not after it.
    """
    datamodule = instantiate(data_cfg, "data")
    if vocab is not None:
        datamodule.vocab = vocab
    datamodule.transform = transform
    datamodule.prepare_data()
    datamodule.setup()
    missing = datamodule.missing_splits(datamodule.test_splits) if test else []
    if missing:
        raise DataError(
            f"data.files.{missing[0]}: not set, but the run tests on "
            f"{', '.join(datamodule.test_splits)} after training (data.test_splits); give "
            f"data.files.{missing[0]}=PATH, or test=false")
    return datamodule


def extra_test_files(cfg: DictConfig) -> dict[str, str]:
    """``extra_tests``: name -> file of each further labelled test set (null entries dropped)."""
    extra = cfg.get("extra_tests") or {}
    return {str(name): str(path) for name, path in extra.items() if path is not None}


def add_extra_tests(cfg: DictConfig, datamodule: TextDataModule) -> list[str]:
    """Read ``extra_tests`` into ``datamodule`` (its reader, vocabulary and label names);
    their names, in order."""
    extra = extra_test_files(cfg)
    for name, path in extra.items():
        datamodule.add_test_file(name, path)
    return list(extra)


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
    schedule = OmegaConf.to_container(cfg.get("scheduler") or {}, resolve=True)
    interval = schedule.pop("interval", "step")  # ours, not the scheduler's argument
    return ClassifierModule(
        net=net,
        embedding=embedding,
        optimizer=instantiate(cfg.optimizer, "optimizer"),
        scheduler=instantiate(schedule, "scheduler") if schedule.get("_target_") else None,
        scheduler_interval=interval,
        label_names=label_names,
        metrics=build_metrics(cfg.get("metrics") or {}),
        metadata=metadata,
    )


def build_metrics(metrics_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ``metrics`` group's torchmetrics classes, as partials taking ``num_classes``."""
    return {str(name): instantiate(node, f"metrics.{name}", _partial_=True)
            for name, node in metrics_cfg.items() if node is not None}


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


def _run_summary(cfg: DictConfig) -> dict[str, Any]:
    choices = {}
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        choices = {k: v for k, v in hc.runtime.choices.items() if not k.startswith("hydra")}
        # `budget` is an optional choice made by interpolation (${experiment}/${recipe}, in
        # conf/train.yaml): name it only where such a budget exists and was merged
        if choices.get("budget") not in budget_options():
            choices.pop("budget", None)
        overrides = list(hc.overrides.task)
    except ValueError:  # no Hydra run (a test, a notebook)
        overrides = []
    try:
        inputs = network_class(cfg.model.net).inputs if "model" in cfg else None
    except ConfigError:  # reported by check_config, inside the results file's lifetime
        inputs = None
    return {
        "task": cfg.task_name,
        "model": cfg.model.name if "model" in cfg else None,
        "inputs": inputs,  # what the model reads, "pair" or "sentence": the report's layout
        "dim": cfg.get("dim"),
        "seed": cfg.get("seed"),
        "data": cfg.data.get("name") if "data" in cfg else None,
        # the premise replaced by a constant (data.hypothesis_only): a diagnostic baseline
        "hypothesis_only": bool("data" in cfg and cfg.data.get("hypothesis_only")),
        "tags": list(cfg.get("tags") or []),
        "choices": choices,
        "overrides": overrides,
        # the epochs this run was given and its config's budget (config.budget_record): the
        # report marks a run given fewer as a reduced budget
        "budget": budget_record(cfg),
        # the early-stopping patience the run trained under (None: its whole budget)
        "early_stopping": ((cfg.get("callbacks") or {}).get("early_stopping") or {}).get(
            "patience"),
    }


# --- tasks -------------------------------------------------------------------------------
def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit ``cfg.model`` on ``cfg.data``, test the best checkpoint, write ``results.json``.

    The run's tags (W&B, ``results.json``) get its model, size and data (``run_tags``).
    Returns the metrics (also written to the results file); ``cfg.optimized_metric`` among them.
    """
    if "tags" in cfg:
        cfg.tags = run_tags(cfg)
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


def _train(cfg: DictConfig, results: ResultsFile) -> dict[str, Any]:
    check_config(cfg)
    L.seed_everything(cfg.seed, workers=True)
    resumed = resume(cfg, results)
    if resumed is not None:
        resolve_wandb_group(cfg, resumed.wandb_group)  # the same run, the same group
    resolve_wandb_group(cfg)  # before the config is recorded
    config = OmegaConf.to_container(cfg, resolve=True)
    # The loggers, callbacks and Trainer before the data: Lightning checks its arguments here.
    loggers = build_loggers(cfg, resumed.wandb_run_id if resumed else None)
    recorder = ResultsRecorder(results, config)
    callbacks = [*build_callbacks(cfg, has_logger=bool(loggers)), ResumeCommand(results),
                 recorder, EpochSeed(cfg.seed)]
    if resumed is not None and resumed.origin is not None:
        checkpoints_stay_in(resumed.origin, Path(cfg.paths.output_dir), callbacks)
    trainer: L.Trainer = instantiate(cfg.trainer, "trainer", callbacks=callbacks,
                                      logger=loggers or False)

    vocab = resumed.vocab if resumed else None
    datamodule = build_datamodule(cfg.data, vocab, test=bool(cfg.get("test")))
    extra = add_extra_tests(cfg, datamodule) if cfg.get("test") else []
    if extra_test_files(cfg) and not cfg.get("test"):
        log.warning("extra_tests are not evaluated: test=false")
    embedding = instantiate(cfg.embeddings, "embeddings")(vocab=datamodule.vocab)
    net = build_net(cfg.model.net, embedding, datamodule.num_classes, datamodule.vocab)
    module = build_module(cfg, net, embedding, datamodule.label_names, metadata={
        "vocab": datamodule.vocab.itos, CHECKPOINT_ENTRY: datamodule.transform.settings(),
        "embedding_dim": embedding.embedding_dim, "config": config,
        "overrides": results.data.get("overrides", [])})
    module.group_names = datamodule.group_names
    results.update(data_stats=datamodule.stats, embedding_stats=getattr(embedding, "stats", {}))
    try:
        _fit_and_test(cfg, trainer, module, datamodule, recorder,
                      [*datamodule.test_splits, *extra])
    except BaseException as err:
        stop = stop_signal(trainer, err)
        if stop is None:
            raise
        raise interruption(trainer, stop) from err
    return recorder.metrics


def _fit_and_test(cfg: DictConfig, trainer: L.Trainer, module: ClassifierModule,
                  datamodule: TextDataModule, recorder: ResultsRecorder,
                  test_sets: list[str]) -> None:
    """Fit, then (``eval_train``) the best checkpoint on the training split, then test it on
    each of ``test_sets`` (``data.test_splits``, then the ``extra_tests``), each recorded
    under its own name."""
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
        for name in test_sets:
            module.eval_split = datamodule.test_split = name
            module.group_names = datamodule.group_names_of(name)
            trainer.test(module, datamodule=datamodule, ckpt_path=ckpt_path)
        module.eval_split = datamodule.test_split = "test"


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate ``cfg.ckpt_path`` on ``cfg.split`` and on each ``extra_tests`` file; write
    ``results.json`` in the job folder."""
    return _with_results(_evaluate, cfg, {"task": "eval", "ckpt_path": cfg.ckpt_path,
                                          "split": cfg.split})


def load_trained(ckpt_path: str | os.PathLike, data_overrides: Mapping[str, Any] | None = None
                 ) -> tuple[ClassifierModule, TextDataModule | None, DictConfig]:
    """Rebuild a trained module (and, if ``data_overrides`` is given, its data) from a file.

    ``data_overrides`` is merged over the run's ``data`` config; ``None`` values keep the
    run's own (an ``eval.py`` knob left unset). The data is read through the checkpoint's
    input transform (``InputTransform.of_checkpoint``), as the run's training read it; an
    override of one of its knobs is refused.
    """
    checkpoint, meta = checkpoint_metadata(ckpt_path)
    run_cfg = OmegaConf.create(meta["config"])
    transform = InputTransform.of_checkpoint(meta)
    vocab = transform.vocab
    # Shape-only embedding: the trained weights come from the state dict below.
    embedding = random_embeddings(vocab, dim=meta["embedding_dim"], freeze=True)
    net = build_net(run_cfg.model.net, embedding, len(meta["label_names"]), vocab)
    module = build_module(run_cfg, net, embedding, meta["label_names"], meta)
    module.load_state_dict(checkpoint["state_dict"])
    module.eval()
    datamodule = None
    if data_overrides is not None:
        overrides = _drop_none(data_overrides)
        _keep_transform(transform, overrides)
        data_cfg = OmegaConf.merge(run_cfg.data, overrides)
        datamodule = build_datamodule(data_cfg, transform=transform)
    return module, datamodule, run_cfg


#: data knobs that the input transform fixes at training (the last two: its vocabulary)
TRANSFORM_KNOBS = ("lowercase", "max_length", "hypothesis_only", "vocab_splits",
                   "vocab_min_freq")


def _keep_transform(transform: InputTransform, overrides: Mapping[str, Any]) -> None:
    """Refuse a ``data.*`` override that would read the data otherwise than training did."""
    settings = transform.settings()
    for key in TRANSFORM_KNOBS:
        if key in overrides and overrides[key] != settings.get(key):
            stored = ", ".join(f"{k}={v}" for k, v in settings.items() if k != "keys")
            raise ConfigError(f"data.{key}={overrides[key]}: a checkpoint reads its data as its "
                              f"training did (its input transform: {stored}, and its "
                              f"vocabulary); drop data.{key}")


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the keys whose value is None, at every depth."""
    return {k: _drop_none(v) if isinstance(v, Mapping) else v
            for k, v in values.items() if v is not None}


def _evaluate(cfg: DictConfig, results: ResultsFile) -> dict[str, Any]:
    kernel_calls = kernels.calls()  # the fast paths that ran before this evaluation
    check_config(cfg)
    L.seed_everything(cfg.seed, workers=True)
    overrides = OmegaConf.to_container(cfg.data, resolve=True) if cfg.get("data") else {}
    module, datamodule, run_cfg = load_trained(cfg.ckpt_path, overrides)
    results.update(model=run_cfg.model.name, dim=run_cfg.get("dim"),
                   data=run_cfg.data.get("name"), params=module.parameter_summary())
    name_wandb_run(cfg, f"{run_cfg.model.name}-d{run_cfg.get('dim')}-s{run_cfg.seed}-"
                        f"{cfg.split}")  # eval.yaml has no model: the run's names
    loggers = build_loggers(cfg)
    trainer: L.Trainer = instantiate(cfg.trainer, "trainer", logger=loggers or False,
                                      callbacks=[])
    metrics: dict[str, Any] = {}
    breakdowns: dict[str, Any] = {}
    confusion: list[list[int]] = []
    stored: dict[str, Any] = {}
    for name in [cfg.split, *add_extra_tests(cfg, datamodule)]:
        # logged and printed under the set's own name (test_mismatched/acc); the training
        # split as train.py's eval_train pass names it (train/acc_eval)
        module.eval_split = name
        module.group_names = datamodule.group_names_of(name)
        trainer.test(module, dataloaders=datamodule.dataloader(name))
        metrics.update({k: clean_number(v) for k, v in trainer.callback_metrics.items()
                        if k.startswith(f"{module.eval_prefix}/")})
        breakdowns[name] = module.breakdown()
        if name in module.predictions:  # each example's prediction (predictions.py)
            stored[name] = predictions.entry(*module.predictions[name])
        if name == cfg.split:
            confusion = module.test_confusion.compute().tolist()
    log_eval_summary(trainer, metrics, breakdowns)  # W&B: the same keys as train.py's
    results.update(metrics=metrics, confusion_matrix=confusion, labels=module.label_names,
                   breakdowns=breakdowns, predictions=stored,
                   numeric_path=numeric_path(trainer.strategy.root_device, kernel_calls))
    log.info("%s", metrics)
    return metrics
