"""Speed side by side with the public implementations run here (issue 50, item 3).

For each row: the same training split, batch size and thread count, one training epoch (no
validation, no test), on our side and on the public implementation's, each in a fresh process,
run alternately in one sitting. Per side: the epoch's wall-clock and CPU seconds, the
process's peak resident memory and the epoch's own peak above its start
(``benchmarks/peers/measure.py``); on our side also the same epoch as a bare PyTorch loop.

* **Ours**: the row's own experiment config (``ROWS``), one epoch of ``Trainer.fit`` as
  ``src/train.py`` builds it (``benchmarks/profile_step.py``'s ``build_run``), timed from
  ``on_train_start`` to ``on_train_end``.
* **Theirs**: ``benchmarks/peers/<driver>.py``, run by the implementation's own interpreter on
  its unmodified checkout (each driver's docstring says how to get both). It reads the
  training split as ``export`` writes it from our DataModule (the tokens our side trains on,
  one JSON object per line) and runs one epoch of their model doing per step what their
  training script does.

Sub-commands::

    # the training split of a row, as the peers read it
    python benchmarks/peer_speed.py export decatt --data-root ../shared/data --out decatt.jsonl
    # one epoch of ours: prints a record (JSON)
    python benchmarks/peer_speed.py ours decatt --data-root ../shared/data --out ours.json
    # the sitting: export, then ours and theirs alternately, ROUNDS times per row; records
    # into DIR/records/, then the table
    python benchmarks/peer_speed.py sitting --data-root ../shared/data --rounds 2 \\
        --peer decatt=CHECKOUT,PYTHON --peer lstm=CHECKOUT,PYTHON ... --out docs/results/peer_speed
    # the table from the records, between the markers of docs/peer_speed.md (--check: compare)
    python benchmarks/peer_speed.py table docs/results/peer_speed --write docs/peer_speed.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))
sys.path.insert(0, str(ROOT / "src"))

from measure import EpochMemory, cpu_name, peak_rss_mib  # noqa: E402  (benchmarks/peers/)


@dataclass(frozen=True)
class Row:
    """One comparison: our experiment overrides and the peer driver beside it."""

    overrides: tuple[str, ...]  # ours, with data_root=... added
    driver: str                 # benchmarks/peers/<driver>.py
    implementation: str         # owner/repo@commit
    batch: int                  # both sides
    what: str                   # the table's model column
    steps: int | None = None    # time only this many steps of the epoch (None: all of it)


ROWS: dict[str, Row] = {
    "decatt": Row(("experiment=protocols/snli_dev2test", "model=decatt"), "decatt_port",
                  "libowen2121/SNLI-decomposable-attention@5ac3eac", 4,
                  "Decomposable Attention (Table 2 row 8)"),
    # InferSent's nonlinear_fc classifier has two hidden layers: ours with mlp_layers=2
    "lstm": Row(("experiment=protocols/snli_dev2test", "model=lstm", "model.net.mlp_layers=2"),
                "infersent",
                "facebookresearch/InferSent@48fe288", 128, "LSTM encoder (Table 2 row 1)"),
    # DIIN: 20 steps (1,400 pairs) of the epoch; theirs takes over ten seconds a step on one
    # thread (every sentence padded to 48 words), so a whole epoch a side and round is too long
    "diin": Row(("experiment=protocols/snli_dev2test", "model=diin"), "diin_tf",
                "YichenGong/Densely-Interactive-Inference-Network@cb2c23b", 70, "DIIN", 20),
    "dcnn": Row(("experiment=dcnn/trec",), "dcnn_port", "FredericGodin/DynamicCNN@694cf6c", 4,
                "DCNN (TREC)"),
}
MARKER = "peer_speed"  # docs/peer_speed.md: <!-- results:peer_speed --> ... <!-- /results:... -->


def row_overrides(name: str, data_root: str, threads: int) -> list[str]:
    row = ROWS[name]
    limit = [f"trainer.limit_train_batches={row.steps}"] if row.steps else []
    return [*row.overrides, f"data_root={Path(data_root).resolve()}", f"threads={threads}",
            f"data.batch_size={row.batch}", "logger=csv", *limit]


def export(name: str, data_root: str, out: Path) -> int:
    """Write the row's training split, our DataModule's tokens joined by spaces, one JSON object
    per line: ``premise``/``hypothesis``/``label`` or ``sentence``/``label``. Returns the count."""
    from profile_step import compose_config

    from entailment_lab.files import write_text_atomic
    from entailment_lab.pipeline import build_datamodule

    with tempfile.TemporaryDirectory(prefix="peer_export_") as work:
        cfg = compose_config(row_overrides(name, data_root, 1), Path(work))
        datamodule = build_datamodule(cfg.data)
        itos = datamodule.vocab.itos
        train = datamodule.splits["train"]
        keys = datamodule.keys
        lines = []
        for example in train:
            record = {key: " ".join(itos[i] for i in example[f"{key}_ids"]) for key in keys}
            record["label"] = int(example["label"])
            lines.append(json.dumps(record))
    write_text_atomic(out, "\n".join(lines) + "\n")
    return len(lines)


def ours(name: str, data_root: str, threads: int, overrides: list[str]) -> dict[str, Any]:
    """One training epoch of our side (``overrides`` after the row's); the record."""
    import lightning
    import torch
    from profile_step import bare_loop_seconds, build_run, fit_quietly

    from entailment_lab.results import code_version

    memory = EpochMemory()

    class Memory(lightning.Callback):  # the epoch's memory, from its first step to its end
        mib: float | None = None

        def on_train_start(self, *_: Any) -> None:
            memory.start()

        def on_train_end(self, *_: Any) -> None:
            self.mib = memory.mib()

    probe = Memory()
    with tempfile.TemporaryDirectory(prefix="peer_ours_") as work:
        start = time.perf_counter()
        cfg, datamodule, module, trainer, timer = build_run(
            [*row_overrides(name, data_root, threads), *overrides], threads, Path(work),
            extra_callbacks=[probe])
        setup_s = time.perf_counter() - start
        rss_before = peak_rss_mib()
        fit_quietly(trainer, module, datamodule)
        # the same epoch as a plain PyTorch loop (same loader, optimiser, clipping; no
        # Lightning), after it: what the network itself costs, the anchor "bare loop vs Trainer"
        bare_s, bare_cpu = bare_loop_seconds(cfg, module, datamodule, ROWS[name].steps)
    version = code_version(ROOT)  # the commit, and whether src/ or conf/ differ from it
    commit = (version["commit"] or "unknown")[:7] + ("-dirty" if version["dirty"] else "")
    return {
        "side": "ours", "implementation": f"entailment-lab@{commit}",
        "model": cfg.model.name, "framework": f"torch {torch.__version__}, lightning "
        f"{lightning.__version__}", "python": platform.python_version(),
        "examples": min(len(datamodule.splits["train"]), timer.steps * int(cfg.data.batch_size)),
        "steps": timer.steps,
        "batch": int(cfg.data.batch_size), "threads": torch.get_num_threads(),
        "epoch_s": round(timer.seconds["epoch"], 3),
        "epoch_cpu_s": round(timer.cpu_seconds["epoch"], 3), "setup_s": round(setup_s, 3),
        "bare_loop_s": round(bare_s, 3), "bare_loop_cpu_s": round(bare_cpu, 3),
        "rss_before_mib": round(rss_before, 1), "peak_rss_mib": round(peak_rss_mib(), 1),
        "epoch_mib": probe.mib, "machine": cpu_name(), "command": shlex.join(sys.argv),
        "notes": "Trainer.fit, one epoch: on_train_start -> on_train_end (the end-of-epoch "
                 "checkpoint included)",
    }


def run_side(command: list[str], record_path: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run one side in a fresh process; its record (which it writes to ``record_path``)."""
    print("$", shlex.join(command), flush=True)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not record_path.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"peer_speed: {shlex.join(command)} failed (exit {done.returncode}):\n"
                         + "\n".join(tail))
    return json.loads(record_path.read_text())


def sitting(args: argparse.Namespace) -> None:
    """Export each row's split, then ours and theirs alternately, ``rounds`` times per row (the
    first side alternates from round to round); every record into ``out/records``."""
    peers = dict(parse_peer(spec) for spec in args.peer)
    records_dir = Path(args.out) / "records"
    records_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS":
           str(args.threads), "OPENBLAS_NUM_THREADS": str(args.threads),
           "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    work = Path(tempfile.mkdtemp(prefix="peer_speed_"))
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for name in args.rows:
        if name not in peers:
            raise SystemExit(f"peer_speed: row {name} needs --peer {name}=CHECKOUT,PYTHON")
        pairs = work / f"{name}.jsonl"
        count = export(name, args.data_root, pairs)
        print(f"# {name}: {count} training examples -> {pairs}", flush=True)
        checkout, python = peers[name]
        for round_ in range(1, args.rounds + 1):
            sides = ["ours", "theirs"] if round_ % 2 else ["theirs", "ours"]
            for side in sides:
                out = records_dir / f"{stamp}_{name}_{side}_{round_}.json"
                if side == "ours":
                    command = [sys.executable, str(Path(__file__).relative_to(ROOT)), "ours",
                               name, "--data-root", args.data_root, "--threads",
                               str(args.threads), "--out", str(out)]
                else:
                    command = [python, f"benchmarks/peers/{ROWS[name].driver}.py", checkout,
                               "--pairs", str(pairs), "--batch", str(ROWS[name].batch),
                               "--threads", str(args.threads), "--out", str(out)]
                    if ROWS[name].steps:
                        command += ["--limit", str(ROWS[name].steps * ROWS[name].batch)]
                record = run_side(command, out, env)
                record.update(row=name, round=round_, sitting=stamp,
                              sitting_command=shlex.join(sys.argv))
                record = portable(record, placeholders(peers, pairs, name, args.data_root,
                                                       args.out))
                out.write_text(json.dumps(record, indent=1) + "\n")
                print(f"  {side:6s} round {round_}: {record['epoch_s']:.1f} s, peak "
                      f"{record['peak_rss_mib']:.0f} MiB", flush=True)
    print(render_table(load_records(Path(args.out))))


def placeholders(peers: dict[str, tuple[str, str]], pairs: Path, row: str, data_root: str,
                 out_dir: str) -> dict[str, str]:
    """This machine's paths in a record -> the names the docs use (``DECATT_CHECKOUT``, ``DATA``,
    ``OUT``, ...)."""
    names = {"decatt": "DECATT", "lstm": "INFERSENT", "dcnn": "DCNN", "diin": "DIIN"}
    out = {str(pairs): f"{row}.jsonl", sys.executable: "python", f"{ROOT}/": "",
           data_root: "DATA", str(Path(data_root).resolve()): "DATA", out_dir: "OUT"}
    for name in sorted(peers, key=lambda n: n == row):  # the row's own names win (two rows
        checkout, python = peers[name]                   # may share an interpreter)
        out[python] = f"{names[name]}_PYTHON"
        out[checkout] = f"{names[name]}_CHECKOUT"
    return out


def portable(record: dict[str, Any], replacements: dict[str, str]) -> dict[str, Any]:
    """``record`` with every string's machine paths replaced (longest first), so that a
    committed record names no folder of the machine that made it."""
    order = sorted(replacements, key=len, reverse=True)

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for path in order:
                value = value.replace(path, replacements[path])
        return value

    return {key: clean(value) for key, value in record.items()}


def parse_peer(spec: str) -> tuple[str, tuple[str, str]]:
    name, _, rest = spec.partition("=")
    checkout, _, python = rest.partition(",")
    if name not in ROWS or not checkout or not python:
        raise SystemExit(f"peer_speed: --peer {spec!r}: expected ROW=CHECKOUT,PYTHON with ROW "
                         f"one of {', '.join(ROWS)}")
    for path in (checkout, python):
        if not Path(path).exists():
            raise SystemExit(f"peer_speed: --peer {spec!r}: {path} does not exist")
    return name, (str(Path(checkout).resolve()), python)


def load_records(root: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted((root / "records").glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise SystemExit(f"peer_speed: {path}: not JSON ({err})") from err
        missing = {"row", "side", "epoch_s", "peak_rss_mib", "steps"} - set(record)
        if missing:
            raise SystemExit(f"peer_speed: {path}: missing {sorted(missing)}")
        records.append(record)
    return records


def spread(values: list[float], digits: int = 1) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def measured(records: list[dict[str, Any]], key: str, digits: int = 0) -> str:
    """``key`` over the rounds, mean ± std; "–" where a record lacks it."""
    values = [r[key] for r in records if r.get(key) is not None]
    return spread(values, digits) if values and len(values) == len(records) else "–"


def render_table(records: list[dict[str, Any]]) -> str:
    """One line per row, from its latest sitting: epoch seconds and peak MiB of each side (mean
    ± std over the rounds), the ratio theirs / ours of the mean epoch times, steps, batch, the
    machine."""
    latest: dict[str, str] = {}  # row -> its latest sitting: earlier sittings are history
    for record in records:
        latest[record["row"]] = max(latest.get(record["row"], ""), record.get("sitting", ""))
    by_row: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        if record.get("sitting", "") == latest[record["row"]]:
            by_row[record["row"]][record["side"]].append(record)
    columns = ["model", "public implementation", "batch", "steps (ours / theirs)",
               "epoch s, ours", "epoch s, ours without Lightning", "epoch s, theirs",
               "theirs / ours", "peak MiB, ours", "peak MiB, theirs", "epoch MiB, ours",
               "epoch MiB, theirs", "rounds", "machine, threads"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name in [n for n in ROWS if n in by_row]:
        sides = by_row[name]
        if not sides["ours"] or not sides["theirs"]:
            continue
        ours_s = [r["epoch_s"] for r in sides["ours"]]
        theirs_s = [r["epoch_s"] for r in sides["theirs"]]
        first = sides["theirs"][0]
        machines = sorted({r.get("machine", "?") for r in sides["ours"] + sides["theirs"]})
        threads = sorted({r.get("threads") for r in sides["ours"] + sides["theirs"]})
        lines.append(
            f"| {ROWS[name].what} | {first['implementation']} ({first.get('framework', '?')}) "
            f"| {sides['ours'][0]['batch']} | {sides['ours'][0]['steps']} / {first['steps']} "
            f"| {spread(ours_s)} | {measured(sides['ours'], 'bare_loop_s', 1)} "
            f"| {spread(theirs_s)} "
            f"| {statistics.mean(theirs_s) / statistics.mean(ours_s):.2f}× "
            f"| {measured(sides['ours'], 'peak_rss_mib')} "
            f"| {measured(sides['theirs'], 'peak_rss_mib')} "
            f"| {measured(sides['ours'], 'epoch_mib')} | {measured(sides['theirs'], 'epoch_mib')} "
            f"| {min(len(ours_s), len(theirs_s))} | {'; '.join(machines)}, "
            f"{'/'.join(map(str, threads))} thread(s) |")
    return "\n".join(lines)


def table(args: argparse.Namespace) -> None:
    """Print the table, or fill the ``<!-- results:peer_speed -->`` markers of ``--write`` (the
    report's marker mechanism); with ``--check``, fail where that would change the file."""
    from entailment_lab.errors import UserError
    from entailment_lab.files import write_text_atomic
    from entailment_lab.report.leaderboard import fill_markers

    rendered = render_table(load_records(Path(args.records)))
    if not args.write:
        print(rendered)
        return
    document = Path(args.write)
    text = document.read_text(encoding="utf-8")
    if f"<!-- results:{MARKER} -->" not in text:
        raise SystemExit(f"peer_speed: {document}: no <!-- results:{MARKER} --> ... "
                         f"<!-- /results:{MARKER} --> markers")
    try:
        new = fill_markers(text, {MARKER: rendered + "\n"}, str(document))
    except UserError as err:
        raise SystemExit(f"peer_speed: {err}") from err
    if args.check:
        if new != text:
            raise SystemExit(f"peer_speed: {document}: the table differs from the records in "
                             f"{args.records}; run benchmarks/peer_speed.py table "
                             f"{args.records} --write {document}")
        return
    write_text_atomic(document, new)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="write a row's training split for the peers")
    p.add_argument("row", choices=ROWS)
    p.add_argument("--data-root", required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("ours", help="one training epoch of ours; prints the record")
    p.add_argument("row", choices=ROWS)
    p.add_argument("--data-root", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path)
    p.add_argument("--override", dest="overrides", action="append", default=[],
                   help="a further Hydra override, after the row's (repeatable; e.g. "
                   "trainer.limit_train_batches=5 for a quick check)")
    p = sub.add_parser("sitting", help="ours and theirs alternately, every row")
    p.add_argument("--data-root", required=True)
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    p.add_argument("--peer", action="append", default=[],
                   help="ROW=CHECKOUT,PYTHON: the row's public checkout and its interpreter")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="docs/results/peer_speed")
    p = sub.add_parser("table", help="the table from the records")
    p.add_argument("records", help="a folder with records/*.json")
    p.add_argument("--write", help="a Markdown file whose table between the markers to replace")
    p.add_argument("--check", action="store_true", help="with --write: fail if it would change")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.command == "export":
        print(f"{export(args.row, args.data_root, args.out)} examples -> {args.out}")
    elif args.command == "ours":
        record = ours(args.row, args.data_root, args.threads, args.overrides)
        text = json.dumps(record, indent=1)
        print(text)
        if args.out:
            args.out.write_text(text + "\n")
    elif args.command == "sitting":
        sitting(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
