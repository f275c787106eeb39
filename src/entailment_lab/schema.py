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

import ast
import contextlib
import difflib
import fnmatch
import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
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
    names: tuple[str, ...] = ()  # the names it accepts, for "did you mean" (long choices)


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
    names = ", ".join("null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
                      for v in values)
    return Knob(lambda v: v in values and type(v) in {type(x) for x in values},
                f"one of {names}", "null" if values[0] is None else str(values[0]),
                tuple(str(v) for v in values if isinstance(v, str)))


def text(*, null: bool = False) -> Knob:
    return Knob(lambda v: isinstance(v, str) or (null and v is None),
                f"a string{' or null' if null else ''}", "NAME")


def any_of(*knobs: Knob) -> Knob:
    return Knob(lambda v: any(k.accepts(v) for k in knobs),
                " or ".join(k.allowed for k in knobs), knobs[0].example,
                tuple(n for k in knobs for n in k.names))


def string_list() -> Knob:
    return Knob(lambda v: isinstance(v, list | tuple) and all(isinstance(x, str) for x in v),
                "a list of strings", "[a,b]")


def column_names(example: str) -> Knob:
    """A column of the data, or a list of them (the first the data has is read)."""
    def named(v: Any) -> bool:
        return isinstance(v, str) and bool(v)
    return Knob(lambda v: named(v) or (isinstance(v, list | tuple) and bool(v)
                                       and all(named(x) for x in v)),
                "a column name or a list of them", example)


def betas() -> Knob:
    unit = number(0.0, 1.0, high_open=True)
    return Knob(lambda v: isinstance(v, list | tuple) and len(v) == 2
                and all(unit.accepts(x) for x in v),
                "two numbers in [0, 1)", "[0.9,0.999]")


_PRECISIONS = ("64", "64-true", "32", "32-true", "16", "16-mixed", "16-true", "bf16",
               "bf16-mixed", "bf16-true", "transformer-engine", "transformer-engine-float16")
#: Lightning's accelerator and strategy names (its registries, plus the aliases its Trainer
#: takes); tests/test_precheck.py keeps them equal to the installed Lightning's, so a name is
#: checked here, before torch and Lightning are imported.
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
STRATEGIES = ("auto", "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook",
              "ddp_find_unused_parameters_false", "ddp_find_unused_parameters_true",
              "ddp_spawn_find_unused_parameters_false", "ddp_spawn_find_unused_parameters_true",
              "ddp_fork_find_unused_parameters_false", "ddp_fork_find_unused_parameters_true",
              "ddp_notebook_find_unused_parameters_false",
              "ddp_notebook_find_unused_parameters_true", "deepspeed", "deepspeed_stage_1",
              "deepspeed_stage_2", "deepspeed_stage_2_offload", "deepspeed_stage_3",
              "deepspeed_stage_3_offload", "deepspeed_stage_3_offload_nvme", "fsdp",
              "fsdp_cpu_offload", "single_device", "single_xla", "xla_debug", "xla",
              "single_tpu")
_OBJECT = Knob(lambda v: isinstance(v, Mapping) and "_target_" in v, "an object (_target_: ...)",
               "")
#: ``trainer.max_time`` as Lightning's ``Timer`` reads it: "DD:HH:MM:SS" or timedelta's keys.
_DURATION = Knob(lambda v: isinstance(v, str) and len(v.strip().split(":")) == 4
                 and all(p.strip().isdigit() for p in v.strip().split(":")),
                 'a duration "DD:HH:MM:SS"', "00:12:00:00")
