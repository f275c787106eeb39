"""Every config group option composes through Hydra's compose API."""

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from entailment_lab import pipeline, threads
from entailment_lab.config import budget_record, check_config
from entailment_lab.errors import ConfigError
from entailment_lab.threads import (
    auto_threads,
    keep_freed_memory,
    parallel_jobs,
    processes_per_run,
    set_flush_denormal,
    set_threads,
)
from tests.conftest import REPO, compose_cfg

GROUPS = ["model", "data", "embeddings", "optimizer", "scheduler", "trainer", "logger",
          "callbacks", "debug", "recipe"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "override", [f"{g}={o}" for g in GROUPS for o in options(g)]
    + [f"experiment={p.relative_to(REPO / 'conf' / 'experiment').with_suffix('')}"
       for p in sorted((REPO / "conf" / "experiment").rglob("*.yaml"))],
)
def test_every_option_composes_and_resolves(override, tmp_path):
    needs_root = "protocols/" in override or "dcnn/" in override  # data_root is required
    extra = ["data_root=/data"] if needs_root else []
    cfg = compose_cfg([override, *extra], tmp_path)
    # Resolve everything except values the user must give (???), e.g. SICK's file paths.
    container = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    assert container["model"]["net"]["_target_"].startswith("entailment_lab.models.")
    assert container["data"]["_target_"].startswith("entailment_lab.data.")


def test_dim_follows_model_default_and_command_line(tmp_path):
    assert compose_cfg(["model=lstm"], tmp_path).model.net.hidden_size == 128
    cfg = compose_cfg(["model=lstm", "dim=64"], tmp_path)
    assert cfg.dim == 64 and cfg.model.net.hidden_size == 64


def test_diin_sentence_length_is_the_data_max_length(tmp_path):
    cfg = compose_cfg(["model=diin"], tmp_path)  # the recipe sets the official 48
    assert cfg.data.max_length == cfg.model.net.sequence_length == 48
    cfg = compose_cfg(["experiment=table2/diin", "data.max_length=32"], tmp_path)
    assert cfg.data.max_length == cfg.model.net.sequence_length == 32


def test_eval_config_composes(tmp_path):
    cfg = compose_cfg(["ckpt_path=x.ckpt"], tmp_path, config_name="eval")
    assert cfg.split == "test" and Path(cfg.paths.root_dir) == REPO


def test_table2_rows_pin_the_paper_settings(tmp_path):
    cfg = compose_cfg(["experiment=table2/row17"], tmp_path)
    assert (cfg.model.name, cfg.dim, cfg.optimizer.lr, cfg.data.batch_size) == ("din1", 400,
                                                                                  0.001, 128)
    assert cfg.embeddings._target_.endswith("glove_file") and "row17" in cfg.tags
    assert cfg.scheduler.gamma == 0.95 and cfg.scheduler.step_size == 1000
    decatt = compose_cfg(["experiment=table2/row08"], tmp_path)
    assert decatt.optimizer._target_ == "torch.optim.Adagrad" and decatt.optimizer.lr == 0.05
    assert decatt.data.batch_size == 4 and decatt.embeddings.normalize
    # The user-facing sweep still composes with a row's settings overridden on the line.
    assert compose_cfg(["experiment=table2/row17", "dim=256"], tmp_path).dim == 256


# model -> (optimiser, lr, Adagrad accumulator, gradient clipping, batch, unit-norm vectors,
#           max epochs, early-stopping patience or None): each model's recipe (conf/recipe/).
RECIPES = {
    "din1": ("Adam", 1e-3, None, None, 128, False, 30, 3),
    "din2": ("Adam", 1e-3, None, None, 128, False, 30, 3),
    "din1_static": ("Adam", 1e-3, None, None, 128, False, 30, 3),
    "lstm": ("Adam", 1e-3, None, None, 128, False, 30, 3),
    "decatt": ("Adagrad", 0.05, 0.1, None, 4, True, 60, None),
    "decatt_intra": ("Adagrad", 0.025, 0.1, None, 4, True, 60, None),
    "diin": ("Adadelta", 0.5, None, 1.0, 70, False, 30, 3),
    "dcnn": ("Adagrad", 0.1, 0.0, None, 4, False, 30, None),
    "dcnn_sentence": ("Adagrad", 0.1, 0.0, None, 4, False, 30, None),
    "dflstm": ("Adagrad", 0.005, 0.0, 5.0, 32, False, 30, 3),
    "tclstm": ("Adagrad", 0.005, 0.0, 5.0, 32, False, 30, 3),
    "lexical": ("LBFGS", 1.0, None, None, 1_000_000, False, 1, None),
    "rlstm": ("Adam", 1e-3, None, None, 128, False, 30, 3),
    "mlstm": ("Adam", 1e-3, None, None, 30, False, 30, 3),
    "wbw_attention": ("Adam", 1e-3, None, None, 128, False, 30, 3),
    "lstmn": ("Adam", 1e-3, None, 5.0, 32, False, 30, 3),
    "hyperlstm": ("Adam", 1e-3, None, None, 128, False, 30, 3),
}


