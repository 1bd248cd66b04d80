"""The training recipe: which parameters decay, the learning-rate schedule, gradient clipping,
stopping on a plateau or a threshold, the final validation, and the convergence verdict."""

import math

import lightning as L
import pytest
import torch
from torch import nn

import harness.train
from harness.config.refusal import BadInput
from harness.readouts.convergence import converged, plateaued, still_rising
from harness.train import run
from harness.training.build import build
from harness.training.optimizer import lr_factor, param_groups
from models.backbone import LanguageModel
from models.mixers.base import Mixer
from tests.conftest import SMALL_RECALL

TINY = [*SMALL_RECALL, "data.num_train=2000", "data.num_val=200", "data.num_test=200", "threads=1"]


def names_by_decay(groups: list[dict]) -> dict[bool, set[str]]:
    return {group["weight_decay"] > 0: set(group["names"]) for group in groups}


def test_only_weight_matrices_decay_and_rwkv_keeps_its_decays() -> None:
    torch.manual_seed(0)
    model = LanguageModel(11, 16, "rwkv", d_model=16, n_layers=1, short_conv=4)
    groups = param_groups(model, 0.1)
    decayed, kept = names_by_decay(groups)[True], names_by_decay(groups)[False]
    assert decayed | kept == {name for name, _ in model.named_parameters()}
    matrices = {
        f"{name}.weight"
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear | nn.Conv1d)
    }
    assert decayed == matrices
    rwkv = {"time_decay", "time_first", "mu_k", "mu_v", "mu_r", "cmu_k", "cmu_r"}
    assert {f"blocks.0.mixer.{name}" for name in rwkv} <= kept
    assert {"embed.weight", "positions.weight", "norm.weight", "norm.bias"} <= kept
    assert names_by_decay(param_groups(model, 0.1, decay="all")) == {
        True: decayed | kept
    }  # the recipe before: everything decays


