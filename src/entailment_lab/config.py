"""The composed config: its resolvers, its checks before any data is read, its epoch budget, and
building objects from it (``hydra.utils.instantiate`` with one-line errors).

``conf/`` is found through Hydra's config path (the entry points' ``config_path="../conf"``);
nothing here locates it on disk.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from entailment_lab.errors import ConfigError, UserError
from entailment_lab.schema import shown, validate

_RUN_ID = secrets.token_hex(3)  # fixed for this process: all jobs of one sweep agree on it


def config_dir() -> Path | None:
    """The primary config folder (``conf/``) as Hydra's config search path names it; ``None``
    outside a Hydra run or for a package's configs."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        for source in HydraConfig.get().runtime.config_sources:
            if source.provider == "main" and source.schema == "file":
                return Path(source.path).resolve()
    return None


def project_root() -> str:
    """The folder that holds the primary config folder (``conf/``'s parent: the checkout), as
    Hydra's config search path names it; the working directory where Hydra has none (a
    package's configs, or no Hydra run)."""
    folder = config_dir()
    return str(folder.parent) if folder else str(Path.cwd())


def _slug(text: str, words: int = 5) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:words]) or "x"


def explain_dir(ckpt_path: str | None, premise: str | None, hypothesis: str | None,
                fallback: str) -> str:
    """Where ``explain.py`` writes (``${explain_dir:...}`` in ``conf/explain.yaml``): beside
    the checkpoint's run, one folder per pair. Here, not in ``explain.py``: the command line is
    resolved before anything heavy is imported.

    ``RUN/checkpoints/epoch_004.ckpt`` -> ``RUN/explain/a-man-is-playing-a--a-person-plays-music
    -HASH`` (first words of each sentence, and a hash of both so that two pairs never share a
    folder). ``fallback`` (``outputs/explain``) when the checkpoint is not given: the run stops
    with a one-line error then.
    """
    if not ckpt_path:
        return fallback
    ckpt = Path(ckpt_path)
    run = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent
    pair = f"{premise or ''}\n{hypothesis or ''}"
    digest = hashlib.sha1(pair.encode("utf-8")).hexdigest()[:6]
    return str(run / "explain" / f"{_slug(premise or '')}--{_slug(hypothesis or '')}-{digest}")


def register_resolvers() -> None:
    """``${project_root:}``, ``${run_id:}``, ``${name_suffix:NAME}`` and
    ``${explain_dir:...}`` for the configs (idempotent)."""
    OmegaConf.register_new_resolver("explain_dir", explain_dir, replace=True)
    OmegaConf.register_new_resolver("project_root", project_root, replace=True)
    OmegaConf.register_new_resolver("run_id", lambda: _RUN_ID, replace=True)
    # "-din1" in a run folder's name (conf/hydra/default.yaml); nothing for a task without a
    # model (eval, predict)
    OmegaConf.register_new_resolver("name_suffix", lambda name=None: f"-{name}" if name else "",
                                    replace=True)


def run_tags(cfg: DictConfig) -> list[str]:
    """The tags of a run (W&B and ``results.json``): the configured ones (an experiment file's
    ``table2``, ``rowNN``, ``protocol_*``, ...), then, for every run, the model's name, its
    size ``d<dim>`` where it has one, and the data's name (``snli``, ``snli_dev2test``,
    ``sick``, ...), so that any sweep can be filtered by what it trained."""
    tags = [str(t) for t in cfg.get("tags") or []]
    if "model" in cfg:
        tags.append(str(cfg.model.name))
    if cfg.get("dim") is not None:
        tags.append(f"d{cfg.dim}")
    if "data" in cfg and (cfg.data.get("name")):
        tags.append(str(cfg.data.name))
    return list(dict.fromkeys(tags))


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

    target = imported_target(net_cfg, "model.net")
    if not (isinstance(target, type) and issubclass(target, Network)):
        raise ConfigError(f"model.net._target_: {net_cfg._target_} is not a subclass of "
                          "entailment_lab.models.base.Network (docs/extending.md, 'A model')")
    return target


