"""The benchmark's quick run measures every kernel mode and every registered mixer."""

import csv
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from models import MIXERS
from studies.bench.forms import Form, chunk_flops, kernel_forms
from studies.bench.grid import extrapolate
from studies.bench.settings import Settings
from studies.bench.step_flops import FUSED_ATTENTION, step_flops
from studies.bench.summary import crossover, step_targets
from studies.bench.train_step import NO_MIXER, composed_config, make_cell
from tests.conftest import REPO


def read(path: Path) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_quick_bench_measures_every_kernel_mode_and_mixer(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "studies.bench",
            "--quick",
            "--threads",
            "1",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read(tmp_path / "bench_train.csv")
    kernels = {f.name for f in kernel_forms(Settings(torch.device("cpu"), [64]))}
    assert {"linear/chunk", "linear/parallel", "linear/recurrent", "linear/cumsum_naive",
            "softmax_sdpa", "rwkv4_wkv/chunk", "delta_rule/recurrent"} <= kernels  # fmt: skip
    for group, names in (("kernel", kernels), ("mixer", set(MIXERS.names()))):
        for name in names:
            for T in (64, 128):
                row = [r for r in rows if (r["group"], r["form"], r["T"]) == (group, name, str(T))]
                assert len(row) == 1, (group, name, T)
                assert float(row[0]["tokens_per_s"]) > 0, row[0]
                assert float(row[0]["peak_mem_mb"]) >= 0, row[0]
    decode = read(tmp_path / "bench_decode.csv")
    by = {(r["mixer"], int(r["T"])): r for r in decode}
    # the KV cache doubles with T, a recurrent state does not change
    assert float(by[("softmax", 128)]["state_kb"]) == 2 * float(by[("softmax", 64)]["state_kb"])
    assert by[("linear", 128)]["state_kb"] == by[("linear", 64)]["state_kb"]
    assert all(float(r["ms_per_token"]) > 0 for r in decode)
    tasks = read(tmp_path / "bench_tasks.csv")
    assert {r["task"] for r in tasks} >= {"assoc_recall"}
    assert {r["loop"] for r in read(tmp_path / "bench_lightning.csv")} == {
        "bare torch loop",
        "lightning",
    }
    step = read(tmp_path / "bench_step.csv")
    for T, batch in ((32, 8), (64, 4)):  # --quick: 256 tokens per step at T = 32, 64
        assert {r["block"] for r in step if int(r["T"]) == T} == {"default", "zoology"}
        at_T = {r["mixer"]: r for r in step if int(r["T"]) == T and r["block"] == "zoology"}
        assert set(at_T) == {*MIXERS.names(), "(no mixer)"}
        at_T = {r["mixer"]: r for r in step if int(r["T"]) == T and r["block"] == "default"}
        assert set(at_T) == {*MIXERS.names(), "(no mixer)"}
        assert float(at_T["softmax"]["vs_softmax"]) == 1.0
        assert all(int(r["batch"]) == batch and float(r["tokens_per_s"]) > 0 for r in at_T.values())
        assert float(at_T["softmax"]["flop_bound_vs_softmax"]) == 1.0
        assert all(float(r["gflop_per_step"]) > 0 for r in at_T.values())
    assert "training step of the backbone=default model" in result.stdout
    assert "training step of the backbone=zoology model" in result.stdout
    targets = {r["target"] for r in read(tmp_path / "bench_targets.csv")}
    assert any("Lightning" in t for t in targets)
    assert any("training step at T=64" in t for t in targets)
    assert (tmp_path / "bench.png").stat().st_size > 0
    assert "crossover T" in result.stdout


def test_crossover_interpolates_in_log_log() -> None:
    rows = [
        {"form": "soft", "T": 256, "tokens_per_s": 400.0},
        {"form": "soft", "T": 1024, "tokens_per_s": 100.0},
        {"form": "lin", "T": 256, "tokens_per_s": 200.0},  # ratio 1/2
        {"form": "lin", "T": 1024, "tokens_per_s": 200.0},  # ratio 2: crosses at the midpoint
    ]
    assert crossover(rows, "lin", "soft") == "~512"
    assert crossover(rows, "soft", "lin").startswith("<= 256")
    rows[3]["tokens_per_s"] = 50.0
    assert crossover(rows, "lin", "soft").startswith("> 1024")


def test_chunk_flops_and_extrapolation() -> None:
    # one block of C = T: scores 2 T^2 D, scores V 2 T^2 Dv, two state products 2 T D Dv each
    B, H, T, D = 1, 1, 64, 32
    assert chunk_flops(B, H, T, D, D, 64) == 3 * (2 * T * T * 2 * D + 4 * T * D * D)
    assert chunk_flops(2, 3, 100, D, D, 64) == 6 * (
        chunk_flops(1, 1, 64, D, D, 64) + chunk_flops(1, 1, 36, D, D, 64)
    )
    form = Form("kernel", "x", lambda T: lambda: None, time_exp=1, mem_exp=1)
    # memory doubled per doubling as declared: x2; time grew 2^1.5 per doubling, faster than
    # declared: the next doubling is assumed to grow 2^(2 * 1.5 - 1) = 4x
    seconds, memory = extrapolate([(100, 1.0, 10.0), (200, 2**1.5, 20.0)], 400, form)
    assert abs(seconds - 4 * 2**1.5) < 1e-9 and abs(memory - 40.0) < 1e-9
    assert extrapolate([(100, 1.0, 10.0)], 400, form) == (4.0, 40.0)  # one point: declared


def test_step_section_builds_the_configured_model() -> None:
    """The training step measures what `python run.py model=<name> ...` trains."""
    s = Settings(torch.device("cpu"), [64], step_tokens=256, step_overrides=["backbone.n_layers=3"])
    cell = make_cell("linear", 64, s)
    cfg = composed_config("linear", s.step_overrides)
    assert len(cell.model.blocks) == 3
    assert cell.model.embed.embedding_dim == cfg.backbone.d_model
    assert cell.model.blocks[0].mixer.chunk_size == cfg.model.chunk_size
    assert (cell.model.blocks[0].conv is None) == (cfg.backbone.short_conv == 0)
    assert tuple(cell.tokens.shape) == (4, 64)
    bare = make_cell(NO_MIXER, 64, s)  # the rest of the model: every mixer an identity
    assert all(isinstance(block.mixer, torch.nn.Identity) for block in bare.model.blocks)
    before = [p.detach().clone() for p in cell.model.parameters()]
    cell.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, cell.model.parameters(), strict=True))


