"""Train a model and test its best checkpoint: ``python src/train.py model=din1 dim=324``.

All settings are Hydra configs under ``conf/`` (see README); ``-m`` sweeps into ``multirun/``.
The command line is checked before Hydra runs it (``entailment_lab.precheck``): a mistake ends
in one line, before any run folder or data; torch and Lightning load only for a run.
"""

import hydra
from omegaconf import DictConfig

from entailment_lab.cli import checked_main, run_task
from entailment_lab.config import register_resolvers

register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from entailment_lab.pipeline import train

    return run_task(train, cfg)


if __name__ == "__main__":
    checked_main(main, "train", __file__)
