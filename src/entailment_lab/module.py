"""The one LightningModule: trains, validates and tests any network of ``entailment_lab.models``.

The network is built from config and injected (``net``), as in lightning-hydra-template; this
module only knows the contract of ``models.base.Network``: a batch is the network's keyword
inputs plus ``label``, and the network returns ``{"logits": ...}``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import PurePath
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import nn
from torchmetrics import MaxMetric, MeanMetric, Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from entailment_lab.data.batching import GROUP_PREFIX, ROW_KEY, network_inputs
from entailment_lab.errors import ConfigError
from entailment_lab.models.base import Network
from entailment_lab.models.common import count_trainable_parameters

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "entailment_lab"


class ClassifierModule(L.LightningModule):
    """Cross-entropy training of a sentence-pair (or single-sentence) classifier.

    Args:
        net: the network (a ``models.base.Network``).
        embedding: the network's word-embedding layer, excluded from the parameter count.
        optimizer: a partial optimiser (``_partial_: true`` in config) taking the parameters.
        scheduler: an optional partial LR scheduler taking the optimiser.
        scheduler_interval: ``step`` (the DIN paper decays every 1,000 steps) or ``epoch``.
        label_names: class names in id order.
        metrics: the metrics every stage computes, by name (the ``metrics`` config group):
            each a callable taking ``num_classes`` (a partial torchmetrics class), logged as
            ``<stage>/<name>``; ``acc`` is always there (checkpoints and early stopping watch
            ``val/acc``). A metric that returns one value per class (``average: none``) is
            logged per class, ``<stage>/<name>/<label>``, on validation and test.
        metadata: stored in every checkpoint under ``"entailment_lab"`` (vocabulary, resolved
            config) so ``eval.py`` and ``explain.py`` can rebuild the run from the file alone.
    """

    def __init__(
        self,
        net: Network,
        embedding: nn.Embedding,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        scheduler_interval: str = "step",
        label_names: Sequence[str] = ("entailment", "neutral", "contradiction"),
        metrics: Mapping[str, Callable[..., Metric]] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["net", "embedding", "optimizer", "scheduler",
                                          "metrics", "metadata"], logger=False)
        self.net = net
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval
        self.label_names = list(label_names)
        self.metadata = dict(metadata or {})
        num_classes = len(self.label_names)
        self.num_trainable = count_trainable_parameters(net, exclude=embedding)
        self.num_paper_convention = net.paper_parameter_count()

        factories = {"acc": partial(MulticlassAccuracy, average="micro"), **(metrics or {})}

        def collection() -> MetricCollection:
            # Labels and logits come from our own pipeline: no per-update argument checks.
            return MetricCollection({name: make(num_classes=num_classes, validate_args=False)
                                     for name, make in factories.items()}, compute_groups=False)

        self.train_metrics, self.val_metrics, self.test_metrics = (collection(), collection(),
                                                                   collection())
        # Each loss is the mean over pairs: every update weighs its batch mean by the batch's
        # size, so an epoch's figure does not depend on how the pairs were batched. A NaN loss
        # is kept, not dropped (torchmetrics' default drops it with a warning, so a diverged
        # run's epoch loss would look sound): "replace NaN by NaN" makes the epoch's mean NaN,
        # where a reader sees it. Not "disable": that strategy also drops the weights
        # (torchmetrics 1.9), which would make the mean a mean over batches.
        self.train_loss, self.val_loss, self.test_loss = (
            MeanMetric(nan_strategy=float("nan")) for _ in range(3))
        self.val_acc_best = MaxMetric()
        self.val_acc_best.persistent(True)  # survives resuming from last.ckpt
        self.test_confusion = MulticlassConfusionMatrix(num_classes=num_classes)
        self.train_acc_at_best: float | None = None  # dropout-on running mean, see README
        # What the test loop is evaluating: "test", another test set (MultiNLI's
        # "test_mismatched", an extra test file's name), or "train" for the eval-mode training
        # accuracy of the best checkpoint (logged as train/acc_eval, see ``eval_name``).
        self.eval_split = "test"
        # Test accuracy per group (``breakdowns``): breakdown name -> group names, set from
        # the DataModule's ``group_names_of(split)`` for the set under test (``overlap``,
        # ``genre``); batches carry ``group/<name>``.
        self.group_names: dict[str, list[str]] = {}
        self.breakdowns: dict[str, dict[str, Any]] = {}
        self._tallies: dict[str, torch.Tensor] = {}  # name -> (groups, 2): [pairs, correct]
        # Each test set's predicted and gold class ids in the order of the set (its rows), for
        # paired significance tests (``predictions.py``): set name -> (predicted, gold).
        self.predictions: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._rows: list[torch.Tensor] = []  # per test batch: (batch, 3) [row, predicted, gold]
        self._epoch_metrics_logged: int | None = None  # the epoch whose metric objects are logged

    # --- forward -------------------------------------------------------------------------
    def forward(self, batch: Mapping[str, torch.Tensor], **kwargs: Any) -> dict[str, torch.Tensor]:
        return self.net(**network_inputs(batch), **kwargs)

    def _step(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(batch)["logits"]
        loss = F.cross_entropy(logits, batch["label"])
        return loss, logits

    def parameter_summary(self) -> dict[str, int]:
        """``params/trainable`` (true count, no word embeddings) and, if defined, the paper's."""
        out = {"params/trainable": self.num_trainable}
        if self.num_paper_convention is not None:
            out["params/paper_convention"] = self.num_paper_convention
        return out

    # --- Lightning hooks -----------------------------------------------------------------
    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.net.set_training_step(self.global_step)
        loss, logits = self._step(batch)
        reg = self.net.regularization_loss()
        if reg is not None:
            loss = loss + reg
        # ``update``, not the metric's ``forward``: forward also computes the batch's own value
        # (a state copy, reset and restore; measured alone, 0.11 ms a call against 0.03 ms);
        # the step value is logged from ``loss`` below.
        self.train_loss.update(loss.detach(), weight=len(batch["label"]))  # a mean over pairs
        self.train_metrics.update(logits, batch["label"])
        # ``self.log`` costs about a millisecond a call, as much as a small model's step
        # (docs/peer_speed.md, "the framework's cost"). The epoch values (loss mean, accuracy,
        # other metrics) are the metric objects: logged once an epoch, which registers them;
        # Lightning computes them at the epoch's end from every update above. The step values
        # are logged where the logger writes them, every ``log_every_n_steps``-th step
        # (Lightning's rule: global step + 1), and at the epoch's first batch.
        if self._epoch_metrics_logged != self.current_epoch:
            self._epoch_metrics_logged = self.current_epoch
            # the keys Lightning gives on_step + on_epoch logging: train/loss_step, _epoch
            self.log("train/loss_epoch", self.train_loss, on_step=False, on_epoch=True,
                     prog_bar=True)
            self._log_metrics("train", self.train_metrics)
        try:
            every = self.trainer.log_every_n_steps
        except RuntimeError:  # not attached to a Trainer (a step called on its own)
            every = 1
        if batch_idx == 0 or (every and (self.global_step + 1) % every == 0):
            if reg is not None:
                self.log("train/reg_loss", reg, on_step=True, on_epoch=False)
            if self.net.l2_penalties():  # applied by the optimiser (configure_optimizers)
                self.log("train/l2_penalty", self.l2_penalty(), on_step=True, on_epoch=False)
            self.log("train/loss_step", loss.detach(), on_step=True, on_epoch=False,
                     prog_bar=True)
        return loss

    def _log_metrics(self, prefix: str, metrics: MetricCollection) -> None:
        """Log each one-value metric as ``prefix/name`` (Lightning computes it over the epoch);
        per-class metrics are logged at the epoch's end (``_log_per_class``)."""
        for name, metric in metrics.items():
            if not _per_class(metric):
                self.log(f"{prefix}/{name}", metric, on_step=False, on_epoch=True,
                         prog_bar=name == "acc")

    def _log_per_class(self, prefix: str, metrics: MetricCollection) -> None:
        for name, metric in metrics.items():
            if _per_class(metric):
                values = metric.compute()
                for label, value in zip(self.label_names, values, strict=True):
                    self.log(f"{prefix}/{name}/{label}", value)
                metric.reset()

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        loss, logits = self._step(batch)
        self.val_loss.update(loss, weight=len(batch["label"]))  # a mean over pairs
        self.val_metrics.update(logits, batch["label"])
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self._log_metrics("val", self.val_metrics)

    def on_validation_epoch_end(self) -> None:
        self._log_per_class("val", self.val_metrics)
        acc = self.val_metrics["acc"].compute()
        if not self.trainer.sanity_checking:
            # The stored maximum (-inf before any update), restored on resume; update_count
            # is not, so it cannot tell a resumed run's first validation from a new best.
            previous = self.val_acc_best.max_value.clone()
            self.val_acc_best(acc)
            train_acc = self.train_metrics["acc"]
            if acc > previous and train_acc.update_count:
                # Validation runs at the end of the training epoch, so this is its accuracy.
                self.train_acc_at_best = float(train_acc.compute())
        best = self.val_acc_best.compute() if self.val_acc_best.update_count else acc
        self.log("val/acc_best", best, sync_dist=True, prog_bar=True)

    @property
    def best_val_acc(self) -> float | None:
        """The best validation accuracy so far (restored on resume); ``None`` before any."""
        best = float(self.val_acc_best.max_value)
        return best if math.isfinite(best) else None

    @property
    def eval_prefix(self) -> str:
        """Where the test loop's metrics go: the name of the set under test (``test/loss``,
        ``test/acc``, ``test_mismatched/acc``, ...); for the training split in eval mode (no
        dropout, best weights) ``train/`` with an ``_eval`` suffix (``train/acc_eval``): see
        ``eval_name``."""
        return self.eval_split

    def eval_name(self, name: str) -> str:
        """The logged name of test-loop metric ``name`` (``acc`` -> ``test/acc``,
        ``test_matched/acc`` or ``train/acc_eval``)."""
        suffix = "_eval" if self.eval_split == "train" else ""
        return f"{self.eval_prefix}/{name}{suffix}"

    def test_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        loss, logits = self._step(batch)
        self.test_loss.update(loss, weight=len(batch["label"]))  # a mean over pairs
        self.test_metrics.update(logits, batch["label"])
        self.test_confusion.update(logits, batch["label"])
        self._tally_groups(batch, logits)
        if ROW_KEY in batch:
            self._rows.append(torch.stack([batch[ROW_KEY], logits.argmax(-1), batch["label"]], 1))
        self.log(self.eval_name("loss"), self.test_loss, on_step=False, on_epoch=True)
        for name, metric in self.test_metrics.items():
            if not _per_class(metric):
                self.log(self.eval_name(name), metric, on_step=False, on_epoch=True)

    def _tally_groups(self, batch: Mapping[str, torch.Tensor], logits: torch.Tensor) -> None:
        correct = (logits.argmax(-1) == batch["label"]).double()
        for name, groups in self.group_names.items():
            ids = batch.get(f"{GROUP_PREFIX}{name}")
            if ids is None:
                continue
            ids = ids.to(correct.device)
            counts = torch.stack([torch.bincount(ids, minlength=len(groups)).double(),
                                  torch.bincount(ids, weights=correct, minlength=len(groups))], 1)
            self._tallies[name] = self._tallies.get(name, 0) + counts

    def on_test_epoch_end(self) -> None:
        if self.eval_split != "train":  # not the eval-mode pass over the training split
            self._log_per_class(self.eval_prefix, self.test_metrics)
            self.breakdowns[self.eval_prefix] = self.breakdown()
            self._store_predictions()

    def _store_predictions(self) -> None:
        """Put the test loop's predictions in row order (``predictions``); a loop that did not
        see every row of its set (``limit_test_batches``) stores none."""
        self.predictions.pop(self.eval_prefix, None)
        if not self._rows:
            return
        table = torch.cat(self._rows)
        size = len(getattr(self.trainer.test_dataloaders, "dataset", ()))  # the whole set
        if size <= int(table[:, 0].max()):
            return
        full = torch.full((size, 2), -1, dtype=torch.long, device=table.device)
        full[table[:, 0]] = table[:, 1:]
        if self.trainer.world_size > 1:  # every rank tested its own batches: merge by row
            full = self.all_gather(full).max(0).values
        if (full < 0).any():
            log.info("%s: predictions not recorded (%d of the set's %d rows tested)",
                     self.eval_prefix, int((full[:, 0] >= 0).sum()), size)
            return
        full = full.cpu().numpy()
        self.predictions[self.eval_prefix] = (full[:, 0], full[:, 1])

    def breakdown(self) -> dict[str, Any]:
        """The finished test loop's accuracy per gold class (from the confusion matrix) and
        per group of each ``group_names`` breakdown: ``{"size": n, "per_class": {label: {"n",
        "acc"}}, "<breakdown>": {group: {"n", "acc"}}}``; ``acc`` is ``None`` for an empty
        group. Summed over processes under DDP."""
        confusion = self.test_confusion.compute().double()
        out: dict[str, Any] = {"size": int(confusion.sum()),
                               "per_class": _accuracies(self.label_names, confusion.sum(1),
                                                        confusion.diagonal())}
        for name, groups in self.group_names.items():
            tally = self._tallies.get(name)
            if tally is None:
                continue
            if self.trainer.world_size > 1:
                tally = self.all_gather(tally).sum(0)
            out[name] = _accuracies(groups, tally[:, 0], tally[:, 1])
        return out

    def on_test_epoch_start(self) -> None:
        self.test_confusion.reset()
        self._tallies = {}
        self._rows = []
        for metric in self.test_metrics.values():  # logged per test set, not over several
            if _per_class(metric):
                metric.reset()

    def l2_penalty(self) -> torch.Tensor:
        """The value of the network's ``l2_penalties``, ``sum lambda / 2 * ||w||^2`` (no grad)."""
        with torch.no_grad():
            return sum((0.5 * c * sum(w.pow(2).sum() for w in ws if w.requires_grad)
                        for c, ws in self.net.l2_penalties()), torch.zeros(()))

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Trainable parameters for the optimiser: one group per ``net.l2_penalties()`` entry
        with ``weight_decay = lambda`` (+ the optimiser's own), the rest in a default group."""
        factory = self.optimizer_factory
        options = getattr(factory, "keywords", {})
        optimizer_class = getattr(factory, "func", factory)
        penalties = self.net.l2_penalties()
        decoupled = options.get("decoupled_weight_decay") or (
            isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.AdamW))
        if penalties and decoupled:
            raise ConfigError(
                f"{type(self.net).__name__} declares L2 penalties (l2_penalties), which the "
                f"optimiser applies as weight decay; {getattr(optimizer_class, '__name__', '?')} "
                "decouples weight decay from the gradient, which changes their meaning. Use an "
                "optimiser with L2-style weight decay (SGD, Adagrad, Adam, Adadelta, RMSprop).")
        base = float(options.get("weight_decay", 0.0) or 0.0)
        groups, taken = [], set()
        for coefficient, weights in penalties:
            weights = [w for w in weights if w.requires_grad and id(w) not in taken]
            taken.update(id(w) for w in weights)
            if weights:
                groups.append({"params": weights, "weight_decay": base + float(coefficient)})
        rest = [p for p in self.parameters() if p.requires_grad and id(p) not in taken]
        return ([{"params": rest}] if rest else []) + groups

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(params=self.parameter_groups())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer=optimizer)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": self.scheduler_interval,
                                 "frequency": 1}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Plain containers only, so every reader loads the file with ``weights_only=True``.
        checkpoint[CHECKPOINT_KEY] = plain_data({
            **checkpoint.get(CHECKPOINT_KEY, {}),  # callbacks' entries (the W&B run id)
            **self.metadata,
            "label_names": self.label_names,
            "train_acc_at_best": self.train_acc_at_best,
        }, CHECKPOINT_KEY)
        for prefix in ("", "datamodule_"):  # Lightning's copies of the saved hparams
            key = f"{prefix}hyper_parameters"
            if key in checkpoint:
                checkpoint[key] = plain_data(checkpoint[key], key)
                checkpoint.pop(f"{prefix}hparams_type", None)  # a class (OmegaConf hparams)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.train_acc_at_best = checkpoint.get(CHECKPOINT_KEY, {}).get("train_acc_at_best")


