"""Synthetic records in the `results.json` format, shaped like the presets' sweeps, so the
report is tested on what it draws without training anything."""

import json
from itertools import product
from pathlib import Path

from harness.records.schema import SCHEMA_VERSION

HEADS = 2


def state_floats(model: str, d_model: int, seq_len: int) -> int:
    """Recurrent floats per layer as the mixers count them (softmax: its KV cache)."""
    head = d_model // HEADS
    return {
        "softmax": 2 * seq_len * d_model,
        "linear": HEADS * (head * head + head),
        "favor": HEADS * (64 * head + 64),
        "based": HEADS * (273 * head + 273),
        "deltanet": HEADS * head * head,
        "retnet": HEADS * head * head,
        "rff": HEADS * (64 * head + 64),
    }[model]


def record(
    model: str,
    *,
    task: str = "assoc_recall",
    seq_len: int = 64,
    d_model: int = 64,
    seed: int = 0,
    lr: float = 0.002,
    acc: float | None = 0.5,
    val_acc: float | None = None,
    status: str = "ok",
    error: str | None = None,
    task_params: dict | None = None,
    metrics: dict | None = None,
    converged: bool = True,
    baselines: dict | None = None,
    diverged_at_step: int | None = None,
) -> dict:
    """One job's record; `status="failed"` with no state is a refused run's record."""
    params = {"vocab_size": 128, "seq_len": seq_len, "num_kv_pairs": 8, "power_a": 0.01}
    if task != "assoc_recall":
        params = {"vocab_size": 32, "seq_len": seq_len}
    params.update(task_params or {})
    floats = state_floats(model, d_model, seq_len)
    all_metrics = {}
    if status == "ok":
        all_metrics = {"test/acc": acc, "val/acc": acc if val_acc is None else val_acc}
        all_metrics[f"test/acc_by/seq_len/{seq_len}"] = acc
        for name, value in (
            {"chance": 1 / 64, "in_context": 0.125} if baselines is None else baselines
        ).items():
            all_metrics[f"test/baseline/{name}"] = value
    all_metrics.update(metrics or {})
    train = {"steps": 400, "epochs": 0.64, "wall_s": 12.0, "tokens_per_s": 1e5, "floor": None}
    train.update(resumed_from_step=0, segments=[], diverged_at_step=diverged_at_step)
    train.update(converged=converged, val_curve=[[100, 0.1], [400, acc or 0.0]])
    refused = status == "failed" and error and "invalid" in error
    return {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "error": error,
        "task": task,
        "model": model,
        "task_params": params,
        "model_params": {"n_heads": HEADS},
        "seq_len": seq_len,
        "seed": seed,
        "config_hash": f"{task}-{model}-{seq_len}-{d_model}-{seed}-{lr}-{json.dumps(params)}",
        "num_params": 1000,
        "state": None
        if refused
        else {
            "floats_per_layer": floats,
            "mixer_floats_per_layer": floats,  # no short conv in these records' backbone
            "conv_floats_per_layer": 0,
            "bytes_per_layer": 4 * floats,
            "bytes_total": 8 * floats,
            "grows_with_seq_len": model == "softmax",
        },
        "metrics": all_metrics,
        "train": None if refused else train,
        "wandb": None,
        "run_dir": f"/sweep/{model}-{seq_len}-{d_model}-{seed}",
        "config": {
            "seed": seed,
            "early_stop_acc": 0.99,
            "backbone": {"d_model": d_model, "n_layers": 2, "pos_emb": "learned"},
            "data": {"num_train": 40000, "batch_size": 64, "seed": seed, "cache_dir": "/c"},
            "optim": {"lr": lr, "weight_decay": 0.1},
            "trainer": {"max_steps": 800, "val_check_interval": 100},
        },
    }


