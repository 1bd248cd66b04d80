"""Re-test a finished run's kept weights at other lengths or task settings:

    python -m harness.evaluate <run dir> task.seq_len=128 [key=value ...] [--out DIR]

The run must have been trained with `checkpoint.keep=true` (its folder holds `model.pt` beside
`results.json`). The run's own config, with the overrides applied, builds the task, the test
sets and the model; the kept weights replace the model's. Only the test side may change:
`task.*` (not `task.name`), `data.num_test`, `data.batch_size`, `data.seed`, `threads` and
`trainer.precision`; the test runs as one process on this machine's best
accelerator, whatever devices the run trained on. Without overrides the run's own test set
is rebuilt and its test metrics are reproduced exactly. A load curve on kept weights:
`task.test={num_kv_pairs:[1,128],load_dist:log2}` (README, "Load curves"): the record then
carries the per-load metrics and `capacity`.

Writes its own record, `<run dir>/eval/<config_hash>/results.json` (or `--out`): the schema
of a run's record with `train: null` and `evaluated: {run_dir, overrides, trained_seq_len}`.
Bad input is refused with one line and exit code 2.
"""

import argparse
import copy
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from common.checks import require
from harness.config.hashing import config_hash
from harness.config.refusal import BadInput, as_bad_input, refused
from harness.config.settings import defaults
from harness.records.record import new_record, write_record
from harness.records.schema import OK, RECORD
from harness.train import job_threads, record_built_parts, test
from harness.training.build import BuiltRun, build
from harness.training.checkpoint import WEIGHTS, kept_weights
from harness.training.console import capacity_text
from harness.training.quiet_trainer import quiet_trainer
from models.backbone import LanguageModel

CHANGEABLE = (
    "data.num_test",
    "data.batch_size",
    "data.seed",
    "threads",
    "trainer.precision",
)
"""Keys an evaluation may change besides `task.*`: what is tested, never what was trained."""


def apply_overrides(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """The run's config with command-line style `key=value` overrides of the test side."""
    parser, cfg = OverridesParser.create(), copy.deepcopy(cfg)
    for line in overrides:
        try:
            (override,) = parser.parse_overrides([line])
        except HydraException as error:
            why = [x for x in str(error).splitlines() if not x.startswith(("Error", "See"))]
            why = why or ["see Hydra's override grammar"]
            raise BadInput(f"{line!r} is not a key=value override ({why[0]})") from error
        key = override.key_or_group
        if not (key.startswith("task.") and key != "task.name") and key not in CHANGEABLE:
            raise BadInput(
                f"{key} cannot change when re-testing kept weights: allowed are task.* "
                f"(except task.name), {', '.join(CHANGEABLE)}"
            )
        if override.is_delete():
            raise BadInput(f"{line}: a key cannot be deleted, only given a value")
        if override.is_sweep_override():
            raise BadInput(f"{line}: one value per key (several lengths: task.eval_seq_lens=[a,b])")
        OmegaConf.update(cfg, key, override.value(), force_add=True)
    return cfg


def load_run(run_dir: str | Path) -> tuple[dict, DictConfig, dict[str, torch.Tensor]]:
    """A finished run's record, its resolved config and its kept weights."""
    run_dir = Path(run_dir)
    path = run_dir / RECORD
    require(path.is_file(), "run_dir", str(run_dir), f"a run's folder (it has no {RECORD})")
    weights_path = run_dir / WEIGHTS
    require(
        weights_path.is_file(),
        "run_dir",
        str(run_dir),
        f"a run that kept its weights ({WEIGHTS}): train it with checkpoint.keep=true",
    )
    record = OmegaConf.to_container(OmegaConf.load(path))
    return record, OmegaConf.create(record["config"]), kept_weights(run_dir)


def load_model(run_dir: str | Path) -> LanguageModel:
    """The trained language model of a run that kept its weights, in eval mode (to probe it:
    `model(tokens)` gives logits, `model.step` generates)."""
    _, cfg, weights = load_run(run_dir)
    parts = build(cfg)
    parts.model.load_state_dict(weights)
    return parts.model.eval()


def load_weights(parts: BuiltRun, weights: dict[str, torch.Tensor]) -> None:
    """The kept weights into the built model. Learned positions: the trained table, cut to the
    length built (refused past the trained length)."""
    table = weights.get("positions.weight")
    if table is not None:
        for seq_len in parts.data.test_seq_lens:
            require(
                seq_len <= len(table),
                "task.seq_len",
                seq_len,
                f"<= {len(table)}, the trained length, with backbone.pos_emb=learned",
            )
        weights = {**weights, "positions.weight": table[: parts.model.max_seq_len]}
    vocab = len(weights["embed.weight"])
    require(
        parts.task.vocab_size == vocab,
        "task.vocab_size",
        parts.task.vocab_size,
        f"{vocab}, the trained model's vocabulary",
    )
    parts.model.load_state_dict(weights)


def evaluate(
    run_dir: str | Path, overrides: Sequence[str] = (), out_dir: str | Path | None = None
) -> dict:
    """Test the kept weights of `run_dir` under `overrides`; returns and writes the record.
    Raises `BadInput` (before any test) for a bad override or a run without kept weights."""
    with as_bad_input():
        trained, cfg, weights = load_run(run_dir)
        cfg = apply_overrides(cfg, overrides)
        # one process on this machine, whatever devices the run trained on
        cfg.trainer.update(accelerator="auto", devices=1, strategy="auto")
        parts = build(cfg)
        load_weights(parts, weights)
    digest = config_hash(cfg)
    out = Path(out_dir) if out_dir is not None else Path(run_dir) / "eval" / digest
    torch.set_num_threads(job_threads(cfg).count)
    record = new_record(cfg, digest, out)
    record_built_parts(record, cfg, parts)
    record["weights"] = str(Path(run_dir) / WEIGHTS)
    record["evaluated"] = {
        "run_dir": str(run_dir),
        "overrides": list(overrides),
        "trained_seq_len": trained["seq_len"],
    }
    for key in ("capacity.threshold", "plateau.min_delta"):  # an older run's config may lack them
        OmegaConf.update(cfg, key, OmegaConf.select(cfg, key, default=defaults()[key]))
    precision = cfg.trainer.get("precision", "32-true")
    trainer = quiet_trainer(devices=1, precision=precision, default_root_dir=out)
    test(trainer, parts, record, cfg)
    record["status"] = OK
    write_record(out, record)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.evaluate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("run_dir", help="a run's folder, trained with checkpoint.keep=true")
    parser.add_argument("overrides", nargs="*", help="key=value, e.g. task.seq_len=128")
    parser.add_argument("--out", help="where to write (default <run dir>/eval/<config hash>)")
    args = parser.parse_args(argv)
    try:
        record = evaluate(args.run_dir, args.overrides, args.out)
    except BadInput as error:
        return refused(error)
    acc = record["metrics"].get("test/acc")
    curve = capacity_text(record["capacity"])
    print(
        f"test/acc={acc} at seq_len={record['seq_len']}", curve, f"-> {record['run_dir']}/{RECORD}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
