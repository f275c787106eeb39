"""Every config group option composes through Hydra's compose API."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import REPO, compose_cfg

GROUPS = ["model", "data", "embeddings", "optimizer", "scheduler", "trainer", "logger",
          "callbacks", "debug"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "override", [f"{g}={o}" for g in GROUPS for o in options(g)]
    + [f"experiment={p.relative_to(REPO / 'conf' / 'experiment').with_suffix('')}"
       for p in sorted((REPO / "conf" / "experiment").rglob("*.yaml"))],
)
def test_every_option_composes_and_resolves(override, tmp_path):
    extra = ["data_root=/data"] if "protocols/" in override else []  # a required value
    cfg = compose_cfg([override, *extra], tmp_path)
    # Resolve everything except values the user must give (???), e.g. SICK's file paths.
    container = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    assert container["model"]["net"]["_target_"].startswith("entailment_lab.models.")
    assert container["data"]["_target_"].startswith("entailment_lab.data.")


def test_dim_follows_model_default_and_command_line(tmp_path):
    assert compose_cfg(["model=lstm"], tmp_path).model.net.hidden_size == 128
    cfg = compose_cfg(["model=lstm", "dim=64"], tmp_path)
    assert cfg.dim == 64 and cfg.model.net.hidden_size == 64


def test_eval_config_composes(tmp_path):
    cfg = compose_cfg(["ckpt_path=x.ckpt"], tmp_path, config_name="eval")
    assert cfg.split == "test" and Path(cfg.paths.root_dir) == REPO


def test_table2_rows_pin_the_paper_settings(tmp_path):
    cfg = compose_cfg(["experiment=table2/row17"], tmp_path)
    assert (cfg.model.name, cfg.dim, cfg.optimizer.lr, cfg.data.batch_size) == ("din1", 400,
                                                                                  0.001, 128)
    assert cfg.embeddings._target_.endswith("glove_file") and "row17" in cfg.tags
    assert cfg.scheduler.scheduler.gamma == 0.95 and cfg.scheduler.scheduler.step_size == 1000
    decatt = compose_cfg(["experiment=table2/row08"], tmp_path)
    assert decatt.optimizer._target_ == "torch.optim.Adagrad" and decatt.optimizer.lr == 0.05
    # The user-facing sweep still composes with a row's settings overridden on the line.
    assert compose_cfg(["experiment=table2/row17", "dim=256"], tmp_path).dim == 256
