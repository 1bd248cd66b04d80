"""How fast, and why: `python -m studies.bench [--device auto|cpu|cuda] [--seq-lens ...] [--quick]`.

Sections (each a table printed, a CSV in `--out`, default `bench_out/`):

- `train`: forward+backward throughput (tokens/s, tokens = batch x T) and peak memory of every
  kernel mode of `models.kernels` and of every registered mixer (default parameters, d_model =
  heads x head_dim), over the T list. A cell whose one call is estimated (from the smaller T,
  scaled by the form's complexity) to need more than half the free memory, or longer than
  `--max-call-s`, is skipped with a note. One warm-up call, then the median of repeated calls
  within a per-cell time budget. The chunk kernel's useful FLOPs (analytic) give GFLOP/s,
  compared with the machine's fp32 matmul peak (`peak`). `crossover`: the T at which each
  linear form overtakes softmax (pitfall 1), by log-log interpolation of the measured ratio.
- `decode`: per-token latency of `mixer.step` (batch 1, one thread) and the state it holds
  after T tokens (flat for recurrent mixers, the KV cache growing for softmax). The state at
  T is reached by stepping T tokens; softmax's KV cache is built at once (`kv_cache`).
- `tasks`: data generation throughput of every registered task.
- `lightning`: one training step under Lightning (`RecallModule`) against a bare torch loop on
  the same model, batch and optimizer.

Peak memory: on CUDA, `torch.cuda.max_memory_allocated` above the allocation before the call.
On CPU, the rise of the process's peak resident set size (Linux VmHWM, reset by writing 5 to
/proc/self/clear_refs after returning freed heap to the OS with malloc_trim) over one call: it
counts everything the call touches (activations, saved tensors, gradients, allocator slack) and
not the inputs allocated before it. It is measured on the first call of a cell.
"""

import argparse
import copy
import ctypes
import gc
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from harness.tables import print_table, save_plot, write_csv
from models import MIXERS, build_mixer
from models.kernels import delta_rule, linear_attention, linear_attention_cumsum, rwkv4_wkv
from models.kernels import softmax_attention as sdpa
from models.mixers.softmax import SoftmaxAttention
from studies.threads import torch_threads
from tasks import IGNORE, TASKS, build_task

SOFTMAX_KERNEL = "softmax_sdpa"
CHUNK_KERNEL = "linear/chunk"
NAIVE_KERNEL = "linear/cumsum_naive"
SECTIONS = ("peak", "train", "decode", "tasks", "lightning")


# ----------------------------------------------------------------------------- settings


@dataclass
class Settings:
    device: torch.device
    seq_lens: list[int]
    batch: int = 16
    heads: int = 2
    head_dim: int = 32
    chunk_size: int = 64
    max_call_s: float = 20.0  # skip a cell whose one forward+backward is estimated longer
    single_shot_s: float = 2.0  # above this estimate: no warm-up, one timed call
    cell_budget_s: float = 1.5  # timed repetitions stop once they add up to this
    max_reps: int = 3
    mem_fraction: float = 0.5  # skip a cell estimated to need more of the free memory
    decode_steps: int = 20
    decode_prefill_s: float = 10.0  # skip stepping a mixer to T if estimated longer
    task_tokens: int = 2_000_000
    lightning_steps: int = 60
    lightning_warmup: int = 10
    matmul_n: int = 2048

    @property
    def d_model(self) -> int:
        return self.heads * self.head_dim


def quick_settings(s: Settings) -> Settings:
    """The tiny version used by the tests: T = 64, 128, few repetitions."""
    s.seq_lens, s.max_call_s = [64, 128], math.inf  # every cell runs
    s.max_reps, s.cell_budget_s, s.decode_steps = 2, 0.5, 3
    s.task_tokens, s.lightning_steps, s.lightning_warmup, s.matmul_n = 100_000, 8, 3, 512
    return s


