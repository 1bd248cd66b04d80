"""The approximation study and the sharpness probe reproduce the claims of docs/background.md
(eq. 6-7, eq. 12)."""

from pathlib import Path

import pytest
import torch

from studies import kernel_approx, sharpness


def test_favor_error_falls_as_one_over_sqrt_d(tmp_path: Path) -> None:
    rows = kernel_approx.error_rows(
        kernel_approx.random_qkv(1.0, 8, 64, kernel_approx.HEAD_DIM, seed=0),
        "random",
        dims=[16, 64, 256, 1024],
        seeds=3,
    )
    for name in ("favor", "favor_iid"):
        errs = [r["kernel_rel_err"] for r in rows if r["map"] == name]
        assert errs == sorted(errs, reverse=True), errs  # decreases with D
        fit = next(s for s in kernel_approx.slope_rows(rows) if s["map"] == name)
        assert -0.8 < fit["slope_kernel"] < -0.3, fit
        assert fit["slope_attn"] < -0.3, fit
    taylor = next(r for r in rows if r["map"] == "taylor")
    assert taylor["D"] == 1 + 32 + 32**2 and taylor["kernel_rel_err"] < 0.05  # small logits


def test_features_estimate_the_softmax_kernel_without_bias() -> None:
    q, k, _ = kernel_approx.random_qkv(0.7, 1, 16, kernel_approx.HEAD_DIM, seed=3)
    exact = kernel_approx.exact_kernel(q, k)
    for name in ("favor", "rff"):
        fmap = kernel_approx.build(name, 8192, seed=0)
        (fq, fk), _ = kernel_approx.kernel_features(name, fmap, q, k)
        approx = fq @ fk.transpose(-1, -2)
        assert torch.allclose(approx, exact, rtol=0.1), (name, (approx / exact - 1).abs().max())


def test_numerics_running_max_is_exact_where_the_plain_form_breaks() -> None:
    rows = kernel_approx.numeric_rows([64], [1, 16], trained=None)
    get = {(r["qk"], r["variant"]): r for r in rows}
    for variant in kernel_approx.VARIANTS:  # every form computes the estimator at small norms
        assert get[("random |x'|=1", variant)]["numeric_err"] < 1e-3, variant
    assert get[("random |x'|=16", "eq7_fp32")]["zero_den_frac"] == 1.0  # all underflow
    assert get[("random |x'|=16", "runmax_fp32")]["numeric_err"] < 1e-4
    assert get[("random |x'|=16", "runmax_fp32")]["zero_den_frac"] == 0.0


@pytest.mark.slow
def test_kernel_approx_quick_cli_writes_tables(tmp_path: Path) -> None:
    out = kernel_approx.main(["--quick", "--out", str(tmp_path), "--train-seconds", "20"])
    fit = next(s for s in out["slopes"] if s["map"] == "favor" and s["qk"].startswith("random"))
    assert -0.8 < fit["slope_kernel"] < -0.3
    assert out["trained"][0]["steps"] > 0
    for name in ("kernel_approx.csv", "kernel_approx_numerics.csv", "kernel_approx.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_sharpness_softmax_goes_one_hot_feature_maps_stay_bounded(tmp_path: Path) -> None:
    out = sharpness.main(["--quick", "--out", str(tmp_path)])
    rows = out["rows"]
    top = max(r["beta"] for r in rows)

    def at(label: str, beta: float) -> dict:
        return next(r for r in rows if r["map"] == label and r["beta"] == beta)

    assert at("softmax", top)["target_weight"] > 0.99
    assert at("softmax", 1.0)["target_weight"] < 0.5  # it is the scaling that sharpens it
    for label in ("elu", "favor D=64", "favor D=1024"):
        weight, bound = at(label, top)["target_weight"], at(label, top)["bound"]
        assert weight <= bound + 1e-9 < 0.5, (label, weight, bound)
    assert at("elu", top)["target_weight"] < 0.1
    assert at("taylor", top)["target_weight"] < 0.6
    assert at("rff D=64", top)["min_weight"] < 0  # negative weights (pitfall 2)
    assert (tmp_path / "sharpness.png").stat().st_size > 0
