"""Train a model and test its best checkpoint: ``python src/train.py model=din1 dim=324``.

All settings are Hydra configs under ``conf/`` (see README); ``-m`` sweeps into ``multirun/``.
"""

import hydra
from omegaconf import DictConfig

from entailment_lab.cli import run_task
from entailment_lab.config import register_resolvers
from entailment_lab.pipeline import train

register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    return run_task(train, cfg)


if __name__ == "__main__":
    main()