def write_sweep(folder: Path, records: list[dict]) -> Path:
    """A sweep folder holding `records` in its `summary.jsonl`."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (folder / "summary.jsonl").write_text(lines)
    return folder


FRONTIER_MODELS = ("softmax", "linear", "favor", "based", "deltanet", "retnet")


def state_frontier(folder: Path) -> Path:
    """`experiment=state_frontier`: six mixers at d_model 32, 64, 128 (T = 64, 8 pairs)."""
    records = [
        record(m, d_model=d, acc=min(1.0, 0.2 + 0.1 * i + d / 256))
        for i, m in enumerate(FRONTIER_MODELS)
        for d in (32, 64, 128)
    ]
    return write_sweep(folder, records)


NEEDLE_MODELS = ("softmax", "linear", "favor", "based", "deltanet")


def needle_grid(folder: Path, diverged: str = "rff") -> Path:
    """`experiment=needle_grid` (5 mixers x 3 lengths) plus a model that diverges at every
    length (no ok needle job) and a refused run's `failed` record."""
    records = []
    for i, model in enumerate(NEEDLE_MODELS):
        for seq_len in (64, 128, 256):
            depth = {
                f"test/acc_by/depth_bin/{b}": max(0.0, 1 - i * 0.15 - (10 - b) * seq_len / 5000)
                for b in range(11)
            }
            acc = sum(depth.values()) / 11
            records.append(
                record(
                    model,
                    task="needle",
                    seq_len=seq_len,
                    acc=acc,
                    metrics=depth,
                    baselines={"chance": 1 / 16, "in_context": 0.5},
                )
            )
    for seq_len in (64, 128, 256):
        step = 10 * seq_len
        error = f"denominator collapse: 40% of eq. 9 denominators <= 0 at step {step}"
        records.append(
            record(
                diverged,
                task="needle",
                seq_len=seq_len,
                status="diverged",
                error=error,
                diverged_at_step=step,
            )
        )
    refused = "model.feature_dim=0 is invalid: must be an integer >= 1"
    records.append(
        record("favor", task="needle", seq_len=64, seed=1, status="failed", error=refused)
    )
    return write_sweep(folder, records)


def eval_lengths(folder: Path) -> Path:
    """Two models trained at 64 and tested at 32 ... 256 (`task.eval_seq_lens`)."""
    records = []
    for model, fall in (("softmax", 0.1), ("linear", 0.3)):
        by_length = {
            f"test/acc_by/seq_len/{n}": max(0.0, 0.95 - fall * abs(n - 64) / 64)
            for n in (32, 64, 128, 256)
        }
        params = {"eval_seq_lens": [32, 128, 256]}
        records.append(
            record(
                model,
                acc=by_length["test/acc_by/seq_len/64"],
                metrics=by_length,
                task_params=params,
            )
        )
    return write_sweep(folder, records)


GAP_ACCURACY = {
    "softmax": (0.993, 0.992, 0.994),
    "linear": (0.995, 0.983, 0.949),
    "deltanet": (0.994, 0.24, 0.057),
    "based": (0.985, 0.993, 0.994),
}
GAP_SWEPT = ["model", "task.num_kv_pairs", "optim.lr"]


def retrieval_gap(
    folder: Path,
    seeds: int = 1,
    swept: list[str] | None = GAP_SWEPT,
    experiment: str | None = "retrieval_gap",
    widths: int = 1,
) -> Path:
    """`experiment=retrieval_gap`: four mixers at 4, 8, 16 pairs (seq_len = 8 x pairs, batch
    = 4,096 / seq_len), two learning rates, `seeds` seeds, 1,500 steps; `in_context` equals
    `elimination` (Zoology's layout); `sweep.json` names the `swept` keys and the `experiment`
    (`swept` None: no file); `widths` > 1 adds d_model 128, ... to the default 64."""
    records = []
    for model, accs in GAP_ACCURACY.items():
        for kv, acc in zip((4, 8, 16), accs, strict=True):
            for lr, seed, width in product((0.003, 0.01), range(seeds), range(widths)):
                r = record(
                    model,
                    d_model=64 * 2**width,
                    seq_len=8 * kv,
                    lr=lr,
                    seed=seed,
                    acc=(acc if lr == 0.003 else 0.9 * acc) - 0.02 * seed,
                    task_params={"num_kv_pairs": kv, "vocab_size": 256},
                    baselines={"chance": 1 / 128, "in_context": 1 / kv, "elimination": 1 / kv},
                    converged=acc > 0.95,
                )
                r["config"]["data"]["batch_size"] = 4096 // (8 * kv)
                r["config"]["trainer"].update(
                    max_steps=1500,
                    use_distributed_sampler=True,
                    num_sanity_val_steps=0,
                    log_every_n_steps=50,
                )
                r["config_hash"] += f"-{lr}-{width}"
                records.append(r)
    write_sweep(folder, records)
    if swept is not None:
        description = {
            "command": "python run.py -m experiment=retrieval_gap logger=none",
            "jobs": len(records),
            "swept": swept,
            "experiment": experiment,
            "logger": {"name": "none"},
            "started": "2026-12-01T09:00:00",
        }
        (folder / "sweep.json").write_text(json.dumps(description))
    return folder