def _accuracies(names: Sequence[str], totals: torch.Tensor, correct: torch.Tensor
                ) -> dict[str, dict[str, Any]]:
    return {name: {"n": int(n), "acc": float(c / n) if n else None}
            for name, n, c in zip(names, totals.tolist(), correct.tolist(), strict=True)}


def _per_class(metric: Metric) -> bool:
    """A metric that returns one value per class (torchmetrics' ``average=None``/``"none"``)."""
    return getattr(metric, "average", "micro") in (None, "none")


def plain_data(value: Any, where: str = "value") -> Any:
    """``value`` as plain Python data (dict, list, str, int, float, bool, None, tensors).

    OmegaConf containers, tuples, paths and NumPy scalars are converted; anything else raises
    ``TypeError`` naming ``where``: a checkpoint must load with ``torch.load(weights_only=True)``.
    """
    if isinstance(value, DictConfig | ListConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, np.generic):  # before the built-ins: np.float64 is a float
        value = value.item()
    if value is None or type(value) in (str, bool, int, float) or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, Mapping):
        return {k if type(k) in (str, int) else str(k): plain_data(v, f"{where}.{k}")
                for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain_data(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{where}: cannot store a value of type {type(value).__name__} in a checkpoint "
                    "(plain containers, numbers, strings and tensors only)")
