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
query and a key feature). A second table runs FAVOR+ through `linear_attention` (chunk mode,
as the mixer does) with: eq. 7 as written (fp32, fp64); a whole-sequence key maximum (as in
performer-pytorch, which also adds 1e-4 to every feature); this repository's
`FavorFeatureMap` (per-token query maximum, constant key shift c = max_i |w_i|^2/2, eps scaled
by e^-c) in fp32 and fp64; and reports the attention error, the fraction of non-finite outputs
and of queries whose every weight underflowed to 0.
"""

import argparse
import math
import statistics
import time
from pathlib import Path

import torch

from harness.tables import print_table, save_plot, write_csv
from models.feature_maps import FavorFeatureMap, build_feature_map
from models.kernels import linear_attention
from models.mixers.kernel_attention import denominator_eps
from studies.threads import torch_threads

HEAD_DIM = 32
DIMS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
NORMS = [0.5, 1.0, 1.5]  # |x'| = |x| d^(-1/4) of random queries and keys
NUMERIC_NORMS = [1, 2, 4, 6, 8, 10, 12, 14, 16, 20]
NUMERIC_DIMS = [64, 1024]
RANDOM_MAPS = ("favor", "favor_iid", "rff")
VARIANTS = {
    "eq7_fp32": "eq. 7 as written (no stabiliser), float32, eps 1e-6",
    "eq7_fp64": "eq. 7 as written, float64, eps 1e-6",
    "seqmax_fp32": "keys shifted by their max over the whole sequence (not causal), float32",
    "seqmax+1e-4_fp32": "the same plus 1e-4 on every feature (as performer-pytorch), float32",
    "ours_fp32": "FavorFeatureMap: query max per token, key shift c = max|w|^2/2, the mixer's "
    "eps (1e-12 e^-c), float32",
    "ours_fp64": "FavorFeatureMap in float64",
    "ours_eps1e-30_fp32": "FavorFeatureMap with eps 1e-30 instead of the mixer's, float32",
    "runmax_eps1e-6_fp32": "keys shifted by their running (prefix) max (causal), float32, eps 1e-6",
    "runmax_fp32": "the same with eps 1e-30: the fix, float32",
}


# ----------------------------------------------------------------------------- inputs


def random_qkv(norm: float, num_seqs: int, T: int, d: int, seed: int) -> tuple:
    """q, k: random directions with |x'| = norm; v ~ N(0, 1); each [num_seqs, T, d], fp64."""
    g = torch.Generator().manual_seed(seed)

    def directions() -> torch.Tensor:
        x = torch.randn(num_seqs, T, d, generator=g, dtype=torch.float64)
        return x / x.norm(dim=-1, keepdim=True) * norm * d**0.25

    return directions(), directions(), torch.randn(num_seqs, T, d, generator=g, dtype=torch.float64)


def trained_qkv(seconds: float, steps: int, seed: int = 0) -> tuple[tuple, dict]:
    """Train a small softmax model on MQAR with the harness (RecallModule + TaskDataModule +
    Lightning), stopping at `steps` or `seconds`; return the last layer's q, k, v on validation
    examples, one sequence per (example, head): [N * H, T, head_dim]."""
    import logging
    import warnings

    import lightning as L

    from harness.data import TaskDataModule
    from harness.module import RecallModule
    from models.backbone import LanguageModel
    from tasks import build_task

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    task = build_task("assoc_recall", vocab_size=64, seq_len=48, num_kv_pairs=6)
    torch.manual_seed(seed)
    model = LanguageModel(task.vocab_size, task.seq_len, "softmax", {"n_heads": 2}, d_model=64)
    data = TaskDataModule(task, 20000, 256, 64, batch_size=64, seed=seed)
    module = RecallModule(model, lr=2e-3, weight_decay=0.1, test_seq_lens=[task.seq_len])
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=steps,
        max_time={"seconds": seconds},
        val_check_interval=min(100, steps),
        check_val_every_n_epoch=None,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, datamodule=data)
        trainer.validate(module, datamodule=data, verbose=False)
    captured = {}
    mixer = model.blocks[-1].mixer
    hook = mixer.register_forward_hook(lambda m, args, out: captured.update(x=args[0]))
    model.eval()
    with torch.no_grad():
        model(data.splits["val"].columns["inputs"][:32])
        q, k, v = (t.flatten(0, 1).double() for t in mixer.split_heads(captured["x"]))
    hook.remove()
    info = {
        "steps": trainer.global_step,
        "train_s": round(time.perf_counter() - start, 1),
        "val_acc": round(float(module.val_results.get("val/acc", float("nan"))), 3),
        "mean_norm_q'": round(float((q.norm(dim=-1) * HEAD_DIM**-0.25).mean()), 2),
        "mean_norm_k'": round(float((k.norm(dim=-1) * HEAD_DIM**-0.25).mean()), 2),
    }
    return (q, k, v), info