def test_every_model_has_a_recipe_test():
    assert set(RECIPES) == set(options("model"))


@pytest.mark.parametrize("model", sorted(RECIPES))
def test_model_alone_selects_its_papers_recipe(model, tmp_path):
    optimiser, lr, accumulator, clip, batch, normalize, epochs, patience = RECIPES[model]
    cfg = compose_cfg([f"model={model}"], tmp_path)
    assert cfg.optimizer._target_ == f"torch.optim.{optimiser}" and cfg.optimizer.lr == lr
    assert cfg.optimizer.get("initial_accumulator_value") == accumulator
    assert cfg.trainer.gradient_clip_val == clip and cfg.data.batch_size == batch
    assert cfg.embeddings.normalize is normalize and cfg.trainer.max_epochs == epochs
    stopping = cfg.callbacks.early_stopping
    assert (stopping.patience if stopping else None) == patience  # None: every epoch runs
    # A protocol changes the data, not the recipe.
    protocol = compose_cfg([f"model={model}", "experiment=protocols/snli_dev2test",
                            "data_root=/data"], tmp_path)
    assert protocol.optimizer == cfg.optimizer and protocol.data.batch_size == batch


def test_dcnn_recipe_restarts_adagrad_every_five_epochs(tmp_path):
    cfg = compose_cfg(["experiment=dcnn/trec", "data_root=/data"], tmp_path)
    assert cfg.callbacks.adagrad_reset.every_n_epochs == 5
    assert cfg.optimizer.initial_accumulator_value == 0.0
    assert cfg.embeddings.dim == 48 and cfg.embeddings._target_.endswith("random_embeddings")
    assert list(cfg.model.net.folding) == [True, True]
    glove = compose_cfg(["experiment=dcnn/trec_glove", "data_root=/data"], tmp_path)
    assert list(glove.model.net.folding) == [False, True] and "dim" not in glove.embeddings


def test_swapping_the_optimiser_keeps_the_recipes_values(tmp_path):
    """A recipe's optimiser values (conf/recipe/) apply to whichever optimiser is chosen: Adam
    under the intra-attention recipe trains at that recipe's lr. A value the chosen optimiser
    does not take is refused before any data is read (tests/test_schema.py)."""
    cfg = compose_cfg(["model=decatt_intra", "optimizer=adam"], tmp_path)
    assert cfg.optimizer._target_ == "torch.optim.Adam" and cfg.optimizer.lr == 0.025
    assert "initial_accumulator_value" not in cfg.optimizer
    other = compose_cfg(["model=decatt", "recipe=din"], tmp_path)
    assert other.optimizer._target_ == "torch.optim.Adam" and other.data.batch_size == 128
    assert other.optimizer.lr == 1e-3


@pytest.mark.parametrize(("overrides", "expected"), [
    (["model=decatt_intra", "trainer.max_epochs=5"], 60),  # inherits decatt's 60 epochs
    (["model=lstm", "trainer.max_epochs=5"], 30),
    (["model=lexical"], 1),                                 # no override: what it runs with
])
def test_configured_budget_ignores_the_command_line_epochs(overrides, expected, tmp_path):
    """What results.json records as the config's budget, for the report's reduced-run check:
    the top-level ``epochs`` of the composed config, never re-composed."""
    cfg = compose_cfg(overrides, tmp_path)
    assert budget_record(cfg)["configured_max_epochs"] == expected


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("config", ["train", "eval", "predict", "explain"])
def test_every_entry_point_defaults_to_auto_threads(config, tmp_path):
    overrides = ["ckpt_path=x.ckpt"] if config != "train" else []
    assert compose_cfg(overrides, tmp_path, config_name=config).threads == "auto"


