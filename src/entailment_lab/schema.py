"""The types and ranges of the knobs a user types, checked once before any data is read.

Hydra refuses an unknown key or group option at compose time; what it cannot know is that
``trainer.max_epochs=abc`` is not a number or that ``optimizer.lr=-1`` is out of range, which
would otherwise surface as a traceback from deep inside Lightning or torch, after the data is
read. ``SCHEMA`` declares, for every group a user types into, the type and range of each knob;
``validate`` checks a composed config against it and raises one ``ConfigError`` that names the
key, the value and what is allowed.

A key that a config does not have is skipped (an optimiser without ``betas``, eval.yaml without
a ``model``), so one schema serves train, eval, predict and explain. Keys under ``model.net``
are the models' own: each model checks them itself (``Network.check_config``); only the knobs
every model shares by name (``dropout``) are typed here.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from entailment_lab.errors import ConfigError


@dataclass(frozen=True)
class Knob:
    """What a knob accepts: ``accepts(value)`` and, for the error message, ``allowed``."""

    accepts: Callable[[Any], bool]
    allowed: str
    example: str


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def integer(low: int | None = None, high: int | None = None, *, null: bool = False,
            example: int = 1) -> Knob:
    """An integer in ``[low, high]`` (``null``: or null)."""
    def accepts(v: Any) -> bool:
        if v is None:
            return null
        return _is_int(v) and (low is None or v >= low) and (high is None or v <= high)
    bounds = _bounds(low, high, ">=", "<=")
    return Knob(accepts, f"an integer{bounds}{' or null' if null else ''}", str(example))


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False, null: bool = False, example: float = 0.5) -> Knob:
    """A finite number in the interval from ``low`` to ``high`` (open ends where asked)."""
    def accepts(v: Any) -> bool:
        if v is None:
            return null
        if not _is_number(v):
            return False
        above = low is None or (v > low if low_open else v >= low)
        below = high is None or (v < high if high_open else v <= high)
        return above and below
    bounds = _bounds(low, high, ">" if low_open else ">=", "<" if high_open else "<=")
    return Knob(accepts, f"a number{bounds}{' or null' if null else ''}", str(example))


def _bounds(low: float | None, high: float | None, low_op: str, high_op: str) -> str:
    parts = ([f"{low_op} {low}"] if low is not None else []) + \
            ([f"{high_op} {high}"] if high is not None else [])
    return f" {' and '.join(parts)}" if parts else ""


def boolean() -> Knob:
    return Knob(lambda v: isinstance(v, bool), "true or false", "true")


def choice(*values: Any) -> Knob:
    shown = ", ".join("null" if v is None else str(v) for v in values)
    return Knob(lambda v: v in values and type(v) in {type(x) for x in values},
                f"one of {shown}", "null" if values[0] is None else str(values[0]))


def text(*, null: bool = False) -> Knob:
    return Knob(lambda v: isinstance(v, str) or (null and v is None),
                f"a string{' or null' if null else ''}", "NAME")


def any_of(*knobs: Knob) -> Knob:
    return Knob(lambda v: any(k.accepts(v) for k in knobs),
                " or ".join(k.allowed for k in knobs), knobs[0].example)


def string_list() -> Knob:
    return Knob(lambda v: isinstance(v, list | tuple) and all(isinstance(x, str) for x in v),
                "a list of strings", "[a,b]")


def betas() -> Knob:
    unit = number(0.0, 1.0, high_open=True)
    return Knob(lambda v: isinstance(v, list | tuple) and len(v) == 2
                and all(unit.accepts(x) for x in v),
                "two numbers in [0, 1)", "[0.9,0.999]")


_PRECISIONS = ("64", "64-true", "32", "32-true", "16", "16-mixed", "16-true", "bf16",
               "bf16-mixed", "bf16-true", "transformer-engine", "transformer-engine-float16")
_POSITIVE_OR_NULL = integer(1, null=True)
_FRACTION_OR_BATCHES = any_of(number(0.0, 1.0), integer(0), choice(None))

#: Every typed knob, by its dotted key in the composed config (``*`` matches one level).
SCHEMA: dict[str, Knob] = {
    # --- top level (conf/train.yaml, eval.yaml, predict.yaml, explain.yaml) ---
    "seed": integer(0, 2**32 - 1, example=1),
    "threads": any_of(choice("auto", None), integer(1, example=2)),
    "flush_denormal": boolean(),
    "dim": integer(1, null=True, example=256),
    "epochs": integer(1, example=30),
    "tags": string_list(),
    "ckpt_path": text(null=True),
    "test": boolean(),
    "eval_train": boolean(),
    "optimized_metric": text(null=True),
    "objective_on_nan": number(),
    "split": text(),  # train, validation, test or a test split (e.g. MultiNLI's test_matched)
    "batch_size": integer(1, example=256),
    "device": choice("cpu", "cuda", "auto"),
    # --- trainer (conf/trainer/) ---
    "trainer.max_epochs": integer(-1, null=True, example=30),
    "trainer.min_epochs": integer(0, null=True),
    "trainer.max_steps": integer(-1, example=1000),
    "trainer.min_steps": integer(0, null=True),
    "trainer.max_time": any_of(text(null=True), Knob(lambda v: isinstance(v, Mapping),
                                                     "a dict of days/hours/minutes", "")),
    "trainer.devices": any_of(integer(-1), text(), Knob(lambda v: isinstance(v, list),
                                                        "a list of device ids", "")),
    "trainer.num_nodes": integer(1),
    "trainer.precision": Knob(lambda v: str(v) in _PRECISIONS, f"one of {', '.join(_PRECISIONS)}",
                              "bf16-mixed"),
    "trainer.accelerator": text(),
    "trainer.limit_train_batches": _FRACTION_OR_BATCHES,
    "trainer.limit_val_batches": _FRACTION_OR_BATCHES,
    "trainer.limit_test_batches": _FRACTION_OR_BATCHES,
    "trainer.limit_predict_batches": _FRACTION_OR_BATCHES,
    "trainer.overfit_batches": any_of(number(0.0, 1.0), integer(0)),
    "trainer.fast_dev_run": any_of(boolean(), integer(0)),
    "trainer.check_val_every_n_epoch": _POSITIVE_OR_NULL,
    "trainer.val_check_interval": any_of(number(0.0, 1.0, low_open=True), integer(1),
                                         choice(None)),
    "trainer.num_sanity_val_steps": integer(-1, null=True),
    "trainer.accumulate_grad_batches": integer(1),
    "trainer.gradient_clip_val": number(0.0, null=True, example=5.0),
    "trainer.gradient_clip_algorithm": choice(None, "norm", "value"),
    "trainer.deterministic": any_of(boolean(), choice("warn", None)),
    "trainer.log_every_n_steps": integer(1, example=50),
    "trainer.enable_checkpointing": choice(None, True, False),
    "trainer.enable_progress_bar": choice(None, True, False),
    "trainer.enable_model_summary": choice(None, True, False),
    "trainer.inference_mode": boolean(),
    "trainer.detect_anomaly": boolean(),
    "trainer.profiler": choice(None, "simple", "advanced", "pytorch"),
    "trainer.reload_dataloaders_every_n_epochs": integer(0),
    # --- data (conf/data/) ---
    "data.batch_size": integer(1, example=128),
    "data.eval_batch_size": integer(1, example=256),
    "data.max_length": integer(1, example=100),
    "data.lowercase": boolean(),
    "data.val_from_train": any_of(integer(1), number(0.0, 1.0, low_open=True, high_open=True),
                                  choice(None)),
    "data.val_group_by": text(null=True),
    "data.vocab_min_freq": integer(1),
    "data.pool_batches": integer(1, example=50),
    "data.num_workers": integer(0, null=True),
    "data.num_proc": _POSITIVE_OR_NULL,
    "data.seed": integer(0, 2**32 - 1),
    "data.split_seed": integer(0, 2**32 - 1, null=True),
    "data.train_size": _POSITIVE_OR_NULL,
    "data.hypothesis_only": boolean(),
    "data.label_names": string_list(),
    "data.files.*": text(null=True),
    "data.test_splits": string_list(),
    "data.hub_splits.*": text(),
    "data.validate_on": text(null=True),
    "data.group_fields": string_list(),
    "extra_tests.*": text(null=True),
    # --- embeddings (conf/embeddings/) ---
    "embeddings.dim": integer(1, example=300),
    "embeddings.freeze": boolean(),
    "embeddings.normalize": boolean(),
    "embeddings.oov_range": number(0.0, example=0.05),
    "embeddings.path": text(),
    # --- optimizer (conf/optimizer/; and the recipes' values) ---
    "optimizer.lr": number(0.0, example=0.001),  # torch's rule: 0 trains nothing, but is valid
    "optimizer.weight_decay": number(0.0, example=0.0),
    "optimizer.betas": betas(),
    "optimizer.eps": number(0.0, low_open=True, example=1e-8),
    "optimizer.rho": number(0.0, 1.0, example=0.95),
    "optimizer.momentum": number(0.0, example=0.9),
    "optimizer.initial_accumulator_value": number(0.0, example=0.1),
    "optimizer.lr_decay": number(0.0, example=0.0),
    # --- scheduler (conf/scheduler/) ---
    "scheduler.interval": choice("step", "epoch"),
    "scheduler.step_size": integer(1, example=1000),
    "scheduler.gamma": number(0.0, 1.0, low_open=True, example=0.95),
    # --- callbacks (conf/callbacks/) ---
    "callbacks.early_stopping.patience": integer(0, example=3),
    "callbacks.early_stopping.min_delta": number(0.0),
    "callbacks.early_stopping.mode": choice("max", "min"),
    "callbacks.model_checkpoint.save_top_k": integer(-1),
    "callbacks.model_checkpoint.mode": choice("max", "min"),
    "callbacks.heatmaps.num_examples": integer(0, example=3),
    "callbacks.adagrad_reset.every_n_epochs": integer(1, example=5),
    # --- logger (conf/logger/) ---
    "logger.wandb.project": text(),
    "logger.wandb.entity": text(null=True),
    "logger.wandb.group": text(null=True),
    "logger.wandb.log_model": any_of(boolean(), choice("all")),
    # --- model: the keys every model config has, and the knobs all models share by name ---
    "model.name": text(),
    "model.default_dim": integer(1, null=True),
    "model.net.dropout": number(0.0, 1.0, high_open=True, example=0.1),
    "model.net.*_dropout": number(0.0, 1.0, high_open=True, example=0.1),
}


def _keys(node: Any, prefix: str = "") -> Iterator[str]:
    """The dotted key of every node and leaf of ``node`` (unresolved), depth first."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield f"{prefix}{key}"
            yield from _keys(value, f"{prefix}{key}.")


