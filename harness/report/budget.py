"""What a figure's points were trained with, for its subtitle: the step budget, the learning
rate (or the grid the best was chosen from on validation) and the width."""

from collections import defaultdict

from harness.report.frame import AVERAGED, SELECTED, as_key, parameter_columns, sort_key


def values_of(rows: list[dict], key: str) -> list:
    """The distinct values of `key` over `rows` (lists included), sorted numerically."""
    distinct = {as_key(r[key]): r[key] for r in rows if r.get(key) is not None}
    return sorted(distinct.values(), key=sort_key)


def joined(values: list) -> str:
    return "/".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values) or "?"


def rate_chosen(rows: list[dict]) -> bool:
    """Whether some point (a task, model and setting, over its seeds) ran at several learning
    rates, so that the report keeps the best on validation."""
    keys = [k for k in parameter_columns(rows) if k not in (*AVERAGED, *SELECTED)]
    rates: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        point = as_key([row.get("task"), row.get("model"), *(row.get(k) for k in keys)])
        rates[point].add(as_key(row.get("optim.lr")))
    return any(len(chosen) > 1 for chosen in rates.values())


def learning_rates(rows: list[dict]) -> str:
    """`lr 0.002`; `lr best of [0.003, 0.01]` where a point was trained at several rates
    (`rate_chosen`); `lr 0.01 (linear), 0.003 (deltanet, softmax)` where each model had its
    own; `lr 0.003/0.01, one per cell` where the rate was set per cell (each width its own)."""
    lrs = values_of(rows, "optim.lr")
    if len(lrs) <= 1:
        return f"lr {joined(lrs)}"
    if rate_chosen(rows):
        return f"lr best of [{', '.join(f'{v:g}' for v in lrs)}]"
    by_model: dict[str, list] = {}
    for row in rows:
        if row.get("optim.lr") is not None:
            by_model.setdefault(str(row.get("model")), []).append(row)
    if any(len(values_of(mine, "optim.lr")) > 1 for mine in by_model.values()):
        return f"lr {joined(lrs)}, one per cell"
    models = {
        lr: sorted(m for m, mine in by_model.items() if values_of(mine, "optim.lr") == [lr])
        for lr in lrs
    }
    return "lr " + ", ".join(f"{lr:g} ({', '.join(names)})" for lr, names in models.items())


def budget(rows: list[dict]) -> str:
    """`1500 steps, lr best of [0.003, 0.01], d_model 64, 2 layers` (several values joined by
    `/`; the layers left out of records without them)."""
    steps = joined(values_of(rows, "trainer.max_steps"))
    lr = learning_rates(rows)
    text = f"{steps} steps, {lr}, d_model {joined(values_of(rows, 'backbone.d_model'))}"
    layers = values_of(rows, "backbone.n_layers")
    if not layers:
        return text
    return f"{text}, {joined(layers)} layer{'' if layers == [1] else 's'}"
