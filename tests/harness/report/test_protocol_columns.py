"""A capacity protocol sweep's cells differ by their state knob; the task settings the protocol
derived from each cell's rank bound are not parameters of their own (`points.varied`), and the
run's `capacity.*` settings survive the re-read beside its readouts."""

from harness.report.frame import varied
from harness.report.reread import reread


def row(knob: int, pairs: int, protocol: bool) -> dict:
    return {
        "task": "assoc_recall",
        "model": "deltanet",
        "model.head_k_dim": knob,
        "task.num_kv_pairs": [1, pairs],
        "task.seq_len": 64 if pairs <= 16 else 128,
        "capacity.protocol": protocol,
        "capacity.threshold": 0.9,
    }


COLUMNS = ["model.head_k_dim", "task.num_kv_pairs", "task.seq_len"]


def test_the_protocol_s_derived_settings_are_not_swept_parameters() -> None:
    cells = [row(2, 8, True), row(4, 16, True), row(6, 24, True)]
    assert varied(cells, COLUMNS) == ["model.head_k_dim"]


def test_without_the_protocol_the_same_settings_are_parameters() -> None:
    plain = [row(4, 8, False), row(4, 16, False)]
    assert varied(plain, COLUMNS) == ["task.num_kv_pairs"]
    assert varied([*plain, row(6, 24, True)], COLUMNS) == COLUMNS[:2]


def test_the_capacity_settings_survive_the_re_read() -> None:
    (kept,) = reread([{**row(4, 16, True), "status": "failed", "capacity.n90": 3.0}], 0.9)
    assert kept["capacity.protocol"] is True and kept["capacity.threshold"] == 0.9
    assert "capacity.n90" not in kept  # a stored readout is read anew, never kept
