"""The GPU check (issue 61): are the models right on a GPU, how fast do they train there, and
how long would Table 2 take on the full SNLI training set?

Runs on a machine with one CUDA GPU and no network (``make gpu-check``), or on the CPU as its
dry run (``make gpu-check DEVICE=cpu``, in CI). Four parts:

1. **numerics**: every model config of ``conf/model`` (and each ``HARNESS_VARIANTS`` setting),
   built, shrunk and fed as ``tests/test_model_harness.py`` does (dropout off, training mode),
   runs one forward and backward on the device and on the CPU in float64: logits and every
   gradient must agree to ``FLOAT64_TOLERANCE`` (largest difference over the tensor's largest
   value); then on the device in bf16 mixed precision (``torch.autocast``) against float32:
   ``BF16_TOLERANCE`` for the logits and for all gradients together (relative L2 error).
2. **timed windows**: DIN-1 20×20 (row 17), DIN-2 20×20 (row 19), Decomposable Attention
   (row 8), DIIN and the LSTM (row 1), each at its recipe's batch on SNLI-length batches, as
   ``src/train.py`` builds the run (config, network, LightningModule, callbacks, Trainer; word
   vectors random, of the row's size and trainability): ``--warmup`` untimed steps, then
   ``--steps`` timed ones through ``Trainer.fit``, then the same batches through a plain PyTorch
   loop (the same optimiser and clipping). Printed: ms a step, steps a second, peak device
   memory in the window, and the framework's share, 1 - bare loop / Trainer.
3. **projection**: every Table 2 row and DIIN, a shorter window each (``--row-steps``) plus the
   validation forward: one epoch on SNLI's training set (549,367 pairs; validation on its
   9,842 dev pairs each epoch) = steps x ms a step + dev batches x ms a batch, and all of
   Table 2 at three seeds, each row for its recipe's epoch budget (``epochs`` of the composed
   experiment: ``conf/recipe/*.yaml``). An upper bound where early stopping ends a run sooner.
4. **record**: one JSON file under ``--out`` (default ``docs/results/gpu`` on a GPU,
   ``outputs/gpu_check`` on the CPU): device name, driver, CUDA, torch and Lightning versions,
   date, commit, the command, and every figure above.

SNLI-length batches: pairs drawn with SNLI's mean lengths (premise 14.1, hypothesis 8.3 tokens,
Bowman et al. 2015, Table 1; normal, standard deviations 6.0 and 3.2, cut to 1 ..
``data.max_length``), sorted by length into batches as the DataModule's bucketing sampler
does, random ids over a 40,000-word vocabulary (about SNLI's); or the lengths of a file in the
hub's schema (``--data``, whitespace tokens). Labels are random.

The GPU machine may lack Hydra, OmegaConf and pytest (the harness is a test module): the check
adds them from wheels in ``--wheels`` (``make gpu-wheels`` fetches them on a machine with a
network, ``--fetch-wheels``), unpacked into ``WHEELS_DIR/site``, nothing else touched. It needs
neither ``datasets`` nor W&B.

    python benchmarks/gpu_check.py                          # on a GPU: all four parts
    python benchmarks/gpu_check.py --device cpu             # the dry run (small windows)
    python benchmarks/gpu_check.py --data ../shared/data/snli/validation.jsonl.gz
    python benchmarks/gpu_check.py --fetch-wheels .gpu-wheels   # with a network
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gzip
import importlib.util
import json
import math
import os
import platform
import random
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: What the GPU machine may lack, pinned to the versions the test suite runs with: the import
#: name, the distribution, its version. Pure-Python wheels (any platform, Python >= 3.10).
WHEELS = [
    ("hydra", "hydra-core", "1.3.8"),
    ("omegaconf", "omegaconf", "2.3.1"),
    ("antlr4", "antlr4-python3-runtime", "4.9.3"),  # OmegaConf's parser; an sdist: built here
    ("pytest", "pytest", "9.2.0"),  # tests/test_model_harness.py is a test module
    ("pluggy", "pluggy", "1.7.0"),
    ("iniconfig", "iniconfig", "2.3.1"),
    ("pygments", "pygments", "2.21.0"),
    ("exceptiongroup", "exceptiongroup", "1.3.0"),  # pytest on Python 3.10 only
    ("tomli", "tomli", "2.2.1"),  # pytest on Python 3.10 only
]
PYTHON_310_ONLY = {"exceptiongroup", "tomli"}
#: Assumed on the GPU machine (torch, Lightning and torchmetrics bring them).
REQUIRED = ("torch", "lightning", "torchmetrics", "numpy", "yaml", "packaging")
WHEELS_LIMIT_MIB = 50

SNLI_TRAIN_PAIRS = 549_367  # SNLI 1.0 training pairs with a gold label
SNLI_DEV_PAIRS = 9_842
SNLI_LENGTHS = {"premise": (14.1, 6.0), "hypothesis": (8.3, 3.2)}  # mean, std (tokens)
VOCABULARY = 40_000  # words: about SNLI's (DIIN fine-tunes every vector, so it costs a step)
SEEDS = 3

#: Part 2's models: name -> the experiment whose recipe, size and batch they train at.
TIMED = {"din1 20x20": "table2/row17", "din2 20x20": "table2/row19",
         "decatt": "table2/row08", "diin": "table2/diin", "lstm": "table2/row01"}
FLOAT64_TOLERANCE = 1e-8  # device vs CPU, float64: largest difference / largest |value|
# bf16-mixed vs float32, relative L2 error: bf16 keeps 8 bits of mantissa (0.4 % an operation).
# Measured with CPU autocast on the harness's networks: logits up to 0.021 (HyperLSTM),
# gradients up to 0.17 (DecAtt with intra-sentence attention), most below 0.08. The bounds
# catch a model that breaks under autocast (NaN, a wrong dtype path), not rounding.
BF16_TOLERANCE = {"logits": 0.05, "gradients": 0.25}
#: Models whose function is not smooth in its inputs' last bits: k-max pooling selects
#: positions by value, and bf16's rounding changes some selections (measured on the CPU:
#: DCNN's gradients 0.30, the sentence DCNN's logits 0.13).
BF16_TOLERANCE_OF = {"dcnn": {"logits": 0.2, "gradients": 0.5},
                     "dcnn_sentence": {"logits": 0.2, "gradients": 0.5}}


# --- packages ---------------------------------------------------------------------------------
#: Published as an sdist only: built into a (pure-Python) wheel here.
BUILT = {"antlr4-python3-runtime"}


def fetch_wheels(folder: Path) -> None:
    """Download the ``WHEELS`` into ``folder``, the pure-Python wheels of each (``--platform
    any``: they install on any Python >= 3.10 and machine), building those published as an
    sdist only (``BUILT``); then check their size against ``WHEELS_LIMIT_MIB``."""
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    published = [f"{d}=={v}" for _, d, v in WHEELS if d not in BUILT]
    subprocess.run([*pip, "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--platform", "any", "--python-version", "3.10", "--dest", str(folder),
                    *published], check=True)
    subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder),
                    *(f"{d}=={v}" for _, d, v in WHEELS if d in BUILT)], check=True)
    wheels = sorted(folder.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels) / 2**20
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{total:.1f} MiB in {len(wheels)} wheels in {folder} (limit {WHEELS_LIMIT_MIB} MiB)")
    if total > WHEELS_LIMIT_MIB:
        sys.exit(f"gpu_check: the wheels take {total:.1f} MiB, over {WHEELS_LIMIT_MIB} MiB")


def _wheel_for(folder: Path, dist: str, version: str) -> Path | None:
    stem = dist.replace("-", "_").lower()
    found = [w for w in folder.glob("*.whl")
             if w.name.lower().startswith(f"{stem}-{version}-") and w.name.endswith("-any.whl")]
    return found[0] if found else None


def ensure_packages(folder: Path) -> list[str]:
    """Make every ``WHEELS`` module importable: those missing are unpacked from their wheel in
    ``folder`` into ``folder/site``, which goes first on ``sys.path`` (a pure-Python wheel is
    importable as unpacked). Exits with one line naming what is missing. Returns what was
    added."""
    missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"gpu_check: {', '.join(missing)} not installed; the check needs torch, "
                 "Lightning and torchmetrics (which bring numpy, PyYAML and packaging)")
    site = folder / "site"
    if site.is_dir():
        sys.path.insert(0, str(site))
    added = []
    for module, dist, version in WHEELS:
        if module in PYTHON_310_ONLY and sys.version_info >= (3, 11):
            continue
        if importlib.util.find_spec(module) is not None:
            continue
        wheel = _wheel_for(folder, dist, version)
        if wheel is None:
            sys.exit(f"gpu_check: {dist} is not installed and {folder} has no wheel of "
                     f"{dist} {version}: run `make gpu-wheels` where there is a network and "
                     f"copy {folder}/ here (it holds {', '.join(d for _, d, _ in WHEELS)})")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
        if str(site) not in sys.path:
            sys.path.insert(0, str(site))
        importlib.invalidate_caches()
        added.append(f"{dist} {version}")
    return added


def import_project() -> None:
    """Put the project (src/, the tests' helpers, the benchmarks) on the path, as pytest and
    the benchmarks do: no installed package needed."""
    for path in (ROOT / "benchmarks" / "peers", ROOT / "benchmarks", ROOT, ROOT / "src"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    os.environ.setdefault("WANDB_MODE", "disabled")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


# --- the machine ------------------------------------------------------------------------------
def environment(device: Any) -> dict[str, Any]:
    """The record's header: device, driver, versions, date, commit."""
    import lightning as L
    import torch
    import torchmetrics
    from measure import cpu_name

    from entailment_lab.results import code_version

    version = code_version(ROOT)
    commit = version["commit"] or os.environ.get("GPU_CHECK_COMMIT") or None
    record: dict[str, Any] = {
        "schema": "gpu_check/1",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit, "dirty": version["dirty"],
        "device": str(device), "cpu": cpu_name(), "cpu_cores": os.cpu_count(),
        "torch": torch.__version__, "lightning": L.__version__,
        "torchmetrics": torchmetrics.__version__, "python": platform.python_version(),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "load_average": round(os.getloadavg()[0], 2),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        record.update(device_name=props.name,
                      device_memory_gib=round(props.total_memory / 2**30, 1),
                      cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                      driver=_nvidia_driver(), compute_capability=f"{props.major}.{props.minor}")
    else:
        record.update(device_name=cpu_name(), driver=None, cuda=None, cudnn=None)
    return record


def _nvidia_driver() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None


# --- 1. numerics ------------------------------------------------------------------------------
def _step(net: Any, inputs: tuple, labels: Any, autocast: bool = False) -> tuple[Any, list]:
    """Logits and the gradients (in parameter order) of one cross-entropy step."""
    import torch

    net.zero_grad(set_to_none=True)
    device = labels.device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = net(*inputs)["logits"]
        loss = torch.nn.functional.cross_entropy(logits.float(), labels)
    loss.backward()
    grads = [p.grad.detach().float().cpu() if p.grad is not None else None
             for p in net.parameters()]
    return logits.detach().double().cpu(), grads


def _max_relative(a: Any, b: Any) -> float:
    scale = float(b.abs().max()) or 1.0
    return float((a.double() - b.double()).abs().max()) / scale


def _l2_relative(a: list, b: list) -> float:
    import torch

    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    if not pairs:
        return 0.0
    diff = torch.cat([(x.double() - y.double()).flatten() for x, y in pairs]).norm()
    return float(diff / (torch.cat([y.double().flatten() for _, y in pairs]).norm() or 1.0))


def numerics_row(model: str, variant: tuple[str, ...], device: Any, folder: Path
                 ) -> dict[str, Any]:
    """Part 1 for one model config (and harness variant)."""
    import torch

    from tests.test_model_harness import batch, build, composed, no_dropout

    cfg = composed(model, folder, *variant)
    cfg = composed(model, folder, *variant, *no_dropout(cfg))
    net, _ = build(cfg, seed=2)
    net.train()
    torch.manual_seed(5)
    inputs = batch(net, cfg, [13, 6, 9], [4, 12, 7])
    labels = torch.arange(3) % len(cfg.data.label_names)
    on_device = tuple(x.to(device) for x in inputs)
    ref_logits, ref_grads = _step(copy.deepcopy(net).double(), inputs, labels)
    logits, grads = _step(copy.deepcopy(net).double().to(device), on_device, labels.to(device))
    f64 = (_max_relative(logits, ref_logits),
           max((_max_relative(g, r) for g, r in zip(grads, ref_grads, strict=True)
                if r is not None), default=0.0))
    f32_logits, f32_grads = _step(copy.deepcopy(net).to(device), on_device, labels.to(device))
    bf_logits, bf_grads = _step(copy.deepcopy(net).to(device), on_device, labels.to(device),
                                autocast=True)
    bf16 = (_l2_relative([bf_logits], [f32_logits]), _l2_relative(bf_grads, f32_grads))
    bound = BF16_TOLERANCE_OF.get(model, BF16_TOLERANCE)
    ok = (max(f64) <= FLOAT64_TOLERANCE and bf16[0] <= bound["logits"]
          and bf16[1] <= bound["gradients"])
    return {"model": model, "variant": list(variant), "float64_logits": f64[0],
            "float64_gradients": f64[1], "bf16_logits": bf16[0], "bf16_gradients": bf16[1],
            "ok": ok}


def first_line(err: BaseException) -> str:
    """An exception as one line: its class and its message's first line."""
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"[:300]


def check_numerics(device: Any, folder: Path, with_variants: bool = True
                   ) -> list[dict[str, Any]]:
    """Part 1 for every model config (and harness variant); prints one line each. An error in
    one (a first run on a new device) is recorded as a failed line and the others go on."""
    from tests.test_model_harness import MODELS, variants

    rows = []
    print(f"\n# 1. numerics: {device} against the CPU (float64, tolerance {FLOAT64_TOLERANCE:g}"
          f" of the largest value) and bf16-mixed against float32 on {device} (relative L2, "
          f"logits {BF16_TOLERANCE['logits']}, gradients {BF16_TOLERANCE['gradients']})")
    print(f"{'model':44s} {'float64 logits':>14s} {'grads':>9s} {'bf16 logits':>12s} "
          f"{'grads':>7s}  ok")
    for model in MODELS:
        for variant in variants(model) if with_variants else [()]:
            name = " ".join((model, *variant))
            try:
                row = numerics_row(model, variant, device, folder)
            except Exception as err:  # a first run on a new device: record it, go on
                row = {"model": model, "variant": list(variant), "ok": False,
                       "error": first_line(err)}
                print(f"{name[:44]:44s} ERROR {row['error'][:200]}", flush=True)
            else:
                print(f"{name[:44]:44s} {row['float64_logits']:14.1e} "
                      f"{row['float64_gradients']:9.1e} {row['bf16_logits']:12.1e} "
                      f"{row['bf16_gradients']:7.1e}  {'ok' if row['ok'] else 'FAIL'}",
                      flush=True)
            rows.append(row)
    return rows


# --- 2. and 3. timed windows ------------------------------------------------------------------
def pair_lengths(count: int, max_length: int, data: str | None, seed: int
                 ) -> list[tuple[int, int]]:
    """``count`` (premise, hypothesis) lengths: SNLI's (``SNLI_LENGTHS``) or a file's."""
    rng = random.Random(seed)
    if data:
        opener = gzip.open if data.endswith(".gz") else open
        with opener(data, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        pool = [(len(r["premise"].split()), len(r["hypothesis"].split())) for r in rows
                if r.get("label", 0) in (0, 1, 2)]
        drawn = [rng.choice(pool) for _ in range(count)]
    else:
        drawn = [tuple(round(rng.gauss(*SNLI_LENGTHS[side]))
                       for side in ("premise", "hypothesis")) for _ in range(count)]
    return [(min(max(p, 1), max_length), min(max(h, 1), max_length)) for p, h in drawn]


def snli_batches(batch_size: int, count: int, max_length: int, data: str | None,
                 seed: int = 0, vocabulary: int = VOCABULARY) -> list[dict[str, Any]]:
    """``count`` batches of pairs with SNLI's lengths, bucketed by length (sorted, cut into
    batches, shuffled), random ids and labels, in the DataModule's batch layout."""
    import torch

    lengths = sorted(pair_lengths(batch_size * count, max_length, data, seed))
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for start in range(0, len(lengths), batch_size):
        chunk = lengths[start:start + batch_size]
        out: dict[str, Any] = {}
        for side, column in (("premise", 0), ("hypothesis", 1)):
            sizes = torch.tensor([pair[column] for pair in chunk])
            ids = torch.randint(2, vocabulary, (len(chunk), int(sizes.max())),
                                generator=generator)
            mask = torch.arange(ids.shape[1])[None, :] < sizes[:, None]
            out[side], out[f"{side}_mask"] = ids * mask, mask
        out["label"] = torch.randint(0, 3, (len(chunk),), generator=generator)
        batches.append(out)
    random.Random(seed).shuffle(batches)
    return batches


def row_config(experiment: str, device: Any, folder: Path, max_batch: int | None = None) -> Any:
    """The experiment's composed config for a timed run: its model, size, recipe and batch
    (at most ``max_batch``), random word vectors of its vectors' size and trainability, the
    device, no logger."""
    from tests.conftest import compose_cfg

    base = compose_cfg([f"experiment={experiment}"], folder / "base")
    accelerator = "gpu" if device.type == "cuda" else "cpu"
    batch = min(int(base.data.batch_size), max_batch or int(base.data.batch_size))
    return compose_cfg([f"data.batch_size={batch}",
        f"experiment={experiment}", "embeddings=random", f"embeddings.dim={base.embeddings.dim}",
        f"embeddings.freeze={str(bool(base.embeddings.freeze)).lower()}", "logger=none",
        f"trainer.accelerator={accelerator}", "trainer.devices=1", "trainer.limit_val_batches=0",
        "trainer.num_sanity_val_steps=0", "trainer.enable_model_summary=false",
        "callbacks.early_stopping=null", "callbacks.heatmaps=null",
    ], folder / experiment.replace("/", "_"))


def time_row(experiment: str, device: Any, folder: Path, warmup: int, steps: int,
             data: str | None, bare: bool, eval_batches: int, max_batch: int | None = None,
             vocabulary: int = VOCABULARY, max_length: int | None = None) -> dict[str, Any]:
    """One experiment's step through ``Trainer.fit`` (and, with ``bare``, a plain loop) over
    ``steps`` SNLI-length batches after ``warmup``, and its eval-mode forward per batch."""
    import lightning as L
    import torch
    from profile_step import bare_loop_seconds, clock

    from entailment_lab.callbacks import EpochSeed
    from entailment_lab.config import instantiate
    from entailment_lab.data.text import Vocabulary
    from entailment_lab.pipeline import build_callbacks, build_module, build_net

    cfg = row_config(experiment, device, folder, max_batch)
    L.seed_everything(cfg.seed, workers=True)
    vocab = Vocabulary(["<pad>", "<unk>", *(f"w{i}" for i in range(vocabulary - 2))])
    embedding = instantiate(cfg.embeddings, "embeddings")(vocab=vocab)
    net = build_net(cfg.model.net, embedding, 3, vocab)
    module = build_module(cfg, net, embedding, list(cfg.data.label_names), metadata={})
    batch_size = int(cfg.data.batch_size)
    longest = min(int(cfg.data.max_length), max_length or int(cfg.data.max_length))
    batches = snli_batches(batch_size, warmup + steps, longest, data, vocabulary=vocabulary)

    marks: dict[str, float] = {}

    class Timer(L.Callback):
        def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                 batch: Any, batch_idx: int) -> None:
            if batch_idx == warmup:
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                marks["start"] = clock(device)

        def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                               outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == warmup + steps - 1:
                marks["end"] = clock(device)

    callbacks = [*build_callbacks(cfg, has_logger=False), EpochSeed(cfg.seed), Timer()]
    trainer: L.Trainer = instantiate(cfg.trainer, "trainer", callbacks=callbacks, logger=False,
                                     max_steps=warmup + steps, max_epochs=1)
    loader = torch.utils.data.DataLoader(batches, batch_size=None)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*(could not find the monitored key|"
                                r"limit_val_batches|val_dataloader|does not have many workers).*")
        trainer.fit(module, train_dataloaders=loader)
    trainer_s = (marks["end"] - marks["start"]) / steps
    peak = (torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None)
    result = {"experiment": experiment, "model": cfg.model.name, "dim": cfg.get("dim"),
              "batch": batch_size, "epochs": cfg.get("epochs"), "steps": steps,
              "warmup": warmup, "ms_per_step": 1000 * trainer_s,
              "steps_per_s": 1 / trainer_s, "peak_device_mib": peak,
              "parameters": module.num_trainable}
    if bare:
        module.to(device)

        def shim(part: list[dict[str, Any]]) -> SimpleNamespace:
            return SimpleNamespace(train_dataloader=lambda: iter(part))

        bare_loop_seconds(cfg, module, shim(batches[:warmup]), None)  # untimed
        bare_s, _ = bare_loop_seconds(cfg, module, shim(batches[warmup:]), None)
        result["bare_ms_per_step"] = 1000 * bare_s / steps
        result["framework_share"] = max(0.0, 1 - bare_s / steps / trainer_s)
    result["eval_ms_per_batch"] = eval_seconds(module, batches[:eval_batches], device) * 1000
    return result


def eval_seconds(module: Any, batches: list[dict[str, Any]], device: Any) -> float:
    """Seconds per batch of the eval-mode forward (validation), after one untimed batch."""
    import torch
    from profile_step import clock

    module.to(device).eval()
    moved = [{k: v.to(device) for k, v in b.items()} for b in batches]
    with torch.no_grad():
        module(moved[0])
        start = clock(device)
        for b in moved:
            module(b)
        return (clock(device) - start) / len(moved)


def table2_experiments() -> list[str]:
    """Every Table 2 row's experiment and DIIN's (``conf/experiment/table2``)."""
    files = (ROOT / "conf" / "experiment" / "table2").glob("*.yaml")
    return [f"table2/{p.stem}" for p in sorted(files, key=lambda p: (p.stem == "diin", p.stem))]


def project(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Part 3: one SNLI epoch per row and all of Table 2 at ``SEEDS`` seeds."""
    out = []
    for r in rows:
        train_steps = math.ceil(SNLI_TRAIN_PAIRS / r["batch"])
        dev_batches = math.ceil(SNLI_DEV_PAIRS / r["batch"])
        epoch_s = (train_steps * r["ms_per_step"] + dev_batches * r["eval_ms_per_batch"]) / 1000
        out.append({"experiment": r["experiment"], "model": r["model"], "batch": r["batch"],
                    "epochs": r["epochs"], "epoch_s": epoch_s,
                    "budget_h": epoch_s * r["epochs"] / 3600})
    table2 = [r for r in out if r["experiment"] != "table2/diin"]
    return {"rows": out, "table2_seeds": SEEDS,
            "table2_hours": SEEDS * sum(r["budget_h"] for r in table2),
            "diin_hours": SEEDS * sum(r["budget_h"] for r in out if r not in table2)}


# --- the run ----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (the dry run)")
    parser.add_argument("--data", default=None, help="pairs in the hub's schema (.jsonl[.gz]) "
                        "whose lengths the batches take; default: SNLI's mean lengths")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed steps before each window (default 20; cpu 0)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps of the five models (default 100; cpu 1)")
    parser.add_argument("--row-steps", type=int, default=None,
                        help="timed steps of each Table 2 row (default 30; cpu 1)")
    parser.add_argument("--eval-batches", type=int, default=None,
                        help="timed validation batches (default 20; cpu 1)")
    parser.add_argument("--variants", action=argparse.BooleanOptionalAction, default=None,
                        help="part 1 also on each harness variant (default: yes; cpu: no)")
    parser.add_argument("--vocabulary", type=int, default=None,
                        help=f"words of the random vocabulary (default {VOCABULARY:,}; cpu 2,000)")
    parser.add_argument("--max-length", type=int, default=None,
                        help="cap the sentences' length (default: data.max_length; cpu 8)")
    parser.add_argument("--max-batch", type=int, default=None,
                        help="cap every row's batch size (default: the recipe's; cpu 8)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["numerics", "timing",
                                                                 "projection"])
    parser.add_argument("--wheels", default=str(ROOT / ".gpu-wheels"),
                        help="where the missing wheels are (make gpu-wheels)")
    parser.add_argument("--fetch-wheels", metavar="DIR", default=None,
                        help="download / build the wheels into DIR and exit (needs a network)")
    parser.add_argument("--out", default=None, help="the record's folder (default: "
                        "docs/results/gpu on a GPU, outputs/gpu_check on the CPU)")
    args = parser.parse_args(argv)
    cpu = args.device == "cpu"
    for name, gpu_default, cpu_default in (("warmup", 20, 0), ("steps", 100, 1),
                                           ("row_steps", 30, 1), ("eval_batches", 20, 1),
                                           ("max_batch", None, 8), ("variants", True, False),
                                           ("vocabulary", VOCABULARY, 2000),
                                           ("max_length", None, 8)):
        if getattr(args, name) is None:
            setattr(args, name, cpu_default if cpu else gpu_default)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.fetch_wheels:
        fetch_wheels(Path(args.fetch_wheels))
        return 0
    started = time.perf_counter()
    added = ensure_packages(Path(args.wheels))
    import_project()
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"gpu_check: --device {args.device}, but torch {torch.__version__} sees no "
                 "CUDA device (for the dry run: --device cpu, or make gpu-check DEVICE=cpu)")
    device = torch.device(args.device)
    record = environment(device)
    record["wheels_added"] = added
    record["settings"] = {k: getattr(args, k) for k in ("warmup", "steps", "row_steps",
                                                        "eval_batches", "max_batch", "variants",
                                                        "vocabulary", "max_length", "data")}
    print(f"# gpu_check on {record['device_name']} ({device}); torch {record['torch']}, CUDA "
          f"{record['cuda']}, driver {record['driver']}, Lightning {record['lightning']}; "
          f"commit {record['commit']}" + (f"; unpacked: {', '.join(added)}" if added else ""))
    folder = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    failed = False
    if "numerics" not in args.skip:
        record["numerics"] = check_numerics(device, folder / "numerics", args.variants)
        failed = not all(r["ok"] for r in record["numerics"])
    if "timing" not in args.skip:
        print(f"\n# 2. timed windows: {args.warmup} untimed + {args.steps} timed steps at the "
              f"recipe's batch{f' (at most {args.max_batch})' if args.max_batch else ''}, "
              f"SNLI-length batches ({args.data or 'SNLI mean lengths'})")
        print(f"{'model':12s} {'batch':>5s} {'ms/step':>8s} {'steps/s':>8s} {'bare ms':>8s} "
              f"{'framework':>9s} {'peak MiB':>9s} {'eval ms':>8s}")
        record["timings"] = []
        for name, experiment in TIMED.items():
            try:
                r = time_row(experiment, device, folder / "timing", args.warmup, args.steps,
                             args.data, bare=True, eval_batches=args.eval_batches,
                             max_batch=args.max_batch, vocabulary=args.vocabulary,
                             max_length=args.max_length)
            except Exception as err:  # recorded; the other models go on
                record["timings"].append({"name": name, "experiment": experiment,
                                          "error": first_line(err)})
                print(f"{name:12s} ERROR {first_line(err)}", flush=True)
                failed = True
                continue
            r["name"] = name
            record["timings"].append(r)
            peak = f"{r['peak_device_mib']:9.0f}" if r["peak_device_mib"] is not None else \
                f"{'-':>9s}"
            print(f"{name:12s} {r['batch']:5d} {r['ms_per_step']:8.2f} {r['steps_per_s']:8.1f} "
                  f"{r['bare_ms_per_step']:8.2f} {100 * r['framework_share']:8.1f}% {peak} "
                  f"{r['eval_ms_per_batch']:8.2f}", flush=True)
    if "projection" not in args.skip:
        timed = {r["experiment"]: r for r in record.get("timings", []) if "error" not in r}
        rows = []
        print(f"\n# 3. projection: one epoch of SNLI train ({SNLI_TRAIN_PAIRS:,} pairs) + dev "
              f"({SNLI_DEV_PAIRS:,}); {args.row_steps} timed steps a row (the five models: "
              "part 2's window)")
        for experiment in table2_experiments():
            try:
                r = timed.get(experiment) or time_row(
                    experiment, device, folder / "rows", args.warmup, args.row_steps, args.data,
                    bare=False, eval_batches=args.eval_batches, max_batch=args.max_batch,
                    vocabulary=args.vocabulary, max_length=args.max_length)
            except Exception as err:  # recorded; the projection says it lacks this row
                print(f"{experiment:14s} ERROR {first_line(err)}", flush=True)
                record.setdefault("row_errors", {})[experiment] = first_line(err)
                failed = True
                continue
            rows.append(r)
        record["row_timings"] = rows
        record["projection"] = projection = project(rows)
        print(f"{'experiment':14s} {'model':14s} {'batch':>5s} {'ms/step':>8s} {'epoch min':>9s} "
              f"{'epochs':>6s} {'budget h':>8s}")
        for r, p in zip(rows, projection["rows"], strict=True):
            print(f"{r['experiment']:14s} {r['model']:14s} {r['batch']:5d} "
                  f"{r['ms_per_step']:8.2f} {p['epoch_s'] / 60:9.1f} {p['epochs']:6d} "
                  f"{p['budget_h']:8.1f}")
        missing = sorted(record.get("row_errors", {}))
        print(f"all of Table 2 ({19 - sum(m != 'table2/diin' for m in missing)} of 19 rows) at "
              f"{SEEDS} seeds, each for its recipe's budget: "
              f"{projection['table2_hours']:.1f} h on this device (DIIN at {SEEDS} seeds: "
              f"{projection['diin_hours']:.1f} h); an upper bound where early stopping ends "
              "a run sooner")
    record["seconds"] = round(time.perf_counter() - started, 1)
    out = Path(args.out) if args.out else ROOT / ("docs/results/gpu" if device.type == "cuda"
                                                 else "outputs/gpu_check")
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = out / f"{stamp}_{device.type}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print(f"\nrecord: {path} ({record['seconds']:.0f} s)"
          + ("; FAILED: see the lines marked FAIL or ERROR" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
