"""Diagnostics recorded by every pair run: accuracy per gold class and per lexical-overlap
bucket of each test set (``results.json`` ``breakdowns``), and the hypothesis-only switch."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from entailment_lab.data.batching import GROUP_PREFIX
from entailment_lab.data.datamodule import TextDataModule
from entailment_lab.data.text import UNK_ID
from entailment_lab.data.transform import OVERLAP_BUCKETS, overlap_bucket
from entailment_lab.errors import ConfigError
from entailment_lab.pipeline import train
from tests.conftest import compose_cfg, file_overrides
from tests.test_metrics import FAST, TINY


@pytest.mark.parametrize(("premise", "hypothesis", "bucket"), [
    ("a man sleeps .", "nobody is here .", "0-25%"),        # 0 of 3 words
    ("a man sleeps .", "a woman sings loudly .", "25-50%"),  # 1 of 4
    ("a man sleeps .", "a man sings .", "50-75%"),           # 2 of 3 (punctuation is no word)
    ("A man sleeps .", "a man sleeps now", "75-100%"),       # 3 of 4, case-insensitive
    ("a man sleeps in a bed .", "a man sleeps .", "100%"),  # every hypothesis word
    ("a man .", ". . .", "0-25%"),                           # no hypothesis word at all
])
def test_overlap_bucket_is_the_share_of_hypothesis_words_in_the_premise(premise, hypothesis,
                                                                       bucket):
    index = overlap_bucket(premise.split(), hypothesis.split())
    assert OVERLAP_BUCKETS[index] == bucket


def _datamodule(files: dict[str, str], **kwargs) -> TextDataModule:
    dm = TextDataModule(fields={"premise": "premise", "hypothesis": "hypothesis"},
                        label_names=["entailment", "neutral", "contradiction"], files=files,
                        batch_size=8, **kwargs)
    dm.setup()
    return dm


def test_hypothesis_only_gives_every_pair_the_same_one_token_premise(pair_files):
    full, only = _datamodule(pair_files), _datamodule(pair_files, hypothesis_only=True)
    batch_full = next(iter(full.dataloader("test")))
    batch = next(iter(only.dataloader("test")))
    assert batch["premise"].tolist() == [[UNK_ID]] * len(batch["label"])
    assert batch["premise_mask"].all()
    assert not (batch_full["premise"] == UNK_ID).all()  # the switch, not the data, did it
    def words(dm: TextDataModule, b: dict) -> list[list[str]]:  # (the vocabularies differ)
        return [[dm.vocab.itos[i] for i in row[mask]] for row, mask in
                zip(b["hypothesis"], b["hypothesis_mask"], strict=True)]

    assert words(only, batch) == words(full, batch_full)
    # the overlap bucket is the real pair's, not the emptied premise's
    torch.testing.assert_close(batch[f"{GROUP_PREFIX}overlap"],
                               batch_full[f"{GROUP_PREFIX}overlap"])
    assert len({*batch_full[f"{GROUP_PREFIX}overlap"].tolist()}) > 1


def test_hypothesis_only_refuses_sentence_data(sentence_files):
    with pytest.raises(ConfigError, match="data.hypothesis_only=true needs sentence pairs"):
        TextDataModule(fields={"sentence": "sentence"}, label_names=list("abcde"),
                       files=sentence_files, hypothesis_only=True)


@pytest.mark.parametrize("hypothesis_only", [False, True])
def test_results_record_accuracy_per_class_and_overlap_bucket(hypothesis_only, pair_files,
                                                              tmp_path, caplog):
    extra = ["data.hypothesis_only=true"] if hypothesis_only else []
    with caplog.at_level(logging.INFO, logger="entailment_lab"):
        train(compose_cfg([*TINY, *FAST, *extra, *file_overrides(pair_files)], tmp_path))
    said = [r for r in caplog.records if r.getMessage().startswith("hypothesis-only")]
    assert len(said) == hypothesis_only  # the training log says so, once, at the start
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["hypothesis_only"] is hypothesis_only
    test = results["breakdowns"]["test"]
    assert set(results["breakdowns"]) == {"test"}  # not the eval-mode pass over train
    confusion = torch.tensor(results["test_confusion_matrix"], dtype=torch.float64)
    assert test["size"] == int(confusion.sum()) == 30
    for i, label in enumerate(results["labels"]):
        assert test["per_class"][label]["n"] == int(confusion[i].sum())
        assert test["per_class"][label]["acc"] == pytest.approx(
            float(confusion[i, i] / confusion[i].sum()))
    buckets = test["overlap"]
    assert list(buckets) == list(OVERLAP_BUCKETS)
    assert sum(b["n"] for b in buckets.values()) == 30
    correct = sum(b["n"] * b["acc"] for b in buckets.values() if b["n"])
    assert correct / 30 == pytest.approx(results["metrics"]["test/acc"], abs=1e-6)
    assert all(b["acc"] is None for b in buckets.values() if not b["n"])
