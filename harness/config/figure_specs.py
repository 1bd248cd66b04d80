"""Which figures a report draws: those its preset declares (`report.figures` in
`conf/experiment/<name>.yaml`), else one default rule.

A declaration names each figure's file and says what it shows:

    report:
      figures:
        acc_vs_num_kv_pairs: {x: task.num_kv_pairs, ticks: [task.seq_len, data.batch_size]}
        acc_vs_state: {x: state, panels: [task.num_kv_pairs]}
        acc_vs_load: {kind: load_curve}

An `accuracy` figure (the default kind) draws test accuracy (y) against `x` (a swept parameter,
or `state`: the mixer's floats per layer), one line per model (hue: the model, joined by the
`hue` parameters' values, `linear taylor`), one panel per value of `panels`; `ticks` are
parameters that are functions of x, written once under each tick. Any other swept parameter
sets points apart on their line. The other kinds draw what their records hold, each against
its own x: `load_curve` (accuracy against load), `capacity` (n90 against state),
`test_length`, `needle_heatmap`, `copy_vs_length`.

The default rule, for a sweep without a declaration: every swept numeric task parameter is an
x (the swept parameters that are functions of it its ticks, the other swept ones its panels),
the state too unless the runs are load curves, and every other kind."""

from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from harness.config.group_nodes import CONF_DIR

ACCURACY_FIGURE = "accuracy"
FIGURE_KINDS = (
    ACCURACY_FIGURE,
    "load_curve",
    "capacity",
    "test_length",
    "needle_heatmap",
    "copy_vs_length",
)
STATE = "state"
"""`x: state`: the mixer's state in floats per layer (softmax: its KV cache)."""
FIELDS = ("kind", "x", "panels", "ticks", "hue")


@dataclass(frozen=True)
class FigureSpec:
    """One figure of a report: its file name (`<name>.png`) and what it shows."""

    name: str
    kind: str = ACCURACY_FIGURE
    x: str | None = None
    panels: tuple[str, ...] = ()
    ticks: tuple[str, ...] = ()
    hue: tuple[str, ...] | None = None
    """Model parameters whose values join the model's name; None: those swept with names."""


FILE_NAMES = {
    "load_curve": "acc_vs_load",
    "capacity": "capacity_vs_state",
    "test_length": "acc_vs_test_length",
}
"""The default rule's file name of a kind, where it is not the kind's own name."""
LEADING, TRAILING = ("load_curve", "capacity"), ("test_length", "needle_heatmap", "copy_vs_length")
"""The default rule's kinds before its accuracy figures, and after them."""


def of_kind(kind: str) -> FigureSpec:
    """The default rule's figure of a kind other than `accuracy`."""
    return FigureSpec(FILE_NAMES.get(kind, kind), kind)


def spec_of(name: str, fields: dict[str, Any]) -> FigureSpec:
    """A declared figure; `ValueError` naming the key for an unknown field, kind or a missing x."""
    where = f"report.figures.{name}"
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValueError(f"{where}.{unknown[0]} is invalid: must be one of {', '.join(FIELDS)}")
    kind = fields.get("kind", ACCURACY_FIGURE)
    if kind not in FIGURE_KINDS:
        raise ValueError(
            f"{where}.kind={kind!r} is invalid: must be one of {', '.join(FIGURE_KINDS)}"
        )
    if kind == ACCURACY_FIGURE and not isinstance(fields.get("x"), str):
        raise ValueError(f"{where}.x={fields.get('x')!r} is invalid: must be a parameter or state")
    hue = fields.get("hue")
    return FigureSpec(
        name,
        kind,
        fields.get("x"),
        tuple(fields.get("panels") or ()),
        tuple(fields.get("ticks") or ()),
        None if hue is None else tuple(hue),
    )


def specs_of(figures: Any) -> list[FigureSpec]:
    """The declared figures of a `report.figures` mapping, in its order."""
    if not isinstance(figures, dict):
        raise ValueError(f"report.figures={figures!r} is invalid: must be a mapping of figures")
    return [spec_of(name, dict(fields or {})) for name, fields in figures.items()]


def declared_figures(experiment: str | None) -> list[FigureSpec] | None:
    """The figures a preset declares (`conf/experiment/<experiment>.yaml`), None where there
    is no such preset or it declares none."""
    path = CONF_DIR / "experiment" / f"{experiment}.yaml"
    if not experiment or not path.exists():
        return None
    figures = OmegaConf.select(OmegaConf.load(path), "report.figures")
    return None if figures is None else specs_of(OmegaConf.to_container(figures))


def default_figures(
    axes: list[str], point_keys: list[str], chosen: list[str] | None, together, load_curves: bool
) -> list[FigureSpec]:
    """The default rule (module docstring): `axes`, the swept numeric task parameters;
    `chosen`, the parameters the sweep's commands swept
    (None: every one); `together(key, x)`, whether `key` is a function of x."""
    specs = []
    for x in [*axes, *([] if load_curves else [STATE])]:
        ticks = [k for k in point_keys if k != x and together(k, x)]
        panels = [k for k in point_keys if k != x and k not in ticks]
        panels = [k for k in panels if chosen is None or k in chosen]
        specs.append(FigureSpec(f"acc_vs_{x.split('.', 1)[-1]}", ACCURACY_FIGURE, x, panels, ticks))
    return [*map(of_kind, LEADING), *specs, *map(of_kind, TRAILING)]
