"""Predictions for your own pairs (``conf/predict.yaml``)::

    python src/predict.py ckpt_path=... input=pairs.jsonl output=preds.jsonl
    python src/predict.py ckpt_path=... premise=... hypothesis=...
"""

import hydra
from omegaconf import DictConfig

from entailment_lab.cli import checked_main, run_task
from entailment_lab.config import register_resolvers

register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="predict")
def main(cfg: DictConfig) -> None:
    from entailment_lab.predict import predict

    run_task(predict, cfg)


if __name__ == "__main__":
    checked_main(main, "predict", __file__)