class MarkedMixer(Mixer):
    """A mixer with a 2-D parameter that the matrix rule would decay, marked to be kept."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.decay_table = nn.Parameter(torch.ones(2, d_model))

    def no_weight_decay(self) -> set[str]:
        return {"decay_table"}


def test_a_mixer_marks_its_own_parameters_out_of_weight_decay() -> None:
    model = nn.Sequential(MarkedMixer(4))
    assert names_by_decay(param_groups(model, 0.1)) == {
        True: {"0.proj.weight"},
        False: {"0.decay_table"},
    }


def test_adamw_shrinks_only_the_decayed_parameters() -> None:
    torch.manual_seed(0)
    model = LanguageModel(11, 8, "linear", d_model=8, n_layers=1)
    groups = param_groups(model, 0.5)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(groups, lr=0.1)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # no gradient: only the decay moves a parameter
    optimizer.step()
    decayed = names_by_decay(groups)[True]
    for name, p in model.named_parameters():
        factor = 1 - 0.1 * 0.5 if name in decayed else 1.0
        torch.testing.assert_close(p.detach(), before[name] * factor)


def test_lr_factor_warms_up_linearly_then_follows_a_cosine_to_the_floor() -> None:
    total, warmup, floor = 100, 10, 0.1
    factors = [lr_factor(step, total, warmup, floor) for step in range(total + 5)]
    assert factors[:warmup] == pytest.approx([(s + 1) / warmup for s in range(warmup)])
    assert factors[warmup] == pytest.approx(1.0)
    after = factors[warmup : total + 1]
    assert all(a > b for a, b in zip(after, after[1:], strict=False))  # strictly decreasing
    assert factors[warmup + (total - warmup) // 2] == pytest.approx((1 + floor) / 2)
    assert factors[total] == factors[-1] == pytest.approx(floor)  # stays at the floor
    assert lr_factor(3, total, 0, floor, "constant") == lr_factor(99, total, 0, floor, "constant")
    assert lr_factor(0, total, 0, floor) == 1.0  # no warm-up: the peak at once


class Recorder(L.Callback):
    """Per optimiser step: the learning rate used, and the gradient norm after clipping."""

    def __init__(self) -> None:
        self.lrs: list[float] = []
        self.grad_norms: list[float] = []

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        optimizer = trainer.optimizers[0]

        def after_step(opt, args, kwargs) -> None:
            grads = [p.grad for group in opt.param_groups for p in group["params"]]
            norms = torch.stack([g.norm() for g in grads if g is not None])
            self.grad_norms.append(float(norms.norm()))
            self.lrs.append(opt.param_groups[0]["lr"])

        optimizer.register_step_post_hook(after_step)


def fit_recorded(make_cfg, overrides: list[str]) -> tuple[Recorder, L.Trainer]:
    cfg = make_cfg([*TINY, *overrides])
    parts = build(cfg)
    recorder = Recorder()
    trainer = L.Trainer(
        max_steps=cfg.trainer.max_steps,
        gradient_clip_val=cfg.optim.grad_clip,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        limit_val_batches=0,
        callbacks=[recorder],
    )
    trainer.fit(parts.module, datamodule=parts.data)
    return recorder, trainer


def test_the_trainer_steps_the_schedule_once_per_optimiser_step(make_cfg) -> None:
    overrides = ["trainer.max_steps=20", "optim.warmup_fraction=0.25", "optim.lr=0.01"]
    recorder, _ = fit_recorded(make_cfg, overrides)
    # the lr in effect at step s is lr * lr_factor(s); the hook reads it after the step,
    # when the scheduler has not moved yet
    assert recorder.lrs == pytest.approx([0.01 * lr_factor(s, 20, 5, 0.1) for s in range(20)])


def test_gradients_are_clipped_to_optim_grad_clip(make_cfg) -> None:
    clipped, _ = fit_recorded(make_cfg, ["trainer.max_steps=10", "optim.grad_clip=0.01"])
    free, _ = fit_recorded(make_cfg, ["trainer.max_steps=10", "optim.grad_clip=null"])
    assert max(clipped.grad_norms) <= 0.01 * (1 + 1e-4)
    assert min(free.grad_norms) > 0.01  # without the clip the same steps have larger norms


@pytest.mark.parametrize(
    ("curve", "rising"),
    [
        ([[100, 0.1]], True),  # too short to judge
        ([[s, 0.13] for s in range(100, 1600, 100)], False),  # flat: a plateau
        ([[100, 0.1], [200, 0.5], [300, 0.9], [400, 0.95], [500, 0.97]], True),
        ([[100, 0.1], [200, 0.1], [300, 0.1], [400, 0.1], [500, 0.6]], True),  # a late jump
        ([[100, 0.5], [200, 0.9], [300, 0.905], [400, 0.909], [500, 0.908]], False),  # < delta
        ([[100, 0.5], [200, 0.9], [300, 0.88], [400, 0.91], [500, 0.85]], False),  # = delta
        ([[100, 0.5], [200, 0.9], [300, 0.88], [400, 0.85], [500, 0.9101]], True),
    ],
)
def test_still_rising_on_synthetic_curves(curve: list, rising: bool) -> None:
    # min_delta 0.01 (no validation size): rising when the last third of the steps beats
    # everything before it by > 0.01
    assert still_rising(curve, min_delta=0.01) is rising
    assert converged(curve, None, 0.01, floor=0.0) is (not rising)
    assert converged(curve, 0.1, 0.01, floor=0.0)  # every curve here reached 0.1


@pytest.mark.parametrize(
    ("curve", "floor", "plateau"),
    [
        ([[s, 0.13] for s in range(100, 1600, 100)], 0.125, False),  # flat at the floor
        ([[s, 0.30] for s in range(100, 1600, 100)], 0.05, True),  # flat well above it
        # a point or two above MQAR's 1/8: not a tenth of the way to 1, no binding learned
        ([[s, 0.145] for s in range(100, 1600, 100)], 0.125, False),
        ([[s, 0.22] for s in range(100, 1600, 100)], 0.125, True),  # > 0.125 + 0.0875
        ([[100, 0.12], [200, 0.2], [300, 0.3], [400, 0.3], [500, 0.3], [600, 0.3]], 0.125, True),
        ([[100, 0.12], [200, 0.2], [300, 0.3], [400, 0.3], [500, 0.3], [600, 0.3]], 0.295, False),
        ([], 0.0, False),
    ],
)
def test_a_plateau_counts_only_above_the_binding_free_floor(curve, floor, plateau) -> None:
    """Before its jump a recall model sits at the floor for an unpredictable number of steps:
    a flat curve there, or a point or two above it, is neither a reason to stop nor a
    convergence (the floor is left a tenth of the way to perfect recall)."""
    assert plateaued(curve, floor, min_delta=0.01) is plateau
    assert converged(curve, None, 0.01, floor) is plateau


FLAT_RUN = ["optim.lr=1e-9", "trainer.val_check_interval=5"]
"""lr 1e-9: the weights hardly move, validation accuracy stays flat at chance."""


def test_a_run_at_the_floor_is_not_stopped_and_not_converged(make_cfg) -> None:
    # flat at chance, which is the floor here
    record = run(make_cfg([*TINY, *FLAT_RUN, "trainer.max_steps=20"]))
    train = record["train"]
    assert train["stopped_by"] == "max_steps" and train["steps"] == 20
    assert train["converged"] is False
    assert max(acc for _, acc in train["val_curve"]) <= train["floor"] + 0.01
    assert train["floor"] == pytest.approx(0.25, abs=0.05)  # 4 pairs: 1 in 4 in context


def test_a_plateau_never_cuts_the_schedule_short(make_cfg, monkeypatch) -> None:
    # the same flat run, judged against a floor below it: a plateau, so converged, and yet
    # trained to the end of its budget (the cosine's low learning rates included)
    monkeypatch.setattr(harness.train, "validation_floor", lambda parts: -1.0)
    record = run(make_cfg([*TINY, *FLAT_RUN, "trainer.max_steps=30"]))
    train = record["train"]
    assert train["stopped_by"] == "max_steps" and train["steps"] == 30
    assert [s for s, _ in train["val_curve"]] == [5, 10, 15, 20, 25, 30]
    assert train["converged"] is True  # judged by the plateau
    num_val = record["config"]["data"]["num_val"]
    acc = train["val_curve"][-1][1]
    assert train["val_standard_error"] == pytest.approx(
        (acc * (1 - acc) / num_val) ** 0.5, abs=1e-6
    )


def test_the_final_weights_are_validated_and_an_unfinished_rise_is_not_converged(
    make_cfg,
) -> None:
    overrides = ["trainer.max_steps=25", "trainer.val_check_interval=10", "optim.lr=0.01"]
    record = run(make_cfg([*TINY, *overrides, "early_stop_acc=null"]))
    curve = record["train"]["val_curve"]
    assert [step for step, _ in curve] == [10, 20, 25]  # 25: the final validation
    assert record["metrics"]["val/acc"] == pytest.approx(curve[-1][1], abs=1e-6)
    assert record["train"]["stopped_by"] == "max_steps"
    assert record["train"]["converged"] is False  # one validation before its last third
    assert set(record["metrics"]) >= {"test/baseline/chance", "test/baseline/in_context"}
    assert record["metrics"]["test/baseline/in_context"] == pytest.approx(1 / 4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["early_stop_acc=2"], r"early_stop_acc=2.0 is invalid: must be a number in \(0, 1\] \(nu"),
        (["optim.schedule=linear"], "optim.schedule='linear' is invalid"),
        (["optim.decay=some"], "optim.decay='some' is invalid"),
        (["optim.warmup_fraction=1.5"], "optim.warmup_fraction=1.5 is invalid"),
        (["optim.grad_clip=0"], "optim.grad_clip=0.0 is invalid"),
        (["+trainer.gradient_clip_val=0.5"], "lives in optim.grad_clip"),
        (["capacity.bound_multiple=0.5"], "capacity.bound_multiple=0.5 is invalid"),
        (["plateau.min_delta=-1"], "plateau.min_delta=-1.0 is invalid"),
    ],
)
def test_bad_recipe_settings_are_refused_before_training(make_cfg, overrides, message) -> None:
    with pytest.raises(BadInput, match=message):
        build(make_cfg([*TINY, *overrides]))


def test_warmup_and_floor_defaults_are_the_documented_ones(make_cfg) -> None:
    cfg = make_cfg(TINY)
    assert cfg.optim.decay == "matrices" and cfg.optim.schedule == "cosine"
    assert cfg.backbone.short_conv == 4 and cfg.optim.grad_clip == 1.0
    assert math.isclose(cfg.optim.warmup_fraction, 0.05)
