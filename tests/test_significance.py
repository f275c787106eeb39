"""Paired significance between rows (``report/significance.py``): the statistics on cases
worked by hand (and against SciPy where it is installed), and the table from stored
predictions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from entailment_lab import predictions
from entailment_lab.report.significance import (
    chosen_pairs,
    compare,
    mcnemar_exact,
    paired_bootstrap,
    significance_table,
)


@pytest.mark.parametrize(("b", "c", "p"), [
    (0, 0, 1.0),  # no discordant pair
    (0, 5, 2 / 32),  # P(X = 0) doubled, X ~ Bin(5, 1/2)
    (1, 9, 2 * (1 + 10) / 1024),  # P(X <= 1) doubled, X ~ Bin(10, 1/2)
    (9, 1, 2 * (1 + 10) / 1024),  # symmetric
    (3, 3, 1.0),  # the doubled tail exceeds 1: capped
    (2, 4, 2 * (1 + 6 + 15) / 64),
])
def test_mcnemar_exact_on_hand_computed_cases(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)


def test_mcnemar_exact_equals_scipys_binomial_test():
    stats = pytest.importorskip("scipy.stats")
    for b, c in [(0, 1), (7, 20), (120, 95), (1500, 1400), (40, 2)]:
        assert mcnemar_exact(b, c) == pytest.approx(
            stats.binomtest(min(b, c), b + c, 0.5).pvalue, rel=1e-9)


def test_bootstrap_of_a_constant_difference_has_no_width():
    right = np.ones((3, 50), dtype=bool)
    assert paired_bootstrap(right, ~right) == (100.0, 100.0, 100.0)
    assert paired_bootstrap(right, right) == (0.0, 0.0, 0.0)


def test_bootstrap_interval_of_a_coin_is_the_binomial_quantiles():
    """One run, A right and B wrong on half of 400 examples, equal on the rest: the resampled
    mean difference is Bin(400, 1/2) / 400 points' worth, whose 2.5 % and 97.5 % quantiles
    are 180 and 220 (of 400): 45 and 55 points."""
    a = np.zeros((1, 400), dtype=bool)
    a[0, :200] = True
    delta, low, high = paired_bootstrap(a, np.zeros_like(a))
    assert delta == 50.0
    assert low == pytest.approx(45.0, abs=0.6) and high == pytest.approx(55.0, abs=0.6)
    assert paired_bootstrap(a, np.zeros_like(a)) == (delta, low, high)  # deterministic


def test_bootstrap_agrees_with_resampling_the_examples():
    """The multinomial over d's values against the plain bootstrap (resample example indices,
    every seed's outcome of an example together), and against SciPy's where installed."""
    rng = np.random.default_rng(5)
    a = rng.random((3, 600)) < 0.62
    b = rng.random((3, 600)) < 0.55
    delta, low, high = paired_bootstrap(a, b)
    d = (a.astype(float) - b).mean(0) * 100
    assert delta == pytest.approx(d.mean())
    means = d[rng.integers(0, d.size, (20_000, d.size))].mean(1)
    plain_low, plain_high = np.quantile(means, [0.025, 0.975])
    assert low == pytest.approx(plain_low, abs=0.3) and high == pytest.approx(plain_high, abs=0.3)
    stats = pytest.importorskip("scipy.stats")
    ci = stats.bootstrap((d,), np.mean, n_resamples=20_000, method="percentile",
                         random_state=1).confidence_interval
    assert low == pytest.approx(ci.low, abs=0.3) and high == pytest.approx(ci.high, abs=0.3)


def test_compare_pairs_runs_over_one_test_set():
    gold = np.array([0, 1, 2, 0, 1, 2])
    a = [(gold.copy(), gold)]  # all right
    b = [(np.array([0, 1, 2, 1, 2, 0]), gold)]  # three right
    result = compare(a, b, [1])
    assert result.delta == 50.0 and result.n == 6
    assert result.p_values == pytest.approx((2 / 8,))  # b = 3, c = 0: 2 P(X = 0), Bin(3, 1/2)
    with pytest.raises(ValueError, match="different test sets"):
        compare(a, [(gold, gold[::-1])])
    with pytest.raises(ValueError, match="same positive number"):
        compare(a, [])


# --- the table -------------------------------------------------------------------------------
@dataclass
class _Job:
    folder: str
    seed: int


@dataclass
class _Row:
    data: str
    model: str
    dim: int | None
    jobs: list[_Job] = field(default_factory=list)
    train_size: int | None = None
    hypothesis_only: bool = False
    flags: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.model + (f" d={self.dim}" if self.dim else "")

    @property
    def tests(self) -> list[float]:
        return [0.0] * len(self.jobs)


GOLD = np.tile([0, 1, 2], 40)  # 120 test pairs


def _row(tmp: Path, model: str, dim: int | None, right: list[float] | None) -> _Row:
    """A row of three seeds; ``right``: each seed's share of correct answers (the first
    examples right), ``None``: records without predictions."""
    row = _Row("snli_dev2test", model, dim)
    for seed in (1, 2, 3):
        folder = tmp / f"{model}{dim}" / str(seed)
        folder.mkdir(parents=True)
        record = {"status": "completed"}
        if right is not None:
            predicted = GOLD.copy()
            wrong = slice(int(right[seed - 1] * len(GOLD)), None)
            predicted[wrong] = (predicted[wrong] + 1) % 3
            record["predictions"] = {"test": predictions.entry(predicted, GOLD)}
        (folder / "results.json").write_text(json.dumps(record))
        row.jobs.append(_Job(str(folder), seed))
    return row


def test_the_table_compares_the_chosen_pairs(tmp_path):
    rows = [_row(tmp_path, "din1", 400, [0.5, 0.5, 0.5]),
            _row(tmp_path, "din2", 400, [0.75, 0.75, 0.75]),
            _row(tmp_path, "lstm", 128, [0.5, 0.5, 0.5]),
            _row(tmp_path, "lexical", None, None),
            _Row("snli_dev2test", "lstm", 128, hypothesis_only=True)]
    pairs = [(a.label, b.label) for a, b in chosen_pairs(rows, "snli_dev2test")]
    assert pairs == [("din2 d=400", "din1 d=400"), ("din1 d=400", "lstm d=128"),
                     ("din2 d=400", "lstm d=128"), ("din1 d=400", "lexical"),
                     ("din2 d=400", "lexical"), ("lstm d=128", "lexical")]
    table = significance_table(rows, ["snli_dev2test"])
    lines = {tuple(c.strip() for c in line.split("|")[2:4]): line for line in table.splitlines()
             if line.startswith("| snli")}
    # DIN-2 right on the first 75 %, DIN-1 on the first 50 %: +25 points, B never right alone
    assert "| +25.0 |" in lines[("din2 d=400", "din1 d=400")]
    assert "< 0.0001 (3 of 3 below 0.05) | 3 × 120 |" in lines[("din2 d=400", "din1 d=400")]
    same = lines[("din1 d=400", "lstm d=128")]
    assert "| +0.0 | [+0.0, +0.0] | 1.00 (0 of 3 below 0.05) |" in same
    assert "no stored predictions (lexical)" in lines[("lstm d=128", "lexical")]
    assert significance_table(rows, ["sick"]).startswith("No pairs")
