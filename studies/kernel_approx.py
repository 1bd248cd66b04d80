"""How well each feature map approximates softmax: `python -m studies.kernel_approx [--quick]`.

The claim that more features approximate softmax better (docs/background.md, eq. 6-7),
measured. For queries and keys q, k (head dim d) and x' = x d^(-1/4), the exact softmax kernel is
kappa(q, k) = exp(q^T k / sqrt(d)) = exp(q'^T k') (eq. 1). For each feature map phi:

- kernel error: ||phi(Q) phi(K)^T - kappa(Q, K)||_F / ||kappa(Q, K)||_F over the causal pairs
  of each sequence, and the same after the best single rescaling of phi(Q) phi(K)^T (the only
  fair number for `elu`, which does not estimate kappa at all);
- attention error: ||o_hat - o||_F / ||o||_F, o exact causal softmax attention (eq. 1), o_hat
  linear attention (eq. 9) with the same features, both in float64.

Maps: `favor` (eq. 7, orthogonal and iid directions) and `rff` (eq. 6) over D = 16 .. 4096,
averaged over independent draws; `taylor` (D = 1 + d + d^2) and `elu` (D = d) are single
points. `rff` estimates the Gaussian kernel exp(-|q' - k'|^2 / 2); its kernel error is
measured after the exact correction exp(|q'|^2/2 + |k'|^2/2) that turns it into kappa, its
attention error as the mixer uses it (uncorrected). FAVOR+ features are eq. 7 as written
(no stabiliser), in float64, so the numbers are the estimator's, not rounding's.

Inputs: random directions scaled to |x'| in NORMS, and queries/keys/values of a small softmax
model trained briefly on MQAR through the harness (`RecallModule`, Lightning).

Numerics: eq. 7 in float32 underflows for large |x'| (exp(-|x'|^2/2) and the product of a
query and a key feature). Further tables (`studies.favor_numerics`) show where each way of
computing FAVOR+ breaks.
"""

import argparse
import math
import statistics
import time
from pathlib import Path

import torch

from harness.report.plain_table import print_table, write_csv
from studies.favor_numerics import (
    NUMERIC_DIMS,
    NUMERIC_NORMS,
    VARIANTS,
    breakdown_rows,
    numeric_pivot,
    numeric_rows,
)
from studies.measure import loglog_slope
from studies.plots import save_plot
from studies.reference import (
    HEAD_DIM,
    causal,
    exact_attention,
    exact_kernel,
    favor_raw,
    linear_outputs,
    random_qkv,
    relative,
    study_feature_map,
)
from studies.threads import torch_threads
from studies.trained_qkv import trained_qkv

DIMS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
NORMS = [0.5, 1.0, 1.5]  # |x'| = |x| d^(-1/4) of random queries and keys
RANDOM_MAPS = ("favor", "favor_iid", "rff")


def kernel_features(name: str, fmap: torch.nn.Module, q: torch.Tensor, k: torch.Tensor) -> tuple:
    """(features whose dot product estimates kappa, features the mixer attends with)."""
    if name.startswith("favor"):
        fq, fk = favor_raw(fmap, q), favor_raw(fmap, k)
        return (fq, fk), (fq, fk)
    fq, fk = fmap(q, is_query=True), fmap(k)
    if name == "rff":  # Gaussian kernel -> softmax kernel: times exp(|q'|^2/2) exp(|k'|^2/2)
        half = [(x * x.shape[-1] ** -0.25).pow(2).sum(-1, keepdim=True) / 2 for x in (q, k)]
        return (fq * half[0].exp(), fk * half[1].exp()), (fq, fk)
    return (fq, fk), (fq, fk)


