"""Our runs next to the papers' tables: ``python src/report.py multirun/DATE/TIME-ID``.

Writes ``report.md``, ``report.csv`` and ``report.png`` into the first PATH (or ``--out``) and
prints the Markdown. PATHs are sweep folders, single job folders, or any folder above them.
``--copy-results`` also keeps every job's ``results.json`` in ``OUT/runs/``: the published
report then carries the per-run records it was built from, and rebuilds from them alone.
"""

from __future__ import annotations

import argparse
import sys

from entailment_lab.errors import UserError
from entailment_lab.report import make_report


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, build the report, print it; user errors become one line and exit 1."""
    parser = argparse.ArgumentParser(
        description="Results report: our runs next to the published numbers (Table 2, DIIN, "
                    "DCNN), mean ± std over seeds, one table per data set.")
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="multirun/DATE/TIME-ID, a job folder, or a folder holding them")
    parser.add_argument("--out", metavar="DIR",
                        help="where report.md/.csv/.png go (default: the first PATH)")
    parser.add_argument("--wandb", metavar="ENTITY/PROJECT",
                        help="also read the runs of this W&B project (needs the network)")
    parser.add_argument("--group", metavar="G", help="with --wandb: only runs of this group "
                        "(a sweep's group is its folder name, e.g. 2026-11-21_08-28-03-67949f)")
    parser.add_argument("--no-plot", action="store_true", help="skip report.png")
    parser.add_argument("--copy-results", action="store_true",
                        help="also copy every job's results.json to OUT/runs/ (replacing what "
                        "is there), so that `src/report.py OUT/runs --out OUT` and "
                        "`src/curves.py OUT/runs --out OUT` rebuild the report and curves from OUT "
                        "alone")
    parser.add_argument("--leaderboard", metavar="RESULTS_DIR",
                        help="instead: regenerate the results tables of the documents given "
                        "with --write (between <!-- results:NAME --> markers) from the per-run "
                        "records under RESULTS_DIR/*/runs (docs/results)")
    parser.add_argument("--write", metavar="DOC", nargs="+", default=[],
                        help="with --leaderboard: the documents to update (README.md "
                        "docs/RESULTS.md)")
    parser.add_argument("--check", action="store_true",
                        help="with --leaderboard: change nothing; exit 1 if a document's tables "
                        "differ from what the records give")
    parser.add_argument("--wandb-workspace", metavar="ENTITY/PROJECT",
                        help="instead: build the project's W&B dashboard (every training run, "
                        "grouped by the report's row; mean ± std per row, accuracy vs parameters "
                        "with the paper's points, validation curves, heat maps) and save it to "
                        "this W&B project as a new workspace (needs the network)")
    parser.add_argument("--dry-run", metavar="OUT.json",
                        help="with --wandb-workspace: write the workspace's spec to OUT.json "
                        "instead of saving it (no network)")
    parser.add_argument("--compare-reduced", action="store_true",
                        help="compare runs with a debug preset or a truncated budget (debug=tiny, "
                        "trainer.limit_train_batches=...) with the paper too (default: they get "
                        "rows of their own, marked, without the paper's numbers)")
    args = parser.parse_args(argv)
    if args.leaderboard:
        return _leaderboard(args.leaderboard, args.write, args.check)
    if args.wandb_workspace:
        return _wandb_workspace(args.wandb_workspace, args.dry_run)
    if args.dry_run:
        parser.error("--dry-run goes with --wandb-workspace ENTITY/PROJECT")
    try:
        report = make_report(args.paths, out=args.out, wandb_project=args.wandb,
                             wandb_group=args.group, plot=not args.no_plot,
                             compare_reduced=args.compare_reduced,
                             copy_results=args.copy_results)
    except UserError as err:
        print(f"error: {str(err).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    print(report.markdown, end="")
    print(f"written: {', '.join(str(f) for f in report.files)}", file=sys.stderr)
    return 0


def _leaderboard(results_dir: str, documents: list[str], check: bool) -> int:
    from entailment_lab.report.leaderboard import update_documents

    if not documents:
        print("error: --leaderboard needs the documents to update: --write README.md "
              "docs/RESULTS.md", file=sys.stderr)
        return 1
    try:
        changed = update_documents(results_dir, documents, check=check)
    except UserError as err:
        print(f"error: {str(err).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    if check and changed:
        print(f"error: the results tables of {', '.join(map(str, changed))} differ from the "
              f"records in {results_dir}: run python src/report.py --leaderboard {results_dir} "
              f"--write {' '.join(documents)}", file=sys.stderr)
        return 1
    verb = "up to date" if check else f"{len(changed)} updated"
    print(f"results tables: {verb} ({', '.join(documents)})", file=sys.stderr)
    return 0


def _wandb_workspace(project: str, dry_run: str | None) -> int:
    from entailment_lab.report.dashboard import save_workspace, write_spec

    try:
        if dry_run:
            print(f"workspace spec written: {write_spec(project, dry_run)}", file=sys.stderr)
        else:
            print(f"workspace saved: {save_workspace(project)}", file=sys.stderr)
    except UserError as err:
        print(f"error: {str(err).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