def load_average() -> float | None:
    """The 1-minute load average (other work on the machine slows every number here)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- memory


class PeakMemory:
    """Peak extra memory of one call (see the module docstring for the CPU method)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu_ok = Path("/proc/self/clear_refs").exists()
        try:
            self.libc = ctypes.CDLL("libc.so.6")
        except OSError:
            self.libc = None
        self.base = 0

    @staticmethod
    def _status_kb(key: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def start(self) -> None:
        if self.device.type == "cuda":
            sync(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        elif self.cpu_ok:
            gc.collect()
            if self.libc is not None:
                self.libc.malloc_trim(0)
            Path("/proc/self/clear_refs").write_text("5")
            self.base = self._status_kb("VmRSS") * 1024

    def stop(self) -> int | None:
        """Bytes above the level at `start`, or None when it cannot be measured."""
        if self.device.type == "cuda":
            sync(self.device)
            return torch.cuda.max_memory_allocated(self.device) - self.base
        if not self.cpu_ok:
            return None
        return max(0, self._status_kb("VmHWM") * 1024 - self.base)


def free_memory(device: torch.device) -> int:
    """Bytes free now: CUDA's free device memory, or Linux MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30  # unknown: assume 8 GiB


# ----------------------------------------------------------------------------- forms


@dataclass
class Form:
    """One thing to time: `make(T)` returns a closure running one forward+backward."""

    group: str  # "kernel" or "mixer"
    name: str
    make: Callable[[int], Callable[[], None]]
    time_exp: float  # how its time grows with T (1 linear, 2 quadratic), for skip estimates
    mem_exp: float
    flops: Callable[[int], float] | None = None  # useful FLOPs of one forward+backward


def leaves(*xs: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
    return [x.detach().to(device).requires_grad_() for x in xs]


def fwd_bwd(forward: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> Callable[[], None]:
    def call() -> None:
        for x in inputs:
            x.grad = None
        out = forward(*inputs)
        out.backward(torch.ones_like(out))

    return call


def chunk_flops(B: int, H: int, T: int, D: int, Dv: int, C: int) -> float:
    """Matmul FLOPs of chunk-mode linear attention, forward + backward (= 3 x forward: each
    matmul's backward is two matmuls of its size). Per block of length L: scores Q K^T
    (2 L^2 D), scores V (2 L^2 Dv), the block's state K^T V and the query-state product
    Q S (2 L D Dv each). Elementwise work (masking, cumsum, normalisation) is not counted."""
    total, full = 0.0, T // C * C
    for length, count in ((C, T // C), (T - full, 1 if full < T else 0)):
        total += count * 2 * (length * length * (D + Dv) + 2 * length * D * Dv)
    return 3.0 * B * H * total


def sdpa_flops(B: int, H: int, T: int, d: int) -> float:
    """Causal softmax attention: Q K^T and P V over the lower triangle, 2 * 2 T^2/2 d each
    head forward; forward + backward counted as 3 x forward, as for the chunk kernel."""
    return 3.0 * B * H * 2 * T * T * d


def kernel_forms(s: Settings) -> list[Form]:
    """Every mode of every kernel, on inputs of the benchmark's shape."""
    B, H, d, C, dev = s.batch, s.heads, s.head_dim, s.chunk_size, s.device

    def gen(seed: int) -> torch.Generator:
        return torch.Generator().manual_seed(seed)

    def qkv(T: int, positive: bool = False) -> list[torch.Tensor]:
        g = gen(T)
        q, k, v = (torch.randn(B, H, T, d, generator=g) for _ in range(3))
        if positive:  # linear attention takes feature-mapped q, k: elu + 1 (eq. 5)
            q, k = F.elu(q) + 1, F.elu(k) + 1
        return leaves(q, k, v, device=dev)

    def linear(mode: str, decay: bool = False) -> Callable[[int], Callable[[], None]]:
        gammas = (1 - 2.0 ** (-5 - torch.arange(H, dtype=torch.float32))).to(dev)  # RetNet's

        def make(T: int) -> Callable[[], None]:
            def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                g = gammas if decay else None
                return linear_attention(q, k, v, decay=g, mode=mode, chunk_size=C)

            return fwd_bwd(forward, qkv(T, positive=True))

        return make

    def wkv(mode: str) -> Callable[[int], Callable[[], None]]:
        def make(T: int) -> Callable[[], None]:
            g, ch = gen(T), H * d
            w, u = torch.rand(ch, generator=g), 0.1 * torch.randn(ch, generator=g)
            k, v = torch.randn(B, T, ch, generator=g), torch.randn(B, T, ch, generator=g)

            def forward(*xs: torch.Tensor) -> torch.Tensor:
                return rwkv4_wkv(*xs, mode=mode, chunk_size=C)

            return fwd_bwd(forward, leaves(w, u, k, v, device=dev))

        return make

    def delta(mode: str) -> Callable[[int], Callable[[], None]]:
        def make(T: int) -> Callable[[], None]:
            g = gen(T)
            q, k, v = (torch.randn(B, H, T, d, generator=g) for _ in range(3))
            beta = torch.sigmoid(torch.randn(B, H, T, generator=g))

            def forward(*xs: torch.Tensor) -> torch.Tensor:
                return delta_rule(*xs, mode=mode, chunk_size=C)

            return fwd_bwd(forward, leaves(q, F.normalize(k, dim=-1), v, beta, device=dev))

        return make

    def softmax(T: int) -> Callable[[], None]:
        return fwd_bwd(sdpa, qkv(T))

    def naive(T: int) -> Callable[[], None]:
        return fwd_bwd(linear_attention_cumsum, qkv(T, positive=True))

    def chunk_gflop(T: int) -> float:
        return chunk_flops(B, H, T, d, d, C)

    forms = [
        Form("kernel", SOFTMAX_KERNEL, softmax, 2, 1, lambda T: sdpa_flops(B, H, T, d)),
        Form("kernel", CHUNK_KERNEL, linear("chunk"), 1, 1, chunk_gflop),
        Form("kernel", "linear/parallel", linear("parallel"), 2, 2),
        Form("kernel", "linear/recurrent", linear("recurrent"), 1, 1),
        Form("kernel", NAIVE_KERNEL, naive, 1, 1),
        Form("kernel", "linear+decay/chunk", linear("chunk", decay=True), 1, 1, chunk_gflop),
    ]
    forms += [Form("kernel", f"rwkv4_wkv/{m}", wkv(m), *exps) for m, exps in MODE_EXPS.items()]
    forms += [Form("kernel", f"delta_rule/{m}", delta(m), *exps) for m, exps in MODE_EXPS.items()]
    return forms


MODE_EXPS = {"chunk": (1, 1), "parallel": (2, 2), "recurrent": (1, 1)}


def make_mixer(name: str, s: Settings) -> torch.nn.Module:
    """Registered mixer `name` with its defaults, d_model = heads x head_dim."""
    params = {"n_heads": s.heads} if "n_heads" in MIXERS.parameters(name) else {}
    torch.manual_seed(0)
    return build_mixer(name, d_model=s.d_model, **params).to(s.device)


def mixer_forms(s: Settings) -> list[Form]:
    def make_for(name: str) -> Callable[[int], Callable[[], None]]:
        def make(T: int) -> Callable[[], None]:
            mixer = make_mixer(name, s).train()
            x = leaves(
                torch.randn(s.batch, T, s.d_model, generator=torch.Generator().manual_seed(T)),
                device=s.device,
            )
            inner = fwd_bwd(mixer, x)

            def call() -> None:
                mixer.zero_grad(set_to_none=True)
                inner()

            return call

        return make

    forms = []
    for name in MIXERS.names():
        grows = bool(getattr(MIXERS.get(name), "grows_with_seq_len", False))
        forms.append(Form("mixer", name, make_for(name), 2 if grows else 1, 2 if grows else 1))
    return forms


# ----------------------------------------------------------------------------- timing grid


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
    t0 = time.perf_counter()
    call()
    sync(s.device)
    first = time.perf_counter() - t0
    peak = memory.stop()
    if first > s.single_shot_s or (estimate_s or 0) > s.single_shot_s:
        return Measured(first, 1, peak)
    times: list[float] = []
    while len(times) < s.max_reps and sum(times) < s.cell_budget_s:
        sync(s.device)
        t0 = time.perf_counter()
        call()
        sync(s.device)
        times.append(time.perf_counter() - t0)
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


def run_grid(forms: list[Form], s: Settings, probe_T: int = 256) -> list[dict]:
    """Time every form at every T (increasing), skipping cells estimated not to fit."""
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
                est_s, est_b = extrapolate(history, T, form) if history else (None, None)
                limit_b = s.mem_fraction * free_memory(s.device)
                if est_b is not None and est_b > limit_b:
                    row["note"] = f"skipped: est. {est_b / 2**30:.1f} GiB > {limit_b / 2**30:.1f}"
                    continue
                if est_s is not None and est_s > s.max_call_s:
                    row["note"] = f"skipped: est. {est_s:.0f} s/call > {s.max_call_s:.0f} s"
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
        t0 = time.perf_counter()
        torch.matmul(a, b)
        sync(s.device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


# ----------------------------------------------------------------------------- crossover


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
                out.append(
                    {
                        "group": group,
                        "form": form,
                        "vs": reference,
                        "crossover_T": crossover(rows, form, reference),
                    }
                )
    return out


# ----------------------------------------------------------------------------- decoding


def kv_cache(mixer: SoftmaxAttention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The state `SoftmaxAttention.step` builds token by token, built at once: its keys and
    values of x [1, T, d_model] (stepping T tokens re-copies the cache each step, O(T^2))."""
    _, k, v = mixer.split_heads(x)
    return k.contiguous(), v.contiguous()


def state_bytes(state: object) -> int:
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, list | tuple):
        return sum(state_bytes(x) for x in state)
    return 0


def decode_rows(s: Settings) -> list[dict]:
    """Per-token latency of `mixer.step` (batch 1, one thread: the tensors are too small to
    split, and a second thread only waits for a busy core) after T tokens, and the state it
    holds."""
    with torch_threads(1), torch.inference_mode():
        return _decode_rows(s)


def _decode_rows(s: Settings) -> list[dict]:
    rows = []
    for name in MIXERS.names():
        mixer = make_mixer(name, s).eval()
        Tmax = max(s.seq_lens)
        xs = torch.randn(
            1, Tmax + s.decode_steps, s.d_model, generator=torch.Generator().manual_seed(1)
        )
        xs = xs.to(s.device)
        state, done, step_s = mixer.init_state(1), 0, None
        for T in sorted(s.seq_lens):
            row: dict = {"mixer": name, "T": T}
            rows.append(row)
            if isinstance(mixer, SoftmaxAttention):
                state, done = kv_cache(mixer, xs[:, :T]), T
            else:
                estimate = (T - done) * (step_s or 0.0)
                if estimate > s.decode_prefill_s:
                    row["note"] = f"skipped: stepping to T est. {estimate:.0f} s"
                    continue
                t0 = time.perf_counter()
                for t in range(done, T):
                    _, state = mixer.step(xs[:, t], state)
                sync(s.device)
                if done < T:
                    step_s = (time.perf_counter() - t0) / (T - done)
                done = T
            times = []
            for i in range(s.decode_steps):  # from the same state each time: its cost at T
                sync(s.device)
                t0 = time.perf_counter()
                mixer.step(xs[:, T + i], state)
                sync(s.device)
                times.append(time.perf_counter() - t0)
            row.update(
                ms_per_token=round(1e3 * statistics.median(times), 4),
                state_kb=round(state_bytes(state) / 1024, 1),
                state_floats=mixer.state_size(T),
            )
    return rows


# ----------------------------------------------------------------------------- tasks


def task_rows(s: Settings) -> list[dict]:
    """Tokens/s of `task.generate` for every task, at its default length and at 1024."""
    rows = []
    for name in TASKS.names():
        base = build_task(name)
        for seq_len in dict.fromkeys([base.seq_len, 1024]):
            row: dict = {"task": name, "seq_len": seq_len}
            rows.append(row)
            try:
                task = base if seq_len == base.seq_len else base.with_seq_len(seq_len)
            except ValueError as error:
                row["note"] = f"not at this length: {error}"[:90]
                continue
            n = max(1, s.task_tokens // seq_len)
            task.generate(min(n, 100), seed=0)  # warm-up
            times = []
            for seed in range(3):
                t0 = time.perf_counter()
                task.generate(n, seed=seed)
                times.append(time.perf_counter() - t0)
            tps = n * seq_len / statistics.median(times)
            row.update(examples=n, tokens_per_s=round(tps), target_1M="yes" if tps >= 1e6 else "NO")
    return rows


# ----------------------------------------------------------------------------- Lightning


class RepeatBatch(Dataset):
    """One batch, `times` times (a DataLoader with batch_size=None yields it as is)."""

    def __init__(self, batch: dict[str, torch.Tensor], times: int) -> None:
        self.batch, self.times = batch, times

    def __len__(self) -> int:
        return self.times

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.batch


def lightning_rows(s: Settings, seq_len: int = 64, batch_size: int = 64) -> list[dict]:
    """Per-step time of N training steps under Lightning (harness `RecallModule`) and in a bare
    torch loop: same softmax model (d_model 64, 2 layers), same fixed MQAR batch, AdamW, same
    device; runs alternate (bare, Lightning, bare, Lightning), the faster of each kind counts."""
    import logging
    import warnings

    import lightning as L

    from harness.module import RecallModule
    from models.backbone import LanguageModel

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    task = build_task("assoc_recall", seq_len=seq_len)
    data = task.generate(batch_size, seed=0)
    batch = {key: torch.from_numpy(data[key]) for key in ("inputs", "labels")}
    lr, wd, steps, warm = 2e-3, 0.1, s.lightning_steps, s.lightning_warmup
    loader = DataLoader(RepeatBatch(batch, steps), batch_size=None)  # the same batch, N times
    torch.manual_seed(0)
    model = LanguageModel(task.vocab_size, seq_len, "softmax", {"n_heads": 2}, d_model=64).to(
        s.device
    )
    init = copy.deepcopy(model.state_dict())

    def bare() -> float:
        model.load_state_dict(init)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
        for i, cpu_batch in enumerate(loader):
            if i == warm:
                sync(s.device)
                t0 = time.perf_counter()
            b = {key: x.to(s.device) for key, x in cpu_batch.items()}
            logits = model(b["inputs"])
            loss = F.cross_entropy(logits.flatten(0, 1), b["labels"].flatten(), ignore_index=IGNORE)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sync(s.device)
        return (time.perf_counter() - t0) / (steps - warm)

    class StepTimer(L.Callback):
        def on_train_batch_start(self, trainer, module, b, batch_idx) -> None:  # noqa: ANN001
            if batch_idx == warm:
                sync(s.device)
                self.t0 = time.perf_counter()

        def on_train_batch_end(self, trainer, module, out, b, batch_idx) -> None:  # noqa: ANN001
            if batch_idx == steps - 1:
                sync(s.device)
                self.t1 = time.perf_counter()

    def lightning() -> float:
        model.load_state_dict(init)
        timer = StepTimer()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = L.Trainer(
                accelerator=s.device.type,
                devices=1,
                max_steps=steps,
                logger=False,
                enable_progress_bar=False,
                enable_checkpointing=False,
                enable_model_summary=False,
                num_sanity_val_steps=0,
                limit_val_batches=0,
                callbacks=[timer],
            )
        module = RecallModule(model, lr, wd, [seq_len])
        with warnings.catch_warnings():  # no validation loop, a plain DataLoader: on purpose
            warnings.simplefilter("ignore")
            trainer.fit(module, train_dataloaders=loader)
        return (timer.t1 - timer.t0) / (steps - warm)

    results: dict[str, list[float]] = {"bare torch loop": [], "lightning": []}
    for _ in range(2):
        results["bare torch loop"].append(bare())
        results["lightning"].append(lightning())
    base = min(results["bare torch loop"])
    return [
        {
            "loop": kind,
            "ms_per_step": round(1e3 * min(times), 2),
            "runs_ms": " / ".join(f"{1e3 * t:.1f}" for t in times),
            "timed_steps": steps - warm,
            "vs_bare_pct": round(100 * (min(times) / base - 1), 1),
        }
        for kind, times in results.items()
    ]


# ----------------------------------------------------------------------------- report


def pivot(rows: list[dict], value: str) -> list[dict]:
    """One row per form, one column per T; a cell without a value shows 'skip' or 'fail'."""
    out: dict[str, dict] = {}
    for r in rows:
        cell = r.get(value)
        if cell is None and r.get("note"):
            cell = "skip" if r["note"].startswith("skip") else "fail"
        out.setdefault(r["form"], {"form": r["form"]})[f"T={r['T']}"] = cell
    return list(out.values())


def memory_slope(rows: list[dict], form: str) -> float | None:
    """Log-log slope of peak memory against T over the measured T >= 1024 (all T if fewer)."""
    points = [
        (r["T"], r["peak_mem_mb"]) for r in rows if r["form"] == form and r.get("peak_mem_mb")
    ]
    big = [p for p in points if p[0] >= 1024]
    points = big if len(big) >= 2 else points
    if len(points) < 2:
        return None
    xs, ys = [math.log(t) for t, _ in points], [math.log(m) for _, m in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def targets(
    train: list[dict], tasks: list[dict], light: list[dict], peak: float | None
) -> list[dict]:
    """Issue 6's performance targets, each with its measured value and whether it holds."""
    speed = {(r["form"], r["T"]): r.get("tokens_per_s") for r in train}
    chunk, naive, soft = (
        speed.get((f, 4096)) for f in (CHUNK_KERNEL, NAIVE_KERNEL, SOFTMAX_KERNEL)
    )
    out = []

    def add(target: str, value: str, ok: bool | None) -> None:
        out.append(
            {
                "target": target,
                "measured": value,
                "holds": {True: "yes", False: "NO", None: "not measured"}[ok],
            }
        )

    for name, other, need in (("naive cumsum", naive, 10), ("softmax SDPA", soft, 3)):
        ratio = chunk / other if chunk and other else None
        add(
            f"chunk >= {need}x {name} at T=4096",
            f"{ratio:.1f}x" if ratio else "-",
            None if ratio is None else ratio >= need,
        )
    slope = memory_slope(train, CHUNK_KERNEL)
    add(
        "chunk memory linear in T (log-log slope <= 1.15)",
        f"slope {slope:.2f}" if slope is not None else "-",
        None if slope is None else slope <= 1.15,
    )
    gf = [r for r in train if r["form"] == CHUNK_KERNEL and r.get("gflop_per_s")]
    if gf and peak:
        best = max(gf, key=lambda r: r["gflop_per_s"])
        rate, share = best["gflop_per_s"], 100 * best["gflop_per_s"] / peak
        measured = f"{rate:.1f} of {peak:.0f} ({share:.0f}%) at T={best['T']}"
        out.append({"target": "chunk GFLOP/s vs matmul peak", "measured": measured, "holds": "-"})
    measured = [r["tokens_per_s"] for r in tasks if r.get("tokens_per_s")]
    add(
        "task generation >= 1M tokens/s (every task, every length)",
        f"min {min(measured) / 1e6:.2f}M" if measured else "-",
        None if not measured else min(measured) >= 1e6,
    )
    pct = next((r["vs_bare_pct"] for r in light if r["loop"] == "lightning"), None)
    add(
        "Lightning step within 10% of bare torch",
        f"{pct:+.1f}%" if pct is not None else "-",
        None if pct is None else pct <= 10,
    )
    return out


def plot(train: list[dict], decode: list[dict], path: Path) -> None:
    def series(rows: list[dict], group: str, value: str) -> dict:
        out: dict = {}
        for r in rows:
            if r.get("group", group) == group:
                name = r.get("form", r.get("mixer"))
                xs, ys = out.setdefault(name, ([], []))
                xs.append(r["T"])
                ys.append(r.get(value))
        return out

    panels = [
        {
            "series": series(train, "kernel", "tokens_per_s"),
            "title": "kernels, forward+backward",
            "xlabel": "T",
            "ylabel": "tokens/s",
            "logx": True,
            "logy": True,
        },
        {
            "series": series(train, "mixer", "tokens_per_s"),
            "title": "mixers, forward+backward",
            "xlabel": "T",
            "ylabel": "tokens/s",
            "logx": True,
            "logy": True,
        },
        {
            "series": series(train, "kernel", "peak_mem_mb"),
            "title": "kernels, peak memory",
            "xlabel": "T",
            "ylabel": "MB",
            "logx": True,
            "logy": True,
        },
    ]
    if decode:
        panels.append(
            {
                "series": series(decode, "mixer", "state_kb"),
                "title": "decoding state per sequence",
                "xlabel": "T",
                "ylabel": "KB",
                "logx": True,
                "logy": True,
            }
        )
    save_plot(path, panels)


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m studies.bench", description=__doc__.split("\n")[0])
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--seq-lens", default="256,1024,4096,16384")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--max-call-s", type=float, default=20.0)
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"subset of {','.join(SECTIONS)}")
    p.add_argument("--out", default="bench_out")
    p.add_argument("--quick", action="store_true", help="tiny version (T=64,128; few repetitions)")
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    for name in ("batch", "heads", "head_dim", "threads"):
        if getattr(args, name) < (0 if name == "threads" else 1):
            raise SystemExit(
                f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: must be >= 1"
            )
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device=cuda is invalid: no CUDA device is available")
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    try:
        seq_lens = sorted({int(t) for t in args.seq_lens.split(",")})
    except ValueError:
        raise SystemExit(
            f"--seq-lens={args.seq_lens!r} is invalid: must be comma-separated integers"
        ) from None
    if seq_lens[0] < 1:
        raise SystemExit(f"--seq-lens={args.seq_lens!r} is invalid: lengths must be >= 1")
    s = Settings(
        device, seq_lens, args.batch, args.heads, args.head_dim, max_call_s=args.max_call_s
    )
    return quick_settings(s) if args.quick else s


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    args = parse_args(argv)
    s = settings_from(args)
    sections = set(args.sections.split(","))
    if args.threads:
        torch.set_num_threads(args.threads)
    if s.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
        torch.backends.cudnn.allow_tf32 = False
    out = Path(args.out)
    started = time.perf_counter()
    load_start = load_average()
    print(
        f"load average (1 min)={load_start} "
        f"device={s.device} threads={torch.get_num_threads()} B={s.batch} H={s.heads} "
        f"d={s.head_dim} T={s.seq_lens} chunk={s.chunk_size}"
    )
    results: dict[str, list[dict]] = {}
    peak = None
    if "peak" in sections:
        peak = matmul_peak(s)
        results["peak"] = [
            {
                "device": str(s.device),
                "threads": torch.get_num_threads(),
                "matmul_n": s.matmul_n,
                "fp32_matmul_gflop_per_s": round(peak, 1),
            }
        ]
        print(f"\nfp32 matmul peak: {peak:.1f} GFLOP/s")
    if "train" in sections:
        fwd_bwd(sdpa, leaves(*torch.randn(3, 2, 2, 64, 16), device=s.device))()  # one-time init
        train = run_grid(kernel_forms(s) + mixer_forms(s), s)
        results["train"], results["crossover"] = train, crossover_rows(train)
        for value, title in (
            ("tokens_per_s", "forward+backward tokens/s"),
            ("peak_mem_mb", "peak memory (MB)"),
        ):
            print(f"\n{title}, B={s.batch} H={s.heads} d={s.head_dim}")
            print_table(pivot(train, value))
        notes = [f"  {r['form']} T={r['T']}: {r['note']}" for r in train if r.get("note")]
        if notes:
            print("\nnotes:\n" + "\n".join(notes))
        gf = [
            {
                "form": r["form"],
                "T": r["T"],
                "gflop_per_s": r["gflop_per_s"],
                "pct_of_peak": round(100 * r["gflop_per_s"] / peak, 1) if peak else None,
            }
            for r in train
            if r.get("gflop_per_s")
        ]
        print("\nuseful GFLOP/s (matmul FLOPs, forward+backward = 3x forward)")
        print_table(gf)
        print("\ncrossover T (pitfall 1): where each form overtakes softmax")
        print_table(results["crossover"])
    if "decode" in sections:
        results["decode"] = decode_rows(s)
        print("\nrecurrent decoding, batch 1: latency per token and state per sequence")
        print_table(results["decode"])
    if "tasks" in sections:
        results["tasks"] = task_rows(s)
        print("\ntask data generation")
        print_table(results["tasks"])
    if "lightning" in sections:
        results["lightning"] = lightning_rows(s)
        print("\ntraining step: Lightning vs a bare torch loop (same model, batch, optimizer)")
        print_table(results["lightning"])
    results["targets"] = targets(
        results.get("train", []), results.get("tasks", []), results.get("lightning", []), peak
    )
    print("\nissue 6 targets")
    print_table(results["targets"])
    results["run"] = [
        {
            "device": str(s.device),
            "threads": torch.get_num_threads(),
            "batch": s.batch,
            "heads": s.heads,
            "head_dim": s.head_dim,
            "seq_lens": " ".join(map(str, s.seq_lens)),
            "load_avg_start": load_start,
            "load_avg_end": load_average(),
            "wall_s": round(time.perf_counter() - started, 1),
        }
    ]
    print(f"\nload average (1 min): {load_start} at the start, {load_average()} at the end")
    for name, rows in results.items():
        write_csv(rows, out / f"bench_{name}.csv")
    if "train" in results:
        plot(results["train"], results.get("decode", []), out / "bench.png")
    png = " and bench.png" if "train" in results else ""
    print(f"\nwrote {out}/bench_*.csv{png} in {time.perf_counter() - started:.0f} s")
    return results


if __name__ == "__main__":
    main()
