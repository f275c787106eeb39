"""MultiNLI (``data=mnli``): both dev sets tested and recorded under their own names, validation
on one of them, accuracy per genre, and one-line errors for its bad input. The fixtures are
written here in the official layouts (``multinli_1.0_*.jsonl`` and the tab-separated ``.txt``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import datasets
import pytest

from entailment_lab.data import datamodule as datamodule_module
from entailment_lab.data.demo import demo_pairs, write_jsonl
from entailment_lab.errors import ConfigError, DataError
from entailment_lab.loggers import finish_wandb
from entailment_lab.pipeline import build_datamodule, evaluate, train
from entailment_lab.report.dashboard import MNLI_COLUMNS
from tests.conftest import FAST, compose_cfg
from tests.test_metrics import TINY
from tests.test_stops import finished_records
from tests.test_train import run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

LABELS = ("entailment", "neutral", "contradiction")
MATCHED = ("fiction", "government", "slate", "telephone", "travel")  # train's genres too
MISMATCHED = ("facetoface", "letters", "nineeleven", "oup", "verbatim")
SIZES = {"train": 60, "dev_matched": 30, "dev_mismatched": 24}
# Rows of each dev set whose gold_label is "-" (dropped): mid-file, as in the distributed files
# (185 of dev_matched's 10,000 rows, scattered); the train file has none, as MultiNLI's.
NO_GOLD_ROWS = (5, 17)
NO_GOLD = len(NO_GOLD_ROWS)
TXT_COLUMNS = ("gold_label", "sentence1_binary_parse", "sentence2_binary_parse",
               "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "promptID",
               "pairID", "genre", "label1", "label2", "label3", "label4", "label5")


def mnli_rows(part: str, seed: int) -> list[dict]:
    """Rows of ``multinli_1.0_<part>`` as distributed: names as gold labels, parses, genre."""
    genres = MISMATCHED if part == "dev_mismatched" else MATCHED
    rows = []
    for i, pair in enumerate(demo_pairs(SIZES[part], seed)):
        gold = LABELS[pair["label"]]
        if part != "train" and i in NO_GOLD_ROWS:
            gold = "-"
        rows.append({
            "annotator_labels": [LABELS[pair["label"]]] * 5, "genre": genres[i % len(genres)],
            "gold_label": gold, "pairID": f"{part}{i}e", "promptID": str(i),
            "sentence1": pair["premise"], "sentence1_binary_parse": "( x )",
            "sentence1_parse": "(ROOT x)", "sentence2": pair["hypothesis"],
            "sentence2_binary_parse": "( y )", "sentence2_parse": "(ROOT y)"})
    return rows


def write_txt(rows: list[dict], path: Path) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n")
        writer.writerow(TXT_COLUMNS)
        for row in rows:
            labels = row["annotator_labels"]
            writer.writerow([row[c] for c in TXT_COLUMNS[:10]] + labels)
    return path


def write_mnli(folder: Path, layout: str) -> dict[str, str]:
    """The three files in ``layout`` (jsonl or txt); split -> path as data=mnli names them."""
    folder.mkdir(parents=True, exist_ok=True)
    splits = {"train": "train", "dev_matched": "test_matched", "dev_mismatched": "test_mismatched"}
    out = {}
    for seed, (part, split) in enumerate(splits.items()):
        rows, path = mnli_rows(part, seed), folder / f"multinli_1.0_{part}.{layout}"
        out[split] = str(write_jsonl(rows, path) if layout == "jsonl" else write_txt(rows, path))
    return out


@pytest.fixture(scope="module")
def mnli(tmp_path_factory) -> dict[str, dict[str, str]]:
    folder = tmp_path_factory.mktemp("mnli")
    return {layout: write_mnli(folder / layout, layout) for layout in ("jsonl", "txt")}


def overrides(files: dict[str, str]) -> list[str]:
    return ["data=mnli", *(f"data.files.{split}={path}" for split, path in files.items())]


def test_data_mnli_composes(tmp_path):
    cfg = compose_cfg(["data=mnli"], tmp_path)
    data = cfg.data
    assert data.hub_name == "nyu-mll/multi_nli"
    assert list(data.test_splits) == ["test_matched", "test_mismatched"]
    assert dict(data.hub_splits) == {"test_matched": "validation_matched",
                                     "test_mismatched": "validation_mismatched"}
    assert data.validate_on == "matched" and list(data.group_fields) == ["genre"]
    # the single-test-set corpora keep their one test split
    assert list(compose_cfg(["data=snli"], tmp_path).data.test_splits) == ["test"]


@pytest.mark.parametrize("layout", ["jsonl", "txt"])
def test_both_layouts_read_with_genres_per_split(layout, mnli, tmp_path):
    cfg = compose_cfg([*overrides(mnli[layout]), "data.cache_dir=" + str(tmp_path)], tmp_path)
    dm = build_datamodule(cfg.data)
    sizes = {s: len(dm.splits[s]) for s in ("train", "validation", "test_matched",
                                             "test_mismatched")}
    assert sizes == {"train": 60, "validation": 30 - NO_GOLD, "test_matched": 30 - NO_GOLD,
                     "test_mismatched": 24 - NO_GOLD}
    assert dm.group_names_of("test_matched")["genre"] == sorted(MATCHED)
    assert dm.group_names_of("test_mismatched")["genre"] == sorted(MISMATCHED)
    batch = next(iter(dm.dataloader("test_mismatched")))
    genres = [sorted(MISMATCHED)[i] for i in batch["group/genre"].tolist()]
    assert set(genres) <= set(MISMATCHED) and len(set(genres)) > 1


@pytest.mark.parametrize(("validate_on", "size", "genres"), [
    ("matched", 30 - NO_GOLD, MATCHED), ("mismatched", 24 - NO_GOLD, MISMATCHED)])
def test_validate_on_picks_the_validation_file(validate_on, size, genres, mnli, tmp_path):
    cfg = compose_cfg([*overrides(mnli["jsonl"]), f"data.validate_on={validate_on}",
                       "data.cache_dir=" + str(tmp_path)], tmp_path)
    dm = build_datamodule(cfg.data)
    assert len(dm.splits["validation"]) == size
    assert dm.group_names_of("validation")["genre"] == sorted(genres)
    assert dm.splits["validation"]["label"] == dm.splits[f"test_{validate_on}"]["label"]


def test_hub_splits_map_to_multinli_names(monkeypatch, tmp_path):
    """The hub path asks nyu-mll/multi_nli for its own split names, once each."""
    asked = {}

    def fake_hub(name, config, splits, cache_dir=None, local_splits=()):
        asked.update(name=name, splits=list(splits), local=list(local_splits))
        parts = {"train": "train", "validation_matched": "dev_matched",
                 "validation_mismatched": "dev_mismatched"}
        return {s: datasets.Dataset.from_list([
            {"premise": r["sentence1"], "hypothesis": r["sentence2"], "genre": r["genre"],
             "label": LABELS.index(r["gold_label"]) if r["gold_label"] != "-" else -1}
            for r in mnli_rows(parts[s], 0)]) for s in splits}

    monkeypatch.setattr(datamodule_module, "load_hub_splits", fake_hub)
    monkeypatch.setattr(datamodule_module, "download_hub_dataset", lambda *a, **k: None)
    cfg = compose_cfg(["data=mnli", "data.validate_on=mismatched"], tmp_path)
    dm = build_datamodule(cfg.data)
    assert asked == {"name": "nyu-mll/multi_nli",
                     "splits": ["train", "validation_matched", "validation_mismatched"],
                     "local": ["train", "test_matched", "test_mismatched"]}
    assert len(dm.splits["validation"]) == len(dm.splits["test_mismatched"]) == 24 - NO_GOLD
    assert dm.group_names_of("test_matched")["genre"] == sorted(MATCHED)


@pytest.fixture(scope="module")
def mnli_run(mnli, tmp_path_factory) -> Path:
    """A tiny LSTM trained on the tab-separated fixture, logged to an offline W&B run."""
    run = tmp_path_factory.mktemp("mnli_run")
    train(compose_cfg([*TINY, *FAST, *overrides(mnli["txt"]), "logger=wandb",
                       "data.cache_dir=" + str(run / "hf")], run))
    return run


def test_a_tiny_run_records_both_dev_sets_and_genres(mnli_run):
    results = json.loads((mnli_run / "results.json").read_text())
    assert results["status"] == "completed"
    metrics = results["metrics"]
    for split in ("test_matched", "test_mismatched"):
        assert {f"{split}/acc", f"{split}/loss"} <= set(metrics)
    assert not any(k.startswith("test/") for k in metrics)  # MultiNLI has no "test" split
    assert "val/acc" in metrics and "train/acc_eval" in metrics
    breakdowns = results["breakdowns"]
    assert set(breakdowns) == {"test_matched", "test_mismatched"}
    for split, genres, size in (("test_matched", MATCHED, 30 - NO_GOLD),
                                ("test_mismatched", MISMATCHED, 24 - NO_GOLD)):
        sets = breakdowns[split]
        assert sets["size"] == size
        assert list(sets["genre"]) == sorted(genres)
        assert sum(g["n"] for g in sets["genre"].values()) == size
        correct = sum(g["n"] * g["acc"] for g in sets["genre"].values())
        assert correct / size == pytest.approx(metrics[f"{split}/acc"], abs=1e-6)
        assert sum(c["n"] for c in sets["per_class"].values()) == size
        assert set(sets["overlap"]) and sum(b["n"] for b in sets["overlap"].values()) == size


def test_the_dashboards_multinli_columns_are_logged(mnli_run):
    [run_file] = mnli_run.glob("wandb/offline-run-*/run-*.wandb")
    summary = {item.key for record in finished_records(run_file)
               if record.WhichOneof("record_type") == "summary"
               for item in record.summary.update}
    missing = sorted(set(MNLI_COLUMNS) - summary)
    assert not missing, f"the dashboard's columns {missing} are not in a data=mnli run's summary"


def test_accuracy_per_genre_is_in_the_wandb_summary(mnli_run):
    """Each dev set's accuracy per genre (and per overlap bucket, per class) as summary keys
    of the offline W&B run, equal to results.json's breakdowns."""
    [run_file] = mnli_run.glob("wandb/offline-run-*/run-*.wandb")
    summary = {item.key: json.loads(item.value_json) for record in finished_records(run_file)
               if record.WhichOneof("record_type") == "summary"
               for item in record.summary.update}
    breakdowns = json.loads((mnli_run / "results.json").read_text())["breakdowns"]
    for split, genres in (("test_matched", MATCHED), ("test_mismatched", MISMATCHED)):
        for genre in genres:
            assert summary[f"{split}/acc_per_genre/{genre}"] == pytest.approx(
                breakdowns[split]["genre"][genre]["acc"])
        for label in LABELS:
            assert summary[f"{split}/acc_per_class/{label}"] == pytest.approx(
                breakdowns[split]["per_class"][label]["acc"])
        assert any(k.startswith(f"{split}/acc_per_overlap/") for k in summary)