# ----------------------------------------------------------------------------- features


def favor_raw(fmap: FavorFeatureMap, x: torch.Tensor) -> torch.Tensor:
    """Eq. 7 exactly as written, no stabiliser: exp(w_i^T x' - |x'|^2/2) / sqrt(D)."""
    xs = x * x.shape[-1] ** -0.25
    logits = xs @ fmap.omega.to(x.dtype).T - xs.pow(2).sum(-1, keepdim=True) / 2
    return torch.exp(logits) / math.sqrt(fmap.out_dim)


def build(name: str, D: int | None, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    if name == "favor_iid":
        return build_feature_map("favor", HEAD_DIM, D, orthogonal=False)
    return build_feature_map(name, HEAD_DIM, D)


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


# ----------------------------------------------------------------------------- errors


def causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()


def exact_kernel(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.exp(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))


def kernel_errors(approx: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    """Relative Frobenius error over causal pairs, raw and after the best scalar rescaling."""
    mask = causal(exact.shape[-1])
    a, e = approx[..., mask], exact[..., mask]
    raw = float((a - e).norm() / e.norm())
    alpha = float((a * e).sum() / (a * a).sum().clamp_min(1e-300))
    return raw, float((alpha * a - e).norm() / e.norm())


def exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(
        ~causal(q.shape[-2]), float("-inf")
    )
    return scores.softmax(-1) @ v


def linear_outputs(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, eps: float) -> tuple:
    """Eq. 9 through the repository's chunk kernel: (outputs, denominators phi(q)^T z).
    The denominator rides along as an extra value column of ones, unnormalised; the output is
    then numerator / (denominator + eps), exactly the kernel's own normalisation."""
    ones = torch.ones_like(v[..., :1])
    raw = linear_attention(fq[None], fk[None], torch.cat([v, ones], -1)[None], normalize=False)
    num, den = raw[0, ..., :-1], raw[0, ..., -1:]
    return num / (den + eps), den


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


# ----------------------------------------------------------------------------- study


def error_rows(qkv: tuple, label: str, dims: list[int], seeds: int) -> list[dict]:
    """Kernel and attention errors of every map on one set of q, k, v (float64)."""
    q, k, v = qkv
    exact_k, exact_o = exact_kernel(q, k), exact_attention(q, k, v)
    rows = []
    plan = [(m, D) for m in RANDOM_MAPS for D in dims] + [("taylor", None), ("elu", None)]
    for name, D in plan:
        errs = []
        for seed in range(seeds if D else 1):
            fmap = build(name, D, seed)
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


def slope(points: list[tuple[float, float]]) -> float:
    xs, ys = [math.log(x) for x, _ in points], [math.log(y) for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def slope_rows(rows: list[dict]) -> list[dict]:
    """Fitted log-log slope of error against D per (inputs, map): FAVOR+ should give ~ -0.5."""
    out = []
    for qk, name in dict.fromkeys((r["qk"], r["map"]) for r in rows if r["map"] in RANDOM_MAPS):
        sel = [r for r in rows if r["qk"] == qk and r["map"] == name]
        fits = {
            key: slope([(r["D"], r[key]) for r in sel])
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


# ----------------------------------------------------------------------------- numerics


def favor_logits(fmap: FavorFeatureMap, x: torch.Tensor) -> torch.Tensor:
    """w_i^T x' - |x'|^2 / 2: the exponents of eq. 7 (before 1/sqrt(D))."""
    xs = x * x.shape[-1] ** -0.25
    return xs @ fmap.omega.to(x.dtype).T - xs.pow(2).sum(-1, keepdim=True) / 2


def prefix_max_outputs(
    fmap: FavorFeatureMap, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """A causal fix, computed densely in fp32: key features relative to the running maximum
    m_t = max_{s<=t, i} (key logit), the shift the query at t sees. Every key of the prefix is
    then <= 1 with the largest exactly 1, as the whole-sequence maximum gives, but without
    looking ahead. A kernel would carry m_t in its state and rescale S, z when it grows (as
    rwkv4_wkv does with its running maximum)."""
    lq, lk = favor_logits(fmap, q), favor_logits(fmap, k)
    fq = torch.exp(lq - lq.amax(-1, keepdim=True)) / math.sqrt(fmap.out_dim)
    m = lk.amax(-1).cummax(-1).values  # [S, T]
    fk = torch.exp(lk[:, None, :, :] - m[:, :, None, None]) / math.sqrt(fmap.out_dim)  # [S,t,s,D]
    weights = torch.einsum("btd,btsd->bts", fq, fk).masked_fill(~causal(q.shape[-2]), 0.0)
    den = weights.sum(-1, keepdim=True)
    return (weights @ v) / (den + eps), den


def numeric_variants(fmap: FavorFeatureMap, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """name -> (outputs, denominators) of the FAVOR+ computations compared."""
    f32 = torch.float32
    q32, k32, v32 = q.to(f32), k.to(f32), v.to(f32)
    scale = 1 / math.sqrt(fmap.out_dim)
    lq, lk = favor_logits(fmap, q32), favor_logits(fmap, k32)
    fq = torch.exp(lq - lq.amax(-1, keepdim=True)) * scale
    fk = torch.exp(lk - lk.amax((-1, -2), keepdim=True)) * scale  # max over the whole sequence
    eps = denominator_eps(fmap)
    out = {
        "eq7_fp32": linear_outputs(favor_raw(fmap, q32), favor_raw(fmap, k32), v32, 1e-6),
        "eq7_fp64": linear_outputs(favor_raw(fmap, q), favor_raw(fmap, k), v, 1e-6),
        "seqmax_fp32": linear_outputs(fq, fk, v32, 1e-6),
        "seqmax+1e-4_fp32": linear_outputs(fq + 1e-4 * scale, fk + 1e-4 * scale, v32, 1e-6),
        "ours_fp32": linear_outputs(fmap(q32, is_query=True), fmap(k32), v32, eps),
        "ours_fp64": linear_outputs(fmap(q, is_query=True), fmap(k), v, eps),
        "ours_eps1e-30_fp32": linear_outputs(fmap(q32, is_query=True), fmap(k32), v32, 1e-30),
        "runmax_eps1e-6_fp32": prefix_max_outputs(fmap, q32, k32, v32, 1e-6),
        "runmax_fp32": prefix_max_outputs(fmap, q32, k32, v32, 1e-30),
    }
    return out


def numeric_rows(dims: list[int], norms: list[float], trained: tuple | None) -> list[dict]:
    """Each computation against the estimator itself (eq. 7 in fp64 with eps = 0): the
    numerical error, and against exact softmax (the statistical error shows there too)."""
    inputs = [(f"random |x'|={r}", random_qkv(r, 4, 64, HEAD_DIM, seed=7)) for r in norms]
    if trained is not None:
        q, k, v = trained
        inputs.append(("trained", (q[:16], k[:16], v[:16])))
    rows = []
    for D in dims:
        fmap = build("favor", D, seed=0)
        for label, (q, k, v) in inputs:
            exact = exact_attention(q, k, v)
            reference, _ = linear_outputs(favor_raw(fmap, q), favor_raw(fmap, k), v, 0.0)
            for name, (out, den) in numeric_variants(fmap, q, k, v).items():
                out = out.double()
                finite = torch.isfinite(out).all(-1)
                ok = finite.any()
                rows.append({
                    "D": D,
                    "qk": label,
                    "variant": name,
                    "numeric_err": relative(out[finite], reference[finite]) if ok else math.nan,
                    "attn_rel_err": relative(out[finite], exact[finite]) if ok else math.nan,
                    "nonfinite_frac": round(1 - float(finite.double().mean()), 4),
                    "zero_den_frac": round(float((den == 0).double().mean()), 4),
                })  # fmt: skip
    return rows


def numeric_pivot(rows: list[dict], value: str) -> list[dict]:
    out: dict = {}
    for r in rows:
        out.setdefault((r["D"], r["qk"]), {"D": r["D"], "qk": r["qk"]})[r["variant"]] = r[value]
    return list(out.values())


def breakdown_rows(rows: list[dict], tolerance: float = 1e-2) -> list[dict]:
    """Per variant and D: the smallest random-input norm |x'| where it stops computing the
    estimator (numerical error > tolerance, non-finite outputs, or every weight underflowed)."""
    out = []
    for D, variant in dict.fromkeys((r["D"], r["variant"]) for r in rows):
        broken = [
            float(r["qk"].split("=")[1])
            for r in rows
            if r["D"] == D and r["variant"] == variant and r["qk"].startswith("random")
            and (r["nonfinite_frac"] or r["zero_den_frac"] or not r["numeric_err"] < tolerance)
        ]  # fmt: skip
        out.append({"D": D, "variant": variant, "breaks_at_norm": min(broken) if broken else "-"})
    return out


# ----------------------------------------------------------------------------- main


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