_TIMEDELTA_KEYS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds",
                   "microseconds")
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
    # --- predict.py's own (conf/predict.yaml) ---
    "input": Knob(lambda v: v is None or (isinstance(v, str) and bool(v)), "a file or null",
                  "pairs.jsonl"),
    "output": Knob(lambda v: v is None or (isinstance(v, str) and bool(v)), "a file or null",
                   "predictions.jsonl"),
    "premise": Knob(lambda v: v is None or isinstance(v, str), "a sentence or null",
                    "'A man is sleeping.'"),
    "hypothesis": Knob(lambda v: v is None or isinstance(v, str), "a sentence or null",
                       "'A man is sleeping.'"),
    "sentence": Knob(lambda v: v is None or isinstance(v, str), "a sentence or null",
                     "'A fine film.'"),
    "fields.*": text(null=True),
    # --- trainer (conf/trainer/) ---
    "trainer.max_epochs": integer(-1, null=True, example=30),
    "trainer.min_epochs": integer(0, null=True),
    "trainer.max_steps": integer(-1, example=1000),
    "trainer.min_steps": integer(0, null=True),
    "trainer.max_time": any_of(_DURATION, Knob(
        lambda v: isinstance(v, Mapping) and set(v) <= set(_TIMEDELTA_KEYS),
        f"a dict of {'/'.join(_TIMEDELTA_KEYS)}", ""), Knob(lambda v: v is None, "null", "")),
    "trainer.devices": any_of(integer(-1), text(), Knob(lambda v: isinstance(v, list),
                                                        "a list of device ids", "")),
    "trainer.num_nodes": integer(1),
    "trainer.precision": Knob(lambda v: str(v) in _PRECISIONS, f"one of {', '.join(_PRECISIONS)}",
                              "bf16-mixed"),
    "trainer.accelerator": any_of(choice(*ACCELERATORS), _OBJECT),
    "trainer.strategy": any_of(Knob(lambda v: isinstance(v, str) and v.lower() in STRATEGIES,
                                    "a Lightning strategy (auto, ddp, ddp_spawn, fsdp, "
                                    "deepspeed, ...)", "ddp", STRATEGIES), _OBJECT),
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
    "data.fields.*": column_names("COLUMN"),
    "data.label_field": column_names("label"),
    "data.drop_labels": Knob(lambda v: isinstance(v, list | tuple) and all(
        _is_int(x) or isinstance(x, str) for x in v), "a list of label ids or names", "[-1]"),
    "data.vocab_splits": string_list(),
    "data.hub_config": text(null=True),
    "data.cache_dir": text(null=True),
    "data.test_splits": string_list(),
    "data.hub_splits.*": text(),
    "data.validate_on": text(null=True),
    "data.group_fields": string_list(),
    "extra_tests.*": text(null=True),
    "paths.*": Knob(lambda v: isinstance(v, str) and bool(v), "a folder", "outputs"),
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
        hint = did_you_mean(value, knob.names) if isinstance(value, str) else ""
        raise ConfigError(f"{key}={shown(value)}: must be {knob.allowed}{hint}{example}")


def shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value)
    return str(value).replace("True", "true").replace("False", "false")


# --- the knobs of a ``_target_``, read from its source ---------------------------------------
# A model's knobs are its constructor's arguments (``models/base.py``: every key of
# ``model.net`` is one), an embedding source's are its function's. Their names, annotations
# and defaults are read from the source file with ``ast``, not by importing it: the checks
# before any data is read run without torch (``precheck.py``), and the constructor stays the
# one description of a model's knobs (no second table to drift from it). Ranges that no
# annotation can say are the model's own ``validate_config``, run once torch is loaded.

@dataclass(frozen=True)
class Argument:
    """One parameter of a target: its name, its annotation's source text, whether it has a
    default."""

    name: str
    annotation: str | None
    has_default: bool
    default: str | None = None  # the default's source text


@dataclass(frozen=True)
class TargetSource:
    """What the source of a class or function says about the values it takes."""

    target: str
    arguments: dict[str, Argument]
    open_ended: bool  # takes **kwargs: any key is an argument
    attributes: dict[str, Any]  # literal class attributes, inherited ones included (``inputs``)
    complete: bool = True  # False: its ``__init__`` comes from outside this package (unknown)

    @property
    def name(self) -> str:
        return self.target.rpartition(".")[2]


def _module_file(module: str) -> Path | None:
    """The source file of one of this package's modules, found without importing it."""
    if module != "entailment_lab" and not module.startswith("entailment_lab."):
        return None
    root = Path(__file__).resolve().parent
    parts = module.split(".")[1:]
    for candidate in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts,
                                                                              "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _parsed(module: str) -> ast.Module | None:
    path = _module_file(module)
    return ast.parse(path.read_text(encoding="utf-8")) if path else None


def module_constant(module: str, name: str) -> Any:
    """A module-level literal (``CONTEXT_ARGUMENTS = (...)``) read from the source."""
    tree = _parsed(module)
    for node in tree.body if tree else []:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{module}.{name}")


