"""Each run's test predictions, stored compactly in its ``results.json``: what paired tests need.

A test loop records, for every test set (``test``, ``test_mismatched``, an extra test file),
the predicted and the gold class id of each example in the order of the set as the DataModule
holds it: the file's rows in file order, less the rows without a gold label (SNLI's ``-``),
which the DataModule drops. The batches are bucketed by length, so each batch carries its
examples' row numbers (``data.batching.ROW_KEY``) and the module puts every prediction back in
its row (``ClassifierModule.predictions``).

Encoding (``ENCODING``): one unsigned byte per example (the class id in ``labels`` order),
compressed with zlib and written as base64 text. SNLI test, 9,824 pairs, takes at most 3.4 kB a
sequence; the gold ids are stored beside the predictions, so a record is checked (its
confusion matrix) and two records are paired (the same gold sequence) without the data.

``results.json``::

    "predictions": {"test": {"encoding": "uint8-zlib-base64", "n": 9824,
                             "predicted": "eJz...", "gold": "eJz...",
                             "source": "test loop"}}

A run made before predictions were recorded gets them afterwards from its best checkpoint::

    python src/add_predictions.py RUN_FOLDER [RUN_FOLDER ...] [--checkpoint CKPT]
                                  [data.files.test=PATH ...]

which tests the checkpoint again, refuses to write when the predictions' confusion matrix
differs from the one the run recorded (another test set, or other numerics), and marks the
entry ``"source": "added afterwards from its checkpoint"`` with the checkpoint, the time and
the code (``added``).
"""

from __future__ import annotations

import argparse
import base64
import logging
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from entailment_lab.errors import UserError
from entailment_lab.results import RESULTS_FILE, code_version, read_results, write_json_atomic

log = logging.getLogger(__name__)

ENCODING = "uint8-zlib-base64"
TEST_LOOP = "test loop"
ADDED = "added afterwards from its checkpoint"


def encode_ids(ids: Sequence[int] | np.ndarray) -> str:
    """Class ids (0–255) as base64 text of their zlib-compressed bytes (``ENCODING``)."""
    array = np.asarray(ids)
    if array.size and (array.min() < 0 or array.max() > 255):
        raise ValueError(f"class ids must lie in 0..255 to be stored one byte each, got "
                         f"{int(array.min())}..{int(array.max())}")
    raw = array.astype(np.uint8).tobytes()
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def decode_ids(text: str, n: int | None = None) -> np.ndarray:
    """The class ids ``encode_ids`` stored (int64); ``n``: the count the entry declares."""
    ids = np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=np.uint8).astype(np.int64)
    if n is not None and len(ids) != n:
        raise ValueError(f"stored predictions decode to {len(ids)} ids, the entry says {n}")
    return ids


def entry(predicted: Sequence[int] | np.ndarray, gold: Sequence[int] | np.ndarray,
          source: str = TEST_LOOP, **extra: Any) -> dict[str, Any]:
    """One test set's ``predictions`` entry (``results.json``)."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} gold labels")
    return {"encoding": ENCODING, "n": len(gold), "predicted": encode_ids(predicted),
            "gold": encode_ids(gold), "source": source, **extra}


def read(record: dict[str, Any], split: str = "test") -> tuple[np.ndarray, np.ndarray] | None:
    """``(predicted, gold)`` of ``split`` in a results record, ``None`` where it has none."""
    stored = (record.get("predictions") or {}).get(split)
    if not stored:
        return None
    if stored.get("encoding") != ENCODING:
        raise ValueError(f"predictions of {split!r}: unknown encoding {stored.get('encoding')!r}"
                         f" (this code reads {ENCODING!r})")
    n = stored.get("n")
    return decode_ids(stored["predicted"], n), decode_ids(stored["gold"], n)


def confusion(predicted: np.ndarray, gold: np.ndarray, num_classes: int) -> list[list[int]]:
    """Rows gold, columns predicted, as ``test_confusion_matrix`` in ``results.json``."""
    counts = np.bincount(gold * num_classes + predicted, minlength=num_classes * num_classes)
    return counts.reshape(num_classes, num_classes).tolist()


# --- adding predictions to a run made without them --------------------------------------------
def _best_checkpoint(run: Path, record: dict[str, Any], given: str | None) -> Path:
    """The checkpoint to test: ``given``, else the record's ``best_checkpoint`` (as recorded,
    relative to where the run was started, or under the run's own ``checkpoints/``)."""
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise UserError(f"--checkpoint {given}: no such file")
        return path
    recorded = record.get("best_checkpoint")
    if not recorded:
        raise UserError(f"{run / 'results.json'}: no best_checkpoint recorded; give --checkpoint")
    for path in (Path(recorded).expanduser(), run / "checkpoints" / Path(recorded).name):
        if path.is_file():
            return path
    raise UserError(f"{run / 'results.json'}: its best checkpoint {recorded} is neither there "
                    f"nor in {run / 'checkpoints'}; give --checkpoint PATH")