def test_breakdown_summary_names_each_group():
    from entailment_lab.callbacks import breakdown_summary

    breakdown = {"size": 3, "per_class": {"neutral": {"n": 3, "acc": 0.5}},
                 "genre": {"slate": {"n": 2, "acc": 1.0}, "oup": {"n": 0, "acc": None}}}
    assert breakdown_summary("test_matched", breakdown) == {
        "test_matched/acc_per_class/neutral": 0.5, "test_matched/acc_per_genre/slate": 1.0,
        "test_matched/acc_per_genre/oup": None}


def test_the_other_layout_trains_to_the_same_figures(mnli, mnli_run, tmp_path):
    """multinli_1.0_*.jsonl, '-' rows mid-file, trains end to end to the very figures of the
    same run on the .txt files: the two layouts are one dataset."""
    figures = train(compose_cfg([*TINY, *FAST, *overrides(mnli["jsonl"]),
                                 "data.cache_dir=" + str(tmp_path / "hf")], tmp_path))
    trained = json.loads((mnli_run / "results.json").read_text())
    for key in ("test_matched/acc", "test_mismatched/acc", "test_matched/loss", "val/acc"):
        assert figures[key] == pytest.approx(trained["metrics"][key], abs=1e-6)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["breakdowns"] == trained["breakdowns"]  # counts and their ratios
    assert results["data_stats"]["test_mismatched/no_gold"] == NO_GOLD


def test_eval_on_a_multinli_dev_set(mnli_run, tmp_path, capsys):
    trained = json.loads((mnli_run / "results.json").read_text())
    cfg = compose_cfg([f"ckpt_path={trained['best_checkpoint']}", "split=test_mismatched",
                       "trainer.accelerator=cpu", "trainer.enable_progress_bar=false"],
                      tmp_path, config_name="eval")
    metrics = evaluate(cfg)
    assert metrics["test_mismatched/acc"] == pytest.approx(
        trained["metrics"]["test_mismatched/acc"], abs=1e-6)
    assert set(metrics) == {"test_mismatched/acc", "test_mismatched/loss"}
    printed = capsys.readouterr().out  # Lightning's table names the set, not "test"
    assert "test_mismatched/acc" in printed and "test/acc" not in printed
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["breakdowns"]["test_mismatched"]["genre"]) == sorted(MISMATCHED)


def test_eval_puts_each_sets_genres_in_the_wandb_summary(mnli_run, tmp_path):
    """eval.py logged to W&B: the set's metrics and its accuracy per genre under the keys a
    training run gives them (test_mismatched/acc_per_genre/oup), equal to its results.json."""
    trained = json.loads((mnli_run / "results.json").read_text())
    cfg = compose_cfg([f"ckpt_path={trained['best_checkpoint']}", "split=test_mismatched",
                       "logger=wandb", "trainer.accelerator=cpu",
                       "trainer.enable_progress_bar=false"], tmp_path, config_name="eval")
    try:
        evaluate(cfg)
    finally:
        finish_wandb()
    [run_file] = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    summary = {item.key: json.loads(item.value_json) for record in finished_records(run_file)
               if record.WhichOneof("record_type") == "summary"
               for item in record.summary.update}
    results = json.loads((tmp_path / "results.json").read_text())
    assert summary["test_mismatched/acc"] == pytest.approx(
        results["metrics"]["test_mismatched/acc"])
    genres = results["breakdowns"]["test_mismatched"]["genre"]
    assert genres and all(summary[f"test_mismatched/acc_per_genre/{g}"] == pytest.approx(
        cell["acc"]) for g, cell in genres.items())
    assert not any(k.startswith("test/") for k in summary)