def test_only_the_dcnn_recipe_flushes_denormal_floats(tmp_path):
    assert compose_cfg([], tmp_path).flush_denormal is False
    assert compose_cfg(["model=dcnn_sentence", "data=sst2"], tmp_path).flush_denormal is True
    tiny = torch.tensor([1e-39])  # a denormal float32
    try:
        line = set_flush_denormal(True)
        if line.endswith("flushed to zero"):
            assert (tiny * 1.0).item() == 0.0
        assert set_flush_denormal(False) == "denormal floats: kept"
        assert (tiny * 1.0).item() > 0.0
    finally:
        set_flush_denormal(False)


def test_threads_setting_and_omp_num_threads_wins(monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert set_threads(2) == ("torch threads: 2 (threads=2; threads=N or OMP_NUM_THREADS=N to "
                              "choose)")
    assert torch.get_num_threads() == 2
    assert set_threads(None).endswith("(torch's default)") and torch.get_num_threads() == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert set_threads(1).endswith("(OMP_NUM_THREADS)") and torch.get_num_threads() == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    for bad in (0, -1, "two", True, 1.5):
        with pytest.raises(ConfigError, match=r"threads must be threads=auto, a positive integer"):
            set_threads(bad)



def test_freed_memory_is_kept_unless_the_environment_sets_malloc(monkeypatch):
    """glibc's malloc gets a fixed 32 MiB mmap threshold and no heap trimming; MALLOC_* or
    another allocator (LD_PRELOAD) in the environment wins; other C libraries: untouched."""
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                 "GLIBC_TUNABLES", "LD_PRELOAD"):
        monkeypatch.delenv(name, raising=False)
    calls = []

    class FakeLibc:
        def mallopt(self, param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    monkeypatch.setattr(threads.ctypes, "CDLL", lambda name: FakeLibc())
    assert keep_freed_memory().startswith("malloc: freed memory kept for reuse")
    assert calls == [(-3, 32 * 2**20), (-1, 2**31 - 1)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD

    def no_libc(name: str) -> None:
        raise OSError(name)

    monkeypatch.setattr(threads.ctypes, "CDLL", no_libc)
    assert keep_freed_memory() == "malloc: the C library's own policy (not glibc)"
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    calls.clear()
    assert keep_freed_memory() == "malloc: as the environment sets it" and not calls

@pytest.mark.parametrize(("usage", "jobs", "expected"), [
    ([2.0, 3.0, 1.0, 0.0], 1, 4),       # idle: every core
    ([100.0, 0.0, 0.0, 0.0], 1, 3),     # another job holds a core
    ([60.0, 40.0, 30.0, 20.0], 1, 2),   # 1.5 cores' worth of work spread over four: 2 busy
    ([100.0] * 4, 1, 1),                # all busy: still one
    ([0.0] * 4, 2, 2),                  # idle, two processes started together: half each
    ([0.0] * 4, 8, 1),
])
def test_auto_threads_takes_the_idle_cores(monkeypatch, usage, jobs, expected):
    import psutil

    monkeypatch.setattr(psutil, "cpu_percent", lambda interval, percpu: usage)
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 4)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    threads, reason = auto_threads(jobs)
    assert threads == expected
    assert reason.startswith("auto: 4 core(s)")


def test_auto_threads_counts_only_the_cores_this_process_may_use(monkeypatch):
    import psutil

    monkeypatch.setattr(psutil, "cpu_percent", lambda interval, percpu: [100.0, 100.0, 0, 0])
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 4)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {2, 3}, raising=False)
    assert auto_threads() == (2, "auto: 2 core(s), 0 busy")  # a SLURM / container allotment


def test_parallel_jobs_of_a_joblib_sweep(tmp_path):
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import read_write

    def multirun() -> None:
        with read_write(HydraConfig.get()):
            HydraConfig.get().mode = RunMode.MULTIRUN

    compose_cfg(["hydra/launcher=local_parallel", "hydra.launcher.n_jobs=3"], tmp_path)
    assert parallel_jobs() == 1  # a single run (hydra.mode RUN), whatever the launcher
    multirun()
    assert parallel_jobs() == 3
    compose_cfg([], tmp_path)  # the basic launcher runs a sweep's jobs one after another
    multirun()
    assert parallel_jobs() == 1