def data_inputs(data_cfg: Mapping[str, Any]) -> str:
    """What a data config feeds a network: ``"sentence"`` when its ``fields`` name a
    ``sentence`` column (SST, TREC), else ``"pair"`` (premise and hypothesis)."""
    fields = data_cfg.get("fields") or {}
    return "sentence" if "sentence" in fields else "pair"


# --- the checks before any data is read ------------------------------------------------------
# Two tiers. ``check_config_fast`` needs neither torch nor Lightning (the models' knobs are
# read from their source, ``schema.read_target``), so a mistake is answered in about a second;
# ``check_config`` adds what needs them: the model's own ``validate_config``, a throw-away
# build of the network at the configured word-vector size, the optimiser's and scheduler's
# arguments, mixed precision on the device. ``precheck.py`` runs both on every job of a
# command line before Hydra makes a run folder; the pipeline runs ``check_config`` again, for
# callers that start a task without the command line (tests, notebooks).

def check_config(cfg: DictConfig, overrides: list[str] | None = None) -> None:
    """Every check of a composed config that needs no data: ``check_config_fast``, then those
    that load torch (the model's ``check_config`` and a build at the configured sizes, the
    optimiser's and scheduler's arguments, precision on this device, the extra test sets'
    names, the DataModule's own checks of its settings: it is built, nothing is read). Raises
    one ``ConfigError``."""
    check_config_fast(cfg, overrides)
    # torch only, then Lightning and the data package: the common mistakes answer soonest
    if "model" in cfg:
        network = network_class(cfg.model.net)
        network.check_config(OmegaConf.to_container(cfg.model.net, resolve=True))
        if "data" in cfg and "embeddings" in cfg:
            build_network_shape(cfg, network)
    for key in ("data", "trainer", "optimizer", "scheduler", "embeddings"):
        node = cfg.get(key)
        if node is None or "_target_" not in node or (key == "scheduler" and not node._target_):
            continue  # scheduler._target_=null: no scheduler
        check_arguments(node, key, ignore=("interval",) if key == "scheduler" else ())
    for group in ("callbacks", "logger"):
        for name, node in (cfg.get(group) or {}).items():
            if node is not None:
                check_arguments(node, f"{group}.{name}")
    if "trainer" in cfg:
        check_precision(cfg.trainer)
    check_extra_tests(cfg)
    if "_target_" in (cfg.get("data") or {}):  # its settings, checked by its constructor
        instantiate(cfg.data, "data")


def check_config_fast(cfg: DictConfig, overrides: list[str] | None = None) -> None:
    """The checks that need neither data nor torch, in one ``ConfigError``: required (``???``)
    values; the types and ranges of ``schema.SCHEMA``; an explicit ``budget=``; the model's
    knobs against its constructor, ``dim`` against the model, a pair model on sentence data
    or the reverse; every file the config names; the test splits; the callbacks' monitors
    against the metrics the run logs; ``data.val_group_by`` without a carve; the device and
    the processes against this machine. ``overrides``: the command line's (default: Hydra's)."""
    missing = sorted(missing_keys(cfg))
    if missing:
        raise ConfigError(
            f"required config value(s) not set: {', '.join(missing)}; give them on the command "
            f"line, e.g. {missing[0]}=..."
        )
    validate(cfg)
    check_named_objects(cfg)
    check_budget_choice(overrides)
    if "model" in cfg:
        check_model(cfg)
    if "trainer" in cfg:
        check_device(cfg.trainer)
    check_files(cfg)
    if cfg.get("task_name") == "train":
        check_splits(cfg)
        check_monitors(cfg)
    check_validation_carve(cfg)
    if cfg.get("task_name") == "train":
        check_hub(cfg)  # last: a network probe, where the data comes from the hub


