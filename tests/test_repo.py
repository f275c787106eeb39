"""The CI workflow is valid for GitHub Actions (actionlint)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def test_github_workflows_pass_actionlint():
    exe = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not Path(exe).exists():
        pytest.skip("actionlint not installed (pip install -e .[dev])")
    workflows = sorted(str(p) for p in (REPO / ".github" / "workflows").glob("*.y*ml"))
    assert workflows
    proc = subprocess.run([exe, *workflows], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr

