"""Evaluate a checkpoint on a split: ``python src/eval.py ckpt_path=... split=test``."""

import hydra
from omegaconf import DictConfig

from entailment_lab.cli import checked_main, run_task
from entailment_lab.config import register_resolvers

register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
def main(cfg: DictConfig) -> float | None:
    from entailment_lab.pipeline import evaluate

    return run_task(evaluate, cfg)


if __name__ == "__main__":
    checked_main(main, "eval", __file__)
