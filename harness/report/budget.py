"""What a figure's points were trained with, for its subtitle: the step budget, the learning
rate (or the grid the best was chosen from on validation) and the width."""

from harness.report.points import as_key, sort_key


def values_of(rows: list[dict], key: str) -> list:
    """The distinct values of `key` over `rows` (lists included), sorted numerically."""
    distinct = {as_key(r[key]): r[key] for r in rows if r.get(key) is not None}
    return sorted(distinct.values(), key=sort_key)


def joined(values: list) -> str:
    return "/".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values) or "?"


def budget(rows: list[dict]) -> str:
    """`1500 steps, lr best of [0.003, 0.01], d_model 64` (several values joined by `/`)."""
    lrs = values_of(rows, "optim.lr")
    lr = f"lr best of [{', '.join(f'{v:g}' for v in lrs)}]" if len(lrs) > 1 else f"lr {joined(lrs)}"
    steps = joined(values_of(rows, "trainer.max_steps"))
    return f"{steps} steps, {lr}, d_model {joined(values_of(rows, 'backbone.d_model'))}"
