"""The command line: sections registered in one table, run in order, printed, written."""

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.config.compose import CONF_DIR
from harness.report.plain_table import print_table, write_csv
from models.kernels import softmax_attention
from studies.bench import __doc__ as DESCRIPTION
from studies.bench.data_gen import task_rows
from studies.bench.decode import decode_rows
from studies.bench.forms import fwd_bwd, kernel_forms, leaves, mixer_forms
from studies.bench.grid import matmul_peak, run_grid
from studies.bench.lightning_overhead import lightning_rows
from studies.bench.settings import Settings, quick_settings
from studies.bench.summary import crossover_rows, gflop_rows, pivot, plot, targets
from studies.bench.train_step import step_rows
from studies.measure import load_average


@dataclass
class Section:
    """A benchmark section: `run(settings)` gives its rows (written as bench_<name>.csv);
    `show(rows, settings)` prints them (default: `title` above a plain table)."""

    name: str
    run: Callable[[Settings], list[dict]]
    title: str = ""
    show: Callable[[list[dict], Settings], None] | None = None

    def print(self, rows: list[dict], s: Settings) -> None:
        if self.show is not None:
            self.show(rows, s)
        else:
            print(f"\n{self.title}")
            print_table(rows)


def peak_rows(s: Settings) -> list[dict]:
    peak = matmul_peak(s)
    return [{"device": str(s.device), "threads": torch.get_num_threads(), "matmul_n": s.matmul_n,
             "fp32_matmul_gflop_per_s": round(peak, 1)}]  # fmt: skip


def show_peak(rows: list[dict], s: Settings) -> None:
    print(f"\nfp32 matmul peak: {rows[0]['fp32_matmul_gflop_per_s']} GFLOP/s")


def train_rows(s: Settings) -> list[dict]:
    fwd_bwd(softmax_attention, leaves(*torch.randn(3, 2, 2, 64, 16), device=s.device))()  # init
    return run_grid(kernel_forms(s) + mixer_forms(s), s)


def show_train(rows: list[dict], s: Settings) -> None:
    for value, title in (
        ("tokens_per_s", "forward+backward tokens/s"),
        ("peak_mem_mb", "peak memory (MB)"),
    ):
        print(
            f"\n{title}, B={s.batch} H={s.heads} d={s.head_dim}, {torch.get_num_threads()} threads"
        )
        print_table(pivot(rows, value))
    notes = [f"  {r['form']} T={r['T']}: {r['note']}" for r in rows if r.get("note")]
    if notes:
        print("\nnotes:\n" + "\n".join(notes))


def show_step(rows: list[dict], s: Settings) -> None:
    for block in s.step_blocks:
        show_block_step([r for r in rows if r.get("block", "default") == block], s, block)


def show_block_step(rows: list[dict], s: Settings, block: str) -> None:
    where = f"{s.step_tokens} tokens per step, {s.step_threads} thread(s), {s.clock} clock"
    compiled = ", torch.compile" if s.compile else ""
    model = f"backbone={block} model"
    print(f"\ntraining step of the {model} (forward + backward + AdamW), {where}{compiled}")
    print("tokens/s relative to softmax (same block) measured in the same run:")
    print_table(pivot(rows, "vs_softmax", key="mixer"))
    print("what the math allows: softmax's FLOPs over the mixer's (the ratio at equal FLOP/s):")
    print_table(pivot(rows, "flop_bound_vs_softmax", key="mixer"))
    print("tokens/s:")
    print_table(pivot(rows, "tokens_per_s", key="mixer"))
    print("GFLOP/s reached (matrix products counted, `studies.bench.step_flops`):")
    print_table(pivot(rows, "gflop_per_s", key="mixer"))
    print("peak memory of a step (MB):")
    print_table(pivot(rows, "peak_mem_mb", key="mixer"))


SECTIONS = [
    Section("peak", peak_rows, show=show_peak),
    Section("train", train_rows, show=show_train),
    Section("step", step_rows, show=show_step),
    Section("decode", decode_rows, "recurrent decoding, batch 1: ms per token, state per sequence"),
    Section("tasks", task_rows, "task data generation"),
    Section("lightning", lightning_rows, "training step: Lightning vs a bare torch loop"),
]
SECTION_NAMES = [section.name for section in SECTIONS]


