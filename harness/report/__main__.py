"""`python -m harness.report <sweep folder> [--out DIR] [--wandb auto|offline|online|disabled]
[--threshold T] [--no-references] [--format png,pdf,svg] [--dpi N]`."""

import argparse
from pathlib import Path

from harness.report import DPI, FORMATS


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
    formats = f"figure files, comma-separated, of {', '.join(FORMATS)} (default: png)"
    parser.add_argument("--format", default="png", help=formats)
    parser.add_argument("--dpi", type=int, default=DPI, help=f"the PNG's dpi (default {DPI})")
    args = parser.parse_args()
    if args.threshold is not None and not 0 < args.threshold <= 1:
        parser.error(f"--threshold={args.threshold} is invalid: must be in (0, 1]")
    kinds = tuple(dict.fromkeys(k.strip().lower() for k in args.format.split(",")))
    if not kinds or not set(kinds) <= set(FORMATS):
        parser.exit(2, f"error: --format={args.format} is invalid: allowed {', '.join(FORMATS)}\n")
    if not 20 <= args.dpi <= 1200:
        parser.exit(2, f"error: --dpi={args.dpi} is invalid: must be in [20, 1200]\n")
    if not args.sweep.is_dir():
        parser.error(f"sweep={args.sweep} is not a folder")
    from harness.records.record_model import NotARecord
    from harness.report.sweep_report import report  # torch, pandas, matplotlib: after --help

    try:
        references = not args.no_references
        report(args.sweep, args.out, args.wandb, args.threshold, references, kinds, args.dpi)
    except NotARecord as error:
        parser.exit(2, f"error: {error}\n")


if __name__ == "__main__":
    main()
