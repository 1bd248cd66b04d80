"""Studies of the models apart from training runs: the benchmark (`python -m studies.bench`),
the feature-map approximation study (`studies.kernel_approx`) and the sharpness probe
(`studies.sharpness`). They import `models`, `tasks` and `harness`; nothing imports them."""
