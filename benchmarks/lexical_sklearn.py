"""The lexical floor against scikit-learn: is a trained run at the convex optimum?

Rebuilds a run's data and feature matrix from its best checkpoint, fits scikit-learn's
``LogisticRegression`` (lbfgs, tol 1e-10) with the same L2 (``C = 1 / (l2 · N)``) on the same
matrix, and prints both sides' accuracies, objectives (mean cross-entropy + l2/2 · ‖W‖²), the
largest weight difference and how often they predict the same test label. Needs the dev extra
(scikit-learn). On SNLI dev→test the fit takes about 3 minutes on one core:

    python benchmarks/lexical_sklearn.py multirun/results/snli_lexical/0/checkpoints/epoch_000.ckpt
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy.special import logsumexp
from sklearn.linear_model import LogisticRegression

from entailment_lab.pipeline import load_trained

SPLITS = ("train", "validation", "test")


def objective(x: object, y: np.ndarray, weights: np.ndarray, bias: np.ndarray, l2: float
              ) -> float:
    """Mean cross-entropy + l2/2 · ‖W‖² (the bias is not penalised): the model's loss."""
    z = x @ weights.T + bias  # (N, classes)
    return float(np.mean(logsumexp(z, axis=1) - z[np.arange(len(y)), y])
                 + 0.5 * l2 * np.square(weights).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a model=lexical run's best checkpoint")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    module, datamodule, run_cfg = load_trained(args.checkpoint, data_overrides={})
    net = module.net.eval()
    data = {s: net.feature_matrix(datamodule.dataloader(s)) for s in SPLITS}
    (x_train, y_train), l2 = data["train"], float(run_cfg.model.net.l2)
    ours_w, ours_b = net.weights()
    start = time.time()
    sk = LogisticRegression(C=1.0 / (l2 * x_train.shape[0]), solver="lbfgs", tol=1e-10,
                            max_iter=10_000).fit(x_train, y_train)
    for name, (w, b) in (("ours", (ours_w, ours_b)), ("sklearn", (sk.coef_, sk.intercept_))):
        accuracy = {s: round(100 * float(np.mean(np.argmax(x @ w.T + b, axis=1) == y)), 2)
                    for s, (x, y) in data.items()}
        print(f"{name:8s} accuracy % {accuracy}  objective "
              f"{objective(x_train, y_train, w, b, l2):.7f}")
    x_test = data["test"][0]
    agree = np.mean(np.argmax(x_test @ ours_w.T + ours_b, axis=1) == sk.predict(x_test))
    print(f"sklearn fit {time.time() - start:.0f} s, {int(sk.n_iter_[0])} iterations; max |W - "
          f"W_sk| {np.abs(ours_w - sk.coef_).max():.4f}; same test prediction {100 * agree:.2f} %")


if __name__ == "__main__":
    main()
