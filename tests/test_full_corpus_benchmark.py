"""``benchmarks/full_corpus.py --tiny``: the corpus is written with its no-gold rows, the data
stage starts twice (cold, then from the cache) and the figures are printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_tiny_rehearsal_prints_both_starts(tmp_path: Path) -> None:
    lengths = tmp_path / "dev.jsonl"  # a --lengths-from file in Stanford's layout
    lengths.write_text("".join(json.dumps({"sentence1": "w " * n + ".", "sentence2": "b .",
                                           "gold_label": "neutral"}) + "\n" for n in (3, 9)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "full_corpus.py"), "--tiny",
                           "--lengths-from", str(lengths), "--out", str(tmp_path / "corpus")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "train 3,000 pairs (4 with label -1), validation 300, test 300" in out, out
    assert ("kept after the no-gold drop: {'train': 2996, 'validation': 295, 'test': 295}; "
            "dropped {'train': 4, 'validation': 5, 'test': 5}") in out, out
    starts = re.findall(r"^(first|second)\s+(\d+\.\d) s \(\s*(\d+\.\d) s\)\s+(\d+\.\d) s .*? "
                        r"([\d,]+) MB\s+([\d,]+) MB$", out, re.MULTILINE)
    assert [s[0] for s in starts] == ["first", "second"], out
    assert all(float(s[3]) >= float(s[1]) > 0 for s in starts)  # the process holds the stage
    assert all(int(s[4].replace(",", "")) > 0 for s in starts)
    parts = re.findall(r"^  (read|validate \+ drop no-gold|tokenise|vocabulary|index)\s+"
                       r"(\d+\.\d) s$", out, re.MULTILINE)
    assert [p[0] for p in parts] == ["read", "validate + drop no-gold", "tokenise",
                                     "vocabulary", "index"], out
    assert re.search(r"^load average \(1, 5, 15 min\) .* on \d+ cores$", out, re.MULTILINE), out
    # the three hypotheses of a premise share it, and the drawn lengths are the file's (4, 10)
    rows = [json.loads(line) for line in (tmp_path / "corpus" / "train.jsonl").open()]
    assert rows[0]["premise"] == rows[1]["premise"] == rows[2]["premise"]
    assert {len(r["premise"].split()) for r in rows} <= {4, 10}
    assert sum(r["label"] == -1 for r in rows) == 4