def blocks(text: str) -> list[str]:
    """`--step-blocks`: names of conf/backbone/<name>.yaml, comma-separated."""
    known = sorted(p.stem for p in (CONF_DIR / "backbone").glob("*.yaml"))
    names = [name for name in text.split(",") if name]
    if not names or set(names) - set(known):
        raise SystemExit(f"--step-blocks={text!r} is invalid: known are {', '.join(known)}")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m studies.bench", description=DESCRIPTION.split("\n")[0]
    )
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--seq-lens", default="256,1024,4096,16384", help="T of the train section")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--max-call-s", type=float, default=20.0)
    p.add_argument("--step-seq-lens", default="64,256,1024,4096", help="T of the step section")
    p.add_argument("--step-threads", type=int, default=1, help="torch threads of the step section")
    p.add_argument(
        "--step-blocks",
        default="default,zoology",
        help="backbones of the step section (conf/backbone/<name>.yaml)",
    )
    p.add_argument(
        "--step-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Hydra override of the step section's model, e.g. backbone.short_conv=4",
    )
    p.add_argument(
        "--clock",
        default="wall",
        choices=("wall", "cpu"),
        help="cpu: time by the process's CPU time, robust to other load (one thread only)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the step section's models")
    p.add_argument(
        "--sections", default=",".join(SECTION_NAMES), help=f"subset of {','.join(SECTION_NAMES)}"
    )
    p.add_argument("--out", default="bench_out")
    p.add_argument("--quick", action="store_true", help="tiny version (T=64,128; few repetitions)")
    return p.parse_args(argv)  # fmt: skip


def lengths(flag: str, text: str) -> list[int]:
    try:
        values = sorted({int(t) for t in text.split(",")})
    except ValueError:
        raise SystemExit(f"{flag}={text!r} is invalid: must be comma-separated integers") from None
    if values[0] < 1:
        raise SystemExit(f"{flag}={text!r} is invalid: lengths must be >= 1")
    return values


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the command line, or SystemExit naming the flag, value and what is allowed."""
    one_cpu_thread = args.threads == args.step_threads == 1 and args.device != "cuda"
    if args.clock == "cpu" and not one_cpu_thread:
        raise SystemExit("--clock=cpu is invalid here: it needs --threads 1 --step-threads 1, CPU")
    for name in ("batch", "heads", "head_dim", "threads", "step_threads"):
        low = 0 if name == "threads" else 1
        if getattr(args, name) < low:
            flag = "--" + name.replace("_", "-")
            raise SystemExit(f"{flag}={getattr(args, name)} is invalid: must be >= {low}")
    unknown = set(args.sections.split(",")) - set(SECTION_NAMES)
    if unknown:
        raise SystemExit(
            f"--sections={args.sections!r} is invalid: known are {', '.join(SECTION_NAMES)}"
        )
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device=cuda is invalid: no CUDA device is available")
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    s = Settings(
        torch.device(auto if args.device == "auto" else args.device),
        lengths("--seq-lens", args.seq_lens),
        args.batch,
        args.heads,
        args.head_dim,
        max_call_s=args.max_call_s,
        step_seq_lens=lengths("--step-seq-lens", args.step_seq_lens),
        step_threads=args.step_threads,
        clock=args.clock,
        step_overrides=args.step_override,
        step_blocks=blocks(args.step_blocks),
        compile=args.compile,
    )
    return quick_settings(s) if args.quick else s


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    args = parse_args(argv)
    s = settings_from(args)
    chosen = args.sections.split(",")
    if args.threads:
        torch.set_num_threads(args.threads)
    if s.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
        torch.backends.cudnn.allow_tf32 = False
    started, load_start = time.perf_counter(), load_average()
    print(
        f"load average (1 min)={load_start} device={s.device} threads={torch.get_num_threads()} "
        f"B={s.batch} H={s.heads} d={s.head_dim} T={s.seq_lens} chunk={s.chunk_size}"
    )
    results: dict[str, list[dict]] = {}
    for section in SECTIONS:
        if section.name in chosen:
            results[section.name] = section.run(s)
            section.print(results[section.name], s)
    peak = results["peak"][0]["fp32_matmul_gflop_per_s"] if "peak" in results else None
    if "train" in results:
        results["gflops"] = gflop_rows(results["train"], peak)
        results["crossover"] = crossover_rows(results["train"])
        print("\nuseful GFLOP/s (matmul FLOPs, forward+backward = 3x forward)")
        print_table(results["gflops"])
        print("\ncrossover T (pitfall 1): where each form overtakes softmax")
        print_table(results["crossover"])
    results["targets"] = targets(results, peak)
    print("\ntargets")
    print_table(results["targets"])
    wall = round(time.perf_counter() - started, 1)
    results["run"] = [{
        "device": str(s.device), "threads": torch.get_num_threads(), "batch": s.batch,
        "heads": s.heads, "head_dim": s.head_dim, "seq_lens": " ".join(map(str, s.seq_lens)),
        "step_seq_lens": " ".join(map(str, s.step_seq_lens)), "step_threads": s.step_threads,
        "clock": s.clock, "step_overrides": " ".join(s.step_overrides),
        "compile": s.compile,
        "load_avg_start": load_start, "load_avg_end": load_average(), "wall_s": wall,
    }]  # fmt: skip
    print(f"\nload average (1 min): {load_start} at the start, {load_average()} at the end")
    out = Path(args.out)
    for name, rows in results.items():
        write_csv(rows, out / f"bench_{name}.csv")
    figure = plot(results, out / "bench.png")
    png = f" and {figure.name}" if figure else ""
    print(f"\nwrote {out}/bench_*.csv{png} in {time.perf_counter() - started:.0f} s")
    return results
