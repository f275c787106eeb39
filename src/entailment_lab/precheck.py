"""A command line checked before Hydra runs it: every mistake that needs no data ends in one
line (``error: ...``, exit status 1), before any run folder exists and before any data is read.

The entry points (``src/train.py``, ``eval.py``, ``predict.py``, ``explain.py``) call
``checked_command`` on their arguments, then hand them to ``@hydra.main``. It composes every
job of the command line (each combination of a ``-m`` sweep) with Hydra's compose API and
checks, in this order, with no torch and no Lightning loaded:

1. each override parses, and a config group's option exists (``model=din3``: the options in
   one line, nested ones such as ``experiment=table2/row17`` included);
2. ``ckpt_path=RUN/checkpoints/last.ckpt`` of a training run: the run's own overrides
   (``RUN/.hydra/overrides.yaml``) come first, the run resumes in its folder, and an override
   that contradicts the run's stored config is refused (``check_resume``);
3. each key exists, ``+key`` included: an added key must be a knob (an argument of its node's
   ``_target_``, a named test set, a split's file, a new callback, logger or metric), else it
   is refused with the nearest knob ("did you mean optimizer.lr?");
4. the composed config: ``config.check_config_fast`` (types and ranges, the model's knobs,
   files, splits, monitors, devices) and the run folder (a training run never writes into a
   folder that holds another run).

Only then are torch and Lightning imported (the run needs them anyway) for what needs them:
``config.check_config`` (the model's own checks and a build at the configured sizes, the
optimiser's arguments) and Lightning's own checks of the Trainer's arguments, by building the
Trainer and the callbacks. A flag other than ``-m`` (``--help``, ``--cfg``, ``-cn``, ...) is
Hydra's: the command line goes to Hydra unchecked.
"""

from __future__ import annotations

import itertools
import logging
import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write

from entailment_lab.config import checkpoint_problem
from entailment_lab.errors import ConfigError
from entailment_lab.results import RESULTS_FILE, read_results, run_folder
from entailment_lab.schema import did_you_mean, shown

MULTIRUN_FLAGS = ("-m", "--multirun")
#: Keys a new node may be added under with ``+``: a named test file, a split's file, a hub
#: split's name.
OPEN_NODES = ("extra_tests", "data.files", "data.hub_splits")
#: Trainer arguments of Lightning 1.x that Lightning 2 removed, and what does their work here
LIGHTNING_1_TRAINER = {
    "gpus": "trainer=gpu (one GPU), or trainer.accelerator=gpu trainer.devices=N",
    "tpu_cores": "trainer.accelerator=tpu trainer.devices=N",
    "auto_select_gpus": "trainer.devices=auto",
    "resume_from_checkpoint": "ckpt_path=RUN/checkpoints/last.ckpt (the run's own config and "
                              "folder)",
    "progress_bar_refresh_rate": "trainer.enable_progress_bar=false (no bar)",
    "weights_summary": "trainer.enable_model_summary=false",
    "amp_backend": "trainer.precision=16-mixed or bf16-mixed",
    "stochastic_weight_avg": "the StochasticWeightAveraging callback (+callbacks.swa._target_="
                             "lightning.pytorch.callbacks.StochasticWeightAveraging)",
}
#: Groups whose members may be new named objects (``+callbacks.NAME._target_=...``).
NAMED_OBJECTS = ("callbacks", "logger", "metrics")
#: What the weights and the optimiser's state in a checkpoint depend on: a resume that changes
#: one of these is refused. The exceptions may change (a moved data folder, loader workers).
RESUME_FIXED = ("model", "dim", "embeddings", "data", "optimizer", "scheduler", "seed", "metrics",
                "recipe")
RESUME_FREE = ("data.files", "data.num_workers", "data.num_proc", "data.cache_dir",
               "data.eval_batch_size", "data.directory", "embeddings.path",
               "embeddings.cache_dir")


