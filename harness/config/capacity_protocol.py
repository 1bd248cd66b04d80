"""The capacity protocol (`capacity.protocol=true`; docs/background.md, "The capacity
protocol"): a capacity cell's loads and context derived from its stack's rank bound R (the sum
of its layers' bounds), so that its readout can be set by the state alone and not by the task.

- The tested loads are the grid 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, ... (the powers of two and
  1.5 times them) up to its first value L >= m R (m = `capacity.bound_multiple`, 2), or up to
  `capacity.max_load` when it is set; a `max_load` below m R is refused before training.
- Every tested load is drawn in training, in equal shares (`task.load_weights`), and tested in
  equal shares (`task.test.load_weights`).
- The context T is the task's `seq_len`, raised to the smallest multiple of 64 that holds L
  (MQAR: 4 tokens a pair).
- A mixer whose state grows with the context (softmax, the control) has no fixed R: it is
  tested up to `capacity.max_load` (refused when that is unset).

`apply_protocol` rewrites `cfg.task` in place and returns what it derived, for the record."""

from typing import Any

from omegaconf import DictConfig, open_dict

from harness.config.hashing import params_of
from harness.config.refusal import BadInput

DERIVED = ("task.seq_len", "task.num_kv_pairs", "task.load_weights", "task.test")
"""The settings the protocol derives from the stack's rank bound: a cell's knob sets them, so
they are never a parameter of their own in a report."""

CONTEXT_STEP = 64
"""The context grows in multiples of this many tokens."""
MAX_CONTEXT = 8192


def load_grid(largest: float) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, 24, ... up to the first value >= `largest`."""
    grid, power = [1], 2
    while grid[-1] < largest:
        grid += [n for n in (power, 3 * power // 2) if n > grid[-1]]
        power *= 2
    return grid[: next(i for i, n in enumerate(grid) if n >= largest) + 1]


def stack_rank_bound(cfg: DictConfig) -> tuple[int, bool]:
    """(R, grows): the stack's rank bound at the task's `seq_len` (the model built as the run
    builds it, on a throwaway seed) and whether its state grows with the context."""
    import torch  # the model's frameworks, only once a run needs them

    from models.backbone import LanguageModel

    seq_len = int(cfg.task.seq_len)
    with torch.random.fork_rng():
        model = LanguageModel(
            vocab_size=int(cfg.task.get("vocab_size") or 256),
            max_seq_len=seq_len,
            mixer=cfg.model.name,
            mixer_params=params_of(cfg.model),
            **cfg.backbone,
        )
    layers = model.layer_states(seq_len)
    return sum(layer["rank_bound"] for layer in layers), any(
        layer["grows_with_seq_len"] for layer in layers
    )


def largest_load(cfg: DictConfig, bound: int, grows: bool) -> int:
    """L of the module docstring, or a refusal naming the setting to raise."""
    multiple, asked = float(cfg.capacity.bound_multiple), cfg.capacity.get("max_load")
    if grows:
        if asked is None:
            raise BadInput(
                f"capacity.max_load=null: model.name={cfg.model.name}'s state grows with the "
                "context, so the protocol has no rank bound to test past: set capacity.max_load, "
                "or pick a mixer with a fixed state (+state_size=deltanet_k4)"
            )
        return int(asked)
    needed = multiple * bound
    if asked is not None and asked < needed:
        raise BadInput(
            f"capacity.max_load={asked} is below {multiple:g} x the stack's rank bound "
            f"{bound} = {needed:g} (capacity.bound_multiple x R): raise capacity.max_load to at "
            "least that, or leave it null to derive it"
        )
    return int(asked) if asked is not None else load_grid(needed)[-1]


def context_for(cfg: DictConfig, loads: list[int]) -> int:
    """The task's `seq_len`, raised to the smallest multiple of `CONTEXT_STEP` whose task
    holds the largest load (the task's own check decides); a refusal when none up to
    `MAX_CONTEXT` does, or when the load is invalid for another reason (the vocabulary)."""
    from tasks import build_task

    params = params_of(cfg.task)
    params.update(num_kv_pairs=[1, loads[-1]], load_weights=None)
    seq_len = int(cfg.task.seq_len)
    first = -(-seq_len // CONTEXT_STEP) * CONTEXT_STEP
    last_error: ValueError | None = None
    for length in [seq_len, *range(max(first, CONTEXT_STEP), MAX_CONTEXT + 1, CONTEXT_STEP)]:
        try:
            build_task(cfg.task.name, **{**params, "seq_len": length})
            return length
        except ValueError as error:
            last_error = error
            if getattr(error, "name", None) != "seq_len":
                break
    raise BadInput(
        f"capacity.protocol=true: task.{last_error} (the protocol tests up to {loads[-1]} pairs: "
        "raise task.vocab_size, or narrow the state)"
    )


def apply_protocol(cfg: DictConfig) -> dict[str, Any] | None:
    """With `capacity.protocol`, rewrite `cfg.task` (loads drawn in training and tested, the
    context) from the stack's rank bound and return what was derived (`rank_bound_stack`,
    `loads`, `seq_len`); None without it. Only tasks whose load is `num_kv_pairs` (MQAR)."""
    if not cfg.capacity.get("protocol"):
        return None
    if "num_kv_pairs" not in cfg.task:
        raise BadInput(
            f"capacity.protocol=true: task.name={cfg.task.name} has no num_kv_pairs; the "
            "protocol derives MQAR's loads (task=assoc_recall)"
        )
    bound, grows = stack_rank_bound(cfg)
    loads = load_grid(largest_load(cfg, bound, grows))
    seq_len = context_for(cfg, loads)
    equal = {n: 1 for n in loads}
    with open_dict(cfg):
        cfg.task.seq_len = seq_len
        cfg.task.num_kv_pairs = [1, loads[-1]]
        cfg.task.load_weights = equal
        cfg.task.test = {"load_weights": equal}
    return {
        "rank_bound_stack": None if grows else bound,
        "loads": loads,
        "seq_len": seq_len,
    }
