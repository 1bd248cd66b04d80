"""Does the capacity law's interval cover what it claims? `python -m studies.law_coverage`.

Simulated sweeps read as the capacity protocol reads them (docs/background.md, "The capacity
protocol"): at each stack rank bound R, 3 seeds read n = c R^b exp(u_R + e), e ~ N(0, 0.15^2)
per seed and u_R ~ N(0, w^2) per width (w = 0: the law is right; w > 0: the widths scatter
about it, as a step would), left-censored below the judging load 2 and right-censored within a
quarter of the largest tested load 2R. Each sweep is fitted with the harness's censored law
(`harness.readouts.censored_law.fit_censored_law`); the share of sweeps whose interval at each
nominal level holds the true b is the coverage. The figure plots it against the nominal level:
on or above the diagonal is honest."""

import argparse
from pathlib import Path

import numpy as np

from harness.readouts.censored_law import EXACT, LEFT, RIGHT, Observation, fit_censored_law
from harness.report.plain_table import print_table

TRUE_C, TRUE_B, SEED_SD = 1.2, 1.0, 0.15
BOUNDS = (4, 6, 8, 12)
"""The law's widths: one layer of 2 heads at key dim 2, 3, 4, 6."""
LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
SCENARIOS = (
    ("4 widths, law right", BOUNDS, 0.0),
    ("5 widths (R 2-12), law right", (2, *BOUNDS), 0.0),
    ("4 widths, widths scatter (w = 0.15)", BOUNDS, 0.15),
)


def sweep(rng: np.random.Generator, width_sd: float, bounds=BOUNDS, seeds: int = 3) -> list:
    """One simulated sweep of the module docstring, as the censored fit's observations."""
    out = []
    for bound in bounds:
        ceiling = 0.75 * 2 * bound
        shift = rng.normal(0, width_sd)
        for n in TRUE_C * bound**TRUE_B * np.exp(shift + rng.normal(0, SEED_SD, seeds)):
            kind, value = EXACT, float(n)
            if n < 2:
                kind, value = LEFT, 2.0
            elif n >= ceiling:
                kind, value = RIGHT, ceiling
            out.append(Observation(float(bound), kind, value, cell=str(bound)))
    return out


def coverage(width_sd: float, bounds, level: float, sweeps: int, seed: int = 0) -> float:
    """The share of `sweeps` simulated sweeps whose interval at `level` holds the true b."""
    rng = np.random.default_rng(seed)
    laws = [fit_censored_law(sweep(rng, width_sd, bounds), level=level) for _ in range(sweeps)]
    return float(np.mean([law.b_low <= TRUE_B <= law.b_high for law in laws]))


def draw_coverage(table: dict[str, list[float]], path: Path) -> None:
    """Coverage against the nominal level, one line per scenario, the diagonal dashed."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot([0.45, 1], [0.45, 1], color="grey", linestyle="--", label="coverage = nominal")
    for name, values in table.items():
        ax.plot(LEVELS, values, marker="o", label=name)
    ax.axhline(0.88, color="red", linewidth=0.8, linestyle=":")
    ax.annotate("0.88: the test's bar at nominal 0.90", (0.5, 0.885), fontsize=8, color="red")
    ax.set_xlabel("nominal level of b's interval")
    ax.set_ylabel("share of simulated sweeps covering the true b")
    ax.set_title("The capacity law's interval: coverage in simulated censored sweeps", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweeps", type=int, default=300, help="simulated sweeps per point")
    parser.add_argument("--out", type=Path, help="write coverage.png into this folder")
    args = parser.parse_args(argv)
    table = {
        name: [coverage(sd, bounds, level, args.sweeps) for level in LEVELS]
        for name, bounds, sd in SCENARIOS
    }
    rows = [
        {
            "scenario": name,
            **{f"{lv:.2f}": f"{v:.3f}" for lv, v in zip(LEVELS, values, strict=True)},
        }
        for name, values in table.items()
    ]
    print_table(rows)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        draw_coverage(table, args.out / "coverage.png")
        print(f"written to {args.out / 'coverage.png'}")


if __name__ == "__main__":
    main()