def test_ddp_ranks_share_the_cores(tmp_path):
    assert processes_per_run(compose_cfg(["trainer=ddp", "trainer.devices=4"], tmp_path)) == 4
    assert processes_per_run(compose_cfg(["trainer=ddp", "trainer.devices=auto"], tmp_path)) == 1
    assert processes_per_run(compose_cfg([], tmp_path)) == 1


@pytest.mark.parametrize("model", ["din1", "lstm", "wbw_attention"])
def test_sick_protocol_trains_the_recipe_budget_without_early_stopping(model, tmp_path):
    recipe = compose_cfg([f"model={model}"], tmp_path)
    cfg = compose_cfg(["experiment=protocols/sick", f"model={model}"], tmp_path)
    assert recipe.callbacks.early_stopping is not None  # the recipe stops early on SNLI
    assert cfg.callbacks.early_stopping is None
    assert cfg.trainer.max_epochs == recipe.trainer.max_epochs


# (experiment, model) -> max_epochs: conf/budget/<experiment>/<recipe>.yaml where the recipe's
# budget was measured not to converge on that protocol's data, else the recipe's own.
@pytest.mark.parametrize(("experiment", "model", "epochs"), [
    ("protocols/sick", "decatt", 180),
    ("protocols/sick", "decatt_intra", 120),
    ("protocols/snli_dev2test", "decatt", 180),
    ("protocols/snli_dev2test", "decatt_intra", 60),  # the recipe's: flat from about epoch 60
    ("protocols/sick", "lstm", 30),
    ("table2/row08", "decatt", 60),                   # a Table 2 row keeps the paper's recipe
])
def test_protocol_budget_replaces_the_recipe_epochs(experiment, model, epochs, tmp_path):
    cfg = compose_cfg([f"experiment={experiment}", f"model={model}"], tmp_path)
    assert cfg.trainer.max_epochs == epochs
    # results.json names the budget file only where one was merged
    choices = pipeline._run_summary(cfg)["choices"]
    assert ("budget" in choices) == (epochs != compose_cfg([f"model={model}"], tmp_path)
                                     .trainer.max_epochs)


def test_protocol_budget_yields_to_the_command_line(tmp_path):
    base = ["experiment=protocols/sick", "model=decatt"]
    assert compose_cfg([*base, "trainer.max_epochs=7"], tmp_path).trainer.max_epochs == 7
    assert compose_cfg([*base, "~budget"], tmp_path).trainer.max_epochs == 60  # the recipe's
    assert compose_cfg(["model=decatt"], tmp_path).trainer.max_epochs == 60
    overrides = [*base, "trainer.max_epochs=7"]  # what the report's reduced-run check reads
    assert budget_record(compose_cfg(overrides, tmp_path)) == {"max_epochs": 7,
                                                               "configured_max_epochs": 180}
    # the budget follows the recipe, not the model name: DIN's recipe keeps its 30 epochs
    assert compose_cfg([*base, "recipe=din"], tmp_path).trainer.max_epochs == 30


def test_a_misspelt_budget_is_refused_not_skipped(tmp_path):
    """Hydra skips a missing optional config without a word: the run would train 60 epochs."""
    for split in ("train", "validation", "test"):  # the files must exist: checked too
        (tmp_path / "sick").mkdir(exist_ok=True)
        (tmp_path / "sick" / f"{split}.jsonl.gz").touch()
    base = ["experiment=protocols/sick", f"data_root={tmp_path}", "model=decatt"]
    cfg = compose_cfg([*base, "budget=protocols/sick/decat"], tmp_path)
    assert cfg.trainer.max_epochs == 60  # what Hydra alone would have trained
    with pytest.raises(ConfigError, match=r"budget=protocols/sick/decat: no such budget; the "
                                          r"budgets are .*protocols/sick/decatt.*~budget"):
        check_config(cfg)
    check_config(compose_cfg([*base, "budget=protocols/sick/decatt_intra"], tmp_path))
    check_config(compose_cfg([*base, "~budget"], tmp_path))


def test_every_budget_file_names_an_experiment_and_a_recipe():
    """A misspelt budget file would never be selected (the group is optional): catch it here."""
    files = sorted((REPO / "conf" / "budget").rglob("*.yaml"))
    assert files
    for path in files:
        experiment = path.parent.relative_to(REPO / "conf" / "budget")
        assert (REPO / "conf" / "experiment" / f"{experiment}.yaml").is_file(), path
        assert (REPO / "conf" / "recipe" / path.name).is_file(), path
        assert set(OmegaConf.load(path)) == {"epochs"}, path  # epochs only, not the recipe