def hub_cached(name: str, cache_dir: str | None = None) -> bool:
    """Whether a local cache holds hub dataset ``name``: ``datasets``' prepared copy
    (``<cache>/<namespace>___<name>``) or the hub client's download
    (``<hub cache>/datasets--<namespace>--<name>``), where those libraries put them; then
    ``datasets`` may load it offline, and ``check_hub`` lets it try."""
    home = Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser()
    prepared = Path(cache_dir or os.environ.get("HF_DATASETS_CACHE") or home / "datasets")
    downloads = Path(os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
                     or home / "hub")
    return (prepared.expanduser() / name.replace("/", "___")).is_dir() or \
        (downloads.expanduser() / f"datasets--{name.replace('/', '--')}").is_dir()


def check_hub(cfg: DictConfig) -> None:
    """Data from the hub (no local file given), offline, in no local cache: one line here,
    before a run folder exists, where ``datasets`` would fail seconds later in the run. One
    request bounded by 3 s (``online.hub_unreachable``) when no offline flag is set."""
    data = cfg.get("data") or {}
    hub = data.get("hub_name")
    if not hub or any(v is not None for v in (data.get("files") or {}).values()):
        return
    if hub_cached(str(hub), data.get("cache_dir")):
        return
    from entailment_lab.online import hub_unreachable

    why = hub_unreachable()
    if why is None:
        return
    splits = ["train", *([] if data.get("validate_on") else ["validation"]),
              *(data.get("test_splits") or ["test"])]
    raise ConfigError(
        f"data={data.get('name') or hub}: cannot load '{hub}' from the Hugging Face hub ({why}) "
        f"and no local cache holds it; use local files in the hub's schema instead: "
        f"{' '.join(f'data.files.{s}=PATH' for s in splits)}")


def missing_keys(cfg: DictConfig) -> list[str]:
    """The dotted keys whose value is required (``???``) and not given; unlike
    ``OmegaConf.missing_keys`` it resolves nothing, so a value that interpolates a missing one
    (``${data_root}/sick/train.jsonl.gz``) does not fail before the missing one is named."""
    found = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        elif node == "???":
            found.append(prefix[:-1])

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return found


def check_model(cfg: DictConfig) -> None:
    """``model.net`` against the constructor of its ``_target_`` (read from the source, no
    import): every key an argument, every required argument given, every value of the
    annotated type; the size knob set through ``dim`` alone; ``dim`` only for a model that
    has a size (``model.default_dim``); pairs or sentences as the data holds."""
    from entailment_lab.schema import annotation_knob, did_you_mean, module_constant, read_target

    net = cfg.model.net
    source = read_target(str(net.get("_target_")))
    name = cfg.model.get("name")
    if cfg.get("dim") is not None and cfg.model.get("default_dim") is None:
        raise ConfigError(f"dim={cfg.dim}: model={name} has no encoding size to set (dim sizes "
                          "the models with a default_dim: DIN, LSTMs, DecAtt, ...); leave dim out "
                          f"for model={name}, and sweep dim in a command of its own")
    check_size_follows_dim(cfg)
    if cfg.get("dim") is None and cfg.model.get("default_dim") is not None:
        raise ConfigError(f"dim=null: model={name} needs an encoding size; give dim=N (its "
                          f"default: {cfg.model.default_dim})")
    if source is None or not source.complete:
        return  # not this package's: network_class and check_config see it (torch loaded)
    context = module_constant("entailment_lab.models.base", "CONTEXT_ARGUMENTS")
    knobs = {n: a for n, a in source.arguments.items() if n not in context}
    values = OmegaConf.to_container(net, resolve=True)
    values = {k: v for k, v in values.items() if not str(k).startswith("_")}
    for key, value in values.items():
        if key not in knobs:
            if source.open_ended:
                continue
            raise ConfigError(f"model.net.{key}: not a knob of {source.name} (model={name})"
                              f"{did_you_mean(key, knobs)}; its knobs: {', '.join(knobs)}")
        knob = annotation_knob(knobs[key].annotation)
        if knob is not None and not knob.accepts(value):
            example = f", e.g. model.net.{key}={knob.example}" if knob.example else ""
            raise ConfigError(f"model.net.{key}={shown(value)}: must be {knob.allowed} "
                              f"({source.name} takes {key}: {knobs[key].annotation}){example}")
    required = [n for n, a in knobs.items() if not a.has_default and n not in values]
    if required:
        raise ConfigError(f"model.net.{required[0]}: required by {source.name} (model={name}) "
                          f"but not set; e.g. +model.net.{required[0]}=...")
    inputs = source.attributes.get("inputs", "pair")
    if "data" in cfg and inputs != data_inputs(cfg.data):
        kind = data_inputs(cfg.data)
        fix = "model=dcnn_sentence" if kind == "sentence" else "model=lstm"
        other = "data=sst2" if inputs == "sentence" else "data=snli"
        raise ConfigError(f"model={name} reads {inputs}s but data={cfg.data.name} holds "
                          f"{kind}s; pick a {kind} model (e.g. {fix}) or {inputs} data (e.g. "
                          f"{other})")