@dataclass
class Job:
    """One job of a command line: its overrides and its composed config (no ``hydra``)."""

    overrides: list[str]
    cfg: DictConfig
    folder: Path
    hydra: DictConfig = field(repr=False)


def checked_command(config_name: str, args: Sequence[str], config_dir: Path,
                    built: bool = True) -> list[str]:
    """``args`` as Hydra should run them (a resume gets its run's overrides and folder), after
    every check that needs no data; raises one ``ConfigError``. ``built``: also the checks
    that load torch and Lightning (``False``: only those without them)."""
    args = list(args)
    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in args):
        return args  # Hydra's own flags (--help, --cfg, -cn, ...): Hydra answers them
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    overrides = [a for a in args if a not in MULTIRUN_FLAGS]
    with hydra_context(config_dir, config_name):
        parsed = _parse(overrides)
        _check_groups(parsed)
        resumed = None
        if config_name == "train" and not multirun:
            overrides, resumed = resume_overrides(overrides)
            parsed = _parse(overrides)
        jobs = [_compose(config_name, combo, multirun, num)
                for num, combo in enumerate(_combinations(parsed, multirun))]
        for job in jobs:
            _set_hydra(job)
            _check_keys(config_name, job)
            from entailment_lab.config import check_config_fast

            check_config_fast(job.cfg, job.overrides)
            if config_name == "train":
                check_run_folder(job, resumed)
                if resumed is not None:
                    check_resume(job, resumed)
        if built:
            seen: set[str] = set()
            for job in jobs:
                key = OmegaConf.to_yaml(job.cfg)
                if key not in seen:
                    seen.add(key)
                    _set_hydra(job)
                    check_built(job, resumed)
    return [*(a for a in args if a in MULTIRUN_FLAGS), *overrides]