def _imported_names(tree: ast.Module, module: str) -> dict[str, str]:
    """Names a module imports from this package: name -> dotted origin."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            origin = node.module if not node.level else \
                ".".join(module.split(".")[:-node.level] + [node.module])
            for alias in node.names:
                names[alias.asname or alias.name] = f"{origin}.{alias.name}"
    return names


@functools.cache
def read_target(target: str) -> TargetSource | None:
    """The parameters and class attributes of ``target`` (``package.module.Name``), read from
    this package's source; ``None`` for a target elsewhere (torch, Lightning) or one the source
    does not show plainly (its ``__init__`` inherited from outside this package)."""
    module, _, name = target.rpartition(".")
    tree = _parsed(module) if module else None
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)
                 and n.name == name), None) if tree else None
    if node is None:
        return None
    if isinstance(node, ast.FunctionDef):
        return TargetSource(target, *_arguments(node, skip_self=False), {})
    attributes: dict[str, Any] = {}
    init = None
    for base in node.bases:  # inherited attributes first, the class's own win
        origin = _imported_names(tree, module).get(getattr(base, "id", ""),
                                                   f"{module}.{getattr(base, 'id', '')}")
        inherited = read_target(origin) if getattr(base, "id", None) else None
        if inherited is not None:
            attributes.update(inherited.attributes)
            init = init or (inherited if inherited.complete else None)
    for item in node.body:
        if isinstance(item, ast.Assign | ast.AnnAssign) and item.value is not None:
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    with contextlib.suppress(ValueError):  # not a literal: not read
                        attributes[t.id] = ast.literal_eval(item.value)
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            return TargetSource(target, *_arguments(item, skip_self=True), attributes)
    if init is None:  # e.g. ``Network``: ``nn.Module.__init__``
        return TargetSource(target, {}, False, attributes, complete=not node.bases)
    return TargetSource(target, init.arguments, init.open_ended, attributes)


def _arguments(node: ast.FunctionDef, skip_self: bool) -> tuple[dict[str, Argument], bool]:
    args = node.args
    positional = [*args.posonlyargs, *args.args][1 if skip_self else 0:]
    first_default = len(positional) - len(args.defaults)
    defaults: list[ast.expr | None] = [None] * first_default + list(args.defaults)
    found = {a.arg: Argument(a.arg, ast.unparse(a.annotation) if a.annotation else None,
                             d is not None, ast.unparse(d) if d is not None else None)
             for a, d in zip(positional, defaults, strict=True)}
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        found[a.arg] = Argument(a.arg, ast.unparse(a.annotation) if a.annotation else None,
                                d is not None, ast.unparse(d) if d is not None else None)
    return found, args.kwarg is not None


_PLURALS = {"integer": "integers", "number": "numbers", "true or false": "booleans",
            "string": "strings"}


def annotation_knob(annotation: str | None) -> Knob | None:
    """The knob a parameter's annotation describes (``int``, ``float | None``,
    ``Sequence[int]``, ``Literal["a", "b"]``, ...); ``None`` where it says nothing checkable."""
    if not annotation:
        return None
    try:
        return _knob_of(ast.parse(annotation, mode="eval").body)
    except SyntaxError:
        return None


def _knob_of(node: ast.expr) -> Knob | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union([node.left, node.right])
    if isinstance(node, ast.Name | ast.Attribute):  # str, pathlib.Path, os.PathLike
        name = node.id if isinstance(node, ast.Name) else node.attr
        return {"int": integer(), "float": number(), "bool": boolean(), "str": text(),
                "Path": text(), "PathLike": text()}.get(name)
    if isinstance(node, ast.Subscript):
        base = ast.unparse(node.value).rpartition(".")[2]
        inner = node.slice
        if base in ("Optional", "Union"):  # typing's spelling, as inspect prints Lightning's
            sides = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
            return _union(sides + ([ast.Constant(None)] if base == "Optional" else []))
        if base == "Literal":
            values = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            return choice(*(ast.literal_eval(v) for v in values))
        if base in ("list", "tuple", "Sequence"):
            element = inner.elts[0] if isinstance(inner, ast.Tuple) else inner
            item = _knob_of(element)
            if item is None:
                return None
            word = item.allowed.removeprefix("an ").removeprefix("a ")
            return Knob(lambda v: isinstance(v, list | tuple) and all(item.accepts(x) for x in v),
                        f"a list of {_PLURALS.get(word, word)}", f"[{item.example}]")
    return None


def _union(sides: list[ast.expr]) -> Knob | None:
    """``A | B | None``: a knob where every side is checkable, else ``None``."""
    def is_none(side: ast.expr) -> bool:
        return (isinstance(side, ast.Constant) and side.value is None) or \
            (isinstance(side, ast.Name) and side.id == "NoneType")

    knobs = [_knob_of(s) for s in sides if not is_none(s)]
    if not knobs or any(k is None for k in knobs):
        return None
    if any(k.allowed == "a number" for k in knobs):  # int | float: a number
        knobs = [k for k in knobs if k.allowed != "an integer"]
    knobs = list({k.allowed: k for k in knobs}.values())  # str | Path: a string
    knob = knobs[0] if len(knobs) == 1 else any_of(*knobs)  # type: ignore[arg-type]
    if not any(is_none(s) for s in sides):
        return knob
    return Knob(lambda v: v is None or knob.accepts(v), f"{knob.allowed} or null", knob.example,
                knob.names)


def nearest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to a mistyped ``word`` (difflib's ratio, as git's and cargo's
    "did you mean"), or ``None`` where none is close."""
    candidates = list(candidates)
    for digit in re.finditer(r"(?<!\d)\d(?!\d)", word):  # row7 -> row07, as files are named
        padded = f"{word[:digit.start()]}0{word[digit.start():]}"
        if padded in candidates:
            return padded
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``" (did you mean X?)"`` for the nearest candidate, else an empty string."""
    found = nearest(word, candidates)
    return f" (did you mean {found}?)" if found else ""


# --- the tables of docs/configuration.md ----------------------------------------------------
KNOB_TABLES = ("<!-- knobs: generated by python -m entailment_lab.schema --write -->",
               "<!-- /knobs -->")


def knob_tables(conf_dir: str | Path) -> str:
    """The two tables of docs/configuration.md that come from this module: every typed knob
    of ``SCHEMA`` with what it accepts, and every model's knobs with the type its constructor
    declares (``read_target``) and the value its config (``conf/model/``) gives."""
    lines = ["| key | accepts |", "|---|---|"]
    lines += [f"| `{key}` | {knob.allowed.replace('|', '/')} |" for key, knob in SCHEMA.items()]
    lines += ["", "| model | knob | type (constructor) | config value |", "|---|---|---|---|"]
    context = module_constant("entailment_lab.models.base", "CONTEXT_ARGUMENTS")
    for path in sorted(Path(conf_dir, "model").glob("*.yaml")):
        config = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        net = config.get("net") or {}
        source = read_target(str(net.get("_target_")))
        if source is None:
            continue
        for name, argument in source.arguments.items():
            if name in context:
                continue
            value = net.get(name, _ABSENT)
            given = "`dim`" if value == "${dim}" else f"`{_markdown(value)}`" \
                if value is not _ABSENT else f"(default `{argument.default}`)"
            annotation = str(argument.annotation).replace("|", "\\|")
            lines.append(f"| {path.stem} | `{name}` | `{annotation}` | {given} |")
    return "\n".join([KNOB_TABLES[0], *lines, KNOB_TABLES[1]])


def _markdown(value: Any) -> str:
    """A config value as the YAML a user types (true, null, [7, 5])."""
    return value if isinstance(value, str) else shown(value)


def write_knob_tables(doc: str | Path, conf_dir: str | Path) -> bool:
    """Replace the generated tables in ``doc``; whether it changed."""
    text = Path(doc).read_text(encoding="utf-8")
    start, end = text.index(KNOB_TABLES[0]), text.index(KNOB_TABLES[1]) + len(KNOB_TABLES[1])
    new = text[:start] + knob_tables(conf_dir) + text[end:]
    Path(doc).write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Write the knob tables of the docs.")
    parser.add_argument("--write", nargs="?", const="docs/configuration.md", metavar="DOC",
                        required=True)
    parser.add_argument("--conf", default="conf")
    args = parser.parse_args()
    print("changed" if write_knob_tables(args.write, args.conf) else "unchanged", args.write)
