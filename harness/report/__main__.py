"""`python -m harness.report <sweep folder> [--out DIR] [--wandb auto|offline|online|disabled]`."""

import argparse
from pathlib import Path

from harness.report import report


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m harness.report", description="Tables and figures of a sweep folder."
    )
    parser.add_argument("sweep", type=Path, help="a multirun folder (or an outputs/ folder)")
    parser.add_argument("--out", type=Path, default=None, help="default: <sweep>/report")
    parser.add_argument(
        "--wandb",
        default="auto",
        choices=["auto", "offline", "online", "disabled"],
        help="log the report to W&B; auto (default): as the sweep's jobs did",
    )
    args = parser.parse_args()
    if not args.sweep.is_dir():
        parser.error(f"sweep={args.sweep} is not a folder")
    report(args.sweep, args.out, args.wandb)


if __name__ == "__main__":
    main()
