"""DataModule, batching and the errors bad input gets."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from entailment_lab.data.batching import BucketBatchSampler, PadCollator, pad_ids
from entailment_lab.data.datamodule import TextDataModule
from entailment_lab.data.demo import write_jsonl
from entailment_lab.errors import ConfigError, DataError

LABELS = ["entailment", "neutral", "contradiction"]
PAIR = {"premise": "premise", "hypothesis": "hypothesis"}


def make_dm(files: dict, **kwargs) -> TextDataModule:
    return TextDataModule(fields=PAIR, label_names=LABELS, files=files, **kwargs)


def test_setup_indexes_all_splits_and_masks(pair_files):
    dm = make_dm(pair_files, batch_size=6)
    dm.setup()
    assert {len(dm.splits[s]) for s in ("train", "validation", "test")} == {60, 30}
    batch = next(iter(dm.train_dataloader()))
    assert batch["premise"].shape == batch["premise_mask"].shape
    assert batch["premise"].dtype == torch.long and batch["premise_mask"].dtype == torch.bool
    assert torch.equal(batch["premise"] != 0, batch["premise_mask"])  # pad id 0 exactly off-mask
    assert batch["label"].shape == (6,)
    moved = dm.transfer_batch_to_device(batch, torch.device("cpu"), 0)  # the flat-dict path
    assert moved.keys() == batch.keys()
    assert all(torch.equal(moved[k], batch[k]) for k in batch)


def test_vocabulary_from_configured_splits(pair_files, tmp_path):
    only_test = {"train": pair_files["train"], "test": pair_files["test"]}
    rows = [{"premise": "zebra quokka", "hypothesis": "a", "label": 0}]
    only_test["test"] = str(write_jsonl(rows, tmp_path / "t.jsonl"))
    dm = make_dm(only_test, vocab_splits=["train"])
    dm.setup()
    assert "quokka" not in dm.vocab.stoi
    dm = make_dm(only_test, vocab_splits=["train", "test"])
    dm.setup()
    assert "quokka" in dm.vocab.stoi


def test_val_from_train_carves_a_seeded_split(pair_files):
    files = {"train": pair_files["train"], "test": pair_files["test"]}
    a, b = make_dm(files, val_from_train=12, seed=3), make_dm(files, val_from_train=12, seed=3)
    a.setup(), b.setup()
    assert len(a.splits["train"]) == 48 and len(a.splits["validation"]) == 12
    assert a.splits["validation"]["premise_ids"] == b.splits["validation"]["premise_ids"]
    with pytest.raises(ConfigError, match="val_from_train"):
        make_dm(files, val_from_train=600).setup()


def test_val_carve_by_premise_shares_no_premise_with_train(tmp_path):
    # SNLI-like: three hypotheses per premise; a pair-wise carve would split the groups.
    rows = [{"premise": f"premise number {i} .", "hypothesis": f"hyp {i} {k} .", "label": k}
            for i in range(40) for k in range(3)]
    files = {"train": str(write_jsonl(rows, tmp_path / "train.jsonl")),
             "test": str(write_jsonl(rows[:6], tmp_path / "test.jsonl"))}
    dm = make_dm(files, val_from_train=20, val_group_by="premise", split_seed=5, seed=99)
    dm.setup()
    premises = {s: {tuple(p) for p in dm.splits[s]["premise_ids"]} for s in ("train", "validation")}
    assert not premises["train"] & premises["validation"]
    assert len(dm.splits["validation"]) == 21  # whole groups of 3 until >= 20 rows
    assert len(dm.splits["train"]) == 120 - 21
    # split_seed, not the run seed, fixes the carve: every run seed sees the same split.
    other = make_dm(files, val_from_train=20, val_group_by="premise", split_seed=5, seed=1)
    other.setup()
    assert other.splits["validation"]["premise_ids"] == dm.splits["validation"]["premise_ids"]
    with pytest.raises(ConfigError, match="val_group_by"):
        make_dm(files, val_from_train=20, val_group_by="sentence1").setup()


def test_the_snli_dev2test_protocol_runs_on_hub_files_with_scattered_no_gold_rows(tmp_path):
    """experiment=protocols/snli_dev2test (1,000 validation pairs carved by premise) on files in
    the hub's schema whose label -1 rows are scattered, as in stanfordnlp/snli's train split."""
    from entailment_lab.pipeline import train
    from tests.conftest import FAST, compose_cfg

    folder = tmp_path / "data" / "snli"
    folder.mkdir(parents=True)
    rows = [{"premise": f"a person number {i} is outside .", "hypothesis": f"someone {k} {i} .",
             "label": -1 if (3 * i + k) % 97 == 40 else k} for i in range(420) for k in range(3)]
    write_jsonl(rows, folder / "validation.jsonl.gz")
    write_jsonl(rows[::7], folder / "test.jsonl.gz")
    no_gold = sum(r["label"] == -1 for r in rows)
    assert no_gold > 5
    run = tmp_path / "run"
    cfg = compose_cfg(["experiment=protocols/snli_dev2test", f"data_root={tmp_path / 'data'}",
                       "model=lstm", "dim=8", "model.net.mlp_size=8", *FAST, "debug=fast"], run)
    metrics = train(cfg)
    assert 0.0 <= metrics["test/acc"] <= 1.0
    stats = json.loads((run / "results.json").read_text())["data_stats"]
    assert stats["train/no_gold"] == no_gold
    assert stats["validation/size"] >= 1000
    assert stats["train/size"] + stats["validation/size"] == len(rows) - no_gold


def test_train_size_takes_nested_subsets(pair_files):
    sizes = {}
    for n in (10, 20):
        dm = make_dm(pair_files, train_size=n, split_seed=2)
        dm.setup()
        words = dm.vocab.itos  # ids differ between the two runs (vocabulary per run)
        sizes[n] = {" ".join(words[i] for i in p + [0] + h)
                    for p, h in zip(dm.splits["train"]["premise_ids"],
                                    dm.splits["train"]["hypothesis_ids"], strict=True)}
        assert len(dm.splits["train"]) == n and len(dm.splits["test"]) == 30
    assert sizes[10] <= sizes[20]  # learning-curve sizes are subsets of the larger ones
    with pytest.raises(ConfigError, match="train_size"):
        make_dm(pair_files, train_size=61).setup()


def test_drops_unlabelled_pairs(tmp_path):
    rows = [{"premise": "a b", "hypothesis": "c", "label": lab} for lab in (0, -1, 2, -1)]
    dm = make_dm({"train": str(write_jsonl(rows, tmp_path / "x.jsonl.gz"))}, vocab_splits=["train"])
    dm.setup()
    assert dm.splits["train"]["label"] == [0, 2]


def test_bucket_sampler_groups_lengths_and_covers_everything():
    lengths = np.random.default_rng(0).integers(1, 60, size=1000)
    sampler = BucketBatchSampler(lengths, batch_size=32, shuffle=True, seed=1, pool_batches=4)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    assert spread < np.ptp(lengths) / 3  # far less padding than random batches
    sampler.set_epoch(1)
    assert list(sampler) != batches  # a new shuffle each epoch
    ranks = [list(BucketBatchSampler(lengths, 32, True, 1, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == (len(sampler) + 1) // 2
    assert not {tuple(b) for b in ranks[0]} & {tuple(b) for b in ranks[1]}
    # Evaluation: no example twice, every rank has a batch even when there are few examples.
    evals = [list(BucketBatchSampler(lengths[:30], 256, False, num_replicas=2, rank=r))
             for r in (0, 1)]
    assert all(evals) and sorted(i for e in evals for b in e for i in b) == list(range(30))
    assert [len(BucketBatchSampler(lengths[:30], 256, False, num_replicas=2, rank=r))
            for r in (0, 1)] == [1, 1]


def test_pad_and_collate():
    ids, mask = pad_ids([[5, 6, 7], [8]])
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    batch = PadCollator(["sentence"])([{"sentence_ids": [3], "label": 1},
                                       {"sentence_ids": [4, 4], "label": 0}])
    assert set(batch) == {"sentence", "sentence_mask", "label"}


# --- bad input: one clear line naming file, line and field --------------------------------
def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_malformed_jsonl_names_file_and_line(tmp_path):
    good = json.dumps({"premise": "a", "hypothesis": "b", "label": 0})
    bad = write_lines(tmp_path / "bad.jsonl", [good, good, '{"premise": "a", "hyp'])
    with pytest.raises(DataError, match=r"bad\.jsonl: line 3, column 18: not valid JSON \(Unt"):
        make_dm({"train": bad}, vocab_splits=["train"]).setup()


def test_missing_field_names_file_and_knob(tmp_path):
    path = write_jsonl([{"premise": "a", "label": 0}], tmp_path / "nohyp.jsonl")
    with pytest.raises(DataError, match=r"no field 'hypothesis'.*data\.fields\.hypothesis"):
        make_dm({"train": str(path)}, vocab_splits=["train"]).setup()


def test_null_field_in_one_row_names_the_line(tmp_path):
    rows = [{"premise": "a", "hypothesis": "b", "label": 0}, {"premise": "a", "label": 1}]
    path = write_jsonl(rows, tmp_path / "gap.jsonl")
    match = r"gap\.jsonl: line 2: field 'hypothesis' \(data\.fields\.hypothesis\) is missing"
    with pytest.raises(DataError, match=match):
        make_dm({"train": str(path)}, vocab_splits=["train"]).setup()


def test_unknown_label_value(tmp_path):
    rows = [{"premise": "a", "hypothesis": "b", "label": lab} for lab in (0, 1, 7)]
    path = write_jsonl(rows, tmp_path / "lab.jsonl")
    with pytest.raises(DataError, match=r"line 3: field 'label' .* has the unknown label 7; use"):
        make_dm({"train": str(path)}, vocab_splits=["train"]).setup()


def test_label_names_are_mapped_through_label_names(tmp_path):
    rows = [{"premise": "a", "hypothesis": "b", "label": name}
            for name in ("contradiction", "-", "Entailment ")]
    path = write_jsonl(rows, tmp_path / "s.jsonl")
    dm = make_dm({"train": str(path)}, vocab_splits=["train"])
    dm.setup()
    assert dm.splits["train"]["label"] == [2, 0]  # "-" (no gold label) dropped like -1


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(DataError, match=r"data\.files\.train: no such file"):
        make_dm({"train": str(tmp_path / "nope.jsonl")}).setup()
    other = tmp_path / "x.xml"
    other.write_text("<pairs/>\n")
    with pytest.raises(DataError, match="unsupported file type"):
        make_dm({"train": str(other)}).setup()


def test_empty_and_overlong_sentences_are_handled_and_reported(tmp_path, caplog):
    rows = [{"premise": "", "hypothesis": "b", "label": 0},
            {"premise": " ".join(["w"] * 1000), "hypothesis": "b", "label": 1}]
    path = write_jsonl(rows, tmp_path / "edge.jsonl.gz")
    dm = make_dm({"train": str(path)}, vocab_splits=["train"], max_length=50)
    with caplog.at_level("WARNING"):
        dm.setup()
    ids = dm.splits["train"]["premise_ids"]
    assert ids[0] == [1] and len(ids[1]) == 50  # empty -> one <unk>; long -> truncated
    assert "1 premise sentence(s) longer than data.max_length=50" in caplog.text
    assert "1 empty premise sentence(s) were replaced" in caplog.text
    assert dm.stats["train/premise_truncated"] == 1


def test_offline_hub_fails_fast_with_local_file_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    dm = TextDataModule(fields=PAIR, label_names=LABELS, hub_name="stanfordnlp/snli",
                        cache_dir=None)
    with pytest.raises(DataError, match=r"hub \(offline.*data\.files\.train=PATH"):
        dm.prepare_data()  # the download step
    with pytest.raises(DataError, match=r"hub.*data\.files\.train=PATH"):
        dm.setup()  # reads the local cache only
    assert time.monotonic() - start < 10


def test_gzip_jsonl_and_parquet_read_alike(pair_files, tmp_path):
    import datasets

    rows = [json.loads(line) for line in Path(pair_files["train"]).read_text().splitlines()]
    gz = tmp_path / "train.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    pq = tmp_path / "train.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(pq))
    a = make_dm({"train": str(gz)}, vocab_splits=["train"])
    b = make_dm({"train": str(pq)}, vocab_splits=["train"])
    a.setup(), b.setup()
    assert a.vocab.itos == b.vocab.itos
    assert a.splits["train"]["premise_ids"] == b.splits["train"]["premise_ids"]
