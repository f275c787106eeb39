"""The W&B dashboard as code (``src/report.py --wandb-workspace``): its spec, built offline, uses
only keys that a real offline W&B run of the platform logs, so a renamed metric breaks it."""

from __future__ import annotations

import json
import runpy
import time

import pytest

from entailment_lab.paper_tables import TABLE2
from entailment_lab.pipeline import train
from entailment_lab.report.dashboard import MNLI_COLUMNS, RUNS_KEY, RUNS_VALUES
from entailment_lab.report.rows import ROW_CONFIG_KEYS
from tests.conftest import FAST, REPO, compose_cfg, file_overrides
from tests.test_stops import finished_records

pytestmark = pytest.mark.usefixtures("one_thread")
MAIN = runpy.run_path(str(REPO / "src/report.py"))["main"]


@pytest.fixture(scope="module")
def logged(pair_files, tmp_path_factory) -> dict:
    """What one tiny DIN run (heat maps need a network with analysis maps) logs to an offline
    W&B run: history and summary keys (a media value's ``_type`` kept), and the config."""
    tmp = tmp_path_factory.mktemp("wandb_run")
    cfg = compose_cfg(["model=din1", "dim=16", *FAST, *file_overrides(pair_files),
                       "trainer.max_epochs=1", "logger=wandb"], tmp)
    train(cfg)
    [run_file] = tmp.glob("wandb/offline-run-*/run-*.wandb")
    keys: dict[str, dict[str, object]] = {"history": {}, "summary": {}}
    config: dict[str, object] = {}
    for record in finished_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind in keys:
            items = record.history.item if kind == "history" else record.summary.update
            for item in items:
                path = list(item.nested_key) or [item.key]
                value = json.loads(item.value_json)
                keys[kind].setdefault(path[0], {} if len(path) > 1 else value)
                if len(path) > 1:  # a media value, flattened: test/heatmaps/_type, ...
                    keys[kind][path[0]][path[1]] = value
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
    return {**keys, "config": config}


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> dict:
    """The spec as ``--dry-run`` writes it, through ``src/report.py``'s main (no network)."""
    out = tmp_path_factory.mktemp("dashboard") / "dashboard.json"
    assert MAIN(["--wandb-workspace", "someone/entailment-lab", "--dry-run", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def _panels(spec: dict, kind: str) -> list[dict]:
    return [p for s in spec["sections"] for p in s["panels"] if p["type"] == kind]


def _config_value(config: dict, dotted: str) -> object:
    node: object = config
    for part in dotted.split("."):
        assert isinstance(node, dict) and part in node, f"config key {dotted} not logged"
        node = node[part]
    return node


def test_every_metric_key_of_the_spec_is_logged_by_a_real_run(spec, logged):
    history, summary = logged["history"], logged["summary"]
    used = {"summary": set(), "history": set()}
    for plot in _panels(spec, "BarPlot"):  # a bar is a run's summary value
        used["summary"].update(plot["metrics"])
    for plot in _panels(spec, "ScatterPlot"):
        used["summary"].update({plot["x"]["name"], plot["y"]["name"]})
    for plot in _panels(spec, "LinePlot"):
        used["history"].update([plot["x"], *plot["y"]])
    columns = spec["runset_settings"]["pinned_columns"]
    # MultiNLI's columns stay empty for this SNLI-layout run: tests/test_mnli.py checks them
    # against a real data=mnli run
    used["summary"].update(c.removeprefix("summary:") for c in columns
                           if c.startswith("summary:") and
                           c.removeprefix("summary:") not in MNLI_COLUMNS)
    assert used["summary"] >= {"test/acc", "val/acc_best", "params/trainable",
                               "params/paper_convention"}
    assert used["history"] >= {"epoch", "val/acc"}
    for where, logged_keys in (("summary", summary), ("history", history)):
        missing = sorted(used[where] - set(logged_keys))
        assert not missing, f"the spec uses {missing}, not in a run's {where}"
    [media] = _panels(spec, "MediaBrowser")
    assert media["media_keys"] == ["test/heatmaps"]
    for key in media["media_keys"]:  # logged as images, at test time
        assert str(summary[key]["_type"]).startswith("images/"), summary[key]
        assert summary[key]["count"] > 0


def test_runs_are_grouped_by_row_through_logged_config_keys(spec, logged):
    runset = spec["runset_settings"]
    groupby = [g["name"] for g in runset["groupby"]]
    # the report's row (rows.RowKey) as config keys: data, model, dim, train size, premise
    assert groupby == list(ROW_CONFIG_KEYS) == ["data.name", "model.name", "dim",
                                                "data.train_size", "data.hypothesis_only"]
    assert [_config_value(logged["config"], key) for key in groupby] == \
        ["snli", "din1", 16, None, False]
    for key in groupby:  # the table shows the grouping keys as W&B names nested config keys
        top, _, rest = key.partition(".")
        assert f"config:{top}.value" + (f".{rest}" if rest else "") in runset["pinned_columns"]


# What the README makes: a Table 2 row, a protocol run, and its plain sweep (no tags).
README_RUNS = [["experiment=table2/row17"],
               ["experiment=protocols/snli_dev2test", "data_root=../shared/data", "model=lstm"],
               ["model=din1", "dim=256"]]


@pytest.mark.parametrize("overrides", README_RUNS, ids=["table2", "protocol", "plain sweep"])
def test_the_runs_filter_shows_every_run_the_readme_makes(spec, overrides, tmp_path):
    """The filter keys on what every training run records in its config, not on tags (a plain
    sweep has none, a protocol run has its own)."""
    assert spec["runset_settings"]["filters"] == \
        f"Config(\"{RUNS_KEY}.value\") in {list(RUNS_VALUES)}"
    cfg = compose_cfg(overrides, tmp_path)
    assert cfg[RUNS_KEY] in RUNS_VALUES, (overrides, cfg.get("tags"))


def test_the_runs_filter_key_is_logged_by_a_real_run(logged):
    assert _config_value(logged["config"], RUNS_KEY) in RUNS_VALUES


def test_mean_and_std_per_row_and_the_papers_points(spec):
    for plot in [*_panels(spec, "BarPlot"), *_panels(spec, "LinePlot")]:
        assert (plot["groupby_aggfunc"], plot["groupby_rangefunc"]) == ("mean", "stddev")
        assert "groupby" not in plot  # the runset's grouping (row), not a panel's own
    # every model against its trainable parameters; the paper's convention where it has one
    assert [(s["x"]["name"], s["y"]["name"], s["log_x"]) for s in _panels(spec, "ScatterPlot")] \
        == [("params/trainable", "test/acc", True), ("params/paper_convention", "test/acc", True)]
    [paper] = _panels(spec, "MarkdownPanel")
    rows = [line for line in paper["markdown"].splitlines() if line.startswith("| ")][2:]
    assert len(rows) == len(TABLE2)
    for row in TABLE2:
        [line] = [r for r in rows if r.startswith(f"| {row.row} |")]
        assert f"| {row.test:.1f} |" in line and f"{row.para_count:,}" in line
    assert spec["settings"]["max_runs"] >= 3 * len(TABLE2)  # three seeds a row fit


def test_saving_fails_fast_in_one_line_when_offline(monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert MAIN(["--wandb-workspace", "someone/entailment-lab"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --wandb-workspace needs the W&B API") and "\n" not in err
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: refused
    started = time.monotonic()
    assert MAIN(["--wandb-workspace", "someone/entailment-lab"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot reach the W&B API at 127.0.0.1:9") and "\n" not in err
    assert time.monotonic() - started < 10
    assert MAIN(["--wandb-workspace", "entailment-lab", "--dry-run", "x.json"]) == 1
    assert "wants ENTITY/PROJECT" in capsys.readouterr().err


def test_the_runs_table_has_both_multinli_dev_sets(spec):
    columns = spec["runset_settings"]["pinned_columns"]
    assert MNLI_COLUMNS == ("test_matched/acc", "test_mismatched/acc")
    assert {f"summary:{key}" for key in MNLI_COLUMNS} <= set(columns)
    # beside the SNLI test accuracy, in this order
    at = columns.index("summary:test/acc")
    assert columns[at + 1:at + 3] == [f"summary:{key}" for key in MNLI_COLUMNS]