def test_checkpoint(ckpt: Path, data_overrides: dict[str, Any]
                    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Test ``ckpt`` on its test split (its own data config, ``data_overrides`` merged over
    it) and return ``(predicted, gold, label_names)`` in the order of the split."""
    import lightning as L

    from entailment_lab.pipeline import load_trained

    module, datamodule, _ = load_trained(ckpt, data_overrides)
    datamodule.setup("test")
    module.group_names = datamodule.group_names_of("test")
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.test(module, dataloaders=datamodule.dataloader("test"), verbose=False)
    stored = module.predictions.get("test")
    if stored is None:
        raise UserError(f"{ckpt}: the test loop recorded no predictions (not every test "
                        "example was evaluated)")
    return stored[0], stored[1], list(module.label_names)


def add_to_run(run: str | Path, checkpoint: str | None = None,
               data_overrides: dict[str, Any] | None = None) -> Path:
    """Test a finished run's best checkpoint again and write its test predictions into its
    ``results.json`` (marked as added afterwards). Refuses, changing nothing, when the
    predictions' confusion matrix differs from the one the run recorded."""
    run = Path(run)
    path = run / RESULTS_FILE if run.is_dir() else run
    run = path.parent
    record = read_results(path)
    if record.get("status") in ("missing", "unreadable"):
        raise UserError(f"{record['error']}; give a run folder (the one holding its "
                        f"{RESULTS_FILE}) or its {RESULTS_FILE}")
    if record.get("status") != "completed":
        raise UserError(f"{path}: status {record.get('status')!r}; predictions are added to "
                        "completed runs only")
    ckpt = _best_checkpoint(run, record, checkpoint)
    predicted, gold, labels = test_checkpoint(ckpt, data_overrides or {})
    recorded = record.get("test_confusion_matrix")
    got = confusion(predicted, gold, len(labels))
    if recorded is None:
        raise UserError(f"{path}: no test_confusion_matrix recorded, so the predictions of "
                        f"{ckpt} cannot be checked against the run's test")
    if got != recorded:
        raise UserError(f"{path}: the predictions of {ckpt} give the confusion matrix {got}, "
                        f"the run recorded {recorded} (another test file, or other numerics); "
                        "nothing written")
    added = {"checkpoint": str(ckpt), "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "code": code_version()}
    record.setdefault("predictions", {})["test"] = entry(predicted, gold, ADDED, added=added)
    write_json_atomic(path, record)
    return path


def main(argv: list[str] | None = None) -> int:
    """``src/add_predictions.py``: add test predictions to finished runs from their best
    checkpoints; a user error is one line and exit 1."""
    parser = argparse.ArgumentParser(
        description="Add test predictions (for paired significance tests) to finished runs "
                    "made before runs recorded them: test each run's best checkpoint again, "
                    "check the predictions against the run's confusion matrix, write them into "
                    "its results.json.")
    parser.add_argument("items", nargs="+", metavar="RUN | data.KEY=VALUE",
                        help="run folders (or their results.json) with a completed test; "
                        "data settings over the checkpoints' own (e.g. data.files.test=PATH "
                        "where a run's relative paths do not resolve from here)")
    parser.add_argument("--checkpoint", metavar="CKPT",
                        help="the checkpoint to test (one RUN only; default: the run's "
                        "best_checkpoint, as recorded or under RUN/checkpoints/)")
    args = parser.parse_args(argv)
    overrides = [a for a in args.items if "=" in a]
    runs = [a for a in args.items if "=" not in a]
    if not runs:
        parser.error("give at least one RUN folder")
    if args.checkpoint and len(runs) != 1:
        parser.error("--checkpoint goes with one RUN")
    try:
        data = _data_overrides(overrides)
        for run in runs:
            written = add_to_run(run, args.checkpoint, data)
            print(f"predictions added: {written}", file=sys.stderr)
    except UserError as err:
        print(f"error: {str(err).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


def _data_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``data.files.test=PATH`` ... as a nested dict under ``data`` (values parsed as YAML)."""
    from omegaconf import OmegaConf

    dotted = []
    for item in items:
        key = item.partition("=")[0]
        if not key.startswith("data."):
            raise UserError(f"{item}: only data settings (data.KEY=VALUE) can be overridden")
        dotted.append(item.removeprefix("data."))
    return OmegaConf.to_container(OmegaConf.from_dotlist(dotted)) if dotted else {}