# --- Hydra ----------------------------------------------------------------------------------
@contextmanager
def hydra_context(config_dir: Path, config_name: str) -> Iterator[None]:
    """Hydra initialised on ``config_dir`` for the checks, cleared after (``@hydra.main``
    initialises its own)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from entailment_lab.config import register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    _LISTINGS.clear()
    try:
        with initialize_config_dir(config_dir=str(Path(config_dir).resolve()),
                                   version_base="1.3", job_name=config_name):
            yield
    finally:
        GlobalHydra.instance().clear()
        _LISTINGS.clear()


def _parse(overrides: list[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    try:
        return parser.parse_overrides(overrides)
    except OverrideParseException as err:
        for override in overrides:  # which one, and what in it
            try:
                parser.parse_overrides([override])
            except OverrideParseException as own:
                raise ConfigError(_unreadable(override, str(own))) from None
        raise ConfigError(_one_line(err)) from None


GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic"


def _unreadable(override: str, message: str) -> str:
    """One line for an override Hydra's grammar cannot read: the character or the function
    call it stopped at, and how to write the value instead."""
    key, _, value = override.partition("=")
    quoted = f"""{key}='"{value}"'"""
    lines = message.splitlines()
    if lines[0].startswith("LexerNoViableAltException: ") and len(lines) > 1:
        column = lines[1].index("^") - len("LexerNoViableAltException: ")
        char = override[column] if 0 <= column < len(override) else ""
        if char == "~" and value.startswith("~"):  # zsh (macOS), sh: ~ after = unexpanded
            return (f"{override}: Hydra's override grammar cannot read '~' (this shell did not "
                    f"expand it); write the folder out, e.g. {key}=$HOME{value[1:]}")
        if char:
            return (f"{override}: Hydra's override grammar cannot read {char!r} (column "
                    f"{column + 1}); quote the value: {quoted} ({GRAMMAR})")
    function = re.search(r"Unknown function '(\w+)'", message)
    if function:
        return (f"{override}: Hydra reads {function.group(1)}(...) as a function call; quote "
                f"the value: {quoted} ({GRAMMAR})")
    return f"{override}: {_one_line(message)}"


def _one_line(err: BaseException | str) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return " ".join(ln for ln in lines if not ln.startswith(("Set the environment variable",
                                                              "full_key:", "object_type=")))


def _loader() -> Any:
    from hydra.core.global_hydra import GlobalHydra

    return GlobalHydra.instance().config_loader()


#: Hydra's listings of the config folders, kept for one ``hydra_context``: a command line asks
#: for the same folders once per override
_LISTINGS: dict[tuple[str, bool], list[str]] = {}


def _listing(group: str, folders: bool) -> list[str]:
    """The option files (``folders``: the sub-folders) of a config group, memoised. Read from
    the loader's search path (``repository``), as its ``get_group_options`` does after copying
    every source into a new caching repository (about 30 ms a call, 1–2 s a command line);
    no config here extends the search path (``hydra.searchpath``), the one thing that copy
    would add."""
    from hydra.core.object_type import ObjectType

    key = (group, folders)
    if key not in _LISTINGS:
        kind = ObjectType.GROUP if folders else ObjectType.CONFIG
        _LISTINGS[key] = sorted(_loader().repository.get_group_options(group, kind))
    return _LISTINGS[key]


def groups(parent: str = "") -> list[str]:
    """Every config group (``model``, ``hydra/launcher``, ``experiment/table2`` ...)."""
    found = []
    for name in _listing(parent, folders=True):
        group = f"{parent}/{name}" if parent else name
        found += [group, *groups(group)]
    return found


def group_options(group: str) -> list[str]:
    """A group's options, those of its sub-folders included (``table2/row17``); ``common``
    folders hold pieces the options share (``data/common``), not options."""
    options = list(_listing(group, folders=False))
    for sub in _listing(group, folders=True):
        if sub != "common":
            options += [f"{sub}/{o}" for o in group_options(f"{group}/{sub}")]
    return options


def _is_group(key: str) -> bool:
    return "." not in key and key in set(groups())


def _check_groups(parsed: list[Any]) -> None:
    """Every option a group override names exists (a sweep's values each)."""
    from hydra.core.override_parser.types import Glob

    for override in parsed:
        group = override.key_or_group
        if override.is_delete() or not _is_group(group):
            continue
        options = group_options(group)
        value = override.value()
        if isinstance(value, Glob):
            if not value.filter(options):
                raise ConfigError(f"{override.input_line}: matches no {group} option; the "
                                  f"options are {', '.join(options)}")
            continue
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() \
            else [value]
        for option in values:
            if option is None:
                raise ConfigError(f"{group}=null: Hydra drops a group's option with ~{group}, "
                                  "not with null")
            if str(option) in options:
                continue
            raise ConfigError(f"{group}={option}: no such {group}"
                              f"{did_you_mean(str(option), options)}; the options are "
                              f"{', '.join(options)}")


def _combinations(parsed: list[Any], multirun: bool) -> list[list[str]]:
    """The jobs of a command line: one, or each combination of a ``-m`` sweep's values. A
    sweep the basic sweeper cannot list (``interval(...)``, for Optuna) is left out of the
    composed jobs: its sweeper checks its values."""
    from hydra.core.override_parser.types import Glob

    if not multirun:
        return [[o.input_line for o in parsed]]
    options = []
    for override in parsed:
        key = override.get_key_element()
        value = override.value()
        if isinstance(value, Glob):
            options.append([f"{key}={v}" for v in value.filter(group_options(
                override.key_or_group))])
        elif override.is_sweep_override():
            try:
                options.append([f"{key}={v}" for v in override.sweep_string_iterator()])
            except Exception:
                continue
        else:
            options.append([override.input_line])
    return [list(combo) for combo in itertools.product(*options)]


def _compose(config_name: str, overrides: list[str], multirun: bool, num: int) -> Job:
    """One job's config, composed as ``@hydra.main`` would, with its run folder resolved."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        full = compose(config_name, overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        raise ConfigError(_composition_error(config_name, overrides, err)) from None
    with read_write(full.hydra), open_dict(full.hydra):
        full.hydra.job.num = num
    HydraConfig.instance().set_config(full)
    try:
        hc = full.hydra
        folder = Path(f"{hc.sweep.dir}/{hc.sweep.subdir}" if multirun else hc.run.dir)
    except OmegaConfBaseException as err:
        raise ConfigError(f"hydra.run.dir: {_one_line(err)}") from None
    with read_write(full.hydra), open_dict(full.hydra):
        full.hydra.runtime.output_dir = str(folder.resolve())
    HydraConfig.instance().set_config(full)
    cfg = OmegaConf.masked_copy(full, [k for k in full if k != "hydra"])
    return Job(overrides, cfg, folder.resolve(), full)


def _set_hydra(job: Job) -> None:
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(job.hydra)


def _composition_error(config_name: str, overrides: list[str], err: BaseException) -> str:
    """Hydra's or OmegaConf's refusal in one line; an unknown key with the nearest knob."""
    import re

    message = str(err)
    unknown = re.search(r"Could not override '([^']+)'", message)
    if unknown:
        key = unknown.group(1)
        base = _base(config_name, overrides)
        problem = added_key_problem(key, base, base, adding=False)
        return f"{key}: {problem}" if problem else \
            f"{key}: not in the config, but a knob of its node: add it with +{key}=..."
    exists = re.search(r"Could not append to config\. An item is already at '([^']+)'", message)
    if exists:
        key = exists.group(1)
        return f"+{key}: {key} exists already; set it without the +: {key}=..."
    absent = re.search(r"Could not delete from config\. '([^']+)' does not exist", message)
    if absent:
        return f"~{absent.group(1)}: no such key to delete"
    return _one_line(err)


def _base(config_name: str, overrides: list[str]) -> DictConfig:
    """The config of the group overrides alone: the keys the value overrides may set."""
    from hydra import compose

    kept = [o for o in _parse(overrides) if _is_group(o.key_or_group)
            or o.key_or_group.startswith("hydra")]
    return compose(config_name, overrides=[o.input_line for o in kept])


def _knob_names(cfg: DictConfig) -> list[str]:
    """Every dotted key of ``cfg`` and, under ``model.net``, every argument of the model's
    constructor (knobs with a default the config does not list)."""
    from entailment_lab.schema import read_target

    names = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                names.append(f"{prefix}{key}")
                walk(value, f"{prefix}{key}.")

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    target = OmegaConf.select(cfg, "model.net._target_", default=None)
    source = read_target(str(target)) if target else None
    if source is not None:
        names += [f"model.net.{n}" for n in source.arguments]
    return names


# --- keys -------------------------------------------------------------------------------------
def _check_keys(config_name: str, job: Job) -> None:
    """A key added with ``+`` or ``++`` must be a knob: Hydra adds any key, and a misspelt one
    (``+optimiser.lr=0.1``) would train with the old value without a word."""
    added = [o for o in _parse(job.overrides) if (o.is_add() or o.is_force_add())
             and not _is_group(o.key_or_group) and not o.key_or_group.startswith("hydra")]
    if not added:
        return
    base = _base_without(config_name, job.overrides, added)
    for override in added:
        key = override.key_or_group
        if override.is_force_add() and OmegaConf.select(base, key, default=_NOTHING) \
                is not _NOTHING:
            continue  # ++ of an existing key: a plain override
        problem = added_key_problem(key, base, job.cfg)
        if problem:
            raise ConfigError(f"{override.get_key_element()}: {problem}")


_NOTHING = object()


def _base_without(config_name: str, overrides: list[str], added: list[Any]) -> DictConfig:
    from hydra import compose

    lines = {o.input_line for o in added}
    return compose(config_name, overrides=[o for o in overrides if o not in lines])


def added_key_problem(key: str, base: DictConfig, cfg: DictConfig,
                      adding: bool = True) -> str | None:
    """Why ``key``, absent from ``base`` (the config without the added keys), is no knob of
    ``cfg``; ``None`` when it is one. ``adding``: given with ``+`` (else a plain override of
    a key the config lacks: a new test set, split or object is no plain override)."""
    from entailment_lab.schema import module_constant, read_target

    parent, _, name = key.rpartition(".")
    if parent in OPEN_NODES and adding:
        return None
    head, _, rest = key.partition(".")
    if head in NAMED_OBJECTS and rest and adding:
        member = rest.split(".")[0]
        if OmegaConf.select(base, f"{head}.{member}", default=None) is None:
            node = OmegaConf.select(cfg, f"{head}.{member}", default=None)
            if isinstance(node, DictConfig) and "_target_" in node:
                return None  # a new callback, logger or metric: instantiated with the run
            return (f"a new {head} entry needs a _target_, e.g. "
                    f"+{head}.{member}._target_=package.Class")
    node = OmegaConf.select(base, parent, default=None) if parent else None
    if isinstance(node, DictConfig) and "_target_" in node:
        target = str(node._target_)
        arguments = list(node)
        if target.endswith("Trainer"):  # conf/trainer/default.yaml lists every argument
            if name in LIGHTNING_1_TRAINER:
                return (f"an argument of Lightning 1.x's Trainer that Lightning 2 dropped; "
                        f"here: {LIGHTNING_1_TRAINER[name]}")
            return f"not an argument of the Trainer{did_you_mean(name, arguments)}"
        source = read_target(target)
        if source is not None and source.complete:
            arguments, open_ended, shown_as = list(source.arguments), source.open_ended, \
                source.name
        else:  # another package's (torch, Lightning): imported, as the run will
            found = imported_signature(target)
            if found is None:
                return None  # cannot be imported: instantiating it says why
            (arguments, open_ended), shown_as = found, target
        if name in arguments or open_ended:
            return None
        context = {*module_constant("entailment_lab.models.base", "CONTEXT_ARGUMENTS"),
                   "params", "optimizer"}  # what the run passes (a network's, an optimiser's)
        knobs = [a for a in arguments if a not in context]
        return (f"not an argument of {shown_as}{did_you_mean(name, knobs)}; its arguments: "
                f"{', '.join(knobs)}")
    # a top-level knob only some experiments define (data_root)
    owners = _options_defining("experiment", key) if "." not in key else []
    if owners:
        files = " data.files.<split>=PATH for each split" if key == "data_root" else ""
        return (f"no such key in this config; it is a knob of experiment={', '.join(owners)}"
                f"{'; without one, give' + files if files else ''}")
    return _no_such_key(key, base)


def _no_such_key(key: str, base: DictConfig) -> str:
    """What a key that is in no config the command composes was probably meant to be: a
    group's option (``wandb=true``: ``logger=wandb``), a knob of that name elsewhere in the
    config (``lr``: ``optimizer.lr``; one that follows a top-level knob, ``${dim}``, names that
    knob too), a knob only other options of its group have (``data.files`` under ``data=demo``),
    else the nearest name."""
    leaf = key.rpartition(".")[2]
    if "." not in key:
        owners = [g for g in groups() if "/" not in g and leaf in group_options(g)]
        if owners:
            return f"no such key; {leaf} is an option: {' or '.join(f'{g}={leaf}' for g in owners)}"
    names = _knob_names(base)
    same = [n for n in names if n.rpartition(".")[2] == leaf]
    if 0 < len(same) <= 3:
        meant: dict[str, None] = {}
        for name in same:
            followed = _followed_knob(base, name)
            if followed:
                meant[followed] = None
            if not (followed and name.startswith("model.net.")):  # set through dim alone
                meant[name] = None  # (check_size_follows_dim)
        meant.pop(key, None)
        if meant:
            return f"no such key (did you mean {' or '.join(meant)}?)"
    head, _, rest = key.partition(".")
    if rest and _is_group(head):
        current = OmegaConf.select(base, f"{head}.name", default=None)
        this = f"{head}={current}" if isinstance(current, str) else f"this {head} config"
        # the first missing level (data.files of data.files.train), or a network's argument
        # written without its net. (model.heads: model.net.heads of model=diin)
        for path in (rest.partition(".")[0], f"net.{rest}" if head == "model" else None):
            others = _options_defining(head, path) if path else []
            if others and current not in others:
                return (f"no such key: {this} has no {head}.{path}; "
                        f"{head}={', '.join(others)} {'has' if len(others) == 1 else 'have'} it")
        if head == "model" and "." not in rest:  # model.attention: the network's arguments
            problem = added_key_problem(f"model.net.{rest}", base, base, adding=False)
            if problem:
                return f"no such key (a network's knobs are model.net.NAME); model.net.{rest}: " \
                    f"{problem}"
    return f"no such key{did_you_mean(key, names)}"


def _followed_knob(cfg: DictConfig, key: str) -> str | None:
    """The top-level knob ``key``'s value follows (``${dim}``, ``${oc.select:epochs,null}``)."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    raw = OmegaConf.to_container(node, resolve=False).get(leaf) \
        if isinstance(node, DictConfig) else None
    found = re.fullmatch(r"\$\{(?:oc\.select:)?(\w+)(?:,[^}]*)?\}", str(raw))
    return found.group(1) if found else None


def _options_defining(group: str, path: str) -> list[str]:
    """The options of ``group`` whose own file sets dotted ``path``, to ``???`` included
    (``data_root`` of the protocols and DCNN experiments); read only when a key is missing."""
    found = []
    for option in group_options(group):
        loaded = _loader().repository.load_config(f"{group}/{option}")
        config = loaded.config if loaded is not None else None
        parent, _, leaf = path.rpartition(".")
        node = OmegaConf.select(config, parent, default=None, throw_on_resolution_failure=False) \
            if parent and isinstance(config, DictConfig) else config
        if isinstance(node, DictConfig) and leaf in list(node.keys()):  # `in` skips ???
            found.append(option)
    return found


def imported_signature(target: str) -> tuple[list[str], bool] | None:
    """The parameter names of ``target`` (imported) and whether it takes ``**kwargs``."""
    import inspect

    import hydra

    try:
        obj = hydra.utils.get_object(target)
        parameters = inspect.signature(obj).parameters
    except Exception:
        return None
    names = [n for n, p in parameters.items()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n != "self"]
    return names, any(p.kind == p.VAR_KEYWORD for p in parameters.values())


# --- resuming ---------------------------------------------------------------------------------
@dataclass
class Resumed:
    """A training command line that resumes: its run, and the stored overrides it took."""

    checkpoint: Path
    run: Path
    stored: list[str] | None  # None: the run's overrides were not found
    given: list[str]  # the command line's own overrides


def stored_overrides(run: Path) -> list[str] | None:
    """The overrides a run was started with: Hydra's ``.hydra/overrides.yaml``, else the
    ``overrides`` of its ``results.json``; ``None`` where neither is there."""
    path = run / ".hydra" / "overrides.yaml"
    if path.is_file():
        return [str(o) for o in OmegaConf.load(path)]
    data = read_results(run / RESULTS_FILE)
    return list(data["overrides"]) if "overrides" in data else None


def _override_key(line: str) -> str:
    [override] = _parse([line])
    return override.key_or_group


def resume_overrides(overrides: list[str]) -> tuple[list[str], Resumed | None]:
    """A command line with ``ckpt_path``: the run's own overrides first (the command line's
    replace those of the same key), and ``hydra.run.dir`` the run's folder unless given, so
    ``ckpt_path=RUN/checkpoints/last.ckpt`` alone resumes the run as it was started."""
    given = {_override_key(o): o for o in overrides}
    if "ckpt_path" not in given:
        return overrides, None
    value = given["ckpt_path"].partition("=")[2]
    problem = checkpoint_problem(value, resume=True)
    if problem:
        raise ConfigError(problem)
    checkpoint = Path(value).expanduser()
    run = run_folder(checkpoint)
    stored = stored_overrides(run)
    _refuse_other_groups(overrides, run)
    kept = [o for o in stored or [] if _override_key(o) not in given
            and _override_key(o) not in ("ckpt_path",) and not o.startswith("hydra.")]
    merged = [*kept, *overrides]
    if "hydra.run.dir" not in given:
        merged.append(f"hydra.run.dir={run}")
    logging.getLogger(__name__).info(
        "resuming %s%s", run, f" with its {len(kept)} override(s)" if stored else "")
    return merged, Resumed(checkpoint.resolve(), run, stored, list(overrides))


def _leaves(cfg: DictConfig) -> dict[str, Any]:
    """Every leaf of ``cfg`` under ``RESUME_FIXED`` (less ``RESUME_FREE``) by dotted key,
    resolved where it resolves (else as written)."""
    found: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
            return
        key = prefix[:-1]
        if key.split(".")[0] not in RESUME_FIXED or any(
                key == free or key.startswith(f"{free}.") for free in RESUME_FREE):
            return
        try:
            value = OmegaConf.select(cfg, key, throw_on_missing=False)
            found[key] = OmegaConf.to_container(value, resolve=True) \
                if isinstance(value, DictConfig | ListConfig) else value
        except Exception:  # an interpolation of this job's Hydra state
            found[key] = node

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return found


def _refuse_other_groups(overrides: list[str], run: Path) -> None:
    """A group option other than the run's (``model=din1`` resuming an LSTM) contradicts the
    checkpoint, told before composing (the run's own values may not fit the other option)."""
    path = run / ".hydra" / "hydra.yaml"
    if not path.is_file():
        return
    choices = OmegaConf.to_container(OmegaConf.load(path).hydra.runtime.choices, resolve=False)
    for override in _parse(overrides):
        group = override.key_or_group
        if group in (*RESUME_FIXED, "experiment") and _is_group(group) and group in choices \
                and str(override.value()) != str(choices[group]):
            raise ConfigError(f"{override.input_line}: contradicts the checkpoint: the run "
                              f"trained {group}={choices[group]} ({path}); resume without "
                              "changing it, or start a new run (no ckpt_path)")


def config_differences(old: DictConfig, new: DictConfig) -> list[tuple[str, Any, Any]]:
    """``(key, old value, new value)`` of each leaf the checkpoint depends on that differs
    (``RESUME_FIXED`` less ``RESUME_FREE``), the model's name and ``dim`` first, then the
    shallowest."""
    a, b = _leaves(old), _leaves(new)
    differing = [k for k in {*a, *b} if a.get(k, "(absent)") != b.get(k, "(absent)")]
    first = {"model.name": 0, "dim": 1}
    differing.sort(key=lambda k: (first.get(k, 2), k.count("."), k))
    return [(k, a.get(k, "(absent)"), b.get(k, "(absent)")) for k in differing]


def check_resume(job: Job, resumed: Resumed) -> None:
    """The resumed config against the run's stored one (``RUN/.hydra/config.yaml``, as
    composed): a difference in what the checkpoint depends on is refused, naming the key."""
    stored = resumed.run / ".hydra" / "config.yaml"
    if stored.is_file():  # else compared with the checkpoint's own once torch is loaded
        _refuse_differences(OmegaConf.load(stored), job.cfg, resumed, str(stored))


def _refuse_differences(old: DictConfig, new: DictConfig, resumed: Resumed, where: str) -> None:
    differing = config_differences(old, new)
    if not differing:
        return
    key, before, now = differing[0]
    culprit = next((o for o in resumed.given if _override_key(o) == key
                    or key.startswith(f"{_override_key(o)}.")), None)
    culprit = culprit or next((o for o in resumed.given if "=" in o and _is_group(
        _override_key(o))), None)
    said = f"{culprit}: " if culprit else ""
    fix = "resume without changing it, or start a new run (no ckpt_path)" if resumed.stored \
        is not None else (f"the run's overrides were not found ({resumed.run}/.hydra/"
                          "overrides.yaml): give them on the command line")
    raise ConfigError(f"{said}contradicts the checkpoint: {key} was {shown(before)} in the run "
                      f"({where}), now {shown(now)}; {fix}")


def check_run_folder(job: Job, resumed: Resumed | None) -> None:
    """A training run never writes into a folder that holds another run's ``results.json``:
    only the run a checkpoint belongs to resumes in its own folder."""
    if not (job.folder / RESULTS_FILE).is_file():
        return
    if resumed is not None and resumed.run == job.folder:
        return
    raise ConfigError(f"hydra.run.dir={job.folder}: holds a run already ({RESULTS_FILE}); "
                      f"resume it with ckpt_path={job.folder}/checkpoints/last.ckpt, or choose "
                      "another folder")


# --- the checks that load torch and Lightning ------------------------------------------------
def check_built(job: Job, resumed: Resumed | None = None) -> None:
    """``config.check_config``; a resumed run's config against its checkpoint's where the
    run's folder holds none; the callbacks and the Trainer built as the run builds them, so
    Lightning's own checks of its arguments run before the data (and name the key)."""
    from entailment_lab.config import check_config

    cfg = job.cfg
    check_config(cfg, job.overrides)
    if cfg.get("ckpt_path"):
        from entailment_lab.checkpoints import checkpoint_metadata

        _, meta = checkpoint_metadata(cfg.ckpt_path)
        if resumed is not None and not (resumed.run / ".hydra" / "config.yaml").is_file():
            _refuse_differences(OmegaConf.create(meta.get("config") or {}), cfg, resumed,
                                f"{resumed.checkpoint}'s metadata")
        if cfg.get("task_name") == "eval":
            check_eval_split(cfg, (meta.get("config") or {}).get("data") or {})
    if "trainer" in cfg:
        build_trainer(cfg, job.overrides)


def check_eval_split(cfg: DictConfig, run_data: dict[str, Any]) -> None:
    """``split`` names a split of the checkpoint's data (or one a file on the command line
    gives)."""
    given = {k for k, v in ((cfg.get("data") or {}).get("files") or {}).items() if v}
    known = list(dict.fromkeys(["train", "validation", "test", *(run_data.get("files") or {}),
                                *(run_data.get("hub_splits") or {}), *given]))
    if cfg.split not in known:
        raise ConfigError(f"split={cfg.split}: the run's data has no such split"
                          f"{did_you_mean(str(cfg.split), known)}; its splits: "
                          f"{', '.join(known)} (or give +data.files.{cfg.split}=PATH)")


def build_trainer(cfg: DictConfig, overrides: Sequence[str]) -> Any:
    """The run's callbacks and Trainer, built and dropped: Lightning checks the Trainer's
    arguments when it is built (accelerator, strategy, devices, precision, max_time, ...).
    Its notes ("GPU available: ...") and warnings are left to the run itself."""
    import hydra

    from entailment_lab.pipeline import build_callbacks

    callbacks = build_callbacks(cfg, has_logger=False) if cfg.get("task_name") == "train" else []
    quiet = [logging.getLogger(n) for n in ("lightning.pytorch.utilities.rank_zero",
                                            "lightning.fabric.utilities.rank_zero")]
    levels = [q.level for q in quiet]
    try:
        for q in quiet:
            q.setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=False)
    except hydra.errors.InstantiationException as err:
        raise ConfigError(trainer_error(err.__cause__ or err, overrides)) from None
    finally:
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)


def trainer_error(err: BaseException, overrides: Sequence[str]) -> str:
    """Lightning's refusal in one line, after the ``trainer.`` overrides it is about (those
    whose knob its message names, else all of them)."""
    message = _one_line(f"{type(err).__name__}: {err}" if not str(err) else err)
    given = [o for o in overrides if o.lstrip("+~").startswith("trainer.")]
    named = [o for o in given if o.lstrip("+~").partition("=")[0].rpartition(".")[2]
             in message]
    return f"{' '.join(named or given) or 'trainer'}: {message}"

