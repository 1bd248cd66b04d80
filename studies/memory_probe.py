"""The memory probe: how many key-value bindings a state holds, with no training.
`python -m studies.memory_probe [--out DIR] [--quick]`.

docs/background.md, "The memory probe" (beside section 17, the rank bound). One head's state
is a D x d_v matrix S. Write n bindings (k_i, v_i), i = 1 .. n, in order, with one of the
update rules the zoo implements, then read every binding back with the query q = k_j:
r_j = S^T k_j (d_v numbers).

Update rules (per write of key k, value v; keys have unit norm):

    sum           S <- S + k v^T                    eq. 8 without the normaliser (`linear`,
                                                    `identity`; RetNet with gamma = 1)
    delta         S <- S + b k (v - S^T k)^T        the delta rule with a fixed write strength
                                                    b = `beta` (default 1), one pass
                                                    (DeltaNet learns beta in (0, 1)): at 1,
                                                    re-writing a key overwrites it
    gated_delta   S <- g (I - b k k^T) S + b k v^T  the gated delta rule (Gated DeltaNet) with
                                                    a fixed decay g per write (default 0.95)
    mamba2        S <- exp(-dt A) S + dt k v^T      Mamba-2's selective update with B = k,
                                                    x = v and the read-out C = q: per head
                                                    A ~ uniform (1, 16] and dt ~ log-uniform
                                                    [1e-3, 0.1], drawn once per head as
                                                    `MambaGate` initialises them (dt the
                                                    softplus of the bias, the input part 0),
                                                    and held for every write

Keys: `random` (independent uniform unit vectors in R^D) or `orthogonal` (the first
min(n, D) keys orthonormal, a random rotation's rows; the rest random unit vectors).
Values: a codebook of V random unit vectors in R^{d_v}, V = the task's vocabulary of values
(MQAR with vocab_size 256 draws its values from the upper half: V = 128 by default); each
memory stores n distinct codebook entries, as MQAR's values are distinct.

Two read-outs of r_j, each correct only on a strict win (a tie is wrong):
    argmax    the codebook entry with the largest dot product with r_j is v_j (a decision over
              the vocabulary, as the LM head makes it);
    nearest   among the n values stored, the one nearest r_j is v_j (the values have unit
              norm, so nearest = largest dot product over the n stored values).

H heads are H independent memories, each storing its own n bindings (Mamba-2: each with its
own A, dt); accuracy at n is the fraction of bindings read back correctly, averaged over the
heads of a trial; heads add samples, not capacity (the probe is per head, like the rank
bound D of section 17 before the factor H).

n90: the largest n such that the mean accuracy (over trials) is >= 0.9 at every n' <= n. Its
interval is a percentile bootstrap over trials (default 200 resamples, 5th and 95th
percentile, rounded outwards to loads: a 90% interval). The loads run n = 1, 2, ... until
the mean accuracy falls below `stop` (0.6) or n reaches V (then n90 is censored: `censored`
is true and n90 is a lower bound). The same n bindings are the first n of one drawn
sequence, so one trial is one nested sequence of loads. Every cell's draws come from its own
seed (`cell_seed`: the seed, the key kind, D, d_v and V), shared by the rules, so rules are
compared on the same keys and values. numpy, float64.
"""

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from studies.memory_probe_figure import save_heatmaps

RULES = ("sum", "delta", "gated_delta", "mamba2")
KEY_KINDS = ("random", "orthogonal")
READOUTS = ("argmax", "nearest")
KEY_DIMS = (2, 4, 8, 16)
VALUE_DIMS = (8, 32, 128)
VOCABS = (64, 128, 256)
DEFAULT_VOCAB = 128  # MQAR's values at vocab_size 256: the upper half
THRESHOLD = 0.9


def cell_seed(seed: int, keys: str, D: int, d_v: int, V: int) -> np.random.SeedSequence:
    """The seed of one cell's draws (shared by every rule, so that the rules see the same
    keys, codebooks and values)."""
    return np.random.SeedSequence([seed, KEY_KINDS.index(keys), D, d_v, V])


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def draw_keys(rng: np.random.Generator, batch: int, n: int, D: int, keys: str) -> np.ndarray:
    """[batch, n, D] unit keys: random, or with the first min(n, D) orthonormal."""
    k = unit(rng.standard_normal((batch, n, D)))
    if keys == "orthogonal":
        m = min(n, D)
        q, r = np.linalg.qr(rng.standard_normal((batch, D, D)))
        q = q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[:, None, :]  # Haar rotation
        k[:, :m] = np.swapaxes(q, -1, -2)[:, :m]
    return k