def test_a_missing_dev_set_is_one_line_naming_its_key(mnli, tmp_path):
    files = {k: v for k, v in mnli["jsonl"].items() if k != "test_mismatched"}
    proc = run_cli([*overrides(files), "model=lstm", *FAST, f"hydra.run.dir={tmp_path}"],
                   tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [errors[0]] and errors[0].startswith(
        "error: data.files.test_mismatched: not set"), proc.stderr[-2000:]


def test_a_missing_validation_dev_set_names_validate_on(mnli, tmp_path):
    files = {k: v for k, v in mnli["jsonl"].items() if k != "test_matched"}
    with pytest.raises(ConfigError, match=r"^data\.files\.test_matched: not set, but "
                                          r"data\.validate_on=matched"):
        train(compose_cfg([*TINY, *FAST, *overrides(files)], tmp_path))


@pytest.mark.parametrize(("override", "message"), [
    ("data.validate_on=both", r"^data\.validate_on=both: not one of the test splits"),
    ("+data.files.dev=x.jsonl", r"^data\.files: unknown split\(s\) \['dev'\]"),
    ("+data.files.validation={train}", r"^data\.files\.validation and data\.validate_on"),
])
def test_bad_multinli_settings_are_one_line(override, message, mnli, tmp_path):
    override = override.format(train=mnli["jsonl"]["train"])  # a file that exists
    with pytest.raises(ConfigError, match=message) as err:
        train(compose_cfg([*TINY, *FAST, *overrides(mnli["jsonl"]), override], tmp_path))
    assert "\n" not in str(err.value)


def test_offline_hub_names_multinli_and_its_files(tmp_path):
    with pytest.raises(DataError) as err:
        train(compose_cfg([*TINY, *FAST, "data=mnli", f"data.cache_dir={tmp_path / 'hf'}"],
                          tmp_path))
    message = str(err.value)
    assert "\n" not in message and "'nyu-mll/multi_nli'" in message and "offline" in message
    assert "data.files.test_matched=PATH data.files.test_mismatched=PATH" in message
    assert "data.files.test=PATH" not in message
