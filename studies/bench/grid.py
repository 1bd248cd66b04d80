"""Timing a form over the T list: warm-up, repeated calls within a budget, peak memory, and
cells skipped when their estimated time or memory would not fit."""

import gc
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from studies.bench.forms import Form
from studies.bench.settings import Settings
from studies.measure import PeakMemory, free_memory, sync


@dataclass
class Measured:
    seconds: float
    reps: int
    peak_bytes: int | None


def time_call(call: Callable[[], None], s: Settings, estimate_s: float | None) -> Measured:
    """First call: memory (and warm-up); then timed calls within the cell budget (median).
    A call estimated longer than `single_shot_s` runs once: that first call is the timing."""
    memory = PeakMemory(s.device)
    memory.start()
    t0 = s.timer()
    call()
    sync(s.device)
    first = s.timer() - t0
    peak = memory.stop()
    if first > s.single_shot_s or (estimate_s or 0) > s.single_shot_s:
        return Measured(first, 1, peak)
    times: list[float] = []
    while len(times) < s.max_reps and sum(times) < s.cell_budget_s:
        sync(s.device)
        t0 = s.timer()
        call()
        sync(s.device)
        times.append(s.timer() - t0)
    return Measured(statistics.median(times), len(times), peak)


def extrapolate(history: list[tuple[int, float, float]], T: int, form: Form) -> tuple[float, float]:
    """(seconds, bytes) of one call at T from the last measured (T', seconds, bytes): scaled by
    (T/T')^p. p is the form's declared exponent, unless the last two points grew faster
    (fitted p' > declared p): then a faster-growing term is taking over, and its share keeps
    rising, so p = min(3, 2 p' - p) (e.g. a loop whose backward is O(T^2) behind an O(T)
    forward). Conservative on purpose: a skipped cell costs nothing, a 2-minute one does."""
    T1, s1, b1 = history[-1]
    exponents = [form.time_exp, form.mem_exp]
    if len(history) >= 2:
        T0, s0, b0 = history[-2]
        for i, (a, b) in enumerate(((s0, s1), (b0, b1))):
            if a > 0 and b > 0:
                fitted = math.log(b / a) / math.log(T1 / T0)
                if fitted > exponents[i]:
                    exponents[i] = min(3.0, 2 * fitted - exponents[i])
    return s1 * (T / T1) ** exponents[0], b1 * (T / T1) ** exponents[1]


def skip_reason(history: list, T: int, form: Form, s: Settings) -> tuple[str | None, float | None]:
    """(why the cell at T is skipped or None, the estimated seconds of one call)."""
    if not history:
        return None, None
    est_s, est_b = extrapolate(history, T, form)
    limit_b = s.mem_fraction * free_memory(s.device)
    if est_b > limit_b:
        return f"skipped: est. {est_b / 2**30:.1f} GiB > {limit_b / 2**30:.1f}", est_s
    if est_s > s.max_call_s:
        return f"skipped: est. {est_s:.0f} s/call > {s.max_call_s:.0f} s", est_s
    return None, est_s


def run_grid(forms: list[Form], s: Settings, probe_T: int = 256) -> list[dict]:
    """Time every form at every T (increasing), skipping cells estimated not to fit; a form
    that fails (e.g. out of memory) is not tried at larger T."""
    rows = []
    for form in forms:
        history: list[tuple[int, float, float]] = []
        stopped = None
        for T in sorted(s.seq_lens):
            row: dict = {"group": form.group, "form": form.name, "T": T}
            rows.append(row)
            if stopped:
                row["note"] = stopped
                continue
            try:
                if not history and 2 * probe_T < T:  # nothing to extrapolate from: probe
                    m = time_call(form.make(probe_T), s, s.single_shot_s + 1)
                    history.append((probe_T, m.seconds, float(m.peak_bytes or 0)))
                reason, est_s = skip_reason(history, T, form, s)
                if reason:
                    row["note"] = reason
                    continue
                m = time_call(form.make(T), s, est_s)
            except (RuntimeError, MemoryError) as error:  # e.g. CUDA out of memory
                stopped = f"failed at T={T}: {type(error).__name__}"
                row["note"] = f"failed: {str(error).splitlines()[0][:80]}"
                gc.collect()
                if s.device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            history.append((T, m.seconds, float(m.peak_bytes or 0)))
            row.update(
                tokens_per_s=round(s.batch * T / m.seconds, 1),
                ms_per_call=round(1e3 * m.seconds, 3),
                reps=m.reps,
                peak_mem_mb=None if m.peak_bytes is None else round(m.peak_bytes / 2**20, 1),
            )
            if form.flops is not None:
                row["gflop_per_s"] = round(form.flops(T) / m.seconds / 1e9, 2)
        print(f"  {form.group} {form.name}: done", file=sys.stderr, flush=True)
    return rows


def matmul_peak(s: Settings, reps: int = 5) -> float:
    """fp32 matmul GFLOP/s of an n x n product (best of `reps`), the machine's practical peak."""
    n = s.matmul_n if s.device.type == "cpu" else 4 * s.matmul_n
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(s.device) for _ in range(2))
    torch.matmul(a, b)
    best = math.inf
    for _ in range(reps):
        sync(s.device)
        t0 = s.timer()
        torch.matmul(a, b)
        sync(s.device)
        best = min(best, s.timer() - t0)
    return 2 * n**3 / best / 1e9
