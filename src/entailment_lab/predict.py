"""Predictions for your own pairs (``src/predict.py``): a file of pairs, or one pair.

Rows are read lazily (``data.sources.read_rows``, the platform's one local-file reader: JSON
Lines, CSV, TSV, optionally gzipped, or Parquet), read into ids by the checkpoint's own input
transform (``data/transform.py``: the run's lower-casing, hypothesis-only switch, vocabulary
with ``<unk>`` for unknown words, truncation at its ``max_length``, an empty sentence as one
``<unk>``: what training, eval and explain apply), predicted ``batch_size`` rows at a time, and
written in input order with the input's own fields plus ``prediction`` and the class
probabilities. Every row is predicted, those without a gold label (``-``) too. The output is
filled as a temporary file and renamed at the end: a failure leaves no half-written output. A
bad line stops the run with one line that names it.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import IO, Any

import torch
from omegaconf import DictConfig

from entailment_lab.config import check_config
from entailment_lab.data.sources import Row, file_format, open_text, read_rows
from entailment_lab.data.transform import InputTransform
from entailment_lab.errors import ConfigError, DataError
from entailment_lab.module import ClassifierModule
from entailment_lab.pipeline import load_trained

log = logging.getLogger(__name__)

PREDICTION, PROBABILITIES = "prediction", "probabilities"
_DELIMITERS = {"csv": ",", "tsv": "\t"}

# --- files ---------------------------------------------------------------------------------
# Rows are read by the one local-file reader (``data.sources``: ``file_format``, ``read_rows``).
_WRITABLE = ("jsonl", "csv", "tsv")


def output_format(path: str | os.PathLike) -> str:
    """``jsonl``, ``csv`` or ``tsv``: what ``RowWriter`` writes for ``path``'s name."""
    fmt = file_format(path, "output").name
    if fmt not in _WRITABLE:
        raise ConfigError(f"output: '{path}' is a .{fmt} file; predictions are written as "
                          ".jsonl, .csv or .tsv (optionally .gz)")
    return fmt


