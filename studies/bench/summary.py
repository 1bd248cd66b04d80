"""What the sections' rows add up to: tables by T, crossover lengths, the performance
targets, and the figure."""

import math
from collections.abc import Callable
from pathlib import Path

from models import MIXERS
from studies.bench.forms import CHUNK_KERNEL, NAIVE_KERNEL, SOFTMAX_KERNEL
from studies.measure import loglog_slope
from studies.plots import save_plot

MEMORY_SLOPE_MAX = 1.15  # "linear in T": a log-log slope of peak memory against T up to this


def pivot(rows: list[dict], value: str, key: str = "form") -> list[dict]:
    """One row per `key`, one column per T; a cell without a value shows 'skip' or 'fail'."""
    out: dict[str, dict] = {}
    for r in rows:
        cell = r.get(value)
        if cell is None and r.get("note"):
            cell = "skip" if r["note"].startswith("skip") else "fail"
        out.setdefault(r[key], {key: r[key]})[f"T={r['T']}"] = cell
    return list(out.values())


def memory_slope(rows: list[dict], form: str, from_T: int = 1024) -> float | None:
    """Log-log slope of peak memory against T over the measured T >= `from_T` (below, fixed
    costs hide the growth); None with fewer than two such points."""
    points = [
        (r["T"], r["peak_mem_mb"])
        for r in rows
        if r["form"] == form and r["T"] >= from_T and r.get("peak_mem_mb")
    ]
    return loglog_slope(points) if len(points) >= 2 else None


def crossover(rows: list[dict], form: str, reference: str) -> str:
    """The T where `form` overtakes `reference` in tokens/s: log-log interpolation of the ratio
    between the last measured T where it is slower and the first where it is faster."""
    speed = {(r["form"], r["T"]): r.get("tokens_per_s") for r in rows}
    Ts = sorted({r["T"] for r in rows if r["form"] == form})
    ratios = [
        (T, speed[(form, T)] / speed[(reference, T)])
        for T in Ts
        if speed.get((form, T)) and speed.get((reference, T))
    ]
    if not ratios:
        return "n/a (not measured together)"
    if ratios[0][1] >= 1:
        return f"<= {ratios[0][0]} (faster at every measured T)"
    for (T0, r0), (T1, r1) in zip(ratios, ratios[1:], strict=False):
        if r1 >= 1:
            frac = -math.log(r0) / (math.log(r1) - math.log(r0))
            return f"~{round(math.exp(math.log(T0) + frac * math.log(T1 / T0)))}"
    return f"> {ratios[-1][0]} (slower at every measured T; ratio {ratios[-1][1]:.2f})"


def crossover_rows(rows: list[dict]) -> list[dict]:
    out = []
    for group, reference in (("kernel", SOFTMAX_KERNEL), ("mixer", "softmax")):
        for form in dict.fromkeys(r["form"] for r in rows if r["group"] == group):
            if form != reference:
                found = crossover(rows, form, reference)
                out.append({"group": group, "form": form, "vs": reference, "crossover_T": found})
    return out


def gflop_rows(train: list[dict], peak: float | None) -> list[dict]:
    """Useful GFLOP/s of the forms that declare their FLOPs, and the share of the matmul peak."""
    return [
        {
            "form": r["form"],
            "T": r["T"],
            "gflop_per_s": r["gflop_per_s"],
            "pct_of_peak": round(100 * r["gflop_per_s"] / peak, 1) if peak else None,
        }
        for r in train
        if r.get("gflop_per_s")
    ]


# ----------------------------------------------------------------------------- targets


def fixed_state_mixers() -> list[str]:
    return [n for n in MIXERS.names() if not getattr(MIXERS.get(n), "grows_with_seq_len", False)]


def target(name: str, measured: str, ok: bool | None) -> dict:
    return {"target": name, "measured": measured, "holds": {True: "yes", False: "NO"}.get(ok, "-")}


def kernel_targets(train: list[dict], peak: float | None) -> list[dict]:
    """The chunk kernel against the naive form and SDPA, memory slopes, share of matmul peak."""
    speed = {(r["form"], r["T"]): r.get("tokens_per_s") for r in train}
    chunk = speed.get((CHUNK_KERNEL, 4096))
    out = []
    for other, need in ((NAIVE_KERNEL, 10), (SOFTMAX_KERNEL, 3)):
        value = chunk / speed[(other, 4096)] if chunk and speed.get((other, 4096)) else None
        text = f"{value:.1f}x" if value else "-"
        ok = None if value is None else value >= need
        out.append(target(f"{CHUNK_KERNEL} >= {need}x {other} at T=4096", text, ok))
    forms = [CHUNK_KERNEL, "rwkv4_wkv/chunk", "delta_rule/chunk", *fixed_state_mixers()]
    slopes = {f: memory_slope(train, f) for f in forms}
    slopes = {f: v for f, v in slopes.items() if v is not None}
    name = f"memory linear in T, chunk kernels and fixed-state mixers (slope <= {MEMORY_SLOPE_MAX})"
    if slopes:
        form, worst = max(slopes.items(), key=lambda item: item[1])
        out.append(
            target(name, f"max log-log slope {worst:.2f} ({form})", worst <= MEMORY_SLOPE_MAX)
        )
    else:
        out.append(target(name, "-", None))
    at_4096 = [
        r for r in train if (r["form"], r["T"]) == (CHUNK_KERNEL, 4096) and r.get("gflop_per_s")
    ]
    if at_4096 and peak:
        rate = at_4096[0]["gflop_per_s"]
        text = f"{rate:.1f} of {peak:.0f} GFLOP/s ({100 * rate / peak:.0f}%)"
        name = f"{CHUNK_KERNEL} at T=4096 >= 30% of the fp32 matmul peak (stretch 40%)"
        out.append(target(name, text, rate >= 0.3 * peak))
    return out


