"""Training, evaluation, records, reports and benchmarks around `tasks` and `models`."""
