"""Every user mistake is refused with one line naming the full key, exit 2, before anything
runs; a refused run leaves no folder; inside a sweep a refusal is a `failed` record."""

from pathlib import Path

import pytest

from harness.config.refusal import BadInput
from harness.records.files import read_summary
from harness.training.build import build, check_added_keys
from tests.conftest import SMALL_RECALL, run_cli

REFUSED = [
    (["seed=-1"], "seed=-1 is invalid: must be a number >= 0"),
    (["early_stop_acc=2"], "early_stop_acc=2.0 is invalid: must be a number in (0, 1]"),
    (["optim.lr=0"], "optim.lr=0.0 is invalid: must be a number > 0"),
    (["optim.grad_clip=-1"], "optim.grad_clip=-1.0 is invalid"),
    (["trainer.val_check_interval=-1"], "trainer.val_check_interval=-1 is invalid"),
    (["backbone.d_model=abc"], "backbone.d_model='abc' is invalid"),
    (["backbone.n_layers=0"], "backbone.n_layers=0 is invalid"),
    (["model=favor", "model.feature_dim=0"], "model.feature_dim=0 is invalid"),
    (["task.seq_len=10"], "task.seq_len=10 is invalid"),
    (["task.eval_seq_lens=[abc]"], "task.eval_seq_lens='abc' is invalid"),
    (["task.eval_seq_lens=[48]"], "(backbone.pos_emb=none evaluates at any length)"),
    (["task.eval_seq_lens=[3]"], "task.eval_seq_lens=[3] is invalid: must be lengths that hold"),
    (
        ["model=hybrid", "model.layers=[gated_deltanet,{name:softmax,n_heads:3}]"],
        "model.layers[1].n_heads=3 is invalid: must be a divisor of d_model=",
    ),
    (
        ["model=hybrid"],
        "model.layers=None is invalid: must be set for model=hybrid: one mixer per layer, bottom "
        "first, e.g. 'model.layers=[gated_deltanet,softmax]'",
    ),
    (["model=hybrid", "model.layers=[gla,sofmax]"], "model.layers[1].name='sofmax' is invalid"),
    (
        ["model=hybrid", "model.layers=[gla,softmax,gla]"],
        "backbone.n_layers=2 is invalid: must be a multiple of the 3 entries of model.layers",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), REFUSED)
def test_refusal_names_the_full_key(make_cfg, overrides, message) -> None:
    with pytest.raises(BadInput) as caught:
        build(make_cfg([*SMALL_RECALL, *overrides]))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_null_early_stop_means_never_stop_on_accuracy(make_cfg) -> None:
    build(make_cfg([*SMALL_RECALL, "early_stop_acc=null"]))


KNOWN = {"optim", "optim.lr", "trainer", "trainer.max_steps", "task", "task.eval_seq_lens"}
GROUPS = {"model", "task", "hydra/launcher", "experiment"}


@pytest.mark.parametrize(
    ("override", "hint"),
    [
        ("+lr=0.5", "did you mean optim.lr?"),
        ("+max_steps=100", "did you mean trainer.max_steps?"),
        ("+optim.momentum=0.9", "--cfg job"),
        ("+model.feture_dim=8", "did you mean model.feature_dim?"),
        ("++lr=0.5", "did you mean optim.lr?"),
    ],
)
def test_added_keys_nothing_reads_are_refused(override: str, hint: str) -> None:
    with pytest.raises(BadInput, match="is refused") as caught:
        check_added_keys([override], KNOWN, GROUPS)
    assert hint in str(caught.value)


@pytest.mark.parametrize(
    "override",
    ["+task.eval_seq_lens=[48]", "+trainer.limit_val_batches=2", "+experiment=x", "++optim.lr=1"],
)
def test_added_keys_that_are_read_pass(override: str) -> None:
    check_added_keys([override], KNOWN, GROUPS)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["+lr=0.5"], "error: +lr=0.5 is refused: lr is not a setting (did you mean optim.lr?)"),
        (["model=favor", "model.feature_dim=0"], "error: model.feature_dim=0 is invalid"),
        (["optim.lr=abc"], "error: optim.lr=abc is refused: Value 'abc' of type 'str' could"),
        (
            ["model=hybrid", "model.layers.1.n_heads=3"],
            "error: model.layers.1.n_heads=3 is refused: Key '1' is not in struct",
        ),
    ],
)
def test_cli_refusal_is_one_line_exit_2_and_leaves_no_folder(tmp_path: Path, args, line) -> None:
    result = run_cli(tmp_path, *args, "hydra.run.dir=outputs/day/time", "logger=none")
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [result.stderr.strip().splitlines()[-1]]
    assert result.stderr.strip().startswith(line)
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_vocab_size_refusal_says_which_setting_caused_it(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "task.vocab_size=8", "hydra.run.dir=out", "logger=none")
    assert "invalid with task.vocab_size=8" in result.stderr


def test_added_key_in_a_sweep_is_refused_before_any_job(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "-m", "model=softmax,linear", "+lr=0.1,0.2", "hydra.sweep.dir=s")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: +lr=0.1,0.2 is refused: lr is not a setting (did you mean optim.lr?)"
    )
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_refusal_inside_a_sweep_is_a_failed_record_and_the_sweep_goes_on(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    small = [a for a in SMALL_RECALL if not a.startswith("trainer.max_steps")]
    result = run_cli(
        tmp_path,
        "-m",
        *small,
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "threads=1",
        "model.n_heads=3,2",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 1  # a job failed; the others ran
    assert "Traceback" not in result.stderr and "Error executing job" not in result.stderr
    records = read_summary(sweep)
    assert sorted(r["status"] for r in records) == ["failed", "ok"]
    failed = next(r for r in records if r["status"] == "failed")
    assert failed["error"].startswith("model.n_heads=3 is invalid: must be a divisor")
    assert "[1/2]  failed" in result.stdout and "model.n_heads=3 is invalid" in result.stdout
    assert "1 ok, 0 diverged, 1 failed -> python -m harness.report" in result.stdout
