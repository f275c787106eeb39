"""Extra labelled test files (``+extra_tests.NAME=PATH``) in train.py and eval.py: read with the
run's reader, vocabulary and label names, tested after the test set, recorded as ``NAME/acc``,
``NAME/loss`` and ``breakdowns.NAME``; bad names and label sets fail in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from entailment_lab.config import check_extra_tests
from entailment_lab.data.datamodule import OVERLAP_BUCKETS
from entailment_lab.data.demo import demo_pairs, write_jsonl
from entailment_lab.errors import ConfigError, DataError
from entailment_lab.pipeline import evaluate, train
from tests.conftest import FAST, compose_cfg, file_overrides
from tests.test_metrics import TINY

pytestmark = pytest.mark.usefixtures("one_thread")

UNSEEN = "zyzzyva"  # a word of the extra file only: it must not enter the run's vocabulary


@pytest.fixture(scope="module")
def hard_file(tmp_path_factory) -> Path:
    """20 pairs unlike the training pairs' seed, one with a word no split of the run has."""
    rows = demo_pairs(20, seed=99)
    rows[0]["hypothesis"] += f" {UNSEEN}"
    return write_jsonl(rows, tmp_path_factory.mktemp("extra") / "hard.jsonl")


@pytest.fixture(scope="module")
def run(pair_files, hard_file, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("extra_run")
    train(compose_cfg([*TINY, *FAST, *file_overrides(pair_files),
                       f"+extra_tests.hard={hard_file}"], folder))
    return folder


def test_train_records_the_extra_set_beside_the_test_set(run):
    results = json.loads((run / "results.json").read_text())
    metrics = results["metrics"]
    # the test set's names are those of a run without extra sets
    assert {k for k in metrics if k.startswith("test/")} == {"test/acc", "test/loss"}
    assert "test_confusion_matrix" in results
    assert {"hard/acc", "hard/loss"} <= set(metrics)
    assert set(results["breakdowns"]) == {"test", "hard"}
    hard = results["breakdowns"]["hard"]
    assert hard["size"] == 20 and list(hard["overlap"]) == list(OVERLAP_BUCKETS)
    correct = sum(c["n"] * c["acc"] for c in hard["per_class"].values() if c["n"])
    assert correct / 20 == pytest.approx(metrics["hard/acc"], abs=1e-6)
    assert results["breakdowns"]["test"]["size"] == 30  # the test set, not the extra one


def test_the_extra_set_keeps_the_runs_vocabulary(run):
    import torch

    checkpoint = torch.load(json.loads((run / "results.json").read_text())["best_checkpoint"],
                            weights_only=True)
    vocab = checkpoint["entailment_lab"]["vocab"]
    assert "man" in vocab or "woman" in vocab  # (the demo corpus's words)
    assert UNSEEN not in vocab


def test_eval_evaluates_extra_sets_besides_the_split(run, hard_file, tmp_path):
    trained = json.loads((run / "results.json").read_text())
    cfg = compose_cfg([f"ckpt_path={trained['best_checkpoint']}", "split=test",
                       f"+extra_tests.hard={hard_file}", f"+extra_tests.again={hard_file}",
                       "trainer.accelerator=cpu", "trainer.enable_progress_bar=false"],
                      tmp_path, config_name="eval")
    metrics = evaluate(cfg)
    for name in ("test", "hard"):  # the same checkpoint on the same pairs
        assert metrics[f"{name}/acc"] == pytest.approx(trained["metrics"][f"{name}/acc"],
                                                       abs=1e-6)
    assert metrics["again/acc"] == metrics["hard/acc"]
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["breakdowns"]) == {"test", "hard", "again"}
    assert results["breakdowns"]["hard"] == trained["breakdowns"]["hard"]
    assert results["confusion_matrix"] == trained["test_confusion_matrix"]  # the split's


def test_another_label_set_is_one_line_naming_file_line_and_field(pair_files, tmp_path):
    """HANS's two labels for a three-way model."""
    hans = tmp_path / "heuristics_evaluation_set.txt"
    hans.write_text("gold_label\tsentence1\tsentence2\theuristic\n"
                    "entailment\tThe doctor saw the actor .\tThe doctor saw the actor .\tlexical\n"
                    "non-entailment\tThe actor saw the doctor .\tThe doctor saw the actor .\t"
                    "lexical\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        train(compose_cfg([*TINY, *FAST, *file_overrides(pair_files),
                           f"+extra_tests.hans={hans}"], tmp_path))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"extra_tests.hans: {hans}: line 3: field 'gold_label'")
    assert "unknown label 'non-entailment'" in message
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "failed"


def test_a_missing_extra_file_names_its_key(pair_files, tmp_path):
    # refused before any data is read (config.check_files)
    with pytest.raises(ConfigError, match=r"^extra_tests\.hard=/nonexistent/h\.jsonl: no such "
                                          r"file$"):
        train(compose_cfg([*TINY, *FAST, *file_overrides(pair_files),
                           "+extra_tests.hard=/nonexistent/h.jsonl"], tmp_path))


@pytest.mark.parametrize("name", ["test", "validation", "train", "val"])
def test_a_name_that_clashes_with_a_split_is_refused(name, pair_files, hard_file, tmp_path):
    with pytest.raises(ConfigError, match=rf"^extra_tests\.{name}: the name clashes"):
        train(compose_cfg([*TINY, *FAST, *file_overrides(pair_files),
                           f"+extra_tests.{name}={hard_file}"], tmp_path))


def test_a_name_that_clashes_with_a_multinli_dev_set_or_holds_a_slash(tmp_path):
    cfg = compose_cfg(["data=mnli", "+extra_tests.test_mismatched=x.jsonl"], tmp_path)
    with pytest.raises(ConfigError, match=r"^extra_tests\.test_mismatched: the name clashes"):
        check_extra_tests(cfg)
    # Hydra's command line refuses a '/' in a key; a config file can still hold one
    with pytest.raises(ConfigError, match=r"^extra_tests\.a/b: .*holds a '/'"):
        check_extra_tests(OmegaConf.create({"extra_tests": {"a/b": "x.jsonl"}}))
    check_extra_tests(OmegaConf.create({"extra_tests": {"hans": "x.jsonl"}}))  # a good name