def check_size_follows_dim(cfg: DictConfig) -> None:
    """One name for the encoding size: a ``model.net`` knob that the model's config sets to
    ``${dim}`` is given through ``dim`` only, so that the run records the size it trains at
    (a changed ``model.net.hidden_size`` would train another size than ``dim`` says)."""
    from hydra.core.hydra_config import HydraConfig

    folder = config_dir()
    if folder is None:
        return
    choice = HydraConfig.get().runtime.choices.get("model")
    path = folder / "model" / f"{choice}.yaml"
    if not choice or not path.is_file():
        return
    declared = OmegaConf.to_container(OmegaConf.load(path), resolve=False).get("net") or {}
    net = OmegaConf.to_container(cfg.model.net, resolve=False)
    for key, value in declared.items():
        if value == "${dim}" and net.get(key) != "${dim}":
            raise ConfigError(f"model.net.{key}={shown(net.get(key))}: follows dim, the "
                              f"encoding size of model={choice}; set dim={net.get(key)} instead "
                              "(the run records dim)")


def embedding_dim(embeddings_cfg: Mapping[str, Any]) -> int | None:
    """The word-vector size an ``embeddings`` config gives: its ``dim``, else the size a
    fixed-size source names (``glove_6b_50d``: 50); ``None`` where neither says."""
    import re

    if embeddings_cfg.get("dim") is not None:
        return int(embeddings_cfg["dim"])
    found = re.search(r"_(\d+)d$", str(embeddings_cfg.get("_target_", "")))
    return int(found.group(1)) if found else None


def build_network_shape(cfg: DictConfig, network: type | None = None) -> None:
    """Build the network once, before any data, with a four-word vocabulary and word vectors
    of the configured size: the constructor's checks that need the embedding (a DCNN's
    folding, DIN-2's sizes) fail here, not after the data and the word vectors are read."""
    import torch
    from torch import nn

    size = embedding_dim(cfg.embeddings)
    labels = (cfg.data.get("label_names") or [])
    if size is None or not labels:
        return
    network = network or network_class(cfg.model.net)
    context: dict[str, Any] = {"embedding": nn.Embedding(4, size, padding_idx=0),
                               "num_classes": len(labels)}
    if network.needs_vocab:
        context["vocab"] = ["<pad>", "<unk>", "a", "b"]
    state = torch.random.get_rng_state()
    try:
        instantiate(cfg.model.net, "model.net", _convert_="all", **context)
    finally:
        torch.random.set_rng_state(state)  # the check draws no numbers the run would draw


