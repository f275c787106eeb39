"""Test predictions stored with each run (``predictions.py``): the encoding, the file order
through length-bucketed batches, and adding them afterwards from a run's best checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from entailment_lab import predictions
from entailment_lab.data.demo import write_jsonl
from entailment_lab.errors import UserError
from entailment_lab.pipeline import evaluate, train
from tests.conftest import FAST, REPO, compose_cfg, file_overrides
from tests.entry_points import run_entry_point

LSTM = ["model=lstm", "dim=16", "model.net.mlp_size=32"]


def test_encoding_round_trips_and_is_compact():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 3, 9824)
    text = predictions.encode_ids(ids)
    assert text.isascii() and len(text) < 3_500  # SNLI test's size, uniform ids: 3.4 kB
    np.testing.assert_array_equal(predictions.decode_ids(text, 9824), ids)
    assert predictions.decode_ids(predictions.encode_ids([]), 0).size == 0
    with pytest.raises(ValueError, match="0..255"):
        predictions.encode_ids([0, 256])
    with pytest.raises(ValueError, match="the entry says 5"):
        predictions.decode_ids(text, 5)


def test_read_and_confusion_of_an_entry():
    record = {"predictions": {"test": predictions.entry([0, 2, 1, 1], [0, 1, 1, 2])}}
    predicted, gold = predictions.read(record)
    assert predicted.tolist() == [0, 2, 1, 1] and gold.tolist() == [0, 1, 1, 2]
    assert predictions.confusion(predicted, gold, 3) == [[1, 0, 0], [0, 1, 1], [0, 1, 0]]
    assert predictions.read({}) is None and predictions.read(record, "test_matched") is None
    record["predictions"]["test"]["encoding"] = "digits"
    with pytest.raises(ValueError, match="unknown encoding"):
        predictions.read(record)


@pytest.fixture(scope="module")
def files(pair_files, tmp_path_factory) -> dict[str, str]:
    """The pair corpus with a test file whose lengths are far from sorted and one row without
    a gold label (dropped by the DataModule, so not in the predictions' order)."""
    rows = [json.loads(line) for line in Path(pair_files["test"]).read_text().splitlines()]
    rows.insert(3, {**rows[0], "label": -1})
    folder = tmp_path_factory.mktemp("test_with_unlabelled")
    return {**pair_files, "test": str(write_jsonl(rows, folder / "test.jsonl"))}


@pytest.fixture(scope="module")
def run(files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    train(compose_cfg([*LSTM, *FAST, *file_overrides(files), "trainer.max_epochs=2",
                       "eval_train=false", "seed=3", "data.eval_batch_size=4"], out))
    return out


def test_a_run_records_its_test_predictions_in_file_order(run, files):
    record = json.loads((run / "results.json").read_text())
    predicted, gold = predictions.read(record)
    rows = [json.loads(line) for line in Path(files["test"]).read_text().splitlines()]
    labels = record["labels"]
    expected_gold = [labels.index(r["label"]) if isinstance(r["label"], str) else r["label"]
                     for r in rows if r["label"] not in (-1, "-")]
    assert gold.tolist() == expected_gold  # file order, the unlabelled row left out
    assert predictions.confusion(predicted, gold, len(labels)) == record["test_confusion_matrix"]
    assert record["predictions"]["test"]["source"] == predictions.TEST_LOOP


def test_eval_records_the_predictions_of_the_checkpoint_it_tests(run, tmp_path):
    record = json.loads((run / "results.json").read_text())
    evaluate(compose_cfg([f"ckpt_path={record['best_checkpoint']}",
                          "trainer.enable_model_summary=false"], tmp_path, config_name="eval"))
    evaluated = json.loads((tmp_path / "results.json").read_text())
    assert evaluated["predictions"]["test"]["predicted"] == \
        record["predictions"]["test"]["predicted"]


def test_predictions_are_added_afterwards_from_the_best_checkpoint(run, files, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    record = json.loads((copy / "results.json").read_text())
    stored = record.pop("predictions")
    (copy / "results.json").write_text(json.dumps(record))
    # the recorded best checkpoint is the original folder's; the copy's own is found too
    predictions.add_to_run(copy)
    added = json.loads((copy / "results.json").read_text())["predictions"]["test"]
    assert added["source"] == predictions.ADDED and "checkpoint" in added["added"]
    assert (added["predicted"], added["gold"]) == (stored["test"]["predicted"],
                                                  stored["test"]["gold"])


def test_adding_refuses_predictions_that_do_not_give_the_recorded_test(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    record = json.loads((copy / "results.json").read_text())
    record.pop("predictions")
    record["test_confusion_matrix"][0][0] += 1  # another test than this checkpoint's
    (copy / "results.json").write_text(json.dumps(record))
    before = (copy / "results.json").read_text()
    with pytest.raises(UserError, match="nothing written"):
        predictions.add_to_run(copy)
    assert (copy / "results.json").read_text() == before


def test_the_command_says_one_line_for_a_run_without_results(tmp_path):
    done = run_entry_point("src/add_predictions.py", [str(tmp_path)], cwd=REPO)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith(f"error: no results.json in {tmp_path}; give a run folder")
    (tmp_path / "results.json").write_text(json.dumps({"status": "running"}))
    with pytest.raises(UserError, match="status 'running'; predictions are added to completed "
                                        "runs only"):
        predictions.add_to_run(tmp_path)
