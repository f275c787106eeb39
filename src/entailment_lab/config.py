"""The composed config: its resolvers, its checks before any data is read, its epoch budget, and
building objects from it (``hydra.utils.instantiate`` with one-line errors).

``conf/`` is found through Hydra's config path (the entry points' ``config_path="../conf"``);
nothing here locates it on disk.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from entailment_lab.errors import ConfigError, UserError
from entailment_lab.schema import validate

_RUN_ID = secrets.token_hex(3)  # fixed for this process: all jobs of one sweep agree on it


def project_root() -> str:
    """The folder that holds the primary config folder (``conf/``'s parent: the checkout), as
    Hydra's config search path names it; the working directory where Hydra has none (a
    package's configs, or no Hydra run)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        for source in HydraConfig.get().runtime.config_sources:
            if source.provider == "main" and source.schema == "file":
                return str(Path(source.path).resolve().parent)
    return str(Path.cwd())


def register_resolvers() -> None:
    """``${project_root:}`` and ``${run_id:}`` for the configs (idempotent)."""
    OmegaConf.register_new_resolver("project_root", project_root, replace=True)
    OmegaConf.register_new_resolver("run_id", lambda: _RUN_ID, replace=True)


def instantiate(node: DictConfig | Mapping[str, Any], what: str, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate`` with errors turned into one-line ``ConfigError``s."""
    try:
        return hydra.utils.instantiate(node, **kwargs)
    except UserError:
        raise
    except hydra.errors.InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        lines = [ln.strip() for ln in str(err).strip().splitlines()
                 if ln.strip() and not ln.strip().startswith("full_key:")]
        raise ConfigError(f"{what}: {' '.join(lines)}") from err


def network_class(net_cfg: DictConfig) -> type:
    """The class named by ``model.net._target_``; it must follow the contract of ``Network``."""
    from entailment_lab.models.base import Network

    try:
        target = hydra.utils.get_class(net_cfg._target_)
    except Exception as err:  # Hydra wraps import errors in its own types
        raise ConfigError(f"model.net._target_: cannot import '{net_cfg._target_}' "
                          f"({err})") from err
    if not (isinstance(target, type) and issubclass(target, Network)):
        raise ConfigError(f"model.net._target_: {net_cfg._target_} is not a subclass of "
                          "entailment_lab.models.base.Network (docs/extending.md, 'A model')")
    return target


def data_inputs(data_cfg: Mapping[str, Any]) -> str:
    """What a data config feeds a network: ``"sentence"`` when its ``fields`` name a
    ``sentence`` column (SST, TREC), else ``"pair"`` (premise and hypothesis)."""
    fields = data_cfg.get("fields") or {}
    return "sentence" if "sentence" in fields else "pair"


def check_config(cfg: DictConfig) -> None:
    """Fail before any data is read, in one line: required (``???``) values; the types and
    ranges of ``schema.SCHEMA``; the trainer's precision (``check_precision``); an explicit
    ``budget=`` that names no budget; the names of ``extra_tests``; a pair model on sentence
    data or the reverse; then the
    model's own checks of its ``model.net`` values (``Network.check_config``)."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(
            f"required config value(s) not set: {', '.join(missing)}; give them on the command "
            f"line, e.g. {missing[0]}=..."
        )
    validate(cfg)
    check_extra_tests(cfg)
    if "trainer" in cfg:
        check_precision(cfg.trainer)
    if "optimizer" in cfg:
        check_arguments(cfg.optimizer, "optimizer")
    check_budget_choice()
    if "model" in cfg:
        network = network_class(cfg.model.net)
        if "data" in cfg and network.inputs != data_inputs(cfg.data):
            kind = data_inputs(cfg.data)
            fix = "model=dcnn_sentence" if kind == "sentence" else "model=lstm"
            other = "data=sst2" if network.inputs == "sentence" else "data=snli"
            raise ConfigError(f"model={cfg.model.name} reads {network.inputs}s but "
                              f"data={cfg.data.name} holds {kind}s; pick a {kind} model (e.g. "
                              f"{fix}) or {network.inputs} data (e.g. {other})")
        network.check_config(OmegaConf.to_container(cfg.model.net, resolve=True))


def check_extra_tests(cfg: DictConfig) -> None:
    """Each ``extra_tests`` name becomes a metric prefix (``NAME/acc``): it may not hold a
    ``/`` nor be a split or stage of the run (``data.check_test_set_name``)."""
    from entailment_lab.data.datamodule import check_test_set_name

    data = cfg.get("data") or {}
    for name in cfg.get("extra_tests") or {}:
        check_test_set_name(str(name), {*(data.get("test_splits") or []),
                                        *(data.get("files") or {})})


def check_arguments(node: DictConfig, key: str) -> None:
    """Every value of a ``_partial_`` node (``optimizer``) must be an argument of its target:
    a recipe's optimiser values (conf/recipe/) stay when another optimiser is chosen on the
    command line, and one that optimiser does not take would fail only once training starts."""
    import inspect

    target = hydra.utils.get_class(node._target_)
    params = inspect.signature(target).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return
    for name in node:
        if not str(name).startswith("_") and name not in params:
            raise ConfigError(f"{key}.{name}: not an argument of {node._target_} (a recipe's "
                              f"value for another optimiser?); drop it with ~{key}.{name}, "
                              f"e.g. {key}=... ~{key}.{name}")


def check_precision(trainer_cfg: Mapping[str, Any]) -> None:
    """Refuse ``precision=16-mixed`` (or ``16``) on a CPU: Lightning only warns there and trains
    in ``bf16-mixed`` instead (float16 autocast is for GPUs), so the run would record one
    precision and train in another. The accelerator is resolved as Lightning's ``auto`` does
    (a GPU if one is there)."""
    if str(trainer_cfg.get("precision")) not in ("16", "16-mixed"):
        return
    from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator

    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not CUDAAccelerator.is_available()
                                      and not MPSAccelerator.is_available())
    if on_cpu:
        raise ConfigError(
            f"trainer.precision={trainer_cfg.get('precision')} (float16 mixed precision) needs a "
            "GPU; on CPU Lightning would only warn and train in bf16-mixed instead. Use "
            "trainer.precision=bf16-mixed on CPU, or trainer=gpu on a GPU machine")