def check_files(cfg: DictConfig) -> None:
    """Every file the config names exists: ``data.files.*``, ``extra_tests.*``, the GloVe
    file of ``embeddings.path``, ``ckpt_path``. Paths are read from the directory the command
    runs in (``hydra.job.chdir`` is false); predict's ``input`` (its format is predict's own
    check)."""
    named: list[tuple[str, Any]] = []
    data = cfg.get("data") or {}
    splits = {"train", "validation", "test", *(data.get("test_splits") or [])}
    # a split the data does not have is the DataModule's to name (check_config); eval builds
    # the checkpoint's DataModule, so there every file given must exist
    named += [(f"data.files.{k}", v) for k, v in (data.get("files") or {}).items()
              if k in splits or cfg.get("task_name") == "eval"]
    named += [(f"extra_tests.{k}", v) for k, v in (cfg.get("extra_tests") or {}).items()]
    if cfg.get("task_name") == "predict":
        named.append(("input", cfg.get("input")))
    if cfg.get("task_name") in ("eval", "predict") and cfg.get("ckpt_path") is None:
        raise ConfigError(f"ckpt_path=null: {cfg.task_name} needs a checkpoint; give "
                          f"ckpt_path=RUN/checkpoints/epoch_NNN.ckpt (a run's best)")
    embeddings = cfg.get("embeddings") or {}
    if "path" in embeddings:
        named.append(("embeddings.path", embeddings.get("path")))
    if cfg.get("ckpt_path") is not None:
        problem = checkpoint_problem(str(cfg.ckpt_path), resume=False)
        if problem:
            raise ConfigError(problem)
    for key, value in named:
        if value is None or Path(str(value)).expanduser().is_file():
            continue
        hint = ""
        if key == "embeddings.path":
            hint = ("; download the GloVe file (conf/embeddings/ says where), or use "
                    "embeddings=glove6b50d (offline)")
        elif key.startswith("data.files."):
            hint = "; data files are read from the folder the command runs in"
        raise ConfigError(f"{key}={value}: no such file{hint}")


#: How a checkpoint file begins: torch.save's zip archive, or a pickle (older torch).
CHECKPOINT_MAGIC = (b"PK\x03\x04", b"\x80")


def checkpoint_problem(value: str, resume: bool) -> str | None:
    """What is wrong with ``ckpt_path=value`` that shows without torch, as one line; None when
    it names a file that begins as a checkpoint does. A run folder (or its ``checkpoints/``)
    gets the checkpoint to give instead: ``last.ckpt`` to resume (``resume``), else the best
    (``epoch_NNN.ckpt``)."""
    path = Path(value).expanduser()
    if path.is_dir():
        folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        found = sorted(p.name for p in folder.glob("*.ckpt"))
        kept = [n for n in found if n != "last.ckpt"]  # the best (save_top_k of them)
        if not found:
            return f"ckpt_path={value}: a folder with no checkpoint (*.ckpt) in it"
        if resume and "last.ckpt" in found:
            pick, why = "last.ckpt", " (to resume the run)"
        elif not resume and len(kept) == 1:
            pick, why = kept[0], " (the best by validation accuracy)"
        else:
            pick, why = found[-1], f"; its checkpoints: {', '.join(found)}"
        return (f"ckpt_path={value}: a folder, not a checkpoint; give one of its checkpoints, "
                f"e.g. ckpt_path={Path(value) / folder.relative_to(path) / pick}{why}")
    if not path.is_file():
        return f"ckpt_path={value}: no such {'checkpoint' if resume else 'file'}"
    with open(path, "rb") as f:
        head = f.read(4)
    if not head.startswith(CHECKPOINT_MAGIC):
        return (f"ckpt_path={value}: not a PyTorch checkpoint (a .ckpt file that train.py "
                f"wrote under RUN/checkpoints/)")
    return None


def check_splits(cfg: DictConfig) -> None:
    """``data.test_splits`` names splits the data has (``data.files`` or ``data.hub_splits``
    keys); with local files (or no hub), the training split and every split the run tests
    have a file."""
    from entailment_lab.schema import did_you_mean

    data = cfg.get("data") or {}
    if "files" not in data:  # a generated corpus (data=demo)
        return
    known = [*(data.get("files") or {}), *(data.get("hub_splits") or {})]
    test_splits = list(data.get("test_splits") or [])
    for split in test_splits:
        if split not in known:
            raise ConfigError(f"data.test_splits: data={data.get('name')} has no split "
                              f"'{split}'{did_you_mean(split, known)}; its splits: "
                              f"{', '.join(dict.fromkeys(known))}")
    files = {k for k, v in (data.get("files") or {}).items() if v is not None}
    if not files and data.get("hub_name"):
        return  # from the hub
    if files - {"train", "validation", *test_splits}:
        return  # a split the data does not have: the DataModule names it (check_config)
    needed = ["train", *(test_splits if cfg.get("test") else [])]
    validate_on = data.get("validate_on")
    for split in needed:
        if validate_on and split in (validate_on, f"test_{validate_on}"):
            continue  # the DataModule names it: data.validate_on validates on it
        if split not in files:
            why = "the run trains on it" if split == "train" else \
                "the run tests on it after training (data.test_splits)"
            fix = "" if split == "train" else ", or test=false"
            raise ConfigError(f"data.files.{split}: not set, but {why}; give "
                              f"data.files.{split}=PATH{fix}")


