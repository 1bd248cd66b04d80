"""Every task is learnable: softmax attention solves a small instance of it, and a trained
model reports accuracy against length (`task.eval_seq_lens`) in one run."""

import pytest

from harness.train import run

COMMON = [
    "model=softmax",
    "data.num_train=20000",
    "data.num_val=300",
    "data.num_test=500",
    "trainer.max_steps=1500",
    "trainer.enable_progress_bar=false",
    "logger=none",
]
SMALL_INSTANCES = {
    "assoc_recall": ["task.vocab_size=32", "task.seq_len=24", "task.num_kv_pairs=4"],
    "copy": ["task.vocab_size=16", "task.seq_len=24", "task.copy_len=6"],
    "needle": ["task.vocab_size=32", "task.seq_len=24", "task.num_distractors=1"],
    "selective_copy": ["task.vocab_size=16", "task.seq_len=24", "task.num_tokens=4"],
    "induction": ["task.vocab_size=16", "task.seq_len=24"],
    "noisy_recall": [
        "task.vocab_size=32",
        "task.seq_len=32",
        "task.num_kv_pairs=4",
        "task.num_queries=4",
        "task.noise_vocab_size=4",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(SMALL_INSTANCES))
def test_softmax_learns_a_small_instance(make_cfg, task: str) -> None:
    record = run(make_cfg([f"task={task}", *SMALL_INSTANCES[task], *COMMON]))
    assert record["status"] == "ok"
    assert record["metrics"]["test/acc"] >= 0.9, record["metrics"]


def test_accuracy_against_length_from_one_run(make_cfg) -> None:
    overrides = [
        *SMALL_INSTANCES["assoc_recall"],
        *COMMON,
        "trainer.max_steps=20",
        "backbone.pos_emb=none",
        "backbone.short_conv=3",
        "task.eval_seq_lens=[16,48]",
    ]
    record = run(make_cfg(overrides))
    by_length = {k: v for k, v in record["metrics"].items() if "acc_by/seq_len" in k}
    assert sorted(by_length) == [f"test/acc_by/seq_len/{n}" for n in (16, 24, 48)]
    assert record["metrics"]["test/acc"] == by_length["test/acc_by/seq_len/24"]
