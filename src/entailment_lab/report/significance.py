"""Paired significance between rows of the results tables, from the runs' stored predictions.

The tables give mean ± std over seeds; whether the gap between two rows is larger than the
test set's sampling noise is a paired question: both rows answered the same test pairs. For
chosen pairs of rows on one protocol (each DIN size against its DIN-1/DIN-2 sibling, each model
against the LSTM and the lexical floor) this module gives, from each run's test predictions
(``predictions.py``; runs made before they were recorded say so):

* **Δ**: row A's accuracy minus row B's, in points, over the test pairs of their runs paired
  by seed, pooled (seed s of A with seed s of B; seeds only one row has are left out);
* **95 % interval**: a percentile bootstrap over test *examples* (Koehn 2004; Dror et al.
  2018): an example's outcomes under every paired seed are resampled together, so the
  interval is that of the test set's sampling, not of the seeds (the seeds' spread is the
  tables' std). Each example contributes ``d_i``, the mean over the paired seeds of
  (A right) − (B right); d takes at most 2k + 1 values for k seeds, so drawing the counts of
  those values from a multinomial is the same distribution as resampling the examples, and
  cheap. ``RESAMPLES`` draws from ``numpy.random.default_rng(SEED)``: the table is the same
  on every regeneration;
* **McNemar's p**: the exact two-sided test (binomial on the discordant pairs, the smaller
  tail doubled, capped at 1; no chi-square approximation, no continuity correction), one test
  per seed pair, because the pooled pairs repeat each example k times and are not
  independent. The cell gives the largest p over the seed pairs and how many are below 0.05.

The interface is small and pure: ``significance_table(rows, protocols)`` takes the results
tables' rows (objects with ``data``, ``model``, ``dim``, ``label``, ``train_size``,
``hypothesis_only``, ``flags``, ``tests`` and ``jobs``, each job with ``folder`` and
``seed``), reads each job's ``results.json`` for its predictions, and returns Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from entailment_lab import predictions
from entailment_lab.results import RESULTS_FILE, read_results

RESAMPLES = 10_000
SEED = 0
LEVEL = 0.95
#: The rows every model is compared with: (name in the table, model, dim).
BASELINES = (("LSTM", "lstm", 128), ("lexical floor", "lexical", None))
DIN_SIBLINGS = ("din1", "din2")


class _Job(Protocol):
    folder: str
    seed: int | None


class _Row(Protocol):
    data: str
    model: str
    dim: int | None
    train_size: int | None
    hypothesis_only: bool
    jobs: Sequence[Any]

    @property
    def label(self) -> str: ...
    @property
    def flags(self) -> list[str]: ...
    @property
    def tests(self) -> list[float]: ...


# --- the statistics ------------------------------------------------------------------------
def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p for ``b`` pairs only A got right and ``c`` only B got right:
    ``min(1, 2 P(X <= min(b, c)))`` with X ~ Binomial(b + c, 1/2); 1 when no pair differs."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
            for i in range(k + 1)]
    top = max(logs)
    tail = math.exp(top) * sum(math.exp(v - top) for v in logs)
    return min(1.0, 2.0 * tail)


@dataclass(frozen=True)
class Paired:
    """The comparison of two rows over their runs paired by seed."""

    seeds: tuple[int | None, ...]  # the paired seeds
    n: int  # test examples of one run
    delta: float  # A − B, accuracy points, pooled over the paired runs
    low: float  # the bootstrap interval, points
    high: float
    p_values: tuple[float, ...]  # McNemar's exact p per seed pair


def paired_bootstrap(a_right: np.ndarray, b_right: np.ndarray, resamples: int = RESAMPLES,
                     seed: int = SEED, level: float = LEVEL) -> tuple[float, float, float]:
    """(Δ, low, high) in points for boolean (k runs, n examples) arrays of A's and B's correct
    answers, run i of A paired with run i of B: Δ the pooled difference of accuracies, and its
    ``level`` percentile interval over ``resamples`` resamplings of the n examples (each
    example's k outcomes together)."""
    a_right, b_right = np.atleast_2d(a_right), np.atleast_2d(b_right)
    if a_right.shape != b_right.shape or a_right.shape[1] == 0:
        raise ValueError(f"paired outcomes must have one non-empty shape, got {a_right.shape} "
                         f"and {b_right.shape}")
    k, n = a_right.shape
    # per example: the number of paired seeds where A alone minus where B alone was right
    d = (a_right.astype(np.int64) - b_right.astype(np.int64)).sum(0)
    values, counts = np.unique(d, return_counts=True)
    draws = np.random.default_rng(seed).multinomial(n, counts / n, size=resamples)
    means = draws @ values / (n * k) * 100.0
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(d.sum() / (n * k) * 100.0), float(low), float(high)


def compare(a: Sequence[tuple[np.ndarray, np.ndarray]], b: Sequence[tuple[np.ndarray,
            np.ndarray]], seeds: Sequence[int | None] = ()) -> Paired:
    """Compare paired runs: ``a[i]`` and ``b[i]`` are one seed's ``(predicted, gold)`` of each
    row, over the same test examples (the gold ids must agree)."""
    if not a or len(a) != len(b):
        raise ValueError(f"need the same positive number of runs on each side, got {len(a)} "
                         f"and {len(b)}")
    for (_, gold_a), (_, gold_b) in zip(a, b, strict=True):
        if gold_a.shape != gold_b.shape or not np.array_equal(gold_a, gold_b):
            raise ValueError("the paired runs were tested on different test sets (gold labels "
                             "differ)")
    a_right = np.stack([p == g for p, g in a])
    b_right = np.stack([p == g for p, g in b])
    delta, low, high = paired_bootstrap(a_right, b_right)
    p_values = tuple(mcnemar_exact(int((x & ~y).sum()), int((~x & y).sum()))
                     for x, y in zip(a_right, b_right, strict=True))
    return Paired(tuple(seeds) or tuple(range(len(a))), a_right.shape[1], delta, low, high,
                  p_values)


# --- rows and runs ---------------------------------------------------------------------------
def _predictions(job: _Job) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        return predictions.read(read_results(Path(job.folder) / RESULTS_FILE))
    except ValueError:
        return None


def _runs(row: _Row) -> dict[int | None, tuple[np.ndarray, np.ndarray]]:
    """The row's runs that stored test predictions, by seed."""
    found = {}
    for job in row.jobs:
        stored = _predictions(job)
        if stored is not None:
            found.setdefault(job.seed, stored)
    return found


def primary_rows(rows: Iterable[_Row], data: str) -> dict[tuple[str, int | None], _Row]:
    """(model, dim) -> the row of the model's own settings on ``data``'s whole training set:
    no extra knob, not hypothesis-only, full budget; of several, the one of today's protocol
    (not ended by early stopping) with the most runs (the README headline's rule)."""
    chosen: dict[tuple[str, int | None], _Row] = {}
    candidates = [r for r in rows if r.data == data and r.train_size is None
                  and "`" not in r.label and not r.hypothesis_only
                  and not any(f.startswith("reduced") for f in r.flags)]
    candidates.sort(key=lambda r: (any("early stopping" in f for f in r.flags), -len(r.tests)))
    for row in candidates:
        chosen.setdefault((row.model, row.dim), row)
    return chosen


def chosen_pairs(rows: Iterable[_Row], data: str) -> list[tuple[_Row, _Row]]:
    """(A, B) pairs on ``data``: DIN-2 against DIN-1 of each size, then every row against each
    of ``BASELINES`` in turn (A the row, B the baseline; a baseline against a later one, the
    LSTM against the lexical floor, once)."""
    primary = primary_rows(rows, data)
    ordered = sorted(primary.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))
    din1, din2 = DIN_SIBLINGS
    pairs = [(row, primary[(din1, dim)]) for (model, dim), row in ordered
             if model == din2 and (din1, dim) in primary]
    keys = [(model, dim) for _, model, dim in BASELINES]
    for i, key in enumerate(keys):
        if key in primary:
            pairs += [(row, primary[key]) for k, row in ordered if k not in keys[i:]]
    return pairs


