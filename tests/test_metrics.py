"""Metrics from config (``conf/metrics/``): computed on every stage, recorded in results.json
under their own names, and read by the report with no list of names of its own."""

from __future__ import annotations

import json
from functools import partial

import pytest
import torch

from entailment_lab.models.lexical import LexicalClassifier
from entailment_lab.module import ClassifierModule
from entailment_lab.pipeline import train
from entailment_lab.report import make_report
from tests.conftest import FAST, compose_cfg, file_overrides

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ["model=lstm", "dim=8", "model.net.mlp_size=8", "trainer.max_epochs=1"]


PER_CLASS = {f"{stage}/acc_per_class/{label}" for stage in ("val", "test")
             for label in ("entailment", "neutral", "contradiction")}


@pytest.mark.parametrize(("option", "expected"), [
    ("metrics=default", set()),
    ("metrics=f1", {"train/f1_macro", "val/f1_macro", "test/f1_macro", "train/f1_macro_eval"}),
    ("metrics=per_class", PER_CLASS),
])
def test_configured_metrics_are_recorded_under_their_names(option, expected, pair_files,
                                                           tmp_path):
    train(compose_cfg([*TINY, option, *FAST, *file_overrides(pair_files)], tmp_path))
    metrics = json.loads((tmp_path / "results.json").read_text())["metrics"]
    assert {k for k in metrics if "f1_macro" in k or "acc_per_class" in k} == expected
    assert {"test/acc", "train/acc_eval", "val/acc_best"} <= set(metrics)
    if option == "metrics=per_class":  # per-class accuracies: the confusion matrix's recalls
        results = json.loads((tmp_path / "results.json").read_text())
        confusion = results["test_confusion_matrix"]
        for i, label in enumerate(results["labels"]):
            if sum(confusion[i]):
                assert metrics[f"test/acc_per_class/{label}"] == pytest.approx(
                    confusion[i][i] / sum(confusion[i]))


def test_the_report_shows_other_test_metrics(pair_files, tmp_path):
    run = tmp_path / "runs" / "0"
    train(compose_cfg([*TINY, "metrics=f1", *FAST, *file_overrides(pair_files)], run))
    report = make_report([tmp_path / "runs"], out=tmp_path / "report", plot=False)
    assert "Other test metrics" in report.markdown and "| f1_macro |" in report.markdown
    assert "f1_macro=" in (tmp_path / "report" / "report.csv").read_text()


def test_a_nan_loss_shows_in_the_epoch_mean():
    # torchmetrics' MeanMetric drops NaN values by default (with a warning), which would make
    # a diverged run's epoch loss look sound; the module's loss means keep them.
    embedding = torch.nn.Embedding(10, 4)
    module = ClassifierModule(net=LexicalClassifier(embedding, num_classes=3),
                              embedding=embedding, optimizer=partial(torch.optim.SGD, lr=0.1))
    for mean in (module.train_loss, module.val_loss, module.test_loss):
        mean.update(torch.tensor(1.0), weight=7)
        mean.update(torch.tensor(2.0), weight=2)
        assert mean.compute() == pytest.approx(11 / 9)  # weighted by the batches' sizes
        mean.update(torch.tensor(float("nan")), weight=4)
        assert torch.isnan(mean.compute())