def draw_values(
    rng: np.random.Generator, batch: int, n: int, d_v: int, V: int
) -> tuple[np.ndarray, np.ndarray]:
    """The codebook [batch, V, d_v] of unit values and the n distinct entries stored, in
    order [batch, n]."""
    codebook = unit(rng.standard_normal((batch, V, d_v)))
    stored = np.argsort(rng.random((batch, V)), axis=-1)[:, :n]
    return codebook, stored


def draw_mamba2_gate(rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(decay exp(-dt A), write scale dt), [batch] each: A uniform in (1, 16], dt log-uniform
    in [1e-3, 0.1], as `models.mixers.mamba2.MambaGate` initialises them."""
    A = 1.0 + 15.0 * (1.0 - rng.random(batch))
    dt = np.exp(np.log(1e-3) + rng.random(batch) * (np.log(0.1) - np.log(1e-3)))
    return np.exp(-dt * A), dt


def write(
    rule: str,
    S: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    decay: float,
    gate: tuple,
    beta: float = 1.0,
) -> np.ndarray:
    """One write of k [B, D], v [B, d_v] into S [B, D, d_v] by `rule` (`beta`: the delta
    rules' write strength)."""
    outer = k[:, :, None] * v[:, None, :]
    if rule == "sum":
        return S + outer
    if rule in ("delta", "gated_delta"):
        old = np.einsum("bd,bde->be", k, S)  # what S returns for k
        S = S - beta * k[:, :, None] * old[:, None, :]  # (I - b k k^T) S
        return (decay * S if rule == "gated_delta" else S) + beta * outer
    if rule == "mamba2":
        a, dt = gate
        return a[:, None, None] * S + dt[:, None, None] * outer
    raise ValueError(f"rule={rule!r} is invalid: must be one of {', '.join(RULES)}")


def strict_hits(scores: np.ndarray, right: np.ndarray) -> np.ndarray:
    """[..., m] scores, [...] index of the right one -> [...] bool: the right one scores
    strictly above every other."""
    target = np.take_along_axis(scores, right[..., None], -1)[..., 0]
    others = scores.copy()
    np.put_along_axis(others, right[..., None], -np.inf, -1)
    return target > others.max(-1)


def accuracy_curves(
    rule: str,
    keys: str,
    D: int,
    d_v: int,
    V: int,
    *,
    trials: int = 30,
    heads: int = 2,
    seed: int = 0,
    decay: float = 0.95,
    beta: float = 1.0,
    stop: float = 0.6,
    n_max: int | None = None,
) -> dict:
    """Per-trial accuracy at n = 1, 2, ...: {"n": [N], "argmax": [trials, N], "nearest":
    [trials, N], "error": [trials, N] (mean |r_j - v_j| of the read-out against the stored
    value, before any decision; 0: exact reconstruction)}. The loads stop after the first n
    where both read-outs' mean accuracy is below `stop`, or at n_max (default V)."""
    if rule not in RULES:
        raise ValueError(f"rule={rule!r} is invalid: must be one of {', '.join(RULES)}")
    if keys not in KEY_KINDS:
        raise ValueError(f"keys={keys!r} is invalid: must be one of {', '.join(KEY_KINDS)}")
    n_max = V if n_max is None else min(n_max, V)
    rng = np.random.default_rng(cell_seed(seed, keys, D, d_v, V))
    batch = trials * heads
    K = draw_keys(rng, batch, n_max, D, keys)
    codebook, stored = draw_values(rng, batch, n_max, d_v, V)
    values = np.take_along_axis(codebook, stored[:, :, None], 1)  # [B, n_max, d_v]
    gate = draw_mamba2_gate(np.random.default_rng(rng.integers(2**63)), batch)
    S = np.zeros((batch, D, d_v))
    out = {name: [] for name in ("argmax", "nearest", "error")}
    n_values = []
    for n in range(1, n_max + 1):
        S = write(rule, S, K[:, n - 1], values[:, n - 1], decay, gate, beta)
        reads = K[:, :n] @ S  # [B, n, d_v]: r_j = S^T k_j
        argmax = strict_hits(reads @ np.swapaxes(codebook, 1, 2), stored[:, :n])
        own = np.broadcast_to(np.arange(n), (batch, n))
        nearest = strict_hits(reads @ np.swapaxes(values[:, :n], 1, 2), own)
        error = np.linalg.norm(reads - values[:, :n], axis=-1)
        for name, hits in (("argmax", argmax), ("nearest", nearest), ("error", error)):
            out[name].append(hits.reshape(trials, heads * n).mean(-1))
        n_values.append(n)
        if max(out["argmax"][-1].mean(), out["nearest"][-1].mean()) < stop:
            break
    return {"n": np.array(n_values), **{k: np.stack(v, -1) for k, v in out.items()}}


def n90_of(mean_curve: np.ndarray, n: np.ndarray, threshold: float = THRESHOLD) -> int:
    """The largest n with mean accuracy >= threshold at it and every smaller load (0 when
    even n = 1 misses)."""
    below = np.flatnonzero(mean_curve < threshold)
    if below.size == 0:
        return int(n[-1])
    return int(n[below[0] - 1]) if below[0] > 0 else 0


def bootstrap_n90(
    acc: np.ndarray, n: np.ndarray, *, boots: int = 200, seed: int = 0, level: float = 0.9
) -> tuple[float, float]:
    """Percentile bootstrap over trials (rows of acc [trials, N]) of n90: (low, high) at
    `level` (default the 5th and 95th percentiles), each rounded outwards to a resampled n90
    (loads are integers)."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, acc.shape[0], size=(boots, acc.shape[0]))
    samples = [n90_of(acc[p].mean(0), n) for p in picks]
    tail = (1 - level) / 2 * 100
    low = np.percentile(samples, tail, method="lower")
    high = np.percentile(samples, 100 - tail, method="higher")
    return float(low), float(high)


def probe_cell(
    rule: str, keys: str, D: int, d_v: int, V: int, *, boots: int = 200, **kw: object
) -> list[dict]:
    """One row per read-out: n90 with its bootstrap interval, whether it is censored (the
    loads reached V still at >= 0.9), and the accuracy at n = D (the rank bound of one
    head) and at n = 2D."""
    curves = accuracy_curves(rule, keys, D, d_v, V, **kw)
    n, rows = curves["n"], []
    for readout in READOUTS:
        acc = curves[readout]
        mean = acc.mean(0)
        n90 = n90_of(mean, n)
        low, high = bootstrap_n90(acc, n, boots=boots, seed=kw.get("seed", 0))

        def at(load: int, mean: np.ndarray = mean) -> float | None:
            return float(mean[load - 1]) if load <= n[-1] else None

        rows.append({
            "rule": rule, "keys": keys, "readout": readout, "D": D, "d_v": d_v, "V": V,
            "n90": n90, "n90_low": low, "n90_high": high,
            "censored": bool(n90 == n[-1] and mean[-1] >= THRESHOLD),
            "acc_at_D": at(D), "acc_at_2D": at(2 * D),
            "error_at_D": float(curves["error"][:, D - 1].mean()) if n[-1] >= D else None,
            "floats": D * d_v, "trials": acc.shape[0], "max_load": int(n[-1]),
        })  # fmt: skip
    return rows


def surface(
    rules=RULES,
    key_kinds=KEY_KINDS,
    key_dims=KEY_DIMS,
    value_dims=VALUE_DIMS,
    vocabs=VOCABS,
    **kw: object,
) -> list[dict]:
    """probe_cell over the grid: rows of (rule, keys, readout, D, d_v, V)."""
    rows = []
    for V in vocabs:
        for keys in key_kinds:
            for D in key_dims:
                for d_v in value_dims:
                    for rule in rules:
                        rows.extend(probe_cell(rule, keys, D, d_v, V, **kw))
    return rows


def n90_text(row: dict) -> str:
    """`20 [18, 22]`, with `>=` when censored."""
    mark = ">=" if row["censored"] else ""
    return f"{mark}{row['n90']} [{row['n90_low']:g}, {row['n90_high']:g}]"


def n90_tables(rows: list[dict], V: int, readout: str) -> list[dict]:
    """One line per (keys, rule, D): n90 [interval] at each d_v, for vocabulary V."""
    sel = [r for r in rows if r["V"] == V and r["readout"] == readout]
    lines = []
    for keys in dict.fromkeys(r["keys"] for r in sel):
        for rule in dict.fromkeys(r["rule"] for r in sel):
            for D in sorted({r["D"] for r in sel}):
                cells = [r for r in sel if (r["keys"], r["rule"], r["D"]) == (keys, rule, D)]
                line = {"keys": keys, "rule": rule, "D": D}
                line.update({f"d_v={r['d_v']}": n90_text(r) for r in cells})
                lines.append(line)
    return lines


def format_table(rows: list[dict]) -> str:
    """An aligned plain-text table of `rows` (dicts sharing their keys). Local, not
    `harness.report.plain_table`: importing the report package costs seconds, the probe none."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = [columns, ["-" * w for w in widths], *cells]
    padded = ("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in lines)
    return "\n".join(line.rstrip() for line in padded)


def write_outputs(out: Path, rows: list[dict], V: int, settings: dict) -> list[Path]:
    """memory_probe.json (settings and rows), memory_probe.csv, and one heatmap per read-out
    at vocabulary V."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory_probe.json").write_text(json.dumps({"settings": settings, "rows": rows}))
    with open(out / "memory_probe.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    paths = [out / "memory_probe.json", out / "memory_probe.csv"]
    if any(r["V"] == V for r in rows):
        for readout in READOUTS:
            paths.append(save_heatmaps(out / f"n90_{readout}_V{V}.png", rows, V, readout))
    return paths


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(
        prog="python -m studies.memory_probe", description=__doc__.split("\n")[0]
    )
    ints = {"type": int, "nargs": "+"}
    p.add_argument("--rules", nargs="+", choices=RULES, default=list(RULES))
    p.add_argument("--keys", nargs="+", choices=KEY_KINDS, default=list(KEY_KINDS))
    p.add_argument("--key-dims", **ints, default=list(KEY_DIMS), help="D per head")
    p.add_argument("--value-dims", **ints, default=list(VALUE_DIMS), help="d_v per head")
    p.add_argument("--vocabs", **ints, default=list(VOCABS), help="codebook sizes V")
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--heads", type=int, default=2, help="independent memories per trial")
    p.add_argument("--decay", type=float, default=0.95, help="gated_delta's decay g per write")
    p.add_argument("--beta", type=float, default=1.0, help="the delta rules' write strength")
    p.add_argument("--boots", type=int, default=200, help="bootstrap resamples for n90's range")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="folder for memory_probe.json, .csv and the heatmaps")
    p.add_argument("--figure-vocab", type=int, default=DEFAULT_VOCAB, help="V of the heatmaps")
    p.add_argument("--quick", action="store_true", help="V = 128 only, 10 trials")
    args = p.parse_args(argv)
    for name in ("decay", "beta"):
        if not 0 < getattr(args, name) <= 1:
            p.error(f"--{name}={getattr(args, name)} is invalid: must be in (0, 1]")
    for name in ("trials", "heads", "boots"):
        if getattr(args, name) < 1:
            p.error(f"--{name}={getattr(args, name)} is invalid: must be >= 1")
    if args.quick:
        args.vocabs, args.trials = [DEFAULT_VOCAB], 10
    started = time.perf_counter()
    settings = {
        k: getattr(args, k)
        for k in ("rules", "keys", "key_dims", "value_dims", "vocabs", "trials", "heads")
    }
    settings.update(decay=args.decay, beta=args.beta, boots=args.boots, seed=args.seed)
    settings["threshold"] = THRESHOLD
    rows = surface(
        args.rules, args.keys, args.key_dims, args.value_dims, args.vocabs,
        trials=args.trials, heads=args.heads, seed=args.seed, decay=args.decay,
        beta=args.beta, boots=args.boots,
    )  # fmt: skip
    for V in args.vocabs:
        for readout in READOUTS:
            print(f"\nn90 per head [90% bootstrap range], {readout} read-out, V = {V} values, "
                  f"{args.trials} trials x {args.heads} heads")  # fmt: skip
            print(format_table(n90_tables(rows, V, readout)))
    if args.out:
        paths = write_outputs(Path(args.out), rows, args.figure_vocab, settings)
        print("\nwrote " + ", ".join(str(p) for p in paths))
    print(f"({time.perf_counter() - started:.0f} s)")
    return rows


if __name__ == "__main__":
    main()