def _p(value: float) -> str:
    return "< 0.0001" if value < 1e-4 else f"{value:.2g}" if value < 0.1 else f"{value:.2f}"


def _cell(row_a: _Row, row_b: _Row) -> list[str]:
    runs_a, runs_b = _runs(row_a), _runs(row_b)
    missing = [r.label for r, runs in ((row_a, runs_a), (row_b, runs_b)) if not runs]
    if missing:
        return [f"no stored predictions ({', '.join(missing)})", "–", "–", "–"]
    seeds = sorted(set(runs_a) & set(runs_b), key=lambda s: (s is None, s or 0))
    if not seeds:
        return ["no runs of one seed on both sides", "–", "–", "–"]
    try:
        result = compare([runs_a[s] for s in seeds], [runs_b[s] for s in seeds], seeds)
    except ValueError as err:
        return [str(err), "–", "–", "–"]
    below = sum(p < 0.05 for p in result.p_values)
    return [f"{result.delta:+.1f}", f"[{result.low:+.1f}, {result.high:+.1f}]",
            f"{_p(max(result.p_values))} ({below} of {len(seeds)} below 0.05)",
            f"{len(seeds)} × {result.n:,}"]


def significance_table(rows: Iterable[_Row], protocols: Sequence[str]) -> str:
    """The paired comparisons of ``protocols``' chosen row pairs (data names, in order; the
    README headline's, ``protocols.yaml``) as Markdown (``CAPTION``)."""
    rows = list(rows)
    lines = ["| data | A | B | Δ (A − B, points) | 95 % interval | McNemar p (largest over "
             "seeds) | paired runs × test pairs |", "|---|---|---|---|---|---|---|"]
    for data in protocols:
        for row_a, row_b in chosen_pairs(rows, data):
            lines.append(f"| {data} | {row_a.label} | {row_b.label} | "
                         + " | ".join(_cell(row_a, row_b)) + " |")
    if len(lines) == 2:
        return "No pairs of rows with per-run records on these protocols yet.\n"
    return CAPTION + "\n\n" + "\n".join(lines) + "\n"


CAPTION = (f"Paired comparisons over the same test pairs, from each run's stored test "
           f"predictions: Δ is A's accuracy minus B's over the runs paired by seed (pooled); "
           f"the {LEVEL * 100:.0f} % interval is a percentile bootstrap over test examples ("
           f"{RESAMPLES:,} resamples, seed {SEED}; an example's outcomes under every paired "
           "seed resampled together); McNemar's p is the exact two-sided test on one seed "
           "pair's discordant pairs, the largest over the seed pairs with how many fall below "
           "0.05. A row's runs are those of its line in the protocol's table above; "
           "\"no stored predictions\": runs made before runs recorded them "
           "(`report/significance.py`).")
