"""The sharpness theorem, measured: `python -m studies.sharpness [--out DIR] [--quick]`.

docs/background.md, section 10 (eq. 12): softmax can make its attention arbitrarily close to
one-hot by scaling the logits, linear attention cannot. Setup: T unit keys k_j (|k'| = 1,
x' = x d^(-1/4)), a query pointing at key j*, q = beta k_j*, beta = 1/16 .. 1024. The
weight on key j is
    softmax:      exp(q^T k_j / sqrt(d)) / sum_l exp(q^T k_l / sqrt(d))          (eq. 1)
    feature map:  phi(q)^T phi(k_j) / sum_l phi(q)^T phi(k_l)                       (eq. 12)
and we report, averaged over every key as the target j* and over feature draws, the weight
on the target and the largest weight on any key. Softmax's tends to 1. For a non-negative
map (elu, favor, taylor) the weight is a convex combination over features i of
phi(k_j)_i / sum_l phi(k_l)_i, so it can never exceed `bound` = max_i of that ratio, whatever
the query: bounded away from 1 unless one key owns a feature. `taylor`'s kernel
1 + s + s^2/2 (s = q^T k / sqrt(d)) is positive but its features are not; as beta grows its
weights tend to s_j^2 / sum_l s_l^2, again bounded. `rff` and `identity` produce negative
weights (pitfall 2): their weights need not lie in [0, 1] at all, and the table reports the
most negative weight too. All in float64; FAVOR+ through `FavorFeatureMap` (its
per-query shift cancels in the ratio, so large beta does not overflow).
"""

import argparse
import statistics
import time
from pathlib import Path

import torch

from harness.report.plain_table import print_table, write_csv
from models.feature_maps import build_feature_map
from studies.plots import save_plot
from studies.reference import HEAD_DIM
from studies.threads import torch_threads

BETAS = [2.0**e for e in range(-4, 11)]
MAPS = {  # label -> (feature map name, feature_dim)
    "elu": ("elu", None),
    "favor D=64": ("favor", 64),
    "favor D=1024": ("favor", 1024),
    "rff D=64": ("rff", 64),
    "taylor": ("taylor", None),
    "identity": ("identity", None),
}


