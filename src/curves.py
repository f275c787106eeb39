"""Validation curves and the learning curve of finished runs: ``python src/curves.py PATH...``.

Reads every ``results.json`` below the PATHs, groups the runs into the report's rows, and
writes ``validation_curves.png`` (validation accuracy per epoch of each run, a panel a row: the
evidence for an epoch budget) and, with ``--learning-curve``, for settings run on smaller
training sets (``data.train_size``), ``learning_curve.png`` + ``learning_curve.md`` into
``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from entailment_lab.curves import (
    learning_curve_table,
    load_rows,
    plot_learning_curve,
    plot_validation_curves,
    write_learning_curve_markdown,
)
from entailment_lab.errors import UserError


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, draw what the runs allow; a folder without runs is one error line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="run or sweep folders")
    parser.add_argument("--out", metavar="DIR", required=True, help="where the files go")
    parser.add_argument("--learning-curve", action="store_true",
                        help="also draw test accuracy against data.train_size")
    args = parser.parse_args(argv)
    try:  # every check before the first file is written
        rows = load_rows(args.paths)
        if not rows:
            raise UserError(f"no completed training run (results.json) under {args.paths}")
        if args.learning_curve and learning_curve_table(rows).empty:
            raise UserError("--learning-curve: no setting has completed runs on smaller "
                            "training sets (data.train_size=N) below the PATHs")
        out = Path(args.out)
        written = [plot_validation_curves(rows, out)]
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.learning_curve:
        written += [plot_learning_curve(rows, out), write_learning_curve_markdown(rows, out)]
    runs = sum(len(row.jobs) for row in rows)
    print(f"{runs} runs in {len(rows)} rows; written: {', '.join(map(str, written))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
