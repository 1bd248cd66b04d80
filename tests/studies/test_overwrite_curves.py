"""`studies.overwrite_curves` on made-up records: one row per config hash (the newest), the
cells' means over seeds, `learned` against the guess among live values."""

import json
from pathlib import Path

from studies.overwrite_curves import cells, load_runs, main


def record(model: str, seed: int, rebound: float, finished: str, hash_: str) -> dict:
    metrics = {
        "test/acc": 0.5,
        "test/baseline/stale": 0.5,
        "test/baseline/current": 0.125,
        "test/acc_by/rebound/0": 0.9,
        "test/acc_by/rebound/1": rebound,
        "test/acc_by/rebinds/0": 0.9,
        "test/acc_by/rebinds/1": rebound,
        "test/acc_by/distance/8": rebound,
    }
    return {
        "status": "ok", "task": "overwrite_recall", "model": model, "seed": seed,
        "config_hash": hash_, "finished_at": finished, "metrics": metrics,
        "state": {"mixer_floats_per_layer": 512, "rank_bound_per_layer": 16},
        "train": {"converged": True},
    }  # fmt: skip


def write(folder: Path, name: str, rec: dict) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "results.json").write_text(json.dumps(rec))


def test_cells_average_seeds_and_keep_the_newest_record(tmp_path: Path) -> None:
    write(tmp_path, "a", record("deltanet", 0, 0.10, "2026-01-01", "h0"))  # replaced below
    write(tmp_path, "b", record("deltanet", 0, 0.70, "2026-01-02", "h0"))
    write(tmp_path, "c", record("deltanet", 1, 0.90, "2026-01-02", "h1"))
    write(tmp_path, "d", record("linear", 0, 0.10, "2026-01-02", "h2"))
    write(tmp_path, "e", record("linear", 1, 0.20, "2026-01-02", "h3"))
    runs = load_runs([tmp_path])
    assert len(runs) == 4
    table = cells(runs).set_index("model")
    assert table.loc["deltanet", "rebound/1"] == 0.8
    assert table.loc["deltanet", "seeds"] == 2
    assert bool(table.loc["deltanet", "learned"]) is True
    assert bool(table.loc["linear", "learned"]) is False  # 0.10 <= 0.125, the guess
    main([str(tmp_path), "--out", str(tmp_path / "out")])
    for name in ("cells.csv", "runs.csv", "overwrite_by_rebinds.png", "overwrite_by_distance.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