# (T, step tokens/s over softmax's, whether only the fixed-state mixers are held to it)
STEP_TARGETS = ((64, 0.6, False), (1024, 1.5, True), (4096, 3.0, True))


def default_block(row: dict) -> bool:
    """A step row of the default block (the targets and the figure's step panel are its)."""
    return row.get("block", "default") == "default"


def step_targets(step: list[dict]) -> list[dict]:
    """Training step against softmax: every mixer at T=64, the fixed-state ones at 1024, 4096."""
    fixed = fixed_state_mixers()
    out = []
    for T, need, fixed_only in STEP_TARGETS:
        names = fixed if fixed_only else MIXERS.names()
        who = "every fixed-state mixer" if fixed_only else "every mixer"
        at_T = {
            r["mixer"]: r
            for r in step
            if r["T"] == T and r["mixer"] in names and r.get("block", "default") == "default"
        }
        ratios = {k: r["vs_softmax"] for k, r in at_T.items()}
        name = f"training step at T={T}: {who} >= {need}x softmax"
        if not ratios:
            out.append(target(name, "-", None))
            continue
        short = ", ".join(
            f"{k} {v:.2f}{math_allows(at_T[k], need)}"
            for k, v in sorted(ratios.items())
            if v < need
        )
        text = f"min {min(ratios.values()):.2f}x" + (f"; below: {short}" if short else "")
        out.append(target(name, text, not short))
    return out


def math_allows(row: dict, need: float) -> str:
    """' (math allows x)' when the mixer's FLOPs leave it below `need` even at softmax's
    FLOP/s (the target is then out of reach without beating softmax's efficiency), else ''."""
    bound = row.get("flop_bound_vs_softmax")
    return f" (math allows {bound:.2f})" if bound is not None and bound < need else ""


def pipeline_targets(tasks: list[dict], lightning: list[dict]) -> list[dict]:
    """Data generation speed and Lightning's overhead."""
    gen = [r["tokens_per_s"] for r in tasks if r.get("tokens_per_s")]
    pct = next((r["vs_bare_pct"] for r in lightning if r["loop"] == "lightning"), None)
    return [
        target(
            "task generation >= 1M tokens/s (every task, every length)",
            f"min {min(gen) / 1e6:.2f}M" if gen else "-",
            None if not gen else min(gen) >= 1e6,
        ),
        target(
            "Lightning step within 10% of bare torch",
            f"{pct:+.1f}%" if pct is not None else "-",
            None if pct is None else pct <= 10,
        ),
    ]


def targets(results: dict[str, list[dict]], peak: float | None) -> list[dict]:
    """Each performance target of the sections that ran, its measured value, whether it holds."""
    out = []
    if "train" in results:
        out += kernel_targets(results["train"], peak)
    if "step" in results:
        out += step_targets(results["step"])
    if "tasks" in results or "lightning" in results:
        out += pipeline_targets(results.get("tasks", []), results.get("lightning", []))
    return out


# ----------------------------------------------------------------------------- figure


def xy_series(rows: list[dict], value: str, key: str, keep: Callable[[dict], bool]) -> dict:
    out: dict = {}
    for r in rows:
        if keep(r):
            xs, ys = out.setdefault(r[key], ([], []))
            xs.append(r["T"])
            ys.append(r.get(value))
    return out


def plot(results: dict[str, list[dict]], path: Path) -> Path | None:
    """Kernels and mixers (tokens/s), kernels' memory, training steps vs softmax, decode state."""
    train, step, decode = (results.get(k, []) for k in ("train", "step", "decode"))
    log = {"xlabel": "T", "logx": True, "logy": True}

    def group(name: str) -> Callable[[dict], bool]:
        return lambda r: r["group"] == name

    panels = []
    if train:
        panels += [
            {"series": xy_series(train, "tokens_per_s", "form", group("kernel")),
             "title": "kernels, forward+backward", "ylabel": "tokens/s", **log},
            {"series": xy_series(train, "tokens_per_s", "form", group("mixer")),
             "title": "mixers, forward+backward", "ylabel": "tokens/s", **log},
            {"series": xy_series(train, "peak_mem_mb", "form", group("kernel")),
             "title": "kernels, peak memory", "ylabel": "MB", **log},
        ]  # fmt: skip
    if step:
        step_lens = {r["T"] for r in step}
        panels.append(
            {"series": xy_series(step, "vs_softmax", "mixer", default_block), "hline": 1.0,
             "marks": {"target": [(T, need) for T, need, _ in STEP_TARGETS if T in step_lens]},
             "title": "training step, tokens/s vs softmax", "ylabel": "ratio", **log}
        )  # fmt: skip
    if decode:
        panels.append(
            {"series": xy_series(decode, "state_kb", "mixer", lambda r: True),
             "title": "decoding state per sequence", "ylabel": "KB", **log}
        )  # fmt: skip
    return save_plot(path, panels) if panels else None
