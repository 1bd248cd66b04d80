"""The `decode` section: per-token latency of `mixer.step` (batch 1, one thread) after T
tokens, and the state it then holds (flat for recurrent mixers, the KV cache growing for
softmax). The state at T is reached by stepping T tokens; softmax's KV cache is built at once."""

import statistics
import time

import torch

from models import MIXERS
from models.mixers.softmax import SoftmaxAttention
from studies.bench.forms import make_mixer
from studies.bench.settings import Settings
from studies.measure import sync
from studies.threads import torch_threads


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
    """One row per (mixer, T): ms per token, state KB and floats (batch 1, one thread: the
    tensors are too small to split, and a second thread only waits for a busy core)."""
    with torch_threads(1), torch.inference_mode():
        return [row for name in MIXERS.names() for row in mixer_decode_rows(name, s)]


def mixer_decode_rows(name: str, s: Settings) -> list[dict]:
    mixer = make_mixer(name, s).eval()
    T_max = max(s.seq_lens)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(1, T_max + s.decode_steps, s.d_model, generator=g).to(s.device)
    state, done, step_s = mixer.init_state(1), 0, None
    rows = []
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
