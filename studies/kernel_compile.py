"""What `torch.compile` costs and gains on one gated kernel alone (docs/performance.md, "The
gated family"): the first compiled forward + backward with an empty inductor cache and again in
a fresh process with that cache warm, then the steady step compiled against eager, all in CPU
seconds of the process and its compiler children, one torch thread.

    python -m studies.kernel_compile --kernel gla --seq-len 1024
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import partial

import torch

from models.kernels import gated_delta_rule, gated_linear_attention
from studies.bench.forms import fwd_bwd, gated_delta_inputs, gla_inputs
from studies.bench.settings import Settings
from studies.threads import torch_threads

KERNELS = ("gla", "gla_scalar", "gated_delta_rule")


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its waited-for children (the C++
    compiler inductor spawns), so that a shared machine's waiting does not count."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def kernel_step(kernel: str, batch: int, seq_len: int, dim: int) -> Callable[[Callable], None]:
    """A function that runs one forward + backward of `kernel` (chunk mode, chunk 64, 2 heads)
    through the given callable, on the benchmark's inputs (`studies.bench.forms`)."""
    s = Settings(device=torch.device("cpu"), seq_lens=[seq_len], batch=batch, head_dim=dim)
    if kernel == "gated_delta_rule":
        inputs = gated_delta_inputs(s, seq_len)
    else:
        inputs = gla_inputs(s, seq_len, per_dim=kernel == "gla")

    def step(attend: Callable) -> None:
        fwd_bwd(partial(attend, mode="chunk", chunk_size=s.chunk_size), inputs)()

    return step


def measure_compile(
    kernel: str, batch: int, seq_len: int, dim: int, steps: int, steady: bool
) -> None:
    """Print the first compiled step's CPU seconds and, with `steady`, the mean step of eager
    and of compiled over `steps` steps after one warm-up each."""
    attend = gated_delta_rule if kernel == "gated_delta_rule" else gated_linear_attention
    step = kernel_step(kernel, batch, seq_len, dim)
    compiled = torch.compile(attend)
    start = cpu_seconds()
    step(compiled)
    print(f"first compiled step: {cpu_seconds() - start:.1f} CPU s")
    if not steady:
        return
    means = []
    for run in (attend, compiled):
        step(run)
        start = cpu_seconds()
        for _ in range(steps):
            step(run)
        means.append((cpu_seconds() - start) / steps)
    eager, fast = means
    ratio = eager / fast
    print(f"steady step: eager {eager * 1e3:.0f} ms, compiled {fast * 1e3:.0f} ms ({ratio:.2f}x)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", choices=KERNELS, default="gla")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--only", choices=("cold", "warm"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.only:
        with torch_threads(1):
            measure_compile(
                args.kernel, args.batch, args.seq_len, args.dim, args.steps, args.only == "warm"
            )
        return
    shape = f"B={args.batch}, H=2, T={args.seq_len}, d={args.dim}, forward + backward, one thread"
    print(f"{args.kernel} chunk kernel under torch.compile ({shape})")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        for which in ("cold", "warm"):
            print(f"{which} inductor cache:", flush=True)
            command = [sys.executable, "-m", "studies.kernel_compile", *(argv or sys.argv[1:])]
            subprocess.run([*command, "--only", which], env=env, check=True)


if __name__ == "__main__":
    main()