def kernel_errors(approx: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    """Relative Frobenius error over causal pairs, raw and after the best scalar rescaling."""
    mask = causal(exact.shape[-1])
    a, e = approx[..., mask], exact[..., mask]
    raw = float((a - e).norm() / e.norm())
    alpha = float((a * e).sum() / (a * a).sum().clamp_min(1e-300))
    return raw, float((alpha * a - e).norm() / e.norm())


def error_rows(qkv: tuple, label: str, dims: list[int], seeds: int) -> list[dict]:
    """Kernel and attention errors of every map on one set of q, k, v (float64)."""
    q, k, v = qkv
    exact_k, exact_o = exact_kernel(q, k), exact_attention(q, k, v)
    rows = []
    plan = [(m, D) for m in RANDOM_MAPS for D in dims] + [("taylor", None), ("elu", None)]
    for name, D in plan:
        errs = []
        for seed in range(seeds if D else 1):
            fmap = study_feature_map(name, D, seed)
            (eq, ek), (aq, ak) = kernel_features(name, fmap, q, k)
            kernel = kernel_errors(eq @ ek.transpose(-1, -2), exact_k)
            out, _ = linear_outputs(aq, ak, v, eps=0.0)
            errs.append((*kernel, relative(out, exact_o)))
        mean = [statistics.fmean(e[i] for e in errs) for i in range(3)]
        rows.append({
            "qk": label,
            "map": name,
            "D": D or fmap.out_dim,
            "kernel_rel_err": mean[0],
            "kernel_rel_err_scaled": mean[1],
            "attn_rel_err": mean[2],
            "draws": len(errs),
        })  # fmt: skip
    return rows


def slope_rows(rows: list[dict]) -> list[dict]:
    """Fitted log-log slope of error against D per (inputs, map): FAVOR+ should give ~ -0.5."""
    out = []
    for qk, name in dict.fromkeys((r["qk"], r["map"]) for r in rows if r["map"] in RANDOM_MAPS):
        sel = [r for r in rows if r["qk"] == qk and r["map"] == name]
        fits = {
            key: loglog_slope([(r["D"], r[key]) for r in sel])
            for key in ("kernel_rel_err", "attn_rel_err")
            if all(0 < r[key] < math.inf for r in sel)
        }
        out.append({
            "qk": qk,
            "map": name,
            "slope_kernel": fits.get("kernel_rel_err"),
            "slope_attn": fits.get("attn_rel_err"),
            "D_range": f"{sel[0]['D']}-{sel[-1]['D']}",
        })  # fmt: skip
    return out


def plot(rows: list[dict], slopes: list[dict], path: Path) -> None:
    """Error vs D, log-log: random inputs (kernel, attention) and trained inputs, with the
    fitted slopes in the labels and a 1/sqrt(D) guide."""
    fitted = {(s["qk"], s["map"]): s for s in slopes}

    def series(select: str, key: str) -> dict:
        out = {}
        for qk, name in dict.fromkeys((r["qk"], r["map"]) for r in rows if select in r["qk"]):
            sel = [r for r in rows if r["qk"] == qk and r["map"] == name]
            fit = fitted.get((qk, name), {}).get(f"slope_{key.split('_')[0]}")
            tag = f" (slope {fit:.2f})" if fit is not None else ""
            out[f"{name}, {qk}{tag}"] = ([r["D"] for r in sel], [r[key] for r in sel])
        return out

    Ds = sorted({r["D"] for r in rows if r["map"] == "favor"})
    guide = {"1/sqrt(D)": (Ds, [D**-0.5 for D in Ds], {"color": "black", "linestyle": ":"})}
    common = {"xlabel": "feature dim D", "ylabel": "relative error", "logx": True, "logy": True}
    panels = [
        {"series": {**series("random", "kernel_rel_err"), **guide},
         "title": "kernel phi(q)^T phi(k) vs exp(q^T k/sqrt(d)), random q, k", **common},
        {"series": {**series("random", "attn_rel_err"), **guide},
         "title": "attention output vs softmax, random q, k", **common},
        {"series": {
            **{f"kernel: {k}": v for k, v in series("trained", "kernel_rel_err").items()},
            **{f"attention: {k}": (*v, {"linestyle": "--"})
               for k, v in series("trained", "attn_rel_err").items()},
        }, "title": "trained q, k (solid: kernel, dashed: attention)", **common},
    ]  # fmt: skip
    save_plot(path, panels)


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    p = argparse.ArgumentParser(
        prog="python -m studies.kernel_approx", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", default="bench_out")
    p.add_argument("--quick", action="store_true", help="fewer D, draws, inputs; a short training")
    p.add_argument("--train-seconds", type=float, default=60.0)
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (small tensors: 1 is fastest)"
    )
    args = p.parse_args(argv)
    with torch_threads(args.threads):
        return run_main(args)


def run_main(args: argparse.Namespace) -> dict[str, list[dict]]:
    started = time.perf_counter()
    dims = [16, 64, 256, 1024] if args.quick else DIMS
    seeds, norms = (3, [1.0]) if args.quick else (5, NORMS)
    rows = []
    for r in norms:
        rows += error_rows(random_qkv(r, 8, 64, HEAD_DIM, seed=0), f"random |x'|={r}", dims, seeds)
    trained, info = trained_qkv(
        args.train_seconds / 4 if args.quick else args.train_seconds,
        steps=100 if args.quick else 2000,
    )
    print(f"trained softmax model (MQAR, vocab 64, T 48, 6 pairs): {info}")
    rows += error_rows(trained, "trained", dims, seeds)
    slopes = slope_rows(rows)
    numeric = numeric_rows(
        [64] if args.quick else NUMERIC_DIMS, [1, 8, 16] if args.quick else NUMERIC_NORMS, trained
    )
    breaks = breakdown_rows(numeric)
    print("\nrelative error against exact softmax (float64; favor/rff averaged over draws)")
    print_table(rows, ["qk", "map", "D", "kernel_rel_err", "kernel_rel_err_scaled", "attn_rel_err"])
    print("\nfitted log-log slope of error vs D (FAVOR+ theory: -0.5)")
    print_table(slopes)
    print("\nnumerics of FAVOR+: relative error against the estimator in float64 (eps 0)")
    for key, text in VARIANTS.items():
        print(f"  {key:>16}: {text}")
    print_table(numeric_pivot(numeric, "numeric_err"))
    print("\nsame computations: relative error against exact softmax attention")
    print_table(numeric_pivot(numeric, "attn_rel_err"))
    print("\nfraction of queries whose every weight underflowed to 0 (denominator 0)")
    print_table(numeric_pivot(numeric, "zero_den_frac"))
    print("\nwhere each computation breaks: smallest random |x'| with numeric error > 1e-2,")
    print("non-finite outputs or a query whose every weight underflowed")
    print_table(breaks)
    out = Path(args.out)
    write_csv(rows, out / "kernel_approx.csv")
    write_csv(slopes, out / "kernel_approx_slopes.csv")
    write_csv(numeric, out / "kernel_approx_numerics.csv")
    write_csv([info], out / "kernel_approx_trained.csv")
    plot(rows, slopes, out / "kernel_approx.png")
    elapsed = time.perf_counter() - started
    print(f"\nwrote {out}/kernel_approx*.csv and kernel_approx.png in {elapsed:.0f} s")
    return {
        "errors": rows,
        "slopes": slopes,
        "numerics": numeric,
        "breaks": breaks,
        "trained": [info],
    }


if __name__ == "__main__":
    main()
