"""``benchmarks/peer_speed.py``: the export the peers read, our side's record, the table made
from records, and docs/peer_speed.md kept equal to the committed records (a hand edit or a
stale table fails)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from entailment_lab.data.demo import write_demo_corpus

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "peer_speed.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import peer_speed  # noqa: E402

from tests.entry_points import run_entry_point  # noqa: E402


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/peer_speed.py ARGS``; in this process (tests/entry_points.py) but
    for ``ours``, which records its own process's peak memory."""
    if args[0] != "ours":
        return run_entry_point(SCRIPT, args, cwd=cwd)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SNLI-shaped data root: snli/validation.jsonl.gz (1,200 pairs) and snli/test.jsonl.gz."""
    root = tmp_path_factory.mktemp("data_root")
    files = write_demo_corpus(root / "demo", sizes={"train": 10, "validation": 1200, "test": 30},
                              seed=3)
    (root / "snli").mkdir()
    for split in ("validation", "test"):
        with open(files[split], "rb") as src, gzip.open(root / "snli" / f"{split}.jsonl.gz",
                                                        "wb") as dst:
            shutil.copyfileobj(src, dst)
    return root


def test_export_writes_the_protocols_training_split_as_tokens(data_root: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "pairs.jsonl"
    done = run("export", "lstm", "--data-root", str(data_root), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    # the protocol holds ~1,000 pairs out for validation (whole premise groups)
    assert 100 < len(lines) < 1200 - 900
    assert set(lines[0]) == {"premise", "hypothesis", "label"}
    assert all(r["label"] in (0, 1, 2) for r in lines)
    assert all(r["premise"] == r["premise"].lower() and r["premise"].split() for r in lines)


@pytest.mark.slow
def test_ours_times_one_epoch_and_writes_a_record(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "ours.json"
    done = run("ours", "lstm", "--data-root", str(data_root), "--out", str(out),
               "--override", "trainer.limit_train_batches=2", "--override",
               "data.batch_size=8")
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["side"] == "ours" and record["model"] == "lstm"
    assert record["steps"] == 2 and record["batch"] == 8 and record["examples"] == 16
    assert record["epoch_s"] > 0 and record["peak_rss_mib"] >= record["rss_before_mib"] > 0
    if Path("/proc/self/clear_refs").exists():
        assert record["epoch_mib"] >= 0
    assert record["threads"] == 1 and record["bare_loop_s"] > 0


def write_records(folder: Path, rows: dict[str, tuple[list[float], list[float]]]) -> None:
    (folder / "records").mkdir(parents=True)
    for name, (ours, theirs) in rows.items():
        for side, times in (("ours", ours), ("theirs", theirs)):
            for round_, seconds in enumerate(times, 1):
                record = {"row": name, "side": side, "round": round_, "epoch_s": seconds,
                          "peak_rss_mib": 100.0 * round_, "epoch_mib": 50.0, "steps": 10,
                          "batch": 4,
                          "threads": 1, "machine": "CPU X", "implementation": f"{side}@abc",
                          "framework": "torch 2"}
                (folder / "records" / f"{name}_{side}_{round_}.json").write_text(
                    json.dumps(record))


def test_table_shows_mean_std_and_the_ratio(tmp_path: Path) -> None:
    write_records(tmp_path, {"decatt": ([10.0, 12.0], [20.0, 22.0]), "lstm": ([4.0], [2.0])})
    table = peer_speed.render_table(peer_speed.load_records(tmp_path))
    lines = table.splitlines()
    assert len(lines) == 4  # header, rule, two rows
    decatt, lstm = lines[2], lines[3]
    assert "| 11.0 ± 1.4 | – | 21.0 ± 1.4 | 1.91× |" in decatt  # no bare loop in these records
    assert "| 150 ± 71 | 150 ± 71 | 50 ± 0 | 50 ± 0 | 2 |" in decatt
    assert "| 4.0 | – | 2.0 | 0.50× | 100 | 100 | 50 | 50 | 1 |" in lstm


def test_table_write_and_check(tmp_path: Path) -> None:
    write_records(tmp_path, {"dcnn": ([3.0, 3.2], [4.0, 4.4])})
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n<!-- results:peer_speed -->\nstale\n<!-- /results:peer_speed -->\nend\n")
    stale = run("table", str(tmp_path), "--write", str(doc), "--check")
    assert stale.returncode != 0 and "differs from the records" in stale.stderr
    assert run("table", str(tmp_path), "--write", str(doc)).returncode == 0
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith("end\n") and "DCNN (TREC)" in text
    assert run("table", str(tmp_path), "--write", str(doc), "--check").returncode == 0


def test_only_the_latest_sitting_of_a_row_counts(tmp_path: Path) -> None:
    write_records(tmp_path, {"lstm": ([4.0], [2.0])})
    for path in (tmp_path / "records").glob("*.json"):
        record = json.loads(path.read_text())
        newer = {**record, "sitting": "20270101T000000", "epoch_s": 2 * record["epoch_s"]}
        (tmp_path / "records" / f"new_{path.name}").write_text(json.dumps(newer))
    table = peer_speed.render_table(peer_speed.load_records(tmp_path))
    assert "| 8.0 | – | 4.0 | 0.50× |" in table and "| 2.0 |" not in table


def test_a_document_without_the_markers_is_named(tmp_path: Path) -> None:
    write_records(tmp_path, {"dcnn": ([3.0], [4.0])})
    doc = tmp_path / "doc.md"
    doc.write_text("no markers here\n")
    done = run("table", str(tmp_path), "--write", str(doc))
    assert done.returncode != 0 and "doc.md: no <!-- results:peer_speed -->" in done.stderr
    assert doc.read_text() == "no markers here\n"


def test_a_bad_record_is_named(tmp_path: Path) -> None:
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "x.json").write_text('{"row": "lstm"}')
    done = run("table", str(tmp_path))
    assert done.returncode != 0 and "x.json: missing" in done.stderr


def test_docs_peer_speed_table_equals_the_committed_records() -> None:
    done = run("table", "docs/results/peer_speed", "--write", "docs/peer_speed.md", "--check")
    assert done.returncode == 0, done.stderr


def test_records_name_no_folder_of_the_machine(tmp_path: Path) -> None:
    peers = {"decatt": ("/home/me/port", "/home/me/venv/bin/python")}
    record = {"command": "/home/me/venv/bin/python benchmarks/peers/decatt_port.py /home/me/port "
                         f"--pairs {tmp_path}/decatt.jsonl --out /data/out/records/x.json",
              "sitting_command": f"{sys.executable} {REPO}/benchmarks/peer_speed.py sitting "
                                 "--data-root /data/nli --out /data/out", "epoch_s": 1.5}
    clean = peer_speed.portable(record, peer_speed.placeholders(
        peers, tmp_path / "decatt.jsonl", "decatt", "/data/nli", "/data/out"))
    assert clean["command"] == ("DECATT_PYTHON benchmarks/peers/decatt_port.py DECATT_CHECKOUT "
                                "--pairs decatt.jsonl --out OUT/records/x.json")
    assert clean["sitting_command"] == ("python benchmarks/peer_speed.py sitting --data-root DATA "
                                        "--out OUT")
    assert clean["epoch_s"] == 1.5