def test_step_section_measures_zoologys_block_beside_the_default() -> None:
    s = Settings(torch.device("cpu"), [64], step_tokens=256)
    zoology = make_cell("linear", 64, s, block="zoology")
    assert zoology.block == "zoology" and zoology.model.positions is None
    assert all(layer.mlp is None and layer.conv is not None for layer in zoology.model.blocks)
    assert make_cell("linear", 64, s).model.blocks[0].mlp is not None
    assert s.step_blocks == ["default", "zoology"]


def test_step_targets_name_the_mixers_below() -> None:
    rows = [
        {"mixer": "softmax", "T": 64, "vs_softmax": 1.0},
        {"mixer": "linear", "T": 64, "vs_softmax": 0.7},
        {"mixer": "rwkv", "T": 64, "vs_softmax": 0.5, "flop_bound_vs_softmax": 0.55},
        {"mixer": "linear", "T": 1024, "vs_softmax": 1.6},
    ]
    found = {r["target"]: r for r in step_targets(rows)}
    at_64 = found["training step at T=64: every mixer >= 0.6x softmax"]
    assert at_64["holds"] == "NO" and "rwkv 0.50 (math allows 0.55)" in at_64["measured"]
    assert "linear" not in at_64["measured"].split("below:")[1]
    at_1024 = found["training step at T=1024: every fixed-state mixer >= 1.5x softmax"]
    assert at_1024["holds"] == "yes"  # softmax, whose state grows, is not a fixed-state mixer
    assert found["training step at T=4096: every fixed-state mixer >= 3.0x softmax"]["holds"] == "-"


def test_step_flops_count_causal_attention_and_every_product() -> None:
    """Softmax attention (the fused CPU op) counts the causal pairs only, 2 (d + d_v) FLOPs
    each forward and twice that backward; a model of one embedding and one linear head counts
    the head's three products (forward, input and weight gradients), 2 N d V FLOPs each."""
    B, H, T, d = 2, 3, 10, 4
    q = torch.randn(B, H, T, d, requires_grad=True)
    with FlopCounterMode(display=False, custom_mapping=FUSED_ATTENTION) as counter:
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    assert counter.get_total_flops() == 3 * 2 * B * H * (T * (T + 1) // 2) * (d + d)
    V, dm = 11, 6
    model = torch.nn.Sequential(torch.nn.Embedding(V, dm), torch.nn.Linear(dm, V, bias=False))
    tokens = torch.randint(0, V, (B, T))
    assert step_flops(model, tokens, tokens) == 3 * 2 * (B * T) * dm * V


def test_narrow_log_axes_are_labelled_in_plain_numbers() -> None:
    """Ratios on a log axis read 0.5, 1, 2, 3 (not 5 x 10^-1); a wide axis keeps its labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from studies.plots import plain_log_ticks

    fig, (narrow, wide) = plt.subplots(1, 2)
    for ax, (low, high) in ((narrow, (0.4, 5.0)), (wide, (1e2, 1e6))):
        ax.set_yscale("log")
        ax.set_ylim(low, high)
        plain_log_ticks(ax.yaxis, low, high)
    label = narrow.yaxis.get_minor_formatter()
    assert [label(y, 0) for y in (0.5, 2.0, 3.0, 4.0)] == ["0.5", "2", "3", ""]
    assert narrow.yaxis.get_major_formatter()(1.0, 0) == "1"
    assert "FuncFormatter" not in type(wide.yaxis.get_major_formatter()).__name__
    plt.close(fig)