# --- the epoch budget ----------------------------------------------------------------------
# One rule: the top-level ``epochs`` is the run's budget. A recipe sets it (conf/recipe/), an
# experiment or a protocol's budget file (conf/budget/<experiment>/<recipe>.yaml) may replace
# it, and ``trainer.max_epochs`` follows it. A run given fewer (``trainer.max_epochs=2`` on the
# command line) records both, and the report marks it as a reduced budget from that record.

def budget_record(cfg: DictConfig) -> dict[str, int | None]:
    """``{"max_epochs": what the trainer got, "configured_max_epochs": the budget}``, as
    ``results.json`` stores it."""
    trainer = cfg.get("trainer") or {}
    return {"max_epochs": trainer.get("max_epochs"), "configured_max_epochs": cfg.get("epochs")}


def budget_options(group: str = "budget") -> list[str]:
    """Every option of the ``budget`` config group (``protocols/sick/decatt``, ...), found
    through Hydra's config search path; empty outside a Hydra run."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType

    if not GlobalHydra.instance().is_initialized():
        return []
    loader = GlobalHydra.instance().config_loader()
    options = [f"{group}/{name}" for name in loader.get_group_options(group, ObjectType.CONFIG)]
    for sub in loader.get_group_options(group, ObjectType.GROUP):
        options += budget_options(f"{group}/{sub}")
    return sorted(o.removeprefix("budget/") for o in options) if group == "budget" else options


def check_budget_choice(overrides: list[str] | None = None) -> None:
    """An explicit ``budget=NAME`` must name an option of ``conf/budget/``: the group is
    optional (chosen by interpolation, conf/train.yaml), so Hydra would skip a misspelt one
    without a word and the run would train the recipe's epochs instead."""
    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return
        overrides = list(HydraConfig.get().overrides.task)
    known = None
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") != "budget":
            continue
        known = budget_options() if known is None else known
        if known and value not in known:
            raise ConfigError(f"budget={value}: no such budget; the budgets are "
                              f"{', '.join(known)}. Leave budget out (the protocol picks its "
                              "own), or drop it with ~budget to train the recipe's epochs")
