"""Every task is learnable: softmax attention solves a small instance of it, and a trained
model reports accuracy against length (`task.eval_seq_lens`) in one run."""

import pytest

from harness.train import run
from tests.conftest import LEARN, SMALL_TASKS, SMOKE


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(SMALL_TASKS))
def test_softmax_learns_a_small_instance(make_cfg, task: str) -> None:
    record = run(make_cfg([f"task={task}", *SMALL_TASKS[task], "model=softmax", *LEARN]))
    assert record["status"] == "ok"
    assert record["metrics"]["test/acc"] >= 0.9, record["metrics"]


def test_accuracy_against_length_from_one_run(make_cfg) -> None:
    overrides = [
        *SMALL_TASKS["assoc_recall"],
        *SMOKE,
        "backbone.pos_emb=none",
        "backbone.short_conv=3",
        "task.eval_seq_lens=[16,48]",
    ]
    record = run(make_cfg(overrides))
    by_length = {k: v for k, v in record["metrics"].items() if "acc_by/seq_len" in k}
    assert sorted(by_length) == [f"test/acc_by/seq_len/{n}" for n in (16, 24, 48)]
    assert record["metrics"]["test/acc"] == by_length["test/acc_by/seq_len/24"]
