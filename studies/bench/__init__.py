"""How fast, and why: `python -m studies.bench [--device auto|cpu|cuda] [--sections ...] [--quick]`.

Sections (each a table printed and a CSV `bench_<section>.csv` in `--out`, default
`bench_out/`), registered in `studies.bench.cli.SECTIONS`:

- `peak`: the fp32 matmul GFLOP/s of the machine (the reference for the kernels' GFLOP/s).
- `train`: forward+backward throughput (tokens/s, tokens = batch x T) and peak memory of every
  kernel mode of `models.kernels` and of every registered mixer (default parameters, d_model =
  heads x head_dim), over the T list. A cell whose one call is estimated (from the smaller T,
  scaled by the form's complexity) to need more than half the free memory, or longer than
  `--max-call-s`, is skipped with a note. One warm-up call, then the median of repeated calls
  within a per-cell time budget. The chunk kernel's useful FLOPs (analytic) give GFLOP/s,
  compared with `peak`; `crossover`: the T at which each linear form overtakes softmax
  (pitfall 1), by log-log interpolation of the measured ratio.
- `step`: the training step users run (`studies.bench.train_step`): forward + backward + AdamW
  of the default language model with every mixer, tokens per step held fixed, as a ratio to
  softmax, one thread by default; with each step's counted FLOPs (`step_flops`), the FLOP/s
  it reached and softmax's count over its own (the ratio the math allows at equal FLOP/s).
- `decode`: per-token latency of `mixer.step` (batch 1, one thread) and the state it holds.
- `tasks`: data generation throughput of every registered task.
- `lightning`: one training step under Lightning against a bare torch loop.

Then `targets`: each performance target, its measured value and whether it holds. Peak memory
is measured as `studies.measure` describes.
"""
