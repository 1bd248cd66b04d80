"""FAVOR+ numerics: where each way of computing eq. 7's estimator breaks in floating point.

FAVOR+ runs through `linear_attention` (chunk mode, as the mixer does) with: eq. 7 as written
(fp32, fp64); a whole-sequence key maximum (as in performer-pytorch, which also adds 1e-4 to
every feature); this repository's `FavorFeatureMap` (per-token query maximum, constant key
shift c = max_i |w_i|^2/2, eps scaled by e^-c) in fp32 and fp64; and a causal running (prefix)
key maximum. Each is compared with the estimator itself (eq. 7 in fp64, eps 0) and with exact
softmax attention; the rows also give the fraction of non-finite outputs and of queries whose
every weight underflowed to 0.
"""

import math

import torch

from models.feature_maps import FavorFeatureMap
from models.mixers.kernel_attention import denominator_eps
from studies.reference import (
    HEAD_DIM,
    causal,
    exact_attention,
    favor_raw,
    linear_outputs,
    random_qkv,
    relative,
    study_feature_map,
)

NUMERIC_NORMS = [1, 2, 4, 6, 8, 10, 12, 14, 16, 20]  # |x'| of random queries and keys
NUMERIC_DIMS = [64, 1024]
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


def prefix_max_outputs(
    fmap: FavorFeatureMap, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """A causal fix, computed densely in fp32: key features relative to the running maximum
    m_t = max_{s<=t, i} (key logit), the shift the query at t sees. Every key of the prefix is
    then <= 1 with the largest exactly 1, as the whole-sequence maximum gives, but without
    looking ahead. A kernel would carry m_t in its state and rescale S, z when it grows (as
    rwkv4_wkv does with its running maximum)."""
    lq, lk = fmap.logits(q), fmap.logits(k)
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
    lq, lk = fmap.logits(q32), fmap.logits(k32)
    fq = torch.exp(lq - lq.amax(-1, keepdim=True)) * scale
    fk = torch.exp(lk - lk.amax((-1, -2), keepdim=True)) * scale  # max over the whole sequence
    eps = denominator_eps(fmap)
    return {
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


def numeric_rows(dims: list[int], norms: list[float], trained: tuple | None) -> list[dict]:
    """Each computation against the estimator itself (eq. 7 in fp64 with eps = 0): the
    numerical error, and against exact softmax (the statistical error shows there too)."""
    inputs = [(f"random |x'|={r}", random_qkv(r, 4, 64, HEAD_DIM, seed=7)) for r in norms]
    if trained is not None:
        q, k, v = trained
        inputs.append(("trained", (q[:16], k[:16], v[:16])))
    rows = []
    for D in dims:
        fmap = study_feature_map("favor", D, seed=0)
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