def metric_names(cfg: DictConfig) -> list[str]:
    """Accuracy and each metric of the ``metrics`` group, as a stage's metrics are named."""
    return ["acc", *(str(k) for k, v in (cfg.get("metrics") or {}).items() if v is not None)]


def logged_metrics(cfg: DictConfig) -> list[str]:
    """The metric names a training run logs (``module.ClassifierModule``): what a callback may
    monitor. Losses, ``val/acc_best``, and each metric of the ``metrics`` group (accuracy
    always) per stage, per class too."""
    names = metric_names(cfg)
    labels = list((cfg.get("data") or {}).get("label_names") or [])
    logged = ["val/acc", "val/loss", "val/acc_best", "train/acc", "train/loss_epoch",
              "train/loss_step", "train/reg_loss", "train/l2_penalty"]
    for stage in ("train", "val"):
        logged += [f"{stage}/{name}" for name in names]
        logged += [f"{stage}/{name}/{label}" for name in names[1:] for label in labels]
    return list(dict.fromkeys(logged))


def check_monitors(cfg: DictConfig) -> None:
    """A callback's ``monitor`` names a metric the run logs: a misspelt one would fail after
    the first epoch (early stopping) or never choose a best checkpoint; so does
    ``optimized_metric``, what a Hydra sweeper (Optuna) maximises."""
    from entailment_lab.schema import did_you_mean

    logged = logged_metrics(cfg)
    for name, node in (cfg.get("callbacks") or {}).items():
        monitor = node.get("monitor") if isinstance(node, Mapping) else None
        if monitor is not None and monitor not in logged:
            main = [m for m in logged if m.count("/") == 1 and m not in (
                "train/loss_step", "train/reg_loss", "train/l2_penalty")]
            raise ConfigError(f"callbacks.{name}.monitor={monitor}: the run logs no such metric"
                              f"{did_you_mean(str(monitor), logged)} (it logs "
                              f"{', '.join(main)}, ...)")
    objective = cfg.get("optimized_metric")  # a sweeper would get NaN from every run
    data = cfg.get("data") or {}
    tests = [*(data.get("test_splits") or ["test"]), *(cfg.get("extra_tests") or {})]
    returned = [*logged, "train/acc_eval", "train/loss_eval",
                *(f"{split}/{name}" for split in tests for name in ["loss", *metric_names(cfg)])]
    if objective and objective not in returned and not any(
            str(objective).startswith(f"{split}/") for split in tests):  # per class, per group
        raise ConfigError(f"optimized_metric={objective}: the run returns no such metric"
                          f"{did_you_mean(str(objective), returned)}; e.g. val/acc_best")


def check_validation_carve(cfg: DictConfig) -> None:
    """``data.val_group_by`` shapes the validation split carved out of train: without
    ``data.val_from_train`` there is no carve and it would be ignored without a word."""
    data = cfg.get("data") or {}
    if data.get("val_group_by") is not None and not data.get("val_from_train"):
        raise ConfigError(f"data.val_group_by={data.get('val_group_by')}: used only with "
                          "data.val_from_train (a validation split carved out of train), which "
                          "is not set; give data.val_from_train=N, or leave val_group_by out")


