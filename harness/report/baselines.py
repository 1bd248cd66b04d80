"""Binding-free baselines that coincide at the precision a reader sees share one line and one
legend entry (`baseline: in_context = elimination`, equal in Zoology's MQAR layout)."""

from harness.report.style import BASELINE_STYLES

PRECISION = 0.005
"""Half a point: two baselines closer than this everywhere print alike."""


def equal_curves(a: dict, b: dict) -> bool:
    """Equal at every x (the same x values, each within `PRECISION`)."""
    return a.keys() == b.keys() and all(abs(a[n] - b[n]) < PRECISION for n in a)


def baseline_order(name: str) -> int:
    return list(BASELINE_STYLES).index(name) if name in BASELINE_STYLES else len(BASELINE_STYLES)


def coinciding(curves: dict[str, dict]) -> dict[str, str]:
    """{drawn baseline: its legend label}: each baseline equal to one drawn before it (in the
    fixed order chance, in_context, elimination, then others) joins that one's label."""
    drawn: dict[str, str] = {}
    for name in sorted(curves, key=lambda n: (baseline_order(n), n)):
        same = next((other for other in drawn if equal_curves(curves[other], curves[name])), None)
        if same is None:
            drawn[name] = name
        else:
            drawn[same] += f" = {name}"
    return drawn
