"""`python -m harness.report <sweep folder> [--out DIR] [--wandb auto|offline|online|disabled]
[--threshold T] [--no-references]`."""

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m harness.report", description="Tables and figures of a sweep folder."
    )
    parser.add_argument("sweep", type=Path, help="a multirun folder (or an outputs/ folder)")
    parser.add_argument("--out", type=Path, default=None, help="default: <sweep>/report")
    modes = ["auto", "offline", "online", "disabled"]
    wandb = "log the report to W&B; auto (default): as the sweep's jobs did"
    parser.add_argument("--wandb", default="auto", choices=modes, help=wandb)
    threshold = "read every load curve at this accuracy (n80 at 0.8); default: the sweep's "
    threshold += "capacity.threshold"
    parser.add_argument("--threshold", type=float, default=None, help=threshold)
    no_references = "leave out the committed references (docs/results/references.txt)"
    parser.add_argument("--no-references", action="store_true", help=no_references)
    args = parser.parse_args()
    if args.threshold is not None and not 0 < args.threshold <= 1:
        parser.error(f"--threshold={args.threshold} is invalid: must be in (0, 1]")
    if not args.sweep.is_dir():
        parser.error(f"sweep={args.sweep} is not a folder")
    from harness.records.record_model import NotARecord
    from harness.report.sweep_report import report  # torch, pandas, matplotlib: after --help

    try:
        report(args.sweep, args.out, args.wandb, args.threshold, not args.no_references)
    except NotARecord as error:
        parser.exit(2, f"error: {error}\n")


if __name__ == "__main__":
    main()
