"""Which state sizes are equal: the committed table against the mixers, the rule, and the
groups `python run.py --help` lists."""

from harness.config.help import group_lines
from harness.config.state_sizes import TABLE, Size, equal_state, equal_state_lines, fixed_bound
from tests.state_sizes import sizes, table_text


def test_the_committed_table_is_the_mixers_own_count() -> None:
    assert TABLE.read_text() == table_text(sizes()), "stale: run python tests/state_sizes.py"


def test_equal_rank_bound_and_near_floats_are_equal_state() -> None:
    linear, deltanet = Size("linear_d2", "linear", 132, 4), Size("deltanet_k2", "deltanet", 128, 4)
    gated = Size("gated_deltanet_k2", "gated_deltanet", 256, 4)
    wide_value = Size("deltanet_k8_v8", "deltanet", 128, 16)
    assert equal_state(linear, deltanet, set())
    assert not equal_state(linear, gated, set())  # equal R, twice the floats
    assert not equal_state(linear, wide_value, set())  # equal floats, R the knob differs
    retnet = [Size(f"retnet_h{h}", "retnet", 4096 / h, 64) for h in (4, 8, 16)]
    fixed = fixed_bound([*retnet, linear, deltanet])
    assert fixed == {"retnet"}
    assert equal_state(retnet[2], Size("deltanet_k4", "deltanet", 256, 8), fixed)  # floats alone
    assert not equal_state(deltanet, Size("deltanet_k2_v32", "deltanet", 128, 4), fixed)


def test_help_lists_the_options_at_equal_state() -> None:
    lines = equal_state_lines().splitlines()
    r4 = next(line for line in lines if line.startswith("  R 4, 128-136 floats: "))
    assert "deltanet_k2," in r4 and "linear_d2," in r4 and "gated_deltanet_k2" not in r4
    assert any(line.startswith("  retnet (R 64 at every size)") for line in lines)
    assert "state_size options at equal state" in group_lines()