@contextmanager
def atomic_output(path: Path) -> Iterator[IO[str]]:
    """A text file that appears at ``path`` only once the block completes (gzip for ``.gz``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open_text(tmp, "w") as f:
            yield f
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


class RowWriter:
    """Writes input rows with their prediction: JSON Lines (``probabilities`` as an object) or
    CSV/TSV (one ``prob_<label>`` column per class; the columns of the first row)."""

    def __init__(self, f: IO[str], fmt: str, label_names: Sequence[str]) -> None:
        self.f, self.fmt, self.label_names = f, fmt, list(label_names)
        self.csv = csv.writer(f, delimiter=_DELIMITERS[fmt], lineterminator="\n") \
            if fmt in _DELIMITERS else None
        self.columns: list[str] | None = None

    def write(self, row: Mapping[str, Any], probs: Sequence[float], where: str) -> str:
        """Write one row; returns its predicted label."""
        for key in (PREDICTION, PROBABILITIES):
            if key in row:
                raise DataError(f"{where}: the input already has a field '{key}', which "
                                "predict.py writes; rename that field")
        predicted = prediction(probs, self.label_names)
        if self.csv is None:
            self.f.write(json.dumps({**row, **predicted}, ensure_ascii=False) + "\n")
            return predicted[PREDICTION]
        if self.columns is None:
            self.columns = list(row)
            self.csv.writerow([*self.columns, PREDICTION,
                               *(f"prob_{name}" for name in self.label_names)])
        extra = [key for key in row if key not in self.columns]
        if extra:
            raise DataError(f"{where}: field(s) {extra} are not among the first row's "
                            f"{self.columns}; a {self.fmt.upper()} output needs the same fields "
                            "on every row (write .jsonl instead)")
        self.csv.writerow([_cell(row.get(c, "")) for c in self.columns]
                          + [predicted[PREDICTION], *predicted[PROBABILITIES].values()])
        return predicted[PREDICTION]


def prediction(probs: Sequence[float], label_names: Sequence[str]) -> dict[str, Any]:
    """``{"prediction": label, "probabilities": {label: p}}`` (rounded to 6 digits)."""
    best = max(range(len(probs)), key=probs.__getitem__)
    return {PREDICTION: label_names[best],
            PROBABILITIES: {name: round(p, 6) for name, p in zip(label_names, probs, strict=True)}}


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# --- the model -----------------------------------------------------------------------------
class Predictor:
    """A trained module with its input transform: texts in, class probabilities out."""

    def __init__(self, module: ClassifierModule, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self.module = module.to(self.device).eval()
        self.transform = InputTransform.of_checkpoint(module.metadata)
        self.transform.announce()
        self.keys = list(self.transform.keys)
        # the inputs a user gives: a hypothesis-only run's premise is emptied before the
        # network sees it, so a file or a command line may leave it out
        self.reads = [k for k in self.keys
                      if not (self.transform.hypothesis_only and k == "premise")]
        self.label_names = list(module.label_names)
        self.counts: Counter[str] = Counter()  # truncated / empty sentences, per key

    @torch.no_grad()
    def probabilities(self, texts: Sequence[Mapping[str, str]]) -> list[list[float]]:
        """Class probabilities of each ``{key: text}`` (keys: ``self.reads``; the others are
        read as empty)."""
        transform = self.transform
        indexed = transform.ids(transform.tokens({k: [t.get(k, "") for t in texts]
                                                  for k in self.keys}))
        for key in self.keys:
            lengths = indexed[f"{key}_length"]
            self.counts[f"{key}_truncated"] += sum(n > transform.max_length for n in lengths)
            self.counts[f"{key}_empty"] += lengths.count(0)
        batch = {k: v.to(self.device) for k, v in transform.tensors(indexed).items()}
        logits = self.module(batch)["logits"]
        return torch.softmax(logits.float(), dim=-1).cpu().tolist()

    def report(self) -> None:
        """Log truncated and empty sentences, as training does."""
        for key in self.keys:
            if self.counts[f"{key}_truncated"]:
                log.warning("%d %s sentence(s) longer than data.max_length=%d tokens were "
                            "truncated", self.counts[f"{key}_truncated"], key,
                            self.transform.max_length)
            if self.counts[f"{key}_empty"] and not self.transform.empty_is_expected(key):
                log.warning("%d empty %s sentence(s) were read as one <unk> token",
                            self.counts[f"{key}_empty"], key)


def _text(row: Mapping[str, Any], key: str, candidates: Sequence[str], where: str) -> str:
    column = next((c for c in candidates if c in row), None)
    if column is None:
        raise DataError(f"{where}: no field {' or '.join(map(repr, candidates))} (it has "
                        f"{', '.join(map(repr, row)) or 'none'}); name the {key} column with "
                        f"fields.{key}=NAME")
    value = row[column]
    if not isinstance(value, str):
        raise DataError(f"{where}: field '{column}' is {json.dumps(value)[:40]}, not text")
    return value


def _batches(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    it = iter(rows)
    while chunk := list(islice(it, size)):
        yield chunk


def predict_file(predictor: Predictor, input_path: str | os.PathLike,
                 output_path: str | os.PathLike, columns: Mapping[str, Sequence[str]],
                 batch_size: int = 256) -> Counter[str]:
    """Predict every row of ``input_path`` into ``output_path`` (formats from the names);
    ``columns`` maps each input key to the field names that may hold it. Returns the number
    of predictions per label."""
    source, output = Path(input_path).expanduser(), Path(output_path).expanduser()
    counts: Counter[str] = Counter()
    with atomic_output(output) as f:
        writer = RowWriter(f, output_format(output), predictor.label_names)
        for chunk in _batches(read_rows(source), batch_size):
            texts = [{key: _text(row, key, columns[key], f"{source} line {lineno}")
                      for key in predictor.reads} for lineno, row in chunk]
            for (lineno, row), probs in zip(chunk, predictor.probabilities(texts), strict=True):
                counts[writer.write(row, probs, f"{source} line {lineno}")] += 1
    predictor.report()
    return counts


# --- the task ------------------------------------------------------------------------------
def _columns(cfg: DictConfig, run_cfg: DictConfig, keys: Sequence[str]) -> dict[str, list[str]]:
    """Input field names per key: ``fields.<key>`` if set, else the key itself, then the
    column(s) the run was trained on (``data.fields``)."""
    columns = {}
    for key in keys:
        given = (cfg.get("fields") or {}).get(key)
        if given:
            columns[key] = [str(given)]
            continue
        trained = (run_cfg.data.get("fields") or {}).get(key) or []
        trained = [trained] if isinstance(trained, str) else list(trained)
        columns[key] = list(dict.fromkeys([key, *trained]))
    return columns


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise ConfigError(f"device={name!r}: {err}; use cpu, cuda or auto") from None


def predict(cfg: DictConfig) -> dict[str, Any]:
    """``src/predict.py``: predict ``cfg.input`` into ``cfg.output``, or one pair given as
    ``premise=`` / ``hypothesis=`` (``sentence=`` for a sentence model), printed as JSON."""
    check_config(cfg)
    given = {k: str(cfg[k]) for k in ("premise", "hypothesis", "sentence")
             if cfg.get(k) is not None}
    if cfg.get("input") and given:
        raise ConfigError(f"give input=FILE or one pair ({', '.join(given)}=...), not both")
    if not cfg.get("input") and not given:
        raise ConfigError("give input=FILE (.jsonl, .csv or .tsv) or one pair as premise=... "
                          "hypothesis=... (sentence=... for a sentence model)")
    if cfg.get("batch_size", 1) < 1:
        raise ConfigError(f"batch_size must be >= 1, got {cfg.batch_size}")
    output = cfg.get("output")
    if cfg.get("input"):
        source = Path(cfg.input).expanduser()
        fmt = file_format(source, "input").name
        if not source.is_file():
            raise DataError(f"input: no such file '{source}'")
        fmt = fmt if fmt in _WRITABLE else "jsonl"  # predictions of a .parquet file: JSON Lines
        output = Path(output or Path(cfg.paths.output_dir) / f"predictions.{fmt}").expanduser()
        if output.resolve() == source.resolve():
            raise ConfigError("output: the same file as input; write the predictions elsewhere")
    if output:
        output_format(output)
    device = _device(str(cfg.get("device", "cpu")))

    module, _, run_cfg = load_trained(cfg.ckpt_path)
    predictor = Predictor(module, device)
    if given:
        return _predict_one(predictor, given, output)
    columns = _columns(cfg, run_cfg, predictor.keys)
    counts = predict_file(predictor, source, output, columns, int(cfg.batch_size))
    log.info("%d predictions written to %s (%s)", sum(counts.values()), output,
             ", ".join(f"{name} {counts[name]}" for name in predictor.label_names))
    return {"rows": sum(counts.values()), "output": str(output), "counts": dict(counts)}


def _predict_one(predictor: Predictor, given: dict[str, str], output: Path | None
                 ) -> dict[str, Any]:
    if not set(predictor.reads) <= set(given) <= set(predictor.keys):
        reads = " and ".join(predictor.reads)
        only = " (a hypothesis-only run: the premise is not read)" \
            if predictor.reads != predictor.keys else ""
        raise ConfigError(f"this checkpoint's {type(predictor.module.net).__name__} reads "
                          f"{reads}{only}: give " + " ".join(f"{k}=..." for k in predictor.reads))
    probs = predictor.probabilities([given])[0]
    if output:
        with atomic_output(output) as f:
            RowWriter(f, output_format(output), predictor.label_names).write(
                given, probs, "the pair")
    predictor.report()
    result = {**given, **prediction(probs, predictor.label_names)}
    print(json.dumps(result, ensure_ascii=False))
    return result

