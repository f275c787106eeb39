"""Each paper row is declared once (``paper_tables.py``): the experiment files are generated
from it, and a committed file that differs from its row fails here."""

from __future__ import annotations

import pytest

from entailment_lab.paper_tables import (
    ALL_ROWS,
    PAIR_ROWS,
    TABLE2,
    experiment_file,
    experiment_name,
)
from tests.conftest import REPO, compose_cfg

GENERATED = [r for r in PAIR_ROWS if experiment_name(r)]


@pytest.mark.parametrize("row", GENERATED, ids=[experiment_name(r) for r in GENERATED])
def test_committed_experiment_file_is_generated_from_its_row(row):
    path = REPO / "conf" / "experiment" / f"{experiment_name(row)}.yaml"
    assert path.read_text(encoding="utf-8") == experiment_file(row), (
        f"{path} differs from its row in paper_tables.py: edit the row, then run "
        "python -m entailment_lab.paper_tables --write")


def test_every_experiment_file_of_table2_has_a_row():
    files = {p.stem for p in (REPO / "conf" / "experiment" / "table2").glob("*.yaml")}
    assert files == {experiment_name(r).split("/")[1] for r in GENERATED}


@pytest.mark.parametrize("row", [r for r in ALL_ROWS if r.model], ids=lambda r: r.label)
def test_every_implemented_row_names_a_model_config(row):
    assert (REPO / "conf" / "model" / f"{row.model}.yaml").is_file()


@pytest.mark.parametrize("row", GENERATED[:3] + [TABLE2[3]], ids=lambda r: r.label)
def test_a_generated_experiment_composes_to_its_row(row, tmp_path):
    cfg = compose_cfg([f"experiment={experiment_name(row)}"], tmp_path)
    assert cfg.model.name == row.model and cfg.get("dim") == row.dim


def test_row_3_is_shown_but_never_compared():
    from entailment_lab.report.tables import RowResult

    row3 = TABLE2[2]
    assert row3.not_comparable and RowResult("snli", row3, "dflstm", 600).comparable is False
    assert RowResult("snli", TABLE2[0], "lstm", 128).comparable is True
