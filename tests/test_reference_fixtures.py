"""The weight-transfer fixtures can be regenerated from the repository alone (with clones of
the third-party code): every generator (``tests/models/NAME/make_fixture.py``) pins a repository
and a full commit, its stored patch exists, and ``make references`` knows every fixture, which
lies beside its generator (tests/references/README.md)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

HERE = REPO / "tests" / "references"
MODELS = REPO / "tests" / "models"
sys.path.insert(0, str(HERE))
from regenerate import FIXTURES, committed  # noqa: E402

GENERATORS = sorted(MODELS.glob("*/make_fixture.py"))


def upstream(generator: Path) -> tuple:
    """The generator's ``UPSTREAM`` constant: (repository, commit, patch, paths), evaluated
    from its source (no import: the generators import third-party code)."""
    for node in ast.parse(generator.read_text()).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets
                                             if isinstance(t, ast.Name)] == ["UPSTREAM"]:
            value = node.value
            if isinstance(value, ast.Call):  # Upstream(...)
                args = [ast.literal_eval(a) for a in value.args]
                kwargs = {k.arg: ast.literal_eval(k.value) for k in value.keywords}
                return (*args, *[None] * (3 - len(args)), kwargs.get("paths", ()))[:4]
            values = ast.literal_eval(value)
            return (*values, *[None] * (4 - len(values)))[:4]
    raise AssertionError(f"{generator}: no UPSTREAM constant")


@pytest.mark.parametrize("generator", GENERATORS, ids=lambda p: f"make_{p.parent.name}")
def test_every_generator_pins_a_repository_commit_and_its_patch(generator):
    repository, commit, patch, _ = upstream(generator)
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", repository)
    assert re.fullmatch(r"[0-9a-f]{40}", commit), "a full commit, not an abbreviation"
    if patch is not None:
        text = (HERE / "patches" / patch).read_text()
        assert text.startswith("diff --git a/"), f"{patch}: not a git diff"


def test_every_patch_is_used_and_every_fixture_is_regenerated():
    used = {upstream(g)[2] for g in GENERATORS} - {None}
    assert used == {p.name for p in (HERE / "patches").glob("*.patch")}
    assert {committed(f) for f in FIXTURES} == set(MODELS.glob("*/*.pt"))  # beside generators
    assert {g for g, _, _ in FIXTURES.values()} == {g.relative_to(MODELS).as_posix()
                                                    for g in GENERATORS}


def test_a_missing_clone_is_a_line_not_a_regenerated_fixture(tmp_path):
    done = subprocess.run([sys.executable, str(HERE / "regenerate.py"), "--checkouts",
                           str(tmp_path), "--check", "--only", "lstm.pt"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stdout.strip() == f"lstm.pt: not regenerated (no checkout {tmp_path}/InferSent)"
