"""The capacity protocol (`harness.config.capacity_protocol`): each cell's loads and context
from its stack's rank bound R, every tested load also trained, and the refusals that name the
setting to raise, before training."""

import pytest

from harness.config.capacity_protocol import apply_protocol, load_grid
from harness.training.build import BadInput, build

PROTOCOL = ["experiment=capacity_law", "debug=smoke", "capacity.protocol=true"]


def test_the_load_grid_is_the_powers_of_two_and_half_again_up_past_the_target() -> None:
    assert load_grid(16) == [1, 2, 3, 4, 6, 8, 12, 16]
    assert load_grid(17) == [1, 2, 3, 4, 6, 8, 12, 16, 24]
    assert load_grid(1) == [1]


@pytest.mark.parametrize(
    ("overrides", "bound", "largest", "seq_len"),
    [
        (["+state_size=deltanet_k2"], 4, 8, 64),
        (["+state_size=deltanet_k4"], 8, 16, 64),
        (["+state_size=deltanet_k6"], 12, 24, 128),  # 4 tokens a pair: 96 > 64
        (["+state_size=deltanet_k4", "backbone.n_layers=2"], 16, 32, 128),  # the stack's bound
        (["+state_size=linear_d3", "capacity.bound_multiple=3"], 6, 24, 128),  # 3 x 6 -> 24
    ],
)
def test_a_cell_is_tested_past_twice_its_stack_bound_on_loads_it_trained_on(
    make_cfg, overrides, bound, largest, seq_len
) -> None:
    cfg = make_cfg([*PROTOCOL, *overrides])
    derived = apply_protocol(cfg)
    assert derived["rank_bound_stack"] == bound and derived["loads"][-1] == largest
    assert derived["loads"][-1] >= cfg.capacity.bound_multiple * bound
    assert cfg.task.seq_len == seq_len and list(cfg.task.num_kv_pairs) == [1, largest]
    trained, tested = dict(cfg.task.load_weights), dict(cfg.task.test.load_weights)
    assert set(tested) == set(derived["loads"]) and set(tested) <= set(trained)
    parts = build(cfg)
    assert parts.model.rank_bound(parts.task.seq_len) == bound
    assert sorted(parts.data.test_tasks[0].loads()) == derived["loads"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["+state_size=deltanet_k4", "capacity.max_load=12"],
            r"capacity.max_load=12 is below 2 x the stack's rank bound 8 = 16 .*raise "
            r"capacity.max_load",
        ),
        (
            ["+state_size=softmax"],
            r"capacity.max_load=null: model.name=softmax's state grows with the context",
        ),
        (
            ["+state_size=deltanet_k32"],
            r"task.num_kv_pairs=\[1, 128\] is invalid.*raise task.vocab_size",
        ),
        (
            ["task=copy"],
            r"task.name=copy has no num_kv_pairs",
        ),
    ],
)
def test_a_cell_that_cannot_pass_its_bound_is_refused_before_training(
    make_cfg, overrides, message
) -> None:
    with pytest.raises(BadInput, match=message):
        apply_protocol(make_cfg([*PROTOCOL, *overrides]))


def test_the_control_is_tested_up_to_max_load_and_nothing_changes_without_the_protocol(
    make_cfg,
) -> None:
    cfg = make_cfg([*PROTOCOL, "+state_size=softmax", "capacity.max_load=24"])
    assert apply_protocol(cfg)["loads"][-1] == 24 and cfg.task.seq_len == 128
    plain = make_cfg(["task=assoc_recall", "model=deltanet"])
    before = dict(plain.task)
    assert apply_protocol(plain) is None and dict(plain.task) == before