def _knob(key: str) -> Knob | None:
    if key in SCHEMA:
        return SCHEMA[key]
    depth = key.count(".")
    return next((knob for pattern, knob in SCHEMA.items()
                 if "*" in pattern and pattern.count(".") == depth
                 and fnmatch.fnmatchcase(key, pattern)), None)


_ABSENT = object()


def validate(cfg: DictConfig) -> None:
    """Check every key of ``cfg`` that ``SCHEMA`` types; raise one ``ConfigError`` for the
    first bad value: ``key=value: must be ALLOWED, e.g. key=EXAMPLE``.

    Required values (``???``) and values that cannot be resolved yet are left to the caller,
    which reports them together.
    """
    for key in _keys(OmegaConf.to_container(cfg, resolve=False)):
        knob = _knob(key)
        if knob is None:
            continue
        try:
            value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
        except OmegaConfBaseException:  # an interpolation of a required value: reported later
            continue
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        if value is _ABSENT or value == "???" or knob.accepts(value):
            continue
        if value is None and key.startswith("data.") and cfg.get("task_name") == "eval":
            continue  # eval.yaml's data values override the checkpoint's; null keeps its own
        example = f", e.g. {key}={knob.example}" if knob.example else ""
        raise ConfigError(f"{key}={_shown(value)}: must be {knob.allowed}{example}")


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value)
    return str(value).replace("True", "true").replace("False", "false")