def gpu_driver_present() -> bool:
    """Whether this machine may have a GPU torch can use, asked without torch: an NVIDIA
    driver (``/proc/driver/nvidia``, ``/dev/nvidia*``, ``nvidia-smi``) or ROCm's ``/dev/kfd``.
    False means no CUDA device for certain; True leaves the question to Lightning."""
    import shutil

    return (Path("/proc/driver/nvidia/version").exists() or Path("/dev/kfd").exists()
            or any(Path("/dev").glob("nvidia[0-9]*")) or shutil.which("nvidia-smi") is not None)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity: a SLURM or container allotment)."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def check_device(trainer_cfg: Mapping[str, Any]) -> None:
    """The accelerator exists here, and a CPU run starts no more processes (DDP ranks,
    ``trainer.devices``) than this process has cores; asked without torch where the answer is
    certain (no GPU driver: a CPU machine), else left to Lightning when the Trainer is built."""
    import platform
    import sys

    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    gpu = gpu_driver_present()
    mps = sys.platform == "darwin" and platform.machine() == "arm64"
    if accelerator in ("gpu", "cuda") and not gpu and not (accelerator == "gpu" and mps):
        raise ConfigError(f"trainer.accelerator={accelerator}: this machine has no GPU (no "
                          "NVIDIA driver); use trainer.accelerator=cpu, or auto (a GPU where "
                          "there is one)")
    if accelerator == "mps" and not mps:
        raise ConfigError("trainer.accelerator=mps: Apple's GPU exists on Apple silicon Macs "
                          "only; use trainer.accelerator=cpu or auto")
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not gpu and not mps)
    if not on_cpu:
        return
    check_precision(trainer_cfg, gpu=False)  # on the CPU for certain
    devices = trainer_cfg.get("devices")
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    cores = usable_cores()
    if isinstance(devices, int) and not isinstance(devices, bool) and devices > cores:
        raise ConfigError(f"trainer.devices={devices}: {devices} training processes (DDP ranks "
                          f"on the CPU) but this process may use {cores} core(s); give "
                          f"trainer.devices={cores} or fewer")


def check_extra_tests(cfg: DictConfig) -> None:
    """Each ``extra_tests`` name becomes a metric prefix (``NAME/acc``): it may not hold a
    ``/`` nor be a split or stage of the run (``data.check_test_set_name``)."""
    from entailment_lab.data.datamodule import check_test_set_name

    data = cfg.get("data") or {}
    for name in cfg.get("extra_tests") or {}:
        check_test_set_name(str(name), {*(data.get("test_splits") or []),
                                        *(data.get("files") or {})})


def imported_target(node: Mapping[str, Any], key: str) -> Any:
    """The class or function ``node._target_`` names, imported; one line where it cannot be."""
    name = node["_target_"]
    hydra_log = logging.getLogger("hydra.utils")  # it logs the failure in three lines
    level = hydra_log.level
    hydra_log.setLevel(logging.CRITICAL)
    try:
        found = hydra.utils.get_object(str(name))
    except Exception as err:  # Hydra wraps import errors in its own types
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        why = lines[1] if len(lines) > 1 else lines[0] if lines else type(err).__name__
        raise ConfigError(f"{key}._target_={shown(name)}: cannot import it ({why}); give the "
                          f"dotted path of a class or function, e.g. {_example(key)}") from None
    finally:
        hydra_log.setLevel(level)
    if not callable(found):
        raise ConfigError(f"{key}._target_={shown(name)}: a {type(found).__name__}, not a class "
                          f"or function; give a dotted path such as {_example(key)}")
    return found


def _example(key: str) -> str:
    return {"optimizer": "torch.optim.SGD", "scheduler": "torch.optim.lr_scheduler.StepLR",
            "embeddings": "entailment_lab.embeddings.glove_file",
            "model.net": "entailment_lab.models.lstm.LSTMEncoderClassifier",
            "trainer": "lightning.pytorch.Trainer"}.get(
        key, "lightning.pytorch.callbacks.EarlyStopping" if key.startswith("callbacks.")
        else "lightning.pytorch.loggers.CSVLogger" if key.startswith("logger.")
        else "package.module.Class")


