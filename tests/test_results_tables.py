"""The published results tables are generated from the committed per-run records: a hand edit,
or a record added without regenerating (``make results``), fails here."""

from __future__ import annotations

import json
import shutil

import pytest

from entailment_lab.errors import UserError
from entailment_lab.report.leaderboard import (
    fill_markers,
    generated_tables,
    update_documents,
)
from tests.conftest import REPO
from tests.test_report import write_job

DOCUMENTS = [REPO / "README.md", REPO / "docs" / "RESULTS.md",
             REPO / "docs" / "DCNN_RESULTS.md"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_committed_tables_equal_the_records(document):
    changed = update_documents(REPO / "docs" / "results", [document], check=True)
    assert not changed, (f"{document.name}: its results tables differ from docs/results/*/runs; "
                         "run make results")


def test_every_table_marker_is_filled():
    tables = generated_tables(REPO / "docs" / "results")
    assert {"headline", "snli_dev2test", "sick", "snli_dev2test_breakdown",
            "sick_breakdown"} <= set(tables)
    text = "".join(d.read_text(encoding="utf-8") for d in DOCUMENTS)
    for name in tables:
        assert f"<!-- results:{name} -->" in text, name


def test_a_new_record_changes_the_table_and_a_hand_edit_is_caught(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "docs" / "results" / "snli_lstm_peer", results / "snli_lstm_peer")
    doc = tmp_path / "RESULTS.md"
    doc.write_text("x\n<!-- results:snli_dev2test -->\n<!-- /results:snli_dev2test -->\n")
    assert update_documents(results, [doc]) == [doc]
    assert "61.8 ± 1.2 (3)" in doc.read_text()
    assert update_documents(results, [doc], check=True) == []
    doc.write_text(doc.read_text().replace("61.8 ± 1.2", "65.0 ± 0.1"))  # a hand edit
    assert update_documents(results, [doc], check=True) == [doc]
    # one more run of the same setting: the row's mean moves, its count becomes 4
    folder = results / "more" / "runs" / "0"
    write_job(folder, experiment="protocols/snli_dev2test", model="lstm", dim=128, test=0.70,
              data="snli_dev2test")
    record = json.loads((folder / "results.json").read_text())
    source = json.loads(next((results / "snli_lstm_peer").rglob("results.json")).read_text())
    record.update(overrides=source["overrides"], seed=9, early_stopping=source.get(
        "early_stopping", "not recorded"))
    (folder / "results.json").write_text(json.dumps(record))
    update_documents(results, [doc])
    assert "(4)" in doc.read_text()


def test_a_document_without_markers_or_records_is_refused(tmp_path):
    doc = tmp_path / "plain.md"
    doc.write_text("no markers\n")
    with pytest.raises(UserError, match="no <!-- results:NAME --> markers"):
        update_documents(REPO / "docs" / "results", [doc])
    with pytest.raises(UserError, match="no per-run records"):
        update_documents(tmp_path, [doc])
    with pytest.raises(UserError, match="names no generated table"):
        fill_markers("<!-- results:nope -->\n<!-- /results:nope -->", {"a": ""}, "doc")


def test_learning_curve_runs_leave_the_protocol_table_for_their_own(tmp_path):
    results = tmp_path / "results"
    base = ["experiment=protocols/snli_dev2test", "data_root=d", "model=lstm"]
    for i, (size, test) in enumerate([(1000, 0.50), (1000, 0.52), (4000, 0.58), (None, 0.62)]):
        sized = [f"data.train_size={size}"] if size else []
        write_job(results / "curve" / "runs" / str(i), model="lstm", dim=128, seed=i,
                  data="snli_dev2test", test=test, overrides=[*base, *sized, f"seed={i}"])
    tables = generated_tables(results)
    assert "0.50" not in tables["snli_dev2test"] and "62.0 (1)" in tables["snli_dev2test"]
    assert "pairs" not in tables["snli_dev2test"]
    curve = tables["snli_dev2test_learning_curve"]
    header, _, line = curve.splitlines()[:3]
    assert header.startswith("| model | 1,000 pairs | 4,000 pairs | whole training set |")
    assert line.startswith("| lstm d=128 | 51.0 ± 1.4 (2) | 58.0 (1) | 62.0 (1) | `curve` |")
    assert "data.train_size=1000,4000" in curve and "src/train.py -m" in curve
