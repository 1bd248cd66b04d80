"""A run's torch threads: `threads=N` as set, or its share of the free cores
(harness.training.threads), measured from CPU time and re-judged while it trains."""

import pytest
import torch

from harness.training import threads
from harness.training.threads import CoreWatch, ThreadShare, choose_threads, share


@pytest.mark.parametrize(
    ("cores", "others", "n_jobs", "count"),
    [
        (2, 0.0, 1, 2),  # a quiet machine: every core
        (2, 0.9, 1, 1),  # a neighbour on one core
        (2, 2.0, 1, 1),  # no core free: still one thread
        (2, 0.0, 2, 1),  # a sweep of two jobs at once on two cores
        (16, 4.0, 2, 8),  # the sweep's share is the smaller
        (16, 10.0, 2, 6),  # the free cores are the smaller
        (16, 0.4, 1, 16),
    ],
)
def test_share_is_the_free_cores_split_among_the_parallel_jobs(cores, others, n_jobs, count):
    choice = share(cores, others, n_jobs)
    assert choice.count == count
    assert f"of {cores} cores free: other work used {others:.1f}" in choice.why


def test_a_set_thread_count_is_kept_and_said(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    choice = choose_threads(3, n_jobs=2)
    assert (choice.count, choice.why, choice.fixed) == (3, "threads=3 as set", True)
    choice = choose_threads(0, n_jobs=None)  # a launcher's setup line
    assert (choice.count, choice.why, choice.fixed) == (
        2,
        "OMP_NUM_THREADS=2 in the environment",
        True,
    )


class Clock:
    """Readings that a test moves: wall seconds, this process's CPU seconds, busy seconds."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wall, self.own, self.busy = 100.0, 10.0, 50.0
        monkeypatch.setattr(threads.time, "monotonic", lambda: self.wall)
        monkeypatch.setattr(threads.time, "process_time", lambda: self.own)
        monkeypatch.setattr(threads, "busy_seconds", lambda cpus: self.busy)

    def advance(self, wall: float, own: float, others: float) -> None:
        """`wall` seconds pass; this process uses `own` CPU seconds, other work `others`."""
        self.wall += wall
        self.own += own
        self.busy += own + others


def test_other_work_is_busy_time_less_this_process_time(monkeypatch):
    clock = Clock(monkeypatch)
    watch = CoreWatch(cpus=[0, 1])
    clock.advance(wall=10.0, own=20.0, others=9.0)  # this run on two cores, a neighbour on ~1
    assert watch.others() == pytest.approx(0.9)
    clock.advance(wall=10.0, own=20.0, others=0.0)  # each look covers the time since the last
    assert watch.others() == pytest.approx(0.0)


def test_a_training_run_gives_cores_back_and_takes_them_again(monkeypatch):
    clock = Clock(monkeypatch)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "RECHECK_S", 5.0)
    try:
        callback = ThreadShare(n_jobs=None, watch=CoreWatch(cpus=[0, 1]))
        trainer = type("Trainer", (), {"global_step": 0})()
        clock.advance(wall=2.0, own=4.0, others=2.0)
        callback.on_train_batch_end(trainer)  # too soon to judge
        assert torch.get_num_threads() == 2
        clock.advance(wall=4.0, own=4.0, others=6.0)  # a neighbour took a core
        trainer.global_step = 40
        callback.on_train_batch_end(trainer)
        assert torch.get_num_threads() == 1
        clock.advance(wall=6.0, own=6.0, others=0.0)  # it ended
        trainer.global_step = 90
        callback.on_train_batch_end(trainer)
        assert torch.get_num_threads() == 2
        assert callback.changes == [[40, 1], [90, 2]]
    finally:
        torch.set_num_threads(previous)