def check_arguments(node: DictConfig, key: str, ignore: tuple[str, ...] = ()) -> None:
    """The values of a node with an imported ``_target_`` (the Trainer, a callback, a logger,
    the optimiser, ...) against the arguments of what it names.

    A ``_partial_`` node's (``optimizer``) every value must be an argument: a recipe's
    optimiser values (conf/recipe/) stay when another optimiser is chosen on the command line,
    and one that optimiser does not take would fail only once training starts. Each value is
    checked against its argument's annotation: Lightning and torch take
    ``check_on_train_epoch_end=flase``, a string and so true, without a word. Arguments whose
    annotation names a type the schema cannot check (``Accelerator``, ``timedelta``) are left
    to the target."""
    import inspect
    import typing

    from entailment_lab.schema import annotation_knob

    target = imported_target(node, key)
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # no signature (a builtin)
        return
    if node.get("_partial_") and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        for name in node:
            if not str(name).startswith("_") and name not in params and name not in ignore:
                raise ConfigError(f"{key}.{name}: not an argument of {node._target_} (a "
                                  f"recipe's value for another {key}?); drop it with "
                                  f"~{key}.{name}, e.g. {key}=... ~{key}.{name}")
    try:
        hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
    except Exception:  # a name only imported for type checkers (WandbLogger's Run)
        hints = {}  # the signature's own annotations, as written
    for name in node:
        if str(name).startswith("_") or name not in params:
            continue
        try:
            value = node[name]
            if isinstance(value, DictConfig | ListConfig):
                value = OmegaConf.to_container(value, resolve=True)
        except OmegaConfBaseException:  # eval's W&B name follows the checkpoint's model
            continue
        hint = hints.get(name, params[name].annotation)
        if hint is inspect.Parameter.empty:
            continue
        annotation = hint if isinstance(hint, str) else inspect.formatannotation(hint)
        knob = annotation_knob(annotation)
        if knob is not None and not knob.accepts(value):
            raise ConfigError(f"{key}.{name}={shown(value)}: must be {knob.allowed} "
                              f"({getattr(target, '__name__', node['_target_'])} takes "
                              f"{name}: {annotation})")


def check_named_objects(cfg: DictConfig) -> None:
    """Each entry of ``callbacks`` and ``logger`` is a config with a ``_target_`` or null
    (switched off): the run skips any other value, so ``callbacks.adagrad_reset=5`` would
    train without the callback and without a word. ``extra_tests`` maps names to files."""
    extra = cfg.get("extra_tests")
    if extra is not None and not isinstance(extra, DictConfig):
        raise ConfigError(f"extra_tests={shown(extra)}: a mapping of test-set names to files; "
                          f"add one with +extra_tests.NAME=PATH")
    for group in ("callbacks", "logger"):
        node = cfg.get(group)
        if not isinstance(node, DictConfig):
            continue
        for name in node:
            value = node[name]
            if value is None or (isinstance(value, DictConfig) and "_target_" in value):
                continue
            shape = f"={shown(value)}" if not isinstance(value, DictConfig) else " (no _target_)"
            raise ConfigError(f"{group}.{name}{shape}: each {group} entry is a config with a "
                              f"_target_ (e.g. +{group}.{name}._target_=package.Class) or null "
                              f"to switch it off ({group}.{name}=null)")


def check_precision(trainer_cfg: Mapping[str, Any], gpu: bool | None = None) -> None:
    """Refuse ``precision=16-mixed`` (or ``16``) on a CPU: Lightning only warns there and trains
    in ``bf16-mixed`` instead (float16 autocast is for GPUs), so the run would record one
    precision and train in another. The accelerator is resolved as Lightning's ``auto`` does
    (a GPU if one is there); ``gpu``: whether there is one, where the caller knows."""
    if str(trainer_cfg.get("precision")) not in ("16", "16-mixed"):
        return
    if gpu is None:
        from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator

        gpu = CUDAAccelerator.is_available() or MPSAccelerator.is_available()
    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not gpu)
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
