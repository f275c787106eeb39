"""Heat maps for one pair: ``python src/explain.py ckpt_path=... premise=... hypothesis=...``."""

import logging

import hydra
from omegaconf import DictConfig

from entailment_lab.cli import checked_main, run_task
from entailment_lab.config import check_config, register_resolvers

register_resolvers()  # ${explain_dir:...} in conf/explain.yaml among them
log = logging.getLogger("explain")


def explain(cfg: DictConfig) -> dict:
    from entailment_lab.explain import explain_pair
    from entailment_lab.files import save_figures
    from entailment_lab.pipeline import load_trained

    check_config(cfg)
    module, _, run_cfg = load_trained(cfg.ckpt_path)
    result = explain_pair(module, cfg.premise, cfg.hypothesis)
    paths = save_figures(result.pop("figures"), cfg.out_dir)
    if not paths:
        log.warning("model '%s' returns no analysis maps; nothing to draw", run_cfg.model.name)
    log.info("prediction: %s %s", result["prediction"], result["probabilities"])
    for path in paths:
        log.info("wrote %s", path)
    return result


@hydra.main(version_base="1.3", config_path="../conf", config_name="explain")
def main(cfg: DictConfig) -> None:
    run_task(explain, cfg)


if __name__ == "__main__":
    checked_main(main, "explain", __file__)