def unit_keys(T: int, d: int, seed: int) -> torch.Tensor:
    """T random keys with |k'| = 1, i.e. |k| = d^(1/4), float64."""
    k = torch.randn(T, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return k / k.norm(dim=-1, keepdim=True) * d**0.25


def softmax_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[Q, T] weights of each query over the keys (eq. 1)."""
    return (q @ k.T / q.shape[-1] ** 0.5).softmax(-1)


def feature_weights(fmap: torch.nn.Module, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[Q, T] linear-attention weights phi(q)^T phi(k_j) / sum_l phi(q)^T phi(k_l) (eq. 12)."""
    scores = fmap(q, is_query=True) @ fmap(k).T
    return scores / scores.sum(-1, keepdim=True)


def feature_bound(fmap: torch.nn.Module, k: torch.Tensor) -> float:
    """For a non-negative map: max over features i of phi(k_j)_i / sum_l phi(k_l)_i, averaged
    over targets j, the most any query can put on key j."""
    fk = fmap(k)
    return float((fk / fk.sum(0, keepdim=True)).amax(-1).mean())


def probe(weights: torch.Tensor) -> dict:
    """Weight on the target (query j aims at key j), the largest and the most negative."""
    target = weights.diagonal()
    return {
        "target_weight": float(target.mean()),
        "max_weight": float(weights.amax(-1).mean()),
        "min_weight": float(weights.amin(-1).min()),
    }


def sharpness_rows(T: int, draws: int, betas: list[float]) -> list[dict]:
    """Rows (map, beta): mean target / max weight, most negative weight, bound (None when
    the map's features can be negative). Each map is drawn once per seed, for every beta."""
    keys = [unit_keys(T, HEAD_DIM, seed) for seed in range(draws)]
    probes: dict[tuple[str, float], list[dict]] = {}
    bounds: dict[str, list[float]] = {}
    for k in keys:
        for beta in betas:
            probes.setdefault(("softmax", beta), []).append(probe(softmax_weights(beta * k, k)))
        bounds.setdefault("softmax", []).append(1.0)
    for label, (name, D) in MAPS.items():
        for seed, k in enumerate(keys):
            torch.manual_seed(seed)
            fmap = build_feature_map(name, HEAD_DIM, D)
            for beta in betas:
                probes.setdefault((label, beta), []).append(
                    probe(feature_weights(fmap, beta * k, k))
                )
            if name in ("elu", "favor"):  # non-negative features
                bounds.setdefault(label, []).append(feature_bound(fmap, k))
    return [
        {
            "map": label,
            "beta": beta,
            **mean_of(found),
            "bound": statistics.fmean(bounds[label]) if label in bounds else None,
        }
        for (label, beta), found in sorted(probes.items(), key=lambda item: item[0][1])
    ]


def mean_of(dicts: list[dict]) -> dict:
    out = {key: statistics.fmean(d[key] for d in dicts) for key in dicts[0]}
    out["min_weight"] = min(d["min_weight"] for d in dicts)
    return out


def summary(rows: list[dict]) -> list[dict]:
    """Per map: target weight at small, unit and the largest beta, and the bound."""
    betas = sorted({r["beta"] for r in rows})
    picks = [betas[0], 1.0, betas[-1]] if 1.0 in betas else [betas[0], betas[-1]]
    out = []
    for label in dict.fromkeys(r["map"] for r in rows):
        line: dict = {"map": label}
        for beta in picks:
            r = next(r for r in rows if r["map"] == label and r["beta"] == beta)
            line[f"target@beta={beta:g}"] = r["target_weight"]
        last = next(r for r in rows if r["map"] == label and r["beta"] == betas[-1])
        line["max_weight@max_beta"] = last["max_weight"]
        line["min_weight(any beta)"] = min(r["min_weight"] for r in rows if r["map"] == label)
        line["bound"] = last["bound"]
        out.append(line)
    return out


def by_beta(rows: list[dict]) -> list[dict]:
    """One line per beta, the target weight of each map in columns."""
    out: dict[float, dict] = {}
    for r in rows:
        out.setdefault(r["beta"], {"beta": r["beta"]})[r["map"]] = r["target_weight"]
    return list(out.values())


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    p = argparse.ArgumentParser(
        prog="python -m studies.sharpness", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", default="bench_out")
    p.add_argument("--keys", type=int, default=64, help="number of keys T")
    p.add_argument("--quick", action="store_true", help="fewer feature draws and betas")
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (small tensors: 1 is fastest)"
    )
    args = p.parse_args(argv)
    with torch_threads(args.threads):
        return run_main(args)


def run_main(args: argparse.Namespace) -> dict[str, list[dict]]:
    started = time.perf_counter()
    betas = BETAS[::2] if args.quick else BETAS
    rows = sharpness_rows(args.keys, draws=2 if args.quick else 5, betas=betas)
    table = summary(rows)
    print(
        f"attention weight a query q = beta k_j puts on its key j, {args.keys} keys, d={HEAD_DIM}"
    )
    print_table(by_beta(rows))
    print("\nsummary: softmax -> 1 with beta; the feature maps stay below their bound")
    print_table(table)
    out = Path(args.out)
    write_csv(rows, out / "sharpness.csv")
    write_csv(table, out / "sharpness_summary.csv")
    series = {}
    for label in dict.fromkeys(r["map"] for r in rows):
        sel = [r for r in rows if r["map"] == label]
        series[label] = ([r["beta"] for r in sel], [r["target_weight"] for r in sel])
    save_plot(out / "sharpness.png", [{
        "series": series, "title": f"weight on the target key ({args.keys} keys)",
        "xlabel": "beta (logit scale)", "ylabel": "attention weight", "logx": True, "hline": 1.0,
    }])  # fmt: skip
    print(
        f"\nwrote {out}/sharpness*.csv and sharpness.png in {time.perf_counter() - started:.0f} s"
    )
    return {"rows": rows, "summary": table}


if __name__ == "__main__":
    main()
