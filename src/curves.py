"""Validation curves and the learning curve of finished runs: ``python src/curves.py PATH...``.

Reads every ``results.json`` below the PATHs and writes ``validation_curves.png`` (validation
accuracy per epoch of each run: the evidence for an epoch budget) and, for runs that differ in
``data.train_size``, ``learning_curve.png`` + ``learning_curve.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from entailment_lab.curves import (
    load_runs,
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
    try:
        runs = load_runs(args.paths)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if runs.empty:
        print(f"error: no completed training run (results.json) under {args.paths}",
              file=sys.stderr)
        return 1
    out = Path(args.out)
    written = [plot_validation_curves(runs, out)]
    if args.learning_curve:
        written += [plot_learning_curve(runs, out), write_learning_curve_markdown(runs, out)]
    print(f"{len(runs)} runs; written: {', '.join(map(str, written))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
