"""Short names of config keys, one table for every place that prints them: in a W&B run's name
(`deltanet-d128-kv8-T256-s1`: `harness.records.wandb_run`) and in the report's panel titles and
annotations (`kv pairs=8, d_model=64`: `harness.report`)."""

SHORT_NAMES: dict[str, tuple[str, str]] = {
    # key: (in a run's name, glued to the value; in a figure)
    "backbone.d_model": ("d", "d_model"),
    "backbone.n_layers": ("L", "n_layers"),
    "task.num_kv_pairs": ("kv", "kv pairs"),
    "task.seq_len": ("T", "seq_len"),
    "task.vocab_size": ("V", "vocab"),
    "model.feature_dim": ("D", "feature_dim"),
    "model.n_heads": ("h", "n_heads"),
    "optim.lr": ("lr", "lr"),
    "seed": ("s", "seed"),
    "state_size": ("", "state size"),  # a run's name carries the option alone: linear_d8
}


def in_run_name(key: str) -> str | None:
    """The abbreviation of `key` in a run's name (`d` for backbone.d_model), if it has one."""
    return SHORT_NAMES[key][0] if key in SHORT_NAMES else None


def in_figure(key: str) -> str:
    """A key's name in panel titles and annotations: `kv pairs`, else the key after its group
    (`feature_dim` for model.feature_dim)."""
    return SHORT_NAMES[key][1] if key in SHORT_NAMES else key.split(".", 1)[-1]
